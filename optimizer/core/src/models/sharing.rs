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

use std::collections::{BTreeSet, HashMap};
use std::fmt;

/// The opt-in: `share=yes`.
/// The shared job's environment variable that carries its GPU memory cap, MiB, from job_submit
/// to cinch's SPANK plugin, which asks the driver to enforce it on the job's cgroup.
pub const DRIVER_CAP_VAR: &str = "CINCH_GPU_MEM_CAP_MIB";

pub const HINT_SHARE: &str = "share";
/// The user's estimate of the job's peak GPU memory: `gpu_mem=10G` (`M`, `G`, `T`; a bare
/// number is GiB).
pub const HINT_GPU_MEM: &str = "gpu_mem";
/// The peak the job measured of itself (written by the helper while it runs): what similar later
/// jobs are predicted from.
pub const HINT_GPU_MEM_PEAK: &str = "gpu_mem_peak";
/// The share of time the job keeps its GPU busy when it runs alone (`gpu_busy=0.62` or `62%`):
/// measured by the helper (NVML's utilisation) on a job holding a whole GPU, or stated.
pub const HINT_GPU_BUSY: &str = "gpu_busy";
/// The application hint (`app=bert`), as for run-time prediction.
pub const HINT_APP: &str = "app";
/// The model and batch size a table entry is looked up by (`app=` is the application hint).
pub const HINT_BATCH: &str = "batch";

/// Largest memory size cinch reads (GiB): anything larger is a typo.
const MAX_GIB: f64 = 4096.0;
/// Similar-job keys the observed-peak book keeps, and job ids per key it counts.
const MAX_KEYS: usize = 10_000;
const MAX_JOBS_PER_KEY: usize = 64;

/// Parses a memory size in GiB: `10`, `10G`, `10GiB`, `10GB`, `800M`, `1.5T`.
pub fn parse_gib(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (number, unit) = lower.split_at(digits_end);
    let scale = match unit.trim() {
        "" | "g" | "gb" | "gib" => 1.0,
        "m" | "mb" | "mib" => 1.0 / 1024.0,
        "t" | "tb" | "tib" => 1024.0,
        _ => return Err(format!("'{t}' is not a memory size (e.g. 10G or 800M)")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{t}' is not a memory size (e.g. 10G or 800M)"))?;
    let gib = value * scale;
    if !(gib > 0.0 && gib <= MAX_GIB) {
        return Err(format!("'{t}' is outside 1M-{MAX_GIB:.0}G of GPU memory"));
    }
    Ok(gib)
}

/// Parses a busy fraction: `0.62`, `62%` (from 1% to 100%).
pub fn parse_busy(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (number, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 0.01),
        None => (t, 1.0),
    };
    let busy = number
        .parse::<f64>()
        .map(|v| v * scale)
        .map_err(|_| format!("'{t}' is not a busy fraction (e.g. 0.62 or 62%)"))?;
    if !(0.01..=1.0).contains(&busy) {
        return Err(format!("'{t}' is outside 1%-100%"));
    }
    Ok(busy)
}

/// Whether the user opted in (`share=yes`); a value other than yes/no is an error.
pub fn opted_in(hints: &crate::slurm::job_hints::Hints) -> Result<bool, String> {
    match hints.get(HINT_SHARE).map(|v| v.to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) if v == "yes" => Ok(true),
        Some(v) if v == "no" => Ok(false),
        Some(v) => Err(format!("cinch hint share: '{v}' is not yes or no")),
    }
}

/// Checks the sharing hints a user wrote (at submit time): the opt-in's value, the sizes, and
/// that the job asks for exactly one GPU on one node when it opts in.
pub fn check_hints(
    hints: &crate::slurm::job_hints::Hints,
    one_gpu: bool,
) -> Result<bool, crate::wire::refusal::Refusal> {
    use crate::wire::refusal::Refusal;
    let share = opted_in(hints).map_err(Refusal::Hint)?;
    for key in [HINT_GPU_MEM, HINT_GPU_MEM_PEAK] {
        if let Some(value) = hints.get(key) {
            parse_gib(value).map_err(|e| Refusal::Hint(format!("cinch hint {key}: {e}")))?;
        }
    }
    if let Some(value) = hints.get(HINT_GPU_BUSY) {
        parse_busy(value).map_err(|e| Refusal::Hint(format!("cinch hint {HINT_GPU_BUSY}: {e}")))?;
    }
    if let Some(batch) = hints.get(HINT_BATCH) {
        batch
            .parse::<u32>()
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                Refusal::Hint(format!(
                    "cinch hint batch: '{batch}' is not a positive whole number"
                ))
            })?;
    }
    if share && !one_gpu {
        return Err(Refusal::GpuRequest(
            "cinch hint share: only a job of one GPU on one node can share a GPU \
             (--gpus=1 or --gres=gpu:1)"
                .into(),
        ));
    }
    if share && hints.contains_key(crate::models::elastic::HINT_ELASTIC) {
        return Err(Refusal::Hint(
            "cinch hint share: an elastic job cannot also share a GPU".into(),
        ));
    }
    Ok(share)
}

/// A site's table of known models: one value (peak GPU memory, or busy fraction alone) by
/// application and batch size (cinch.conf `ShareModelMemory=bert:32=10G,resnet50=8G`,
/// `ShareModelBusy=bert=58%,resnet50=99%`; an entry without a batch size covers every batch size
/// the table does not list).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelTable {
    entries: Vec<(String, Option<u32>, f64)>,
}

impl ModelTable {
    /// Parses `app[:batch]=size` entries separated by commas.
    pub fn parse(text: &str) -> Result<ModelTable, String> {
        Self::parse_with(text, "size", parse_gib)
    }

    /// Parses `app[:batch]=busy` entries (`0.58` or `58%`) separated by commas.
    pub fn parse_busy(text: &str) -> Result<ModelTable, String> {
        Self::parse_with(text, "busy", parse_busy)
    }

