//! What the cluster has shown so far, learned from successive snapshots: how long jobs really run
//! compared with their time limits, and how fast similar jobs ran consolidated versus spread.
//!
//! The optimizer sees no job completions directly, only snapshots. A job that was running in one
//! snapshot and is neither running nor pending in the next has ended; its run time is measured
//! from its start to the first snapshot that no longer shows it (accurate to one agent interval).
//! Pure and deterministic: the service and the simulator feed it the same snapshots.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::learn::run_model::{ModelCache, OUTCOMES};
use crate::wire::snapshot::{JobProgress, RunningJob, Snapshot};

mod predict;
pub use predict::Predictor;

/// Keys remembered at most; past this, new keys are not learned (old ones still are).
const MAX_KEYS: usize = 10_000;
/// Runs shorter than this tell nothing about speed (failed starts, cancellations).
const MIN_RUN_S: i64 = 60;

/// An exponentially weighted mean that starts from a prior worth `prior_weight` observations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mean {
    pub value: f64,
    pub count: u64,
}

impl Mean {
    fn add(&mut self, x: f64, alpha_floor: f64) {
        self.count += 1;
        let alpha = (1.0 / self.count as f64).max(alpha_floor);
        self.value += alpha * (x - self.value);
    }
}

/// A plain running mean (no floor on the weight of new values).
fn add_mean<K>(entry: std::collections::hash_map::Entry<'_, K, Mean>, x: f64) {
    entry
        .and_modify(|m| m.add(x, 0.0))
        .or_insert(Mean { value: x, count: 1 });
}

/// A mean whose new values weigh at least `alpha_floor` (recent ones count most).
fn add_mean_floor<K>(
    entry: std::collections::hash_map::Entry<'_, K, Mean>,
    x: f64,
    alpha_floor: f64,
) {
    entry
        .and_modify(|m| m.add(x, alpha_floor))
        .or_insert(Mean { value: x, count: 1 });
}

fn add(mean: &mut Option<Mean>, x: f64, alpha_floor: f64) {
    match mean {
        Some(m) => m.add(x, alpha_floor),
        None => *mean = Some(Mean { value: x, count: 1 }),
    }
}

/// How jobs with the same key (user, name, GPUs) ran: mean run seconds per placement kind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KeyStats {
    pub consolidated: Option<Mean>,
    /// Every run on more nodes than needed.
    pub spread: Option<Mean>,
    /// The spread runs that also crossed racks.
    pub cross_rack: Option<Mean>,
}

#[derive(Debug, Clone, PartialEq)]
struct Seen {
    key: String,
    user: String,
    /// The job's name, empty if none.
    name: String,
    gpus: u32,
    app: Option<String>,
    start: i64,
    limit_s: Option<f64>,
    consolidated: bool,
    cross_rack: bool,
    /// The whole run its own progress predicted, read once it had done a tenth of its steps
    /// ([`PROGRESS_SCORED_AT`]), for scoring that source against the others when it ends.
    progress_run_s: Option<f64>,
}

/// The share of its printed steps a job has done when its progress's prediction is scored: a
/// prediction made early enough to matter to the rounds that follow.
pub const PROGRESS_SCORED_AT: f64 = 0.1;

/// New outcomes between two builds of the run model: it changes slowly, and a build sorts them.
const MODEL_EVERY: u64 = 10;

/// Where a run-time prediction comes from ([`History::predict_run_s`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunSource {
    /// The job's time limit scaled by how much of their limits this user's (or everybody's) jobs
    /// really ran here.
    Limit,
    /// How long this user's earlier jobs of the same name and GPU count ran (geometric mean).
    Similar,
    /// How long this user's earlier jobs on as many GPUs ran (geometric mean).
    UserGpus,
    /// Nothing known: the policy's default.
    Default,
    /// The job's own profile: iterations it runs over the rate it measured (`iters`,
    /// `iter_rate` hints).
    Profile,
}

impl RunSource {
    pub fn describe(self) -> &'static str {
        match self {
            RunSource::Limit => "time limit x what jobs really ran of theirs here",
            RunSource::Similar => "similar earlier jobs",
            RunSource::UserGpus => "the user's earlier jobs on as many GPUs",
            RunSource::Default => "default",
            RunSource::Profile => "the job's own iterations and rate",
        }
    }
}

/// Predictions scored so far before one source is preferred over another.
const MIN_SCORED: u64 = 10;
/// Runs of a user's before their own limit ratio replaces everybody's.
const MIN_USER_RATIO_RUNS: u64 = 3;

