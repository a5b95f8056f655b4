//! The sharing view: the GPUs shared now, their co-runners, the whole-GPU nodes and the mix
//! of shapes waiting, as the agent and the simulator assemble it.

use super::*;

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
    pub(super) fn speed_with(&self, extra: Option<f64>, params: &ShareParams) -> f64 {
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
    pub(super) fn other_users(&self, job: &ShareJob, params: &ShareParams) -> bool {
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
    pub(super) fn fragment(&self, free: u32, total: u32) -> f64 {
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