    fn parse_with(
        text: &str,
        what: &str,
        value: fn(&str) -> Result<f64, String>,
    ) -> Result<ModelTable, String> {
        let mut entries = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (model, size) = entry
                .split_once('=')
                .ok_or_else(|| format!("'{entry}' is not app[:batch]={what}"))?;
            let (app, batch) = match model.split_once(':') {
                Some((app, batch)) => (
                    app.trim(),
                    Some(
                        batch
                            .trim()
                            .parse::<u32>()
                            .ok()
                            .filter(|&b| b > 0)
                            .ok_or_else(|| {
                                format!("'{entry}': batch '{batch}' is not a positive whole number")
                            })?,
                    ),
                ),
                None => (model.trim(), None),
            };
            if app.is_empty() {
                return Err(format!("'{entry}' names no application"));
            }
            let v = value(size).map_err(|e| format!("'{entry}': {e}"))?;
            entries.push((app.to_ascii_lowercase(), batch, v));
        }
        Ok(ModelTable { entries })
    }

    /// The entries as cinch.conf writes them, `app[:batch]=value` joined by commas, each value
    /// written by `value`.
    pub fn render(&self, value: impl Fn(f64) -> String) -> String {
        self.entries
            .iter()
            .map(|(app, batch, v)| match batch {
                Some(b) => format!("{app}:{b}={}", value(*v)),
                None => format!("{app}={}", value(*v)),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Adds an entry (the caller keeps entries unique).
    pub fn push(&mut self, app: &str, batch: Option<u32>, value: f64) {
        self.entries.push((app.to_ascii_lowercase(), batch, value));
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The table's peak for `app` at `batch`: the exact entry, else the application's entry
    /// without a batch size.
    pub fn lookup(&self, app: &str, batch: Option<u32>) -> Option<f64> {
        let app = app.to_ascii_lowercase();
        let exact = batch.and_then(|b| {
            self.entries
                .iter()
                .find(|(a, eb, _)| *a == app && *eb == Some(b))
        });
        exact
            .or_else(|| {
                self.entries
                    .iter()
                    .find(|(a, eb, _)| *a == app && eb.is_none())
            })
            .map(|&(_, _, gib)| gib)
    }
}

/// Which jobs count as similar for observed peaks: the same user running the same application
/// (its `app=` hint, else its job name) at the same batch size.
pub fn similar_key(
    user: &str,
    name: Option<&str>,
    hints: &crate::slurm::job_hints::Hints,
) -> Option<String> {
    let what = hints
        .get(HINT_APP)
        .map(String::as_str)
        .or(name)
        .filter(|s| !s.is_empty())?;
    Some(match hints.get(HINT_BATCH) {
        Some(batch) => format!("{user}/{what}:{batch}"),
        None => format!("{user}/{what}"),
    })
}

/// The largest value reported per similar-job key, and by which jobs.
#[derive(Debug, Clone, Default)]
struct KeyedMax {
    by_key: HashMap<String, (f64, BTreeSet<u32>)>,
}

impl KeyedMax {
    fn record(&mut self, key: &str, job_id: u32, value: f64) {
        if !(value.is_finite() && value > 0.0) {
            return;
        }
        if !self.by_key.contains_key(key) && self.by_key.len() >= MAX_KEYS {
            return;
        }
        let entry = self
            .by_key
            .entry(key.to_string())
            .or_insert((0.0, BTreeSet::new()));
        entry.0 = entry.0.max(value);
        if entry.1.len() < MAX_JOBS_PER_KEY {
            entry.1.insert(job_id);
        }
    }

    fn observed(&self, key: &str, job_id: u32) -> Option<(f64, u32)> {
        let (value, jobs) = self.by_key.get(key)?;
        let others = jobs.iter().filter(|&&j| j != job_id).count() as u32;
        (others > 0).then_some((*value, others))
    }
}

/// What jobs reported of themselves, by [`similar_key`]: the largest peak GPU memory and the
/// largest busy fraction, and how many jobs reported each.
#[derive(Debug, Clone, Default)]
pub struct ReportBook {
    peaks: KeyedMax,
    busy: KeyedMax,
}

impl ReportBook {
    /// Notes that job `job_id` reported a peak of `gib`.
    pub fn record_peak(&mut self, key: &str, job_id: u32, gib: f64) {
        self.peaks.record(key, job_id, gib);
    }

    /// Notes that job `job_id` reported keeping its GPU `busy` (a fraction) alone.
    pub fn record_busy(&mut self, key: &str, job_id: u32, busy: f64) {
        if busy <= 1.0 {
            self.busy.record(key, job_id, busy);
        }
    }

    /// The largest peak observed for similar jobs other than `job_id`, and how many reported.
    pub fn observed_peak(&self, key: &str, job_id: u32) -> Option<(f64, u32)> {
        self.peaks.observed(key, job_id)
    }

    /// The largest busy fraction similar jobs other than `job_id` reported, and how many did.
    pub fn observed_busy(&self, key: &str, job_id: u32) -> Option<(f64, u32)> {
        self.busy.observed(key, job_id)
    }

    /// Keys with a reported peak, and with a reported busy fraction.
    pub fn len(&self) -> (usize, usize) {
        (self.peaks.by_key.len(), self.busy.by_key.len())
    }

    pub fn is_empty(&self) -> bool {
        self.peaks.by_key.is_empty() && self.busy.by_key.is_empty()
    }
}

/// Where a prediction came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// The user's `gpu_mem=`.
    Stated,
    /// The site's model table.
    Table,
    /// The largest peak that this many similar jobs reported.
    Observed(u32),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Stated => f.write_str("stated"),
            Source::Table => f.write_str("model table"),
            Source::Observed(1) => f.write_str("observed peak of 1 similar job"),
            Source::Observed(n) => write!(f, "observed peak of {n} similar jobs"),
        }
    }
}

/// A predicted peak: the largest of what is known (a low estimate must not squeeze a job that
/// has been seen to need more).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    pub gib: f64,
    pub source: Source,
}

impl fmt::Display for Prediction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}G ({})", self.gib, self.source)
    }
}