/// A job's predicted run time, where it comes from, and how far off that source has been here
/// (mean |ln(predicted / actual)| over the jobs it was scored on, if enough).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunPrediction {
    pub run_s: f64,
    pub source: RunSource,
    pub log_error: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct History {
    running: FxHashMap<u32, Seen>,
    /// Actual run time / time limit, over jobs that had a limit.
    limit_ratio: Option<Mean>,
    by_key: FxHashMap<String, KeyStats>,
    /// GPU-seconds each queued or running job received in its earlier runs (before requeues):
    /// Tiresias's attained service survives a requeue.
    earlier_service: FxHashMap<u32, f64>,
    /// When each requeued job was seen back in the queue.
    requeued_at: FxHashMap<u32, i64>,
    /// Each restarted job's latest restart: its earlier service then, and how long it had
    /// waited in the queue since its requeue (Tiresias's starvation promotion).
    restarts: FxHashMap<u32, Restart>,
    /// ln(run seconds) by job key and by (user, GPUs): the predictor's similar-job means.
    /// Nested (user, then job name, then GPUs) so that a prediction, made for every running
    /// and pending job every round, looks them up without building a key.
    log_run_by_job: FxHashMap<String, FxHashMap<String, FxHashMap<u32, Mean>>>,
    log_run_by_user_gpus: FxHashMap<String, FxHashMap<u32, Mean>>,
    /// Entries in each of the two above, each capped at [`MAX_KEYS`].
    log_run_entries: [usize; 2],
    /// ln(run / limit) overall and by user: how much of their limits jobs really use.
    log_limit_ratio: Option<Mean>,
    log_limit_ratio_by_user: FxHashMap<String, Mean>,
    /// Mean |ln(predicted / actual)| of each source (limit, similar, user-GPUs), each scored on
    /// every ended job it could predict, before that job was learned.
    source_error: [Option<Mean>; 3],
    /// Jobs seen to end.
    pub finished: u64,
    /// (predicted, actual) run seconds of the latest ended jobs, the prediction the one the
    /// best source made just before the job was learned: what the run model is made of.
    outcomes: std::collections::VecDeque<(f64, f64)>,
    /// The run model of the latest outcomes, rebuilt every [`MODEL_EVERY`] new ones.
    model: ModelCache,
    /// The latest predictions, kept while nothing is learned.
    kept: predict::KeptPredictions,
    /// The running jobs' ids at the last look that learned something, in snapshot order: an
    /// unchanged list is told without hashing each id.
    last_running: Vec<u32>,
    /// Each queued or running job's stated finish target (its `due`, or submission plus its
    /// `turnaround`) and its submission, kept until it ends.
    stated_targets: FxHashMap<u32, (i64, i64)>,
    /// The queued jobs seen to state no finish target, so a look does not read their hints
    /// again: like a target, the verdict is the one of the job's first wait in view (a `due`
    /// added to a waiting job's comment later is not learned from).
    no_target: FxHashSet<u32>,
    /// Per user, whether their stated targets could be met at all: the job's own run fitted
    /// between its submission and its target (1) or not (0), recent ones weighing most.
    target_fit_by_user: FxHashMap<String, Mean>,
    /// Over the ended jobs whose progress was read at a tenth of their steps: mean
    /// |ln(predicted / actual)| of that progress's prediction, and of the best other source's
    /// for the same jobs. Progress is used while it predicts better here.
    progress_error: Option<Mean>,
    base_error_with_progress: Option<Mean>,
    /// The latest [`OUTCOMES`] of those jobs' |predicted / actual - 1| by progress, for its
    /// median error (reports).
    progress_relative_errors: std::collections::VecDeque<f64>,
    /// Per job that showed progress, the rate of its steps on each kind of placement it ran on
    /// (kept across its requeues): the same job on both tells the slowdown directly.
    placement_rates: FxHashMap<u32, PlacementRates>,
    /// Slowdowns measured that way, by key (`app=NAME`, `gpus=N`, the job's key): 1 - its rate
    /// spread / its rate consolidated.
    rate_slowdowns: FxHashMap<String, Option<Mean>>,
    /// Jobs followed (requeued jobs' service, placement rates) at which the next sweep of jobs
    /// gone from the queue unseen runs: twice those kept after the last one.
    sweep_at: usize,
}

/// The fewest followed jobs that make a sweep of those gone from the queue worth its scans.
const MIN_SWEEP: usize = 256;

/// One job's step rates on a consolidated and a spread placement.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct PlacementRates {
    consolidated: Option<f64>,
    spread: Option<f64>,
    /// Whether its slowdown was learned (once per job).
    learned: bool,
}

/// Weight of a user's latest target in [`History::target_fit`]: about their last five count.
const TARGET_FIT_ALPHA: f64 = 0.2;

/// A requeued job's latest restart, as snapshots showed it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Restart {
    /// GPU-seconds it had received before this run.
    pub service_before: f64,
    /// Seconds it waited in the queue between its requeue and this run's start.
    pub waited_s: i64,
}

/// The key similar jobs share: the same user running the same job name on as many GPUs.
pub fn job_key(user: &str, name: Option<&str>, gpus: u32) -> String {
    format!("{user}/{}/{gpus}", name.unwrap_or(""))
}

/// The fewest nodes `gpus` GPUs fit on, with nodes of `gpus_per_node`.
pub fn fewest_nodes(gpus: u32, gpus_per_node: u32) -> u32 {
    gpus.div_ceil(gpus_per_node.max(1)).max(1)
}

impl History {
    /// Learn from the next snapshot (snapshots must come in time order).
    pub fn observe(&mut self, snapshot: &Snapshot) {
        self.note_stated_targets(snapshot);
        self.note_progress(snapshot);
        // The same jobs running as at the last look: nothing ended or started, nothing to
        // learn. Most rounds of a busy cluster.
        let same_as_last = snapshot.running.len() == self.last_running.len()
            && snapshot
                .running
                .iter()
                .zip(&self.last_running)
                .all(|(j, &id)| j.job_id == id);
        if snapshot.running.len() == self.running.len()
            && (same_as_last
                || snapshot
                    .running
                    .iter()
                    .all(|j| self.running.contains_key(&j.job_id)))
        {
            return;
        }
        // Which jobs ended and which started since the last look: by a merge with the last
        // list when the agent kept its order, else by hashing every id.
        let (ended, started) = self.changes_in_order(snapshot).unwrap_or_else(|| {
            let now_running: FxHashSet<u32> = snapshot.running.iter().map(|j| j.job_id).collect();
            let mut ended: Vec<u32> = self
                .running
                .keys()
                .filter(|id| !now_running.contains(id))
                .copied()
                .collect();
            ended.sort_unstable();
            let started = (0..snapshot.running.len())
                .filter(|&k| !self.running.contains_key(&snapshot.running[k].job_id))
                .collect();
            (ended, started)
        });
        self.last_running.clear();
        self.last_running
            .extend(snapshot.running.iter().map(|j| j.job_id));
        self.note_ended(snapshot, ended);
        if !started.is_empty() {
            self.note_started(snapshot, started);
        }
    }

