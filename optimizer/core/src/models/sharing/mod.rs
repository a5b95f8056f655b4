//! Memory-aware GPU sharing (TENSILE's lesson at cluster level, section 4 of
//! `../shared/research/seed-systems.md`): predict each opted-in job's peak GPU memory, and let
//! several such jobs share one GPU only while the sum of their predicted peaks stays under the
//! GPU's memory minus a safety margin, and only when the slowdown from sharing costs less than
//! waiting for a GPU of one's own.
//!
//! In Slurm the share is a number of `gres/shard`s: on a sharing node each GPU is cut into `S`
//! shards, and one shard stands for `usable / S` of the GPU's memory, where
//! `usable = memory x (1 - margin)`. A job predicted to peak at `P` gets `ceil(P / (usable / S))`
//! shards of one GPU; Slurm never gives one GPU's shards out twice, so the predicted peaks on any
//! GPU sum to at most `usable`, whichever GPU of the node Slurm picks. A job predicted above
//! `usable` keeps a GPU of its own.
//!
//! Interference (`Interference::Measured`, the default): jobs sharing a GPU split its time by
//! what each keeps it busy alone ([`crate::models::corun`], fitted on an H100's measurements), so two
//! light jobs share for free and two busy ones each run at under half speed. A job's busy
//! fraction is its own report (`gpu_busy=`, written by the helper), else the largest that
//! similar jobs reported or the site's table lists (`ShareModelBusy`, which `cinch share-table`
//! makes from sacct's `gres/gpuutil`), else unknown and taken as fully busy. Sites may keep the
//! older fixed model (`Interference::Constant`: `n` jobs each at `1 / (1 + alpha (n - 1))`). A
//! share pays off when the time it adds (to this job, and to the jobs already on that GPU) is
//! less than the time the job would wait for a whole GPU.
//!
//! The plugin calls [`decide`] at submit time (Slurm 22.05 cannot turn a pending job's GPU
//! request into shards afterwards, see docs/policies/sharing.md) and the simulator calls the same
//! function with what a live agent would know.
//!
//! Laid out by what each part knows: `hints` (what a job says: its opt-in, estimates and their
//! checks), `table` (the site's known models), `reports` (what similar jobs measured of
//! themselves), `predict` (a job's peak memory and busy fraction, with their source), `view`
//! (the shared GPUs and whole-GPU nodes the decision looks at); [`decide`] and its parameters
//! here.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

mod hints;
mod predict;
mod reports;
mod table;
#[cfg(test)]
mod tests;
mod view;

pub use hints::*;
pub use predict::*;
pub use reports::*;
pub use table::*;
pub use view::*;

/// How cinch predicts the slowdown of jobs sharing a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Interference {
    /// From each job's busy fraction ([`crate::models::corun`], time-slicing's fitted capacity).
    Measured(crate::models::corun::CorunModel),
    /// One constant for every job: `n` jobs each at `1 / (1 + alpha (n - 1))`.
    Constant(f64),
}

impl fmt::Display for Interference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Interference::Measured(_) => f.write_str("measured"),
            Interference::Constant(a) => write!(f, "{a}"),
        }
    }
}

/// How a site shares its GPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareParams {
    /// Memory of one GPU on the sharing nodes, GiB.
    pub gpu_mem_gib: f64,
    /// Share of that memory never promised to predicted peaks (prediction error, fragmentation,
    /// the CUDA context), 0-0.9.
    pub margin: f64,
    /// How sharing slows jobs down.
    pub interference: Interference,
    /// How jobs on one GPU share it: Slurm's shards (time-slicing) or `gres/mps` (MPS). Under
    /// MPS the measured model's MPS capacity applies, each job's memory is capped
    /// ([`ShareParams::mem_cap_gib`]), and jobs of different users never share a GPU (the MPS
    /// control daemon serves one user at a time, serialising the others).
    pub mode: crate::models::corun::ShareMode,
}

impl Default for ShareParams {
    fn default() -> Self {
        ShareParams {
            gpu_mem_gib: 80.0,
            margin: 0.10,
            interference: Interference::Measured(crate::models::corun::CorunModel::default()),
            mode: crate::models::corun::ShareMode::TimeSlice,
        }
    }
}