/// The largest of the stated estimate, the table's entry and the observed peak of similar jobs;
/// `None` when none is known (the job then keeps a GPU of its own).
pub fn predict(
    stated: Option<f64>,
    table: Option<f64>,
    observed: Option<(f64, u32)>,
) -> Option<Prediction> {
    let candidates = [
        stated.map(|gib| Prediction {
            gib,
            source: Source::Stated,
        }),
        table.map(|gib| Prediction {
            gib,
            source: Source::Table,
        }),
        observed.map(|(gib, n)| Prediction {
            gib,
            source: Source::Observed(n),
        }),
    ];
    candidates
        .into_iter()
        .flatten()
        .fold(None, |best: Option<Prediction>, p| match best {
            Some(b) if b.gib >= p.gib => Some(b),
            _ => Some(p),
        })
}

/// A job's prediction from its hints, a site's table and the observed peaks.
pub fn predict_job(
    key: Option<&str>,
    job_id: u32,
    hints: &crate::slurm::job_hints::Hints,
    table: &ModelTable,
    book: &ReportBook,
) -> Option<Prediction> {
    let stated = hints.get(HINT_GPU_MEM).and_then(|v| parse_gib(v).ok());
    let batch = hints.get(HINT_BATCH).and_then(|b| b.parse().ok());
    let from_table = hints.get(HINT_APP).and_then(|app| table.lookup(app, batch));
    let observed = key.and_then(|k| book.observed_peak(k, job_id));
    predict(stated, from_table, observed)
}

/// Where a busy fraction came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BusySource {
    /// The job's own `gpu_busy=` (the helper's measurement, or the user's).
    Reported,
    /// The largest that this many similar jobs reported.
    Observed(u32),
    /// The site's model table (`ShareModelBusy`).
    Table,
    /// Nothing known: taken as fully busy, the most slowdown.
    Unknown,
}

/// How busy a job keeps its GPU alone, and where that came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Busy {
    pub fraction: f64,
    pub source: BusySource,
}

impl Busy {
    /// Nothing known: fully busy ([`crate::models::corun::UNKNOWN_BUSY`]).
    pub const UNKNOWN: Busy = Busy {
        fraction: crate::models::corun::UNKNOWN_BUSY,
        source: BusySource::Unknown,
    };
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = (self.fraction * 100.0).round();
        match self.source {
            BusySource::Reported => write!(f, "busy {pct}% (reported)"),
            BusySource::Observed(1) => write!(f, "busy {pct}% (1 similar job)"),
            BusySource::Observed(n) => write!(f, "busy {pct}% ({n} similar jobs)"),
            BusySource::Table => write!(f, "busy {pct}% (model table)"),
            BusySource::Unknown => write!(f, "busy unknown, taken as {pct}%"),
        }
    }
}

/// A job's busy fraction: its own report when it has one (it measured itself), else the largest
/// of what similar jobs reported and the site's table lists, else [`Busy::UNKNOWN`].
pub fn busy_of(
    key: Option<&str>,
    job_id: u32,
    hints: &crate::slurm::job_hints::Hints,
    table: &ModelTable,
    book: &ReportBook,
) -> Busy {
    if let Some(fraction) = hints.get(HINT_GPU_BUSY).and_then(|v| parse_busy(v).ok()) {
        return Busy {
            fraction,
            source: BusySource::Reported,
        };
    }
    let batch = hints.get(HINT_BATCH).and_then(|b| b.parse().ok());
    let from_table = hints.get(HINT_APP).and_then(|app| table.lookup(app, batch));
    let observed = key.and_then(|k| book.observed_busy(k, job_id));
    match (observed, from_table) {
        (Some((o, n)), t) if t.is_none_or(|t| o >= t) => Busy {
            fraction: o,
            source: BusySource::Observed(n),
        },
        (_, Some(t)) => Busy {
            fraction: t,
            source: BusySource::Table,
        },
        _ => Busy::UNKNOWN,
    }
}

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

/// One GPU of a sharing node, as the last look at Slurm showed it.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedGpu {
    pub node: String,
    pub index: u32,
    pub shards_total: u32,
    pub shards_free: u32,
    /// The jobs on this GPU.
    pub co_runners: Vec<CoRunner>,
}

/// A job on a shared GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoRunner {
    /// Seconds it has left, at its current speed.
    pub left_s: i64,
    /// Its busy fraction alone.
    pub busy: f64,
    /// Its user (`None`: not known).
    pub user: Option<u32>,
}

/// The job a sharing decision is for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareJob {
    /// Its predicted peak GPU memory (`None`: nothing known; it keeps a whole GPU).
    pub prediction: Option<Prediction>,
    /// How busy it keeps a GPU alone.
    pub busy: Busy,
    /// Its expected run time alone, seconds.
    pub run_s: i64,
    /// Its user (`None`: not known; under MPS it then shares with no one).
    pub user: Option<u32>,
}

impl SharedGpu {
    /// The speed of the jobs on this GPU, with one more of busy fraction `extra` if given;
    /// no list is built (job_submit decides under slurmctld's lock).
    fn speed_with(&self, extra: Option<f64>, params: &ShareParams) -> f64 {
        let demand: f64 = self
            .co_runners
            .iter()
            .map(|c| c.busy)
            .chain(extra)
            .map(crate::models::corun::demand_of)
            .sum();
        params.speed_of(self.co_runners.len() + usize::from(extra.is_some()), demand)
    }

    /// Takes `shards` for a job just placed here (`job.run_s` its run time alone).
    pub fn take(&mut self, shards: u32, job: &ShareJob, params: &ShareParams) {
        let before = self.speed_with(None, params);
        let after = self.speed_with(Some(job.busy.fraction), params);
        for c in &mut self.co_runners {
            c.left_s = (c.left_s as f64 * before / after).round() as i64;
        }
        self.co_runners.push(CoRunner {
            left_s: (job.run_s as f64 / after).round() as i64,
            busy: job.busy.fraction,
            user: job.user,
        });
        self.shards_free = self.shards_free.saturating_sub(shards);
    }