    /// Learns from the jobs that ended since the last look (`ended`, ids): a finished one's run
    /// is recorded; a requeued one keeps the service it received.
    fn note_ended(&mut self, snapshot: &Snapshot, ended: Vec<u32>) {
        // Which of the jobs that ended are back in the queue (requeued): one pass over the
        // queue against the few ended ids, without hashing every waiting job's id.
        let requeued: FxHashSet<u32> = if ended.is_empty() {
            FxHashSet::default()
        } else {
            let asked: FxHashSet<u32> = ended.iter().copied().collect();
            (snapshot.pending.iter())
                .map(|j| j.job_id)
                .filter(|id| asked.contains(id))
                .collect()
        };
        for id in ended {
            let Some(seen) = self.running.remove(&id) else {
                continue;
            };
            // It ended between the last snapshot that showed it and this one: counted to this
            // one (an upper bound, as close as the snapshots come).
            let run = (snapshot.time - seen.start).max(0);
            // A job back in the queue was requeued, not finished: it keeps what it received.
            if requeued.contains(&id) {
                let run = run as f64;
                *self.earlier_service.entry(id).or_default() += run * f64::from(seen.gpus);
                self.requeued_at.insert(id, snapshot.time);
                continue;
            }
            self.earlier_service.remove(&id);
            self.requeued_at.remove(&id);
            self.restarts.remove(&id);
            self.placement_rates.remove(&id);
            if let Some((finish_by, submit)) = self.stated_targets.remove(&id) {
                let fitted = run <= finish_by - submit;
                add_mean_floor(
                    self.target_fit_by_user.entry(seen.user.clone()),
                    if fitted { 1.0 } else { 0.0 },
                    TARGET_FIT_ALPHA,
                );
            }
            self.record(&seen, run);
        }
        self.sweep_gone(snapshot);
    }

    /// Forgets the followed jobs that left the queue without ending a run here (cancelled while
    /// waiting): their ids never come back, so nothing reads what is kept of them, and the sweep
    /// runs only once the jobs followed have doubled since the last (a requeue-heavy run
    /// follows thousands of jobs; checking them all at every end was a sixth of Tiresias's
    /// runs on Cedar, docs/benchmarks.md).
    fn sweep_gone(&mut self, snapshot: &Snapshot) {
        let followed_n = self.earlier_service.len() + self.placement_rates.len();
        if followed_n < self.sweep_at.max(MIN_SWEEP) {
            return;
        }
        let present: FxHashSet<u32> = (snapshot.pending.iter().map(|j| j.job_id))
            .chain(snapshot.running.iter().map(|j| j.job_id))
            .filter(|id| {
                self.earlier_service.contains_key(id) || self.placement_rates.contains_key(id)
            })
            .collect();
        self.earlier_service.retain(|id, _| present.contains(id));
        let kept = &self.earlier_service;
        self.requeued_at.retain(|id, _| kept.contains_key(id));
        self.restarts.retain(|id, _| kept.contains_key(id));
        self.placement_rates.retain(|id, _| present.contains(id));
        self.sweep_at = 2 * (self.earlier_service.len() + self.placement_rates.len());
    }

    /// Starts following the jobs that started since the last look (`started`, positions in
    /// the snapshot's running jobs).
    fn note_started(&mut self, snapshot: &Snapshot, started: Vec<usize>) {
        let node_size = snapshot
            .nodes
            .iter()
            .map(|n| n.gpus_total)
            .max()
            .unwrap_or(1);
        // Each node's rack, looked up only for jobs on more than one node (built once, then).
        let rack_of: std::cell::OnceCell<FxHashMap<&str, &str>> = std::cell::OnceCell::new();
        let racks_of = || {
            rack_of.get_or_init(|| {
                snapshot
                    .nodes
                    .iter()
                    .filter_map(|n| Some((n.name.as_str(), n.rack.as_deref()?)))
                    .collect()
            })
        };
        for job in started.into_iter().map(|k| &snapshot.running[k]) {
            if let Some(at) = self.requeued_at.remove(&job.job_id) {
                let service_before = self.earlier_service.get(&job.job_id).copied();
                self.restarts.insert(
                    job.job_id,
                    Restart {
                        service_before: service_before.unwrap_or(0.0),
                        waited_s: (job.start_time - at).max(0),
                    },
                );
            }
            self.running.entry(job.job_id).or_insert_with(|| Seen {
                key: job_key(&job.user, job.name.as_deref(), job.gpus),
                user: job.user.clone(),
                name: job.name.clone().unwrap_or_default(),
                gpus: job.gpus,
                app: job.hints.get("app").map(|a| a.to_ascii_lowercase()),
                start: job.start_time,
                limit_s: job.time_limit_min.map(|m| f64::from(m) * 60.0),
                consolidated: job.nodes.len() as u32 <= fewest_nodes(job.gpus, node_size),
                cross_rack: job.nodes.len() > 1 && {
                    let rack_of = racks_of();
                    let mut racks = job.nodes.iter().filter_map(|n| rack_of.get(n.as_str()));
                    racks.next().is_some_and(|first| racks.any(|r| r != first))
                },
                progress_run_s: None,
            });
        }
    }

    /// Reads the prediction of each running job's progress once it has done a tenth of its
    /// steps, to be scored when the job ends.
    fn note_progress(&mut self, snapshot: &Snapshot) {
        // One pass over the running jobs (most report no progress); each job's two notes touch
        // what the other does not read.
        for job in &snapshot.running {
            let Some(progress) = job.progress else {
                continue;
            };
            if progress.fraction() >= PROGRESS_SCORED_AT {
                if let Some(seen) = self
                    .running
                    .get_mut(&job.job_id)
                    .filter(|s| s.progress_run_s.is_none() && s.start == job.start_time)
                {
                    seen.progress_run_s = progress.predicted_run_s(seen.start);
                }
            }
            self.note_rate(job, progress);
        }
    }

    /// The rate of a running job's steps on its placement: a job seen on both kinds measures
    /// its application's slowdown spread (Dally's), free of how long its run is.
    fn note_rate(&mut self, job: &RunningJob, progress: JobProgress) {
        let Some(rate) = progress.rate().filter(|r| *r > 0.0) else {
            return;
        };
        let Some(seen) = self
            .running
            .get(&job.job_id)
            .filter(|s| s.start == job.start_time)
        else {
            return;
        };
        let rates = self.placement_rates.entry(job.job_id).or_default();
        if seen.consolidated {
            rates.consolidated = Some(rate);
        } else {
            rates.spread = Some(rate);
        }
        let (Some(c), Some(sp), false) = (rates.consolidated, rates.spread, rates.learned) else {
            return;
        };
        rates.learned = true;
        let slowdown = (1.0 - sp / c).clamp(0.0, 0.95);
        let mut keys = vec![seen.key.clone()];
        if let Some(app) = &seen.app {
            keys.push(format!("app={app}"));
        }
        if seen.gpus > 1 {
            keys.push(format!("gpus={}", seen.gpus));
        }
        for key in keys {
            if self.rate_slowdowns.len() < MAX_KEYS || self.rate_slowdowns.contains_key(&key) {
                add(self.rate_slowdowns.entry(key).or_default(), slowdown, 0.05);
            }
        }
    }