impl ShareParams {
    /// Shards a job predicted to peak at `gib` needs on a GPU of `shards_per_gpu`; `None` when
    /// the peak does not fit in the GPU's usable memory.
    pub fn shards_for(&self, gib: f64, shards_per_gpu: u32) -> Option<u32> {
        if shards_per_gpu == 0 {
            return None;
        }
        let usable = self.gpu_mem_gib * (1.0 - self.margin);
        let per_shard = usable / f64::from(shards_per_gpu);
        // The epsilon keeps an exact multiple (e.g. 36G on 9G shards) at its count.
        let shards = (gib / per_shard - 1e-9).ceil().max(1.0);
        (shards <= f64::from(shards_per_gpu)).then_some(shards as u32)
    }

    /// The memory cap (GiB) of a job given `units` of a GPU's `units_per_gpu` (MPS mode): its
    /// share of the whole GPU's memory, so the caps on a GPU never add up to more than the GPU,
    /// and each is at least the predicted peak plus the margin's share.
    pub fn mem_cap_gib(&self, units: u32, units_per_gpu: u32) -> f64 {
        self.gpu_mem_gib * f64::from(units) / f64::from(units_per_gpu.max(1))
    }

    /// Speed of each of the jobs on one GPU (their busy fractions alone), relative to running
    /// alone.
    pub fn speed(&self, busy: &[f64]) -> f64 {
        let demand = busy
            .iter()
            .map(|&u| crate::models::corun::demand_of(u))
            .sum();
        self.speed_of(busy.len(), demand)
    }

    /// [`ShareParams::speed`] from the number of jobs and their summed demand
    /// ([`crate::models::corun::demand_of`]).
    fn speed_of(&self, jobs: usize, demand: f64) -> f64 {
        match self.interference {
            Interference::Measured(model) => model.speed_of(self.mode, jobs, demand),
            Interference::Constant(alpha) => 1.0 / (1.0 + alpha * jobs.saturating_sub(1) as f64),
        }
    }
}

/// What to do with an opted-in job.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Run it on `shards` shards of a GPU on `node` (GPU `index` is where cinch expects Slurm to
    /// put it; Slurm picks among the node's GPUs with room).
    Share {
        node: String,
        index: u32,
        shards: u32,
        prediction: Prediction,
        why: String,
    },
    /// Leave it a whole GPU, and why.
    Whole(String),
}

/// A GPU an opted-in job could share, as [`decide`] weighs it.
#[derive(Clone, Copy)]
struct Candidate<'g> {
    gpu: &'g SharedGpu,
    shards: u32,
    /// Seconds of run time sharing it adds, to this job and the jobs there.
    added: f64,
    /// Seconds: the time added, and the fragment it leaves as the time of the jobs it keeps out.
    cost: f64,
}

/// Keeps `c` in `best` if it costs less, or the same with fewer shards left over (best fit);
/// else the earlier GPU (the first in the node list) stays.
fn keep_better<'g>(best: &mut Option<Candidate<'g>>, c: Candidate<'g>) {
    let better = best.as_ref().is_none_or(|b| {
        c.cost < b.cost - 1e-9
            || (c.cost <= b.cost + 1e-9
                && c.gpu.shards_free - c.shards < b.gpu.shards_free - b.shards)
    });
    if better {
        *best = Some(c);
    }
}