    /// Whether MPS keeps `job` off this GPU: jobs of another (or an unknown) user are on it.
    fn other_users(&self, job: &ShareJob, params: &ShareParams) -> bool {
        params.mode == crate::models::corun::ShareMode::Mps
            && self
                .co_runners
                .iter()
                .any(|c| c.user.is_none() || c.user != job.user)
    }
}

/// A job without a time limit is taken to run this long (seconds) when sharing's cost is
/// weighed, and a whole GPU with no known end to free up after it.
pub const UNKNOWN_RUN_S: i64 = 86_400;

/// A node outside the sharing partition with GPUs: what a job waiting for a whole GPU faces.
#[derive(Debug, Clone, PartialEq)]
pub struct WholeGpuNode {
    pub partitions: Vec<String>,
    pub gpus_free: u32,
    /// When the first running GPU job there reaches its time limit (Unix seconds).
    pub first_end: Option<i64>,
}

/// The shapes of the jobs on the sharing GPUs, each as its share of a GPU in thousandths and
/// weighted by that share (the GPU it takes: rare large jobs weigh what they hold): what the
/// coming jobs are expected to ask for, as FGD's gradient needs a mix of shapes. A live agent
/// knows no more than what runs now; the first jobs find it empty (no fragmentation term).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareMix {
    /// (share in thousandths of a GPU, total weight).
    shapes: Vec<(u32, f64)>,
    total: f64,
}

impl ShareMix {
    /// A GPU's thousandths that `shards` of its `shards_total` are.
    pub fn milli_of(shards: u32, shards_total: u32) -> u32 {
        (u64::from(shards) * 1000 / u64::from(shards_total.max(1))).clamp(1, 1000) as u32
    }

    /// A job on `milli` thousandths of a GPU (1000: a whole GPU, or all of a GPU's shards).
    pub fn add(&mut self, milli: u32) {
        let milli = milli.clamp(1, 1000);
        let weight = f64::from(milli);
        match self.shapes.iter_mut().find(|(m, _)| *m == milli) {
            Some((_, w)) => *w += weight,
            None => self.shapes.push((milli, weight)),
        }
        self.total += weight;
    }

    /// The share of a GPU the mix's shapes take, on average by weight (1 when empty).
    pub fn mean_share(&self) -> f64 {
        if self.total <= 0.0 {
            return 1.0;
        }
        let weighted: f64 = self.shapes.iter().map(|&(m, w)| f64::from(m) * w).sum();
        (weighted / self.total / 1000.0).clamp(0.001, 1.0)
    }

    /// FGD's fragment of a GPU with `free` of `total` shards, expected over the mix, as a share
    /// of the GPU: the free room each shape could not use there (all of it when the shape does
    /// not fit, none when it does).
    fn fragment(&self, free: u32, total: u32) -> f64 {
        if self.total <= 0.0 || total == 0 {
            return 0.0;
        }
        let unusable: f64 = self
            .shapes
            .iter()
            .filter(|&&(milli, _)| {
                let need = (u64::from(milli) * u64::from(total)).div_ceil(1000).max(1);
                u64::from(free) < need
            })
            .map(|&(_, w)| w)
            .sum();
        unusable / self.total * f64::from(free) / f64::from(total)
    }

    /// How much `shards` taken from a GPU with `free` of `total` raise its expected fragment.
    pub fn fragment_added(&self, free: u32, shards: u32, total: u32) -> f64 {
        self.fragment(free.saturating_sub(shards), total) - self.fragment(free, total)
    }
}

/// What a sharing decision needs, as of one look at the cluster (the plugin's agent builds it
/// from Slurm, the simulator from its state): the sharing GPUs, the whole-GPU nodes, and the
/// peaks jobs reported.
#[derive(Debug, Clone, Default)]
pub struct ShareView {
    pub gpus: Vec<SharedGpu>,
    pub whole: Vec<WholeGpuNode>,
    pub reports: ReportBook,
    /// What the jobs on the sharing GPUs ask for: the shapes coming jobs are expected to have.
    pub mix: ShareMix,
}

impl ShareView {
    /// A running job's `shards` on `node`'s GPU `index` (`None`: the node's one MPS GPU),
    /// counted as the view's builders (the plugin's agent and the simulator) both count them:
    /// taken from that GPU, the job among its co-runners, its shape in the mix. A job on a GPU
    /// the view lacks is left out (false).
    pub fn add_running(
        &mut self,
        node: &str,
        index: Option<u32>,
        shards: u32,
        job: CoRunner,
    ) -> bool {
        let Some(g) = self
            .gpus
            .iter_mut()
            .find(|g| g.node == node && index.is_none_or(|i| g.index == i))
        else {
            return false;
        };
        g.shards_free = g.shards_free.saturating_sub(shards);
        self.mix.add(ShareMix::milli_of(shards, g.shards_total));
        g.co_runners.push(job);
        true
    }

    /// A shard job waiting for `node` (pinned there by an earlier decision), counted where
    /// Slurm will start it: on that node's GPU with the fewest free shards that still holds
    /// `shards`, its shape in the mix. One that no GPU there holds now is left out (false).
    pub fn add_waiting(
        &mut self,
        node: &str,
        shards: u32,
        job: &ShareJob,
        params: &ShareParams,
    ) -> bool {
        let Some(g) = self
            .gpus
            .iter_mut()
            .filter(|g| g.node == node && g.shards_free >= shards)
            .min_by_key(|g| g.shards_free)
        else {
            return false;
        };
        g.take(shards, job, params);
        self.mix.add(ShareMix::milli_of(shards, g.shards_total));
        true
    }