    /// Whether a running job's own progress predicts its end better here than the other
    /// sources: until enough jobs that showed progress ended to tell, it is taken to.
    pub fn progress_trusted(&self) -> bool {
        match (self.progress_error, self.base_error_with_progress) {
            (Some(progress), Some(base)) if progress.count >= MIN_SCORED => {
                progress.value <= base.value
            }
            _ => true,
        }
    }

    /// How far off progress and the other sources have been on the jobs that showed progress
    /// (mean |ln(predicted / actual)|, and how many jobs), for reports.
    pub fn progress_errors(&self) -> Option<(f64, f64, u64)> {
        let (progress, base) = (self.progress_error?, self.base_error_with_progress?);
        Some((progress.value, base.value, progress.count))
    }

    /// The median of |predicted / actual - 1| of the whole run progress predicted at a tenth of
    /// the steps, over the latest ended jobs that showed progress, and how many (for reports).
    pub fn progress_median_error(&self) -> Option<(f64, usize)> {
        let mut errors: Vec<f64> = self.progress_relative_errors.iter().copied().collect();
        errors.sort_by(f64::total_cmp);
        let n = errors.len();
        (n > 0).then(|| (crate::util::stats::percentile(&errors, 0.5), n))
    }

    /// Remembers the finish targets pending jobs state (once each), and forgets those of jobs
    /// gone without running to their end (cancelled). Only jobs with hints are looked at.
    fn note_stated_targets(&mut self, snapshot: &Snapshot) {
        for job in snapshot.pending.iter().filter(|j| !j.hints.is_empty()) {
            if self.stated_targets.contains_key(&job.job_id)
                || self.no_target.contains(&job.job_id)
                || self.stated_targets.len() >= MAX_KEYS
            {
                continue;
            }
            match crate::models::qos::stated_finish_by(&job.hints, job.submit_time) {
                Some(finish_by) => {
                    self.stated_targets
                        .insert(job.job_id, (finish_by, job.submit_time));
                }
                None => {
                    self.no_target.insert(job.job_id);
                }
            }
        }
        // Jobs known to run until this look says they ended keep theirs, to be judged then.
        let live_jobs = snapshot.pending.len() + snapshot.running.len() + self.running.len();
        if self.stated_targets.len() > live_jobs {
            let live: FxHashSet<u32> = snapshot
                .pending
                .iter()
                .map(|j| j.job_id)
                .chain(snapshot.running.iter().map(|j| j.job_id))
                .chain(self.running.keys().copied())
                .collect();
            self.stated_targets.retain(|id, _| live.contains(id));
        }
        // The verdicts of jobs gone from the queue (started, cancelled, or out of the
        // snapshot's share of it) are dropped once they are as many as the queue's, so the set
        // stays the queue's size and is swept once per that many departures.
        if self.no_target.len() > 2 * snapshot.pending.len() + 64 {
            let queued: FxHashSet<u32> = snapshot.pending.iter().map(|j| j.job_id).collect();
            self.no_target.retain(|id| queued.contains(id));
        }
    }

    /// How many more jobs' stated targets the history can keep: while a look's queue is
    /// shorter, every target it states is kept, whatever the queue's order.
    pub fn stated_target_room(&self) -> usize {
        MAX_KEYS.saturating_sub(self.stated_targets.len())
    }

    /// How often `user`'s stated targets could be met at all (their jobs' own runs fitted
    /// between submission and target), recent ones weighing most; `None` before any ended.
    pub fn target_fit(&self, user: &str) -> Option<Mean> {
        self.target_fit_by_user.get(user).copied()
    }

    /// The jobs that ended (ids) and started (positions in the snapshot) since the last look,
    /// from a merge of the last running list with this one; `None` when the order changed and
    /// the merge cannot tell (a job it would call ended is listed later). Exact because the
    /// jobs known as running are always those of the last list.
    fn changes_in_order(&self, snapshot: &Snapshot) -> Option<(Vec<u32>, Vec<usize>)> {
        let now = &snapshot.running;
        let mut ended = Vec::new();
        let mut k = 0;
        for &id in &self.last_running {
            if now.get(k).is_some_and(|j| j.job_id == id) {
                k += 1;
            } else {
                ended.push(id);
            }
        }
        let started: Vec<usize> = (k..now.len()).collect();
        if started
            .iter()
            .any(|&i| self.running.contains_key(&now[i].job_id))
        {
            return None;
        }
        Some((ended, started))
    }

    /// Learns the run time of a job that ended before cinch saw it (a site's accounting
    /// history, `sacct`): the run-time predictors only, scored as online (each source is scored
    /// on the job before it is learned). Its placement is not known, so no slowdown is learned.
    /// Whether it was learned (runs shorter than a minute are not, as online).
    pub fn import_run(
        &mut self,
        user: &str,
        name: Option<&str>,
        gpus: u32,
        limit_s: Option<f64>,
        run_s: f64,
    ) -> bool {
        if run_s.is_nan() || run_s < MIN_RUN_S as f64 || gpus == 0 {
            return false;
        }
        let seen = Seen {
            key: job_key(user, name, gpus),
            user: user.to_string(),
            name: name.unwrap_or("").to_string(),
            gpus,
            app: None,
            start: 0,
            limit_s,
            consolidated: true,
            cross_rack: false,
            progress_run_s: None,
        };
        self.finished += 1;
        self.score_and_learn_run(&seen, run_s);
        if let Some(limit) = limit_s.filter(|&l| l > 0.0) {
            add(&mut self.limit_ratio, (run_s / limit).min(1.0), 0.01);
        }
        true
    }