/// Decides where an opted-in job of one GPU shares, if it does: `gpus` the sharing nodes' GPUs,
/// `whole_gpu_wait_s` how long the job would wait for a GPU of its own (0: one is free now).
pub fn decide(
    job: &ShareJob,
    whole_gpu_wait_s: i64,
    gpus: &[SharedGpu],
    mix: &ShareMix,
    params: &ShareParams,
) -> Verdict {
    let busy = job.busy;
    let Some(prediction) = job.prediction else {
        return Verdict::Whole(
            "no peak GPU memory known (state gpu_mem=, or name a model the site's table lists)"
                .into(),
        );
    };
    let run_s = job.run_s.max(1);
    if prediction.gib > params.gpu_mem_gib {
        return Verdict::Whole(format!(
            "predicted peak {prediction} is more than a GPU's {:.0}G",
            params.gpu_mem_gib
        ));
    }
    // Every GPU with room: the time sharing it adds, and what it costs in all. Kept as it goes
    // (no list: this runs in job_submit): the best of all, and the best that adds less than
    // the wait for a whole GPU.
    let mean_share = mix.mean_share();
    let mut best_any: Option<Candidate> = None;
    let mut best_within_wait: Option<Candidate> = None;
    let mut shares_anyway = false;
    for gpu in gpus {
        // A peak above the usable memory shares with no one: it may take an idle GPU's shards
        // all to itself (a whole GPU of the sharing nodes, which whole-GPU jobs cannot use).
        let idle = gpu.co_runners.is_empty() && gpu.shards_free == gpu.shards_total;
        let shards = match params.shards_for(prediction.gib, gpu.shards_total) {
            Some(shards) => shards,
            None if idle && gpu.shards_total > 0 => gpu.shards_total,
            None => continue,
        };
        if gpu.shards_free < shards || gpu.other_users(job, params) {
            continue;
        }
        let before = gpu.speed_with(None, params);
        let now = gpu.speed_with(Some(busy.fraction), params);
        // Time added: this job runs slower than alone, and each job already there slows down.
        let added = run_s as f64 * (1.0 / now - 1.0)
            + gpu
                .co_runners
                .iter()
                .map(|c| c.left_s.max(0) as f64 * (before / now - 1.0))
                .sum::<f64>();
        // The fragment it leaves (FGD's: room the shapes of the jobs on the sharing GPUs could
        // no longer use, as a share of the GPU) stays while this job runs; in the time of the
        // jobs it keeps out, that is the GPU-seconds over their typical share.
        let fragment = mix.fragment_added(gpu.shards_free, shards, gpu.shards_total);
        let candidate = Candidate {
            gpu,
            shards,
            added,
            cost: added + fragment * run_s as f64 / mean_share,
        };
        shares_anyway |= added <= 1e-9;
        if added < whole_gpu_wait_s as f64 {
            keep_better(&mut best_within_wait, candidate);
        }
        keep_better(&mut best_any, candidate);
    }
    // Sharing that slows no one is always worth it (it keeps a whole GPU for a job that needs
    // one); any other must cost less than waiting for a whole GPU, unless the job shares anyway
    // (on a GPU where it slows no one) and this GPU costs less in all. The least cost, then
    // best fit, then the first in the node list ([`keep_better`]). With no mix that is the least
    // time added (an idle shared GPU first: jobs share only when they must); with one, a GPU
    // also costs the room it leaves too small for the shapes.
    let best = if shares_anyway {
        best_any
    } else {
        best_within_wait
    }
    .map(|c| (c.gpu, c.shards, c.added));
    let usable = params.gpu_mem_gib * (1.0 - params.margin);
    match best {
        Some((gpu, shards, added)) => Verdict::Share {
            node: gpu.node.clone(),
            index: gpu.index,
            shards,
            prediction,
            why: format!(
                "predicted peak {prediction}, {busy}: {shards} of {} shards of GPU {} on {} with \
                 {} other job(s); sharing adds {:.0} min, waiting for a whole GPU {:.0} min{}",
                gpu.shards_total,
                gpu.index,
                gpu.node,
                gpu.co_runners.len(),
                added / 60.0,
                whole_gpu_wait_s as f64 / 60.0,
                if added > 1e-9 && added >= whole_gpu_wait_s as f64 {
                    "; beside them rather than on an idle shared GPU, whose room left would be too \
                     small for the jobs that share here"
                } else {
                    ""
                }
            ),
        },
        None if whole_gpu_wait_s <= 0 => Verdict::Whole(format!(
            "a whole GPU is free and no shared GPU has room for predicted peak {prediction}, \
             {busy}, without slowing its jobs down"
        )),
        None if prediction.gib > usable => Verdict::Whole(format!(
            "predicted peak {prediction} does not fit beside other jobs in a GPU's usable \
             {usable:.0}G ({:.0}G less a {:.0}% margin), and no sharing GPU is idle",
            params.gpu_mem_gib,
            params.margin * 100.0
        )),
        None => Verdict::Whole(format!(
            "no shared GPU has room for predicted peak {prediction}, {busy}, at a slowdown that \
             beats waiting {:.0} min for a whole GPU",
            whole_gpu_wait_s as f64 / 60.0
        )),
    }
}