    /// How long a job in `partitions` (Slurm's comma list; `None`: any) waits for a whole GPU,
    /// by the time limits of the jobs holding them (0: one is free).
    pub fn whole_gpu_wait_s(&self, partitions: Option<&str>, now: i64) -> i64 {
        let wanted: Vec<&str> = partitions
            .map(|p| p.split(',').filter(|q| !q.is_empty()).collect())
            .unwrap_or_default();
        let mut wait = i64::MAX;
        for node in &self.whole {
            if !wanted.is_empty() && !node.partitions.iter().any(|p| wanted.contains(&p.as_str())) {
                continue;
            }
            if node.gpus_free > 0 {
                return 0;
            }
            if let Some(end) = node.first_end {
                wait = wait.min((end - now).max(1));
            }
        }
        if wait == i64::MAX {
            UNKNOWN_RUN_S
        } else {
            wait
        }
    }

    /// [`decide`] for one opted-in job; a share takes its shards from the view, so the next
    /// decision sees them gone.
    pub fn decide(
        &mut self,
        job: &ShareJob,
        partitions: Option<&str>,
        now: i64,
        params: &ShareParams,
    ) -> Verdict {
        let wait = self.whole_gpu_wait_s(partitions, now);
        let verdict = decide(job, wait, &self.gpus, &self.mix, params);
        if let Verdict::Share {
            node,
            index,
            shards,
            ..
        } = &verdict
        {
            if let Some(g) = self
                .gpus
                .iter_mut()
                .find(|g| g.node == *node && g.index == *index)
            {
                g.take(*shards, job, params);
                let milli = ShareMix::milli_of(*shards, g.shards_total);
                self.mix.add(milli);
            }
        }
        verdict
    }