    /// Learns what a queued or running job received in runs that ended before cinch's view
    /// began: `service_gpu_s` GPU-seconds, its latest run ended (requeued) at `requeued_at`. As
    /// if snapshots had shown those runs: its attained service survives, and a run it starts
    /// (or is seen in first) is its restart after a wait from then. A self-simulation's window
    /// starts so, from a record of the jobs' runs (docs/policies/portfolio.md). Nothing is
    /// learned of a job that received nothing.
    pub fn import_requeued(&mut self, job_id: u32, service_gpu_s: f64, requeued_at: i64) {
        if service_gpu_s.is_nan() || service_gpu_s <= 0.0 {
            return;
        }
        *self.earlier_service.entry(job_id).or_default() += service_gpu_s;
        self.requeued_at.insert(job_id, requeued_at);
    }

    /// Learns from a job that ran `run` seconds and ended.
    fn record(&mut self, seen: &Seen, run: i64) {
        if run < MIN_RUN_S {
            return;
        }
        self.finished += 1;
        self.score_and_learn_run(seen, run as f64);
        if let Some(limit) = seen.limit_s.filter(|&l| l > 0.0) {
            let ratio = (run as f64 / limit).min(1.0);
            add(&mut self.limit_ratio, ratio, 0.01);
            // Jobs of one application differ in length; their time limits scale with it, so
            // run / limit compares them across placements.
            if let Some(app) = &seen.app {
                self.learn(format!("app={app}"), seen, ratio);
            }
            // The same across every job on as many GPUs, hinted or not: the class slowdown.
            if seen.gpus > 1 {
                self.learn(format!("gpus={}", seen.gpus), seen, ratio);
            }
        }
        self.learn(seen.key.clone(), seen, run as f64);
    }

    /// Scores each source's prediction for an ended job against its real run time, then learns
    /// the run time, so every score is of a prediction made without knowing the answer.
    fn score_and_learn_run(&mut self, seen: &Seen, run: f64) {
        let candidates = self.candidates(&seen.user, &seen.name, seen.gpus, seen.limit_s);
        if candidates.iter().any(Option::is_some) {
            let predicted = self.choose(candidates, 1.0).run_s;
            if self.outcomes.len() == OUTCOMES {
                self.outcomes.pop_front();
            }
            self.outcomes.push_back((predicted, run));
            if let Some(by_progress) = seen.progress_run_s {
                add(
                    &mut self.progress_error,
                    (by_progress.max(1.0) / run).ln().abs(),
                    0.0,
                );
                add(
                    &mut self.base_error_with_progress,
                    (predicted / run).ln().abs(),
                    0.0,
                );
                if self.progress_relative_errors.len() == OUTCOMES {
                    self.progress_relative_errors.pop_front();
                }
                self.progress_relative_errors
                    .push_back((by_progress / run - 1.0).abs());
            }
        }
        for (i, prediction) in candidates.iter().enumerate() {
            if let Some(p) = prediction {
                add(&mut self.source_error[i], (p / run).ln().abs(), 0.0);
            }
        }
        let ln_run = run.ln();
        let (user, name, gpus) = (&seen.user, &seen.name, seen.gpus);
        let known = self
            .log_run_by_job
            .get(user)
            .and_then(|names| names.get(name))
            .is_some_and(|by_gpus| by_gpus.contains_key(&gpus));
        if known || self.log_run_entries[0] < MAX_KEYS {
            self.log_run_entries[0] += usize::from(!known);
            let by_gpus = self
                .log_run_by_job
                .entry(user.clone())
                .or_default()
                .entry(name.clone())
                .or_default();
            add_mean(by_gpus.entry(gpus), ln_run);
        }
        let known = self
            .log_run_by_user_gpus
            .get(user)
            .is_some_and(|by_gpus| by_gpus.contains_key(&gpus));
        if known || self.log_run_entries[1] < MAX_KEYS {
            self.log_run_entries[1] += usize::from(!known);
            let by_gpus = self.log_run_by_user_gpus.entry(user.clone()).or_default();
            add_mean(by_gpus.entry(gpus), ln_run);
        }
        if let Some(limit) = seen.limit_s.filter(|&l| l > 0.0) {
            let ln_ratio = (run / limit).min(1.0).ln();
            add(&mut self.log_limit_ratio, ln_ratio, 0.01);
            if self.log_limit_ratio_by_user.len() < MAX_KEYS
                || self.log_limit_ratio_by_user.contains_key(&seen.user)
            {
                add_mean(
                    self.log_limit_ratio_by_user.entry(seen.user.clone()),
                    ln_ratio,
                );
            }
        }
    }

    /// GPU-seconds a job has received so far: its earlier runs and, if it runs, the current one
    /// up to `now` (Tiresias's attained service).
    pub fn attained_service(&self, job_id: u32, running: Option<(u32, i64)>, now: i64) -> f64 {
        let earlier = self.earlier_service.get(&job_id).copied().unwrap_or(0.0);
        earlier
            + running.map_or(0.0, |(gpus, start)| {
                f64::from(gpus) * (now - start).max(0) as f64
            })
    }

    /// How far off the time-limit source has been here (mean |ln(predicted / actual)|), once
    /// scored on enough ended jobs.
    pub fn limit_log_error(&self) -> Option<f64> {
        self.source_error[0]
            .filter(|m| m.count >= MIN_SCORED)
            .map(|m| m.value)
    }

    /// A requeued job's latest restart, once it started again.
    pub fn last_restart(&self, job_id: u32) -> Option<Restart> {
        self.restarts.get(&job_id).copied()
    }

    fn learn(&mut self, key: String, seen: &Seen, value: f64) {
        if self.by_key.len() >= MAX_KEYS && !self.by_key.contains_key(&key) {
            return;
        }
        let stats = self.by_key.entry(key).or_default();
        if seen.consolidated {
            add(&mut stats.consolidated, value, 0.05);
        } else {
            add(&mut stats.spread, value, 0.05);
            if seen.cross_rack {
                add(&mut stats.cross_rack, value, 0.05);
            }
        }
    }

    /// Mean fraction of their time limit that jobs really ran, with how many jobs it rests on.
    pub fn limit_ratio(&self) -> Option<Mean> {
        self.limit_ratio
    }

    /// The slowdown similar jobs showed spread rather than consolidated (0 = none), once both
    /// kinds of run have been seen: 1 - consolidated time / spread time.
    pub fn learned_slowdown(&self, key: &str) -> Option<f64> {
        self.slowdown_of(key, 1)
    }