    /// One line for the log: shards free per GPU, whole GPUs free, peaks known.
    pub fn summary(&self) -> String {
        let gpus: Vec<String> = self
            .gpus
            .iter()
            .map(|g| {
                format!(
                    "{}/gpu{} {}/{} free",
                    g.node, g.index, g.shards_free, g.shards_total
                )
            })
            .collect();
        let (peaks, busy) = self.reports.len();
        format!(
            "{}; whole GPUs free outside the sharing partition: {}; jobs' reported peaks: {peaks}, \
             busy fractions: {busy}",
            if gpus.is_empty() {
                "no sharing GPUs".to_string()
            } else {
                gpus.join(", ")
            },
            self.whole.iter().map(|n| n.gpus_free).sum::<u32>(),
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::hints;

    /// [`decide`] with no jobs' shapes known (no fragmentation term).
    fn decide_no_mix(
        job: &ShareJob,
        whole_gpu_wait_s: i64,
        gpus: &[SharedGpu],
        params: &ShareParams,
    ) -> Verdict {
        decide(job, whole_gpu_wait_s, gpus, &ShareMix::default(), params)
    }

    /// The job a decision is for (user 1000).
    fn sj(prediction: Option<Prediction>, busy: Busy, run_s: i64) -> ShareJob {
        ShareJob {
            prediction,
            busy,
            run_s,
            user: Some(1000),
        }
    }

    fn gpu(node: &str, index: u32, free: u32, co: &[i64]) -> SharedGpu {
        SharedGpu {
            node: node.into(),
            index,
            shards_total: 8,
            shards_free: free,
            co_runners: co
                .iter()
                .map(|&left_s| CoRunner {
                    left_s,
                    busy: 1.0,
                    user: Some(1000),
                })
                .collect(),
        }
    }

    /// The rules both builders of the view follow (the plugin's agent, the simulator): a
    /// running job counts on its GPU; a waiting one on its node's fullest GPU that still holds
    /// it, and nowhere (not in the mix either) when none does.
    #[test]
    fn the_view_counts_running_jobs_on_their_gpu_and_waiting_ones_where_slurm_will_start_them() {
        let mut view = ShareView {
            gpus: vec![gpu("n0", 0, 8, &[]), gpu("n0", 1, 8, &[])],
            ..ShareView::default()
        };
        let on = |busy| CoRunner {
            left_s: 600,
            busy,
            user: Some(1000),
        };
        assert!(view.add_running("n0", Some(1), 3, on(0.5)));
        assert!(!view.add_running("n9", Some(0), 3, on(0.5)));
        let frees = |v: &ShareView| v.gpus.iter().map(|g| g.shards_free).collect::<Vec<_>>();
        assert_eq!(frees(&view), [8, 5]);
        let params = ShareParams::default();
        let waiting = sj(None, Busy::UNKNOWN, 600);
        // 4 shards fit on both GPUs: the fuller one, GPU 1, takes them.
        assert!(view.add_waiting("n0", 4, &waiting, &params));
        assert_eq!(frees(&view), [8, 1]);
        // 9 fit on neither: left out, and out of the mix.
        assert!(!view.add_waiting("n0", 9, &waiting, &params));
        assert_eq!(frees(&view), [8, 1]);
        let mut mix = ShareMix::default();
        mix.add(375);
        mix.add(500);
        assert_eq!(view.mix, mix);
        assert_eq!(view.gpus[1].co_runners.len(), 2);
    }

    #[test]
    fn memory_sizes_parse_in_the_units_users_write() {
        assert_eq!(parse_gib("10").unwrap(), 10.0);
        assert_eq!(parse_gib("10G").unwrap(), 10.0);
        assert_eq!(parse_gib("10GiB").unwrap(), 10.0);
        assert_eq!(parse_gib("512M").unwrap(), 0.5);
        assert_eq!(parse_gib("1t").unwrap(), 1024.0);
        for bad in ["", "G", "ten", "-1G", "0", "10X", "9999T", "1.2.3G"] {
            assert!(parse_gib(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn hints_are_checked_and_sharing_needs_one_gpu() {
        assert_eq!(check_hints(&hints(&[]), false), Ok(false));
        assert_eq!(check_hints(&hints(&[("share", "yes")]), true), Ok(true));
        assert_eq!(check_hints(&hints(&[("share", "no")]), false), Ok(false));
        use crate::wire::refusal::Refusal;
        let err = check_hints(&hints(&[("share", "maybe")]), true).unwrap_err();
        assert!(
            matches!(&err, Refusal::Hint(m) if m.contains("'maybe' is not yes or no")),
            "{err}"
        );
        // Two GPUs asked for where the hint needs one: the GPU request is what is wrong.
        let err = check_hints(&hints(&[("share", "yes")]), false).unwrap_err();
        assert!(
            matches!(&err, Refusal::GpuRequest(m) if m.contains("one GPU on one node")),
            "{err}"
        );
        let err = check_hints(&hints(&[("share", "yes"), ("gpu_mem", "lots")]), true).unwrap_err();
        assert!(
            matches!(&err, Refusal::Hint(m) if m.contains("gpu_mem")),
            "{err}"
        );
        let err = check_hints(&hints(&[("share", "yes"), ("elastic", "1-4")]), true).unwrap_err();
        assert!(
            matches!(&err, Refusal::Hint(m) if m.contains("elastic")),
            "{err}"
        );
        let err = check_hints(&hints(&[("batch", "0")]), true).unwrap_err();
        assert!(
            matches!(&err, Refusal::Hint(m) if m.contains("batch")),
            "{err}"
        );
    }

    #[test]
    fn the_model_table_matches_batch_then_application() {
        let table = ModelTable::parse("bert:32=10G, bert=14G,resnet50=8G").unwrap();
        assert_eq!(table.lookup("BERT", Some(32)), Some(10.0));
        assert_eq!(table.lookup("bert", Some(64)), Some(14.0));
        assert_eq!(table.lookup("bert", None), Some(14.0));
        assert_eq!(table.lookup("yolo", None), None);
        for bad in ["bert", "bert:x=1G", "=1G", "bert=huge"] {
            assert!(ModelTable::parse(bad).is_err(), "{bad} parsed");
        }
        assert!(ModelTable::parse("").unwrap().is_empty());
    }

    #[test]
    fn a_prediction_is_the_largest_known_peak_and_names_its_source() {
        assert_eq!(predict(None, None, None), None);
        let p = predict(Some(4.0), Some(10.0), Some((9.0, 3))).unwrap();
        assert_eq!((p.gib, p.source), (10.0, Source::Table));
        let p = predict(Some(4.0), None, Some((9.0, 3))).unwrap();
        assert_eq!(p.to_string(), "9.0G (observed peak of 3 similar jobs)");
        let p = predict(Some(12.0), None, Some((9.0, 1))).unwrap();
        assert_eq!(p.source, Source::Stated);
    }

    #[test]
    fn observed_peaks_count_other_similar_jobs_only() {
        let mut book = ReportBook::default();
        let h = hints(&[("app", "bert"), ("batch", "32")]);
        let key = similar_key("ann", Some("train"), &h).unwrap();
        assert_eq!(key, "ann/bert:32");
        book.record_peak(&key, 7, 6.0);
        book.record_peak(&key, 7, 9.0);
        // A job's own report does not predict itself.
        assert_eq!(book.observed_peak(&key, 7), None);
        assert_eq!(book.observed_peak(&key, 8), Some((9.0, 1)));
        book.record_peak(&key, 9, 5.0);
        assert_eq!(book.observed_peak(&key, 10), Some((9.0, 2)));
        book.record_peak(&key, 11, f64::NAN);
        assert_eq!(book.observed_peak(&key, 10), Some((9.0, 2)));
        let p = predict_job(Some(&key), 10, &h, &ModelTable::default(), &book).unwrap();
        assert_eq!(p.source, Source::Observed(2));
        assert_eq!(similar_key("ann", None, &hints(&[])), None);
    }

    #[test]
    fn shards_stand_for_usable_memory() {
        let params = ShareParams::default(); // 80G less 10%: 72G usable, 9G per shard of 8
        assert_eq!(params.shards_for(9.0, 8), Some(1));
        assert_eq!(params.shards_for(9.5, 8), Some(2));
        assert_eq!(params.shards_for(36.0, 8), Some(4));
        assert_eq!(params.shards_for(72.0, 8), Some(8));
        assert_eq!(params.shards_for(73.0, 8), None);
        assert_eq!(params.shards_for(1.0, 0), None);
        assert_eq!(params.speed(&[1.0]), 1.0);
        let constant = ShareParams {
            interference: Interference::Constant(0.5),
            ..params
        };
        assert!((constant.speed(&[1.0, 0.3]) - 2.0 / 3.0).abs() < 1e-12);
        // Measured: two light jobs share for free, two busy ones split the GPU.
        assert_eq!(params.speed(&[0.3, 0.3]), 1.0);
        assert!((params.speed(&[1.0, 1.0]) - 0.91 / 2.0).abs() < 1e-12);
    }

    #[test]
    fn a_job_shares_only_where_it_fits_and_sharing_beats_waiting() {
        // The older constant model, whose arithmetic is easy to follow by hand.
        let params = ShareParams {
            interference: Interference::Constant(0.5),
            ..ShareParams::default()
        };
        let p = Some(Prediction {
            gib: 20.0,
            source: Source::Stated,
        }); // 3 shards
        let gpus = [
            gpu("n1", 0, 2, &[3_600]),
            gpu("n1", 1, 4, &[3_600]),
            gpu("n2", 0, 8, &[]),
        ];
        // An idle GPU first: sharing there costs nothing.
        match decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 2_700, &gpus, &params) {
            Verdict::Share { node, index, .. } => assert_eq!((node.as_str(), index), ("n2", 0)),
            other => panic!("{other:?}"),
        }
        // Among GPUs that cost the same, best fit: the fewest shards left that still fit.
        let crowded = [
            gpu("n1", 0, 2, &[3_600]),
            gpu("n1", 1, 4, &[3_600]),
            gpu("n1", 2, 8, &[3_600]),
        ];
        match decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 7_200, &crowded, &params) {
            Verdict::Share {
                node,
                index,
                shards,
                ..
            } => {
                assert_eq!((node.as_str(), index, shards), ("n1", 1, 3));
            }
            other => panic!("{other:?}"),
        }
        // Sharing adds 1 h (30 min to it, 30 min to the other job): not worth a 45 min wait.
        let busy = [gpu("n1", 1, 4, &[3_600])];
        assert!(
            matches!(decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 2_700, &busy, &params), Verdict::Whole(w) if w.contains("beats waiting"))
        );
        // With a whole GPU free, only sharing that slows no one: the idle shared GPU, not a
        // busy one.
        match decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 0, &gpus, &params) {
            Verdict::Share { node, index, .. } => assert_eq!((node.as_str(), index), ("n2", 0)),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 0, &busy, &params), Verdict::Whole(w) if w.contains("a whole GPU is free"))
        );
        // An unknown peak, a peak above usable memory: no sharing.
        assert!(
            matches!(decide_no_mix(&sj(None, Busy::UNKNOWN, 3_600), 7_200, &gpus, &params), Verdict::Whole(w) if w.contains("no peak"))
        );
        let huge = Some(Prediction {
            gib: 75.0,
            source: Source::Stated,
        });
        // A peak above the usable 72G shares with no one, but may have an idle GPU's shards.
        match decide_no_mix(&sj(huge, Busy::UNKNOWN, 3_600), 7_200, &gpus, &params) {
            Verdict::Share { node, shards, .. } => assert_eq!((node.as_str(), shards), ("n2", 8)),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(decide_no_mix(&sj(huge, Busy::UNKNOWN, 3_600), 7_200, &busy, &params), Verdict::Whole(w) if w.contains("does not fit beside"))
        );
        let more = Some(Prediction {
            gib: 81.0,
            source: Source::Stated,
        });
        assert!(
            matches!(decide_no_mix(&sj(more, Busy::UNKNOWN, 3_600), 7_200, &gpus, &params), Verdict::Whole(w) if w.contains("more than a GPU's 80G"))
        );
    }