    /// The slowdown jobs of application `app` (`app=` hint) showed spread, from their run time
    /// per time limit, once at least `min_runs` runs of each kind ended.
    pub fn learned_app_slowdown(&self, app: &str, min_runs: u64) -> Option<f64> {
        self.slowdown_of(&format!("app={}", app.to_ascii_lowercase()), min_runs)
    }

    /// The slowdown every job on `gpus` GPUs showed spread on this cluster, from run time per
    /// time limit (so under the network's current congestion), once at least `min_runs` runs of
    /// each kind ended.
    pub fn learned_gpus_slowdown(&self, gpus: u32, min_runs: u64) -> Option<f64> {
        self.slowdown_of(&format!("gpus={gpus}"), min_runs)
    }

    /// The slowdown runs of `key` (a job key, `app=NAME` or `gpus=N`) showed across racks,
    /// once at least `min_runs` consolidated and cross-rack runs ended.
    pub fn learned_cross_rack_slowdown(&self, key: &str, min_runs: u64) -> Option<f64> {
        let stats = self.by_key.get(key)?;
        let (c, x) = (stats.consolidated?, stats.cross_rack?);
        (c.count >= min_runs && x.count >= min_runs && x.value > 0.0)
            .then(|| (1.0 - c.value / x.value).clamp(0.0, 0.95))
    }

    /// Whether any run's slowdown was learned (else every `learned_*` lookup misses).
    pub fn knows_slowdowns(&self) -> bool {
        !self.by_key.is_empty() || !self.rate_slowdowns.is_empty()
    }

    /// The slowdown runs of `key` (a job key, `app=NAME` or `gpus=N`) showed spread, once at
    /// least `min_runs` runs of each kind ended.
    pub fn learned_class_slowdown(&self, key: &str, min_runs: u64) -> Option<f64> {
        self.slowdown_of(key, min_runs)
    }

    fn slowdown_of(&self, key: &str, min_runs: u64) -> Option<f64> {
        // Measured on the same jobs' steps on both kinds of placement: the direct measure,
        // taken once any job showed it.
        if let Some(Some(m)) = self.rate_slowdowns.get(key) {
            return Some(m.value.clamp(0.0, 0.95));
        }
        let stats = self.by_key.get(key)?;
        let (c, s) = (stats.consolidated?, stats.spread?);
        (c.count >= min_runs && s.count >= min_runs && s.value > 0.0)
            .then(|| (1.0 - c.value / s.value).clamp(0.0, 0.95))
    }

    pub fn key_stats(&self, key: &str) -> Option<KeyStats> {
        self.by_key.get(key).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cluster, snapshot};
    use crate::wire::snapshot::RunningJob;

    #[test]
    fn imported_runs_predict_similar_jobs_and_teach_no_slowdown() {
        let mut h = History::default();
        assert!(
            !h.import_run("ann", Some("train"), 4, Some(36_000.0), 30.0),
            "too short"
        );
        for _ in 0..3 {
            assert!(h.import_run("ann", Some("train"), 4, Some(36_000.0), 7_200.0));
        }
        let p = h.predict_run_s("ann", Some("train"), 4, Some(36_000.0), 3_600.0);
        assert_eq!(p.source, RunSource::Similar);
        assert!((p.run_s - 7_200.0).abs() < 1.0, "{p:?}");
        // A different job of the same user on as many GPUs: the user's runs on 4 GPUs.
        let p = h.predict_run_s("ann", Some("other"), 4, None, 3_600.0);
        assert_eq!(p.source, RunSource::UserGpus);
        assert_eq!(h.finished, 3);
        assert_eq!(h.learned_class_slowdown("gpus=4", 1), None);
        assert_eq!(h.key_stats(&job_key("ann", Some("train"), 4)), None);
    }

    /// Service imported for a job requeued before the history's view began counts as if
    /// snapshots had shown its runs: attained while it waits and once it runs again, its restart
    /// timed from the requeue, and dropped when it ends; nothing is learned of nothing.
    #[test]
    fn service_imported_for_a_requeued_job_survives_until_it_ends() {
        let mut h = History::default();
        h.import_requeued(7, f64::NAN, -50);
        h.import_requeued(7, 0.0, -50);
        assert_eq!(h.attained_service(7, None, 0), 0.0);
        h.import_requeued(7, 1_600.0, -50);
        assert_eq!(h.attained_service(7, None, 0), 1_600.0);
        let mut snap = snapshot(cluster(2, 8, 1), vec![]);
        snap.time = 100;
        snap.running.push(RunningJob {
            job_id: 7,
            user: "ann".into(),
            nodes: vec!["n1".into()],
            gpus: 8,
            start_time: 100,
            ..RunningJob::default()
        });
        h.observe(&snap);
        assert_eq!(
            h.last_restart(7),
            Some(Restart {
                service_before: 1_600.0,
                waited_s: 150
            })
        );
        assert_eq!(h.attained_service(7, Some((8, 100)), 200), 2_400.0);
        snap.time = 300;
        snap.running.clear();
        h.observe(&snap);
        assert_eq!(h.attained_service(7, None, 300), 0.0, "ended");
        assert_eq!(h.last_restart(7), None);
    }

    /// A round's predictor answers as the history does for every job, whichever job came
    /// before: the same user and name again (equal strings in other allocations too), another
    /// name of the same user, another user, and jobs without either.
    #[test]
    fn jobs_that_left_the_queue_unseen_are_forgotten_once_those_followed_double() {
        // Requeued jobs 1..=N waiting; job 1 stays, the others are cancelled while waiting.
        let n = MIN_SWEEP as u32 + 10;
        let mut h = History::default();
        for id in 1..=n {
            h.import_requeued(id, 100.0, -10);
        }
        let mut snap = at(0, vec![running(9_000, &["n1"], 0)]);
        snap.pending.push(crate::testing::pending(1, 1));
        h.observe(&snap);
        assert_eq!(h.earlier_service.len(), 1, "swept: only job 1 waits");
        assert_eq!(h.requeued_at.len(), 1);
        assert_eq!(h.attained_service(1, None, 0), 100.0, "kept while it waits");
        // Below the next sweep's mark nothing is checked: a job gone stays followed, unread.
        h.import_requeued(n + 1, 50.0, -10);
        snap.time = 60;
        snap.running.clear();
        h.observe(&snap);
        assert_eq!(h.earlier_service.len(), 2);
        assert_eq!(h.attained_service(1, None, 60), 100.0);
    }