    #[test]
    fn taking_shards_slows_the_jobs_already_there() {
        let left = |g: &SharedGpu| g.co_runners.iter().map(|c| c.left_s).collect::<Vec<_>>();
        let params = ShareParams {
            interference: Interference::Constant(0.5),
            ..ShareParams::default()
        };
        let mut g = gpu("n1", 0, 8, &[]);
        g.take(3, &sj(None, Busy::UNKNOWN, 3_600), &params);
        assert_eq!((g.shards_free, left(&g)), (5, vec![3_600]));
        g.take(2, &sj(None, Busy::UNKNOWN, 3_600), &params);
        assert_eq!(g.shards_free, 3);
        assert_eq!(left(&g), vec![5_400, 5_400]);
        // Measured: a light job beside a light one slows nobody; a busy one slows both.
        let measured = ShareParams::default();
        let mut g = gpu("n1", 0, 8, &[]);
        let light = Busy {
            fraction: 0.3,
            source: BusySource::Table,
        };
        g.take(1, &sj(None, light, 3_600), &measured);
        g.take(1, &sj(None, light, 3_600), &measured);
        assert_eq!(left(&g), vec![3_600, 3_600]);
        g.take(1, &sj(None, Busy::UNKNOWN, 3_600), &measured);
        // Demand 1.6 on a capacity of 0.91: each at 0.569x.
        assert_eq!(left(&g), vec![6_330, 6_330, 6_330]);
    }

    #[test]
    fn busy_fractions_parse_as_fractions_or_percent() {
        assert_eq!(parse_busy("0.62").unwrap(), 0.62);
        assert!((parse_busy("62%").unwrap() - 0.62).abs() < 1e-12);
        assert_eq!(parse_busy("1").unwrap(), 1.0);
        for bad in ["", "%", "busy", "0", "1.5", "150%", "-0.2", "0.001"] {
            assert!(parse_busy(bad).is_err(), "{bad} parsed");
        }
        let err = check_hints(&hints(&[("gpu_busy", "lots")]), true).unwrap_err();
        assert!(err.to_string().contains("gpu_busy"), "{err}");
        let table = ModelTable::parse_busy("bert:32=58%,resnet50=0.99").unwrap();
        assert_eq!(table.lookup("bert", Some(32)), Some(0.58));
        assert_eq!(
            table.render(|v| format!("{:.0}%", v * 100.0)),
            "bert:32=58%,resnet50=99%"
        );
        assert!(ModelTable::parse_busy("bert=10G").is_err());
    }

    #[test]
    fn a_jobs_busy_fraction_is_its_own_report_else_the_largest_known_else_busy() {
        let table = ModelTable::parse_busy("bert=0.5").unwrap();
        let mut book = ReportBook::default();
        let h = hints(&[("app", "bert")]);
        let key = similar_key("ann", None, &h).unwrap();
        assert_eq!(
            busy_of(Some(&key), 1, &h, &ModelTable::default(), &book),
            Busy::UNKNOWN
        );
        let b = busy_of(Some(&key), 1, &h, &table, &book);
        assert_eq!((b.fraction, b.source), (0.5, BusySource::Table));
        assert_eq!(b.to_string(), "busy 50% (model table)");
        book.record_busy(&key, 7, 0.4);
        assert_eq!(
            busy_of(Some(&key), 1, &h, &table, &book).source,
            BusySource::Table
        );
        book.record_busy(&key, 8, 0.7);
        let b = busy_of(Some(&key), 1, &h, &table, &book);
        assert_eq!((b.fraction, b.source), (0.7, BusySource::Observed(2)));
        // Its own report wins, whatever others say.
        let own = hints(&[("app", "bert"), ("gpu_busy", "30%")]);
        let b = busy_of(Some(&key), 1, &own, &table, &book);
        assert_eq!((b.fraction, b.source), (0.3, BusySource::Reported));
        assert_eq!(Busy::UNKNOWN.to_string(), "busy unknown, taken as 100%");
    }