    fn running(id: u32, nodes: &[&str], start: i64) -> RunningJob {
        RunningJob {
            job_id: id,
            user: "ann".into(),
            name: Some("bert".into()),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            gpus: 8,
            start_time: start,
            time_limit_min: Some(100),
            ..RunningJob::default()
        }
    }

    fn at(time: i64, running: Vec<RunningJob>) -> Snapshot {
        let mut snap = snapshot(cluster(4, 8, 1), Vec::new());
        snap.time = time;
        snap.running = running;
        snap
    }

    /// Dally's slowdown from progress: a bert job of 8 GPUs makes 80 steps a minute spread over
    /// two nodes, is requeued and makes 100 a minute on one node: its application's slowdown
    /// spread is 20%, learned from its own rates before any job ended.
    #[test]
    fn the_same_jobs_rates_on_two_placements_give_its_applications_slowdown() {
        use crate::wire::snapshot::JobProgress;
        let bert = |mut job: RunningJob| {
            job.hints = crate::slurm::job_hints::Hints::from_comment(Some("cinch:app=bert"));
            job
        };
        let hinted = |mut job: RunningJob, start: i64, per_minute: u64| {
            job.progress = Some(JobProgress {
                total: 100_000,
                done: 2 * per_minute,
                at: start + 180,
                since_done: per_minute,
                since: start + 120,
            });
            job
        };
        let mut h = History::default();
        assert_eq!(h.learned_app_slowdown("bert", 5), None);
        let spread = bert(running(1, &["n1", "n2"], 0));
        h.observe(&at(0, vec![spread.clone()]));
        h.observe(&at(200, vec![hinted(spread, 0, 80)]));
        // Requeued (back in the queue), then restarted on one node.
        let mut queued = at(300, Vec::new());
        queued.pending = vec![crate::testing::pending(1, 8)];
        h.observe(&queued);
        let whole = bert(running(1, &["n3"], 400));
        h.observe(&at(400, vec![whole.clone()]));
        assert_eq!(
            h.learned_app_slowdown("bert", 5),
            None,
            "one placement so far"
        );
        h.observe(&at(600, vec![hinted(whole, 400, 100)]));
        let s = h
            .learned_app_slowdown("bert", 5)
            .expect("measured by its rates");
        assert!((s - 0.2).abs() < 1e-9, "{s}");
        assert!(h.knows_slowdowns());
    }

    /// Jobs that ran an hour each, read at a tenth of their steps: progress that foretold the
    /// hour is trusted; progress whose rate was ten times too slow (a slow start) is not, once
    /// enough jobs ended to tell. Until then it is.
    #[test]
    fn progress_counts_while_it_has_predicted_better_than_the_other_sources() {
        use crate::wire::snapshot::JobProgress;
        // Steps done 180 s before the reading of 100 of 1,000 at 360 s.
        for (since_done, trusted) in [(50, true), (95, false)] {
            let mut h = History::default();
            assert!(h.progress_trusted(), "unscored");
            for i in 0..MIN_SCORED as u32 {
                let start = i64::from(i) * 10_000;
                h.observe(&at(start, vec![running(i + 1, &["n1"], start)]));
                let mut job = running(i + 1, &["n1"], start);
                job.progress = Some(JobProgress {
                    total: 1_000,
                    done: 100,
                    at: start + 360,
                    since_done,
                    since: start + 180,
                });
                h.observe(&at(start + 400, vec![job]));
                h.observe(&at(start + 3_600, Vec::new()));
            }
            let (progress, base, n) = h.progress_errors().expect("scored");
            assert_eq!(n, MIN_SCORED);
            let (median, counted) = h.progress_median_error().expect("scored");
            assert_eq!(counted, MIN_SCORED as usize);
            assert!((median < 1e-9) == trusted, "{median}");
            if trusted {
                // 50 steps in 180 s: 900 left take 3,240 s, an hour in all.
                assert!(progress < 1e-9, "{progress}");
            } else {
                // 5 steps in 180 s: 9 hours and more.
                assert!(progress > 9f64.ln(), "{progress}");
            }
            assert!(base > 0.0 && base < 9f64.ln(), "{base}");
            assert_eq!(h.progress_trusted(), trusted, "{since_done}");
        }
    }

    /// A user's targets that their own jobs' runs could not fit (a 10-minute turnaround for an
    /// hour's run) are learned as such; cancelled jobs' targets are forgotten.
    #[test]
    fn learns_whether_a_users_stated_targets_fit_their_jobs_runs() {
        let mut h = History::default();
        let queued = |id: u32, turnaround: &str| {
            let mut j = crate::testing::pending(id, 8);
            j.user = "ann".into();
            j.submit_time = 0;
            j.hints.insert("turnaround".into(), turnaround.into());
            j
        };
        let mut snap = at(0, Vec::new());
        snap.pending = vec![queued(1, "10:00"), queued(2, "2:00:00"), queued(3, "5:00")];
        h.observe(&snap);
        assert_eq!(h.target_fit("ann"), None);
        // 1 and 2 run an hour; 3 is cancelled.
        h.observe(&at(
            10,
            vec![running(1, &["n1"], 10), running(2, &["n2"], 10)],
        ));
        h.observe(&at(3610, Vec::new()));
        let fit = h.target_fit("ann").unwrap();
        assert_eq!(fit.count, 2);
        assert!((fit.value - 0.5).abs() < 1e-9, "one of two fitted: {fit:?}");
        assert!(h.stated_targets.is_empty(), "{:?}", h.stated_targets);
        assert_eq!(h.target_fit("bob"), None);
        // A target that fits the run: counted as such (the latest weighs most).
        let mut snap = at(4000, Vec::new());
        snap.pending = vec![queued(4, "3:00:00")];
        h.observe(&snap);
        h.observe(&at(4000, vec![running(4, &["n1"], 4000)]));
        h.observe(&at(7600, Vec::new()));
        let fit = h.target_fit("ann").unwrap();
        assert_eq!(fit.count, 3);
        assert!(fit.value > 0.5, "{fit:?}");
    }