    #[test]
    fn light_jobs_share_where_busy_ones_would_wait() {
        let params = ShareParams::default();
        let p = Some(Prediction {
            gib: 20.0,
            source: Source::Stated,
        });
        let light = |fraction| Busy {
            fraction,
            source: BusySource::Table,
        };
        let mut g = gpu("n1", 0, 8, &[]);
        g.co_runners = vec![CoRunner {
            left_s: 3_600,
            busy: 0.3,
            user: Some(1000),
        }];
        // Two light jobs: nothing added, so even a short wait for a whole GPU is not worth it.
        assert!(matches!(
            decide_no_mix(
                &sj(p, light(0.3), 3_600),
                60,
                std::slice::from_ref(&g),
                &params
            ),
            Verdict::Share { .. }
        ));
        // A busy job beside the light one slows both to 0.7x (51 min added in all): a 30 min
        // wait for a whole GPU beats that.
        assert!(matches!(
            decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 1_800, std::slice::from_ref(&g), &params),
            Verdict::Whole(w) if w.contains("busy unknown")
        ));
    }

    #[test]
    fn under_mps_jobs_share_faster_with_capped_memory_and_only_with_their_own_user() {
        use crate::models::corun::ShareMode;
        let mps = ShareParams {
            mode: ShareMode::Mps,
            ..ShareParams::default()
        };
        // MPS overlaps kernels: two busy jobs run at 1.13 / 2 each, not 0.91 / 2.
        assert!((mps.speed(&[1.0, 1.0]) - 1.13 / 2.0).abs() < 1e-12);
        // 25 of 100 units of an 80G GPU: a 20G cap (a 16G peak plus its share of the margin).
        assert_eq!(mps.mem_cap_gib(25, 100), 20.0);
        let p = Some(Prediction {
            gib: 16.0,
            source: Source::Stated,
        });
        let mut g = gpu("n1", 0, 8, &[3_600]);
        g.shards_free = 6;
        // The GPU holds a job of user 1000: its own user may join, another may not.
        assert!(matches!(
            decide_no_mix(
                &sj(p, Busy::UNKNOWN, 3_600),
                7_200,
                std::slice::from_ref(&g),
                &mps
            ),
            Verdict::Share { .. }
        ));
        let other = ShareJob {
            user: Some(2000),
            ..sj(p, Busy::UNKNOWN, 3_600)
        };
        assert!(matches!(
            decide_no_mix(&other, 7_200, std::slice::from_ref(&g), &mps),
            Verdict::Whole(_)
        ));
        // Shards (time-slicing) know no such rule; they are slower (2.4 h added, not 1.5 h).
        assert!(matches!(
            decide_no_mix(
                &other,
                7_200,
                std::slice::from_ref(&g),
                &ShareParams::default()
            ),
            Verdict::Whole(_)
        ));
        assert!(matches!(
            decide_no_mix(
                &other,
                9_000,
                std::slice::from_ref(&g),
                &ShareParams::default()
            ),
            Verdict::Share { .. }
        ));
        // An idle GPU takes anyone.
        let idle = gpu("n2", 0, 8, &[]);
        assert!(matches!(
            decide_no_mix(&other, 7_200, std::slice::from_ref(&idle), &mps),
            Verdict::Share { .. }
        ));
    }

    #[test]
    fn a_mix_of_shapes_makes_a_fragment_count_as_time_and_moves_the_choice_from_best_fit() {
        // FGD's fragment, as a share of the GPU: free room too small for a shape of the mix.
        let mut mix = ShareMix::default();
        assert_eq!(mix.fragment_added(16, 8, 16), 0.0, "no mix, no fragment");
        for _ in 0..5 {
            mix.add(250); // 4 of 16 shards
        }
        mix.add(375); // 6 of 16 shards
        assert_eq!(ShareMix::milli_of(6, 16), 375);
        assert_eq!(mix.fragment_added(10, 8, 16), 2.0 / 16.0);
        let after = 4.0 / 16.0 * 375.0 / 1625.0;
        assert!((mix.fragment_added(12, 8, 16) - after).abs() < 1e-12);
        // An 8-shard job, light enough to share for free on either GPU: best fit takes n1 (2
        // shards left), the mix takes n2 (4 left, which the 4-shard jobs can use).
        let co = |shards_free| SharedGpu {
            node: String::new(),
            index: 0,
            shards_total: 16,
            shards_free,
            co_runners: vec![CoRunner {
                left_s: 3_600,
                busy: 0.3,
                user: Some(1000),
            }],
        };
        let gpus = [
            SharedGpu {
                node: "n1".into(),
                ..co(10)
            },
            SharedGpu {
                node: "n2".into(),
                ..co(12)
            },
        ];
        let job = sj(
            Some(Prediction {
                gib: 36.0,
                source: Source::Stated,
            }),
            Busy {
                fraction: 0.3,
                source: BusySource::Table,
            },
            3_600,
        );
        let params = ShareParams::default();
        let node = |mix: &ShareMix| match decide(&job, 0, &gpus, mix, &params) {
            Verdict::Share {
                node, shards: 8, ..
            } => node,
            other => panic!("{other:?}"),
        };
        assert_eq!(node(&ShareMix::default()), "n1");
        assert_eq!(node(&mix), "n2");
        // With a whole GPU free, a job that slows its neighbour (busy 0.7 beside 0.3: 12 min
        // added in all) still goes beside it when an idle GPU would keep half a GPU that the
        // whole-GPU shapes of the mix cannot use (24 min of their time); the reason says so.
        let mut halves = ShareMix::default();
        halves.add(1000);
        halves.add(500);
        let busier = ShareJob {
            busy: Busy {
                fraction: 0.7,
                source: BusySource::Table,
            },
            ..job
        };
        let idle = SharedGpu {
            node: "n3".into(),
            shards_free: 16,
            co_runners: Vec::new(),
            ..co(16)
        };
        let half = SharedGpu {
            node: "n1".into(),
            ..co(8)
        };
        let gpus = [idle, half];
        match decide(&busier, 0, &gpus, &halves, &params) {
            Verdict::Share { node, why, .. } => {
                assert_eq!(node, "n1");
                assert!(
                    why.contains("beside them rather than on an idle shared GPU"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        match decide_no_mix(&busier, 0, &gpus, &params) {
            Verdict::Share { node, why, .. } => {
                assert_eq!(node, "n3", "no mix: the idle GPU, which slows no one");
                assert!(!why.contains("beside them"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