    /// A waiting job's hints are read for a target once: a job seen to state none is not read
    /// again while it waits, and the verdicts of jobs gone from the queue do not pile up.
    #[test]
    fn a_waiting_job_is_read_for_a_target_once_and_the_verdicts_stay_the_queues_size() {
        let mut h = History::default();
        let queued = |id: u32, hints: &[(&str, &str)]| {
            let mut j = crate::testing::pending(id, 1);
            j.submit_time = 0;
            for (k, v) in hints {
                j.hints.insert(k.to_string(), v.to_string());
            }
            j
        };
        let mut snap = at(0, Vec::new());
        snap.pending = (1..=300).map(|id| queued(id, &[("app", "bert")])).collect();
        snap.pending.push(queued(301, &[("turnaround", "1:00:00")]));
        h.observe(&snap);
        assert_eq!(h.no_target.len(), 300);
        assert_eq!(h.stated_targets.get(&301), Some(&(3600, 0)));
        // Job 1 now states a target: its verdict stands (as a target, once seen, does).
        snap.pending[0] = queued(1, &[("app", "bert"), ("due", "7200")]);
        h.observe(&snap);
        assert!(!h.stated_targets.contains_key(&1));
        // The queue drains: what is kept stays within twice the queue.
        for left in (0..300).rev() {
            snap.pending.truncate(left);
            snap.time += 1;
            h.observe(&snap);
            assert!(
                h.no_target.len() <= 2 * left + 64,
                "{} at {left}",
                h.no_target.len()
            );
        }
    }

    /// What a look learns of a queue shorter than the room for stated targets does not depend
    /// on the queue's order (the simulator's look after a pass leaves it unsorted); a queue
    /// that fills the room keeps the targets of its first jobs.
    #[test]
    fn below_the_room_for_targets_a_looks_queue_order_does_not_matter() {
        let queued = |id: u32| {
            let mut j = crate::testing::pending(id, 1);
            j.submit_time = 0;
            let hint = if id.is_multiple_of(3) { "due" } else { "app" };
            j.hints.insert(hint.to_string(), "7200".to_string());
            j
        };
        let looked = |ids: &mut dyn Iterator<Item = u32>| {
            let mut h = History::default();
            let mut snap = at(0, Vec::new());
            snap.pending = ids.map(queued).collect();
            h.observe(&snap);
            h
        };
        let forward = looked(&mut (1..=90));
        assert!(90 < History::default().stated_target_room());
        assert_eq!(forward.stated_target_room(), MAX_KEYS - 30);
        assert_eq!(forward, looked(&mut (1..=90).rev()));
        // At the room's edge the first in the queue are kept.
        let mut full = History::default();
        for id in 0..MAX_KEYS as u32 {
            full.stated_targets.insert(1_000_000 + id, (0, 0));
        }
        full.stated_targets.remove(&1_000_000);
        assert_eq!(full.stated_target_room(), 1);
        let mut snap = at(0, Vec::new());
        snap.pending = vec![queued(3), queued(6)];
        full.observe(&snap);
        assert!(full.stated_targets.contains_key(&3));
        assert!(!full.stated_targets.contains_key(&6));
    }

    #[test]
    fn learns_run_times_and_the_spread_slowdown_of_similar_jobs() {
        let mut h = History::default();
        // Job 1 consolidated on n1 runs 3000 s; job 2, the same work spread, runs 6000 s.
        h.observe(&at(0, vec![running(1, &["n1"], 0)]));
        h.observe(&at(2990, vec![running(1, &["n1"], 0)]));
        h.observe(&at(3000, vec![running(2, &["n2", "n3"], 3000)]));
        assert_eq!(h.finished, 1);
        assert_eq!(h.learned_slowdown("ann/bert/8"), None, "no spread run yet");
        h.observe(&at(8990, vec![running(2, &["n2", "n3"], 3000)]));
        h.observe(&at(9000, vec![]));
        assert_eq!(h.finished, 2);
        let s = h.learned_slowdown("ann/bert/8").unwrap();
        assert!((s - 0.5).abs() < 1e-9, "{s}");
        // Limits were 6000 s: ratios 0.5 and 1.0.
        let ratio = h.limit_ratio().unwrap();
        assert_eq!(ratio.count, 2);
        assert!((ratio.value - 0.75).abs() < 1e-9, "{ratio:?}");
    }

    #[test]
    fn requeued_and_momentary_jobs_teach_nothing() {
        let mut h = History::default();
        h.observe(&at(0, vec![running(1, &["n1"], 0)]));
        let mut back = at(5000, vec![]);
        back.pending.push(crate::testing::pending(1, 8));
        h.observe(&back);
        assert_eq!(h.finished, 0, "a requeued job did not finish");
        h.observe(&at(5010, vec![running(3, &["n1"], 5010)]));
        h.observe(&at(5030, vec![]));
        assert_eq!(h.finished, 0, "20 s runs are failed starts, not speed data");
    }

    #[test]
    fn ended_and_started_jobs_are_found_whatever_the_order_of_the_list() {
        // In order (a merge suffices) and reordered (the merge cannot tell; ids are hashed):
        // the same jobs end and start either way.
        for reorder in [false, true] {
            let mut h = History::default();
            let jobs = |ids: &[u32], start: i64| -> Vec<RunningJob> {
                ids.iter().map(|&id| running(id, &["n1"], start)).collect()
            };
            h.observe(&at(0, jobs(&[1, 2, 3], 0)));
            let next: &[u32] = if reorder { &[4, 3, 1] } else { &[1, 3, 4] };
            h.observe(&at(3600, jobs(next, 0)));
            assert_eq!(h.finished, 1, "job 2 ended (reorder {reorder})");
            let mut known: Vec<u32> = h.running.keys().copied().collect();
            known.sort_unstable();
            assert_eq!(known, [1, 3, 4], "reorder {reorder}");
            h.observe(&at(7200, vec![]));
            assert_eq!(h.finished, 4, "reorder {reorder}");
        }
    }
}
