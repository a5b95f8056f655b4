//! `dally`: network-sensitive consolidation by delay scheduling (after Dally, arXiv 2401.16492;
//! the algorithm and its parameters are explained in docs/policies/consolidation.md).
//!
//! Each pending multi-GPU job has a placement *level* it wants: 0 = the fewest nodes it fits on
//! inside one rack (one node for a job that fits a node), 1 = any nodes of one rack, 2 = anywhere.
//! A job whose training is network-sensitive declines placements worse than the level it is
//! allowed: it starts at level 0 and is allowed one level more each time a delay timer runs out.
//! While it declines it is delayed (BeginTime) until its next timer; as soon as a placement at its
//! allowed level is free it is pinned there. Compute-bound jobs are never delayed.
//!
//! Timers are either fixed by the admin or set by the auto-tuner: per job and level, wait at most
//! as long as running spread would cost (break-even: run time x slowdown / (1 - slowdown)), and
//! not at all when the cluster's running jobs are not expected to free such a placement within
//! that time. Run times are time limits scaled by how long jobs really ran here ([`History`]).
//!
//! Network-sensitive preemption: a sensitive job that runs spread, allows requeueing and said it
//! checkpoints is requeued when a level-0 placement is free for it and the time it would save
//! beats the restart cost, at most `max_preemptions` times per job.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::placement::Cluster;
use super::Policy;
use crate::decision::Decision;
use crate::history::{fewest_nodes, job_key, History};
use crate::rng::SeededRng;
use crate::snapshot::{PendingJob, RunningJob, Snapshot};

/// Fraction of training speed each application loses when 8 GPUs sit on 2 nodes instead of one
/// (1 - step time on one node / step time on two), at its median measured batch size on the
/// measured network. Derived from the step-time model the simulator fits to the Pollux
/// artifact's `placements.csv`/`scalability.csv` (optimizer/sim/src/perf.rs; a test there
/// recomputes this table). cifar10's intra-node sync is slower than its inter-node one: 0.
pub const APP_SLOWDOWN: [(&str, f64); 6] = [
    ("bert", 0.487),
    ("cifar10", 0.0),
    ("deepspeech2", 0.108),
    ("imagenet", 0.191),
    ("ncf", 0.414),
    ("yolov3", 0.470),
];

/// The measured slowdown of a named application (`app=` hint), if cinch knows it.
pub fn app_slowdown(app: &str) -> Option<f64> {
    let app = app.to_ascii_lowercase();
    APP_SLOWDOWN
        .iter()
        .find(|(name, _)| *name == app)
        .map(|&(_, s)| s)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct DallyParams {
    /// Jobs asking for at least this many GPUs are placed by this policy (2 or more).
    pub min_gpus: u32,
    /// Fixed seconds a job waits for level 0 (fewest nodes, one rack) before taking level 1;
    /// omitted or null: the auto-tuner sets it per job.
    pub node_timer_s: Option<u32>,
    /// Fixed seconds a job waits at level 1 (one rack) before taking any nodes; omitted or
    /// null: auto-tuned.
    pub rack_timer_s: Option<u32>,
    /// Longest timer the auto-tuner sets (seconds, 0 to 604800).
    pub max_timer_s: u32,
    /// Jobs expected to slow down less than this when spread (0 to 1) are never delayed.
    pub min_slowdown: f64,
    /// Slowdown assumed for a job whose application is unknown and not yet learned (0 to 0.95).
    pub default_slowdown: f64,
    /// Run time assumed for a job without a time limit (seconds, 1 or more).
    pub default_run_s: u32,
    /// Requeue spread, sensitive, checkpointing jobs when a consolidated placement frees.
    pub preempt: bool,
    /// Most times one job is requeued (Slurm's restart count), 0 to 100.
    pub max_preemptions: u32,
    /// What a requeue costs the job (restart, checkpoint reload, Slurm's requeue delay), s.
    pub restart_cost_s: u32,
    /// Lifetime of each decision in seconds (1 to 86400).
    pub ttl_s: u32,
}

impl Default for DallyParams {
    fn default() -> Self {
        DallyParams {
            min_gpus: 2,
            node_timer_s: None,
            rack_timer_s: None,
            max_timer_s: 86_400,
            min_slowdown: 0.1,
            default_slowdown: 0.2,
            default_run_s: 3600,
            preempt: true,
            max_preemptions: 1,
            restart_cost_s: 300,
            ttl_s: 300,
        }
    }
}

impl DallyParams {
    pub fn validate(&self) -> Result<(), String> {
        super::check_min_gpus(self.min_gpus)?;
        for (name, value) in [
            ("node_timer_s", self.node_timer_s),
            ("rack_timer_s", self.rack_timer_s),
            ("max_timer_s", Some(self.max_timer_s)),
        ] {
            if let Some(v) = value.filter(|&v| v > 604_800) {
                return Err(format!("{name} must be from 0 to 604800 (7 days), not {v}"));
            }
        }
        super::check_range("min_slowdown", self.min_slowdown, 0.0..=1.0)?;
        super::check_range("default_slowdown", self.default_slowdown, 0.0..=0.95)?;
        if self.default_run_s == 0 {
            return Err("default_run_s must be at least 1".into());
        }
        if self.max_preemptions > 100 {
            return Err(format!(
                "max_preemptions must be from 0 to 100, not {}",
                self.max_preemptions
            ));
        }
        super::check_ttl(self.ttl_s)
    }
}

/// How much a job is expected to slow down spread, and where that figure comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Sensitivity {
    pub slowdown: f64,
    pub source: String,
}

/// Level names for reasons.
const LEVEL: [&str; 3] = ["consolidated", "one rack", "any nodes"];

/// Runs of each kind (consolidated, spread) before an application's learned slowdown is used.
const MIN_APP_RUNS: u64 = 5;

/// Prior weight (in jobs) of the assumption that jobs run half their time limit.
const PRIOR_JOBS: f64 = 3.0;
const PRIOR_RATIO: f64 = 0.5;

pub struct Dally(pub DallyParams);

/// The job's needs for levels: fewest nodes, and whether one rack can hold it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ideal {
    pub(super) nodes: u32,
    pub(super) one_rack: bool,
}

/// What the cluster's nodes and racks can hold at most, for [`Ideal`]s.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sizes {
    pub(super) node_gpus: u32,
    pub(super) rack_gpus: u64,
}

impl Sizes {
    pub(super) fn ideal(self, gpus: u32) -> Ideal {
        Ideal {
            nodes: fewest_nodes(gpus, self.node_gpus),
            one_rack: u64::from(gpus) <= self.rack_gpus,
        }
    }
}

impl Ideal {
    /// The level of a placement on `nodes` nodes across `racks` racks.
    pub(super) fn level_of(self, nodes: u32, racks: usize) -> usize {
        if nodes <= self.nodes && (racks <= 1 || !self.one_rack) {
            0
        } else if racks <= 1 {
            1
        } else {
            2
        }
    }

    /// The levels that exist for the job (a job bigger than a rack has no level 1).
    fn next_level(self, level: usize) -> usize {
        if level == 0 && !self.one_rack {
            2
        } else {
            (level + 1).min(2)
        }
    }
}

/// When running jobs are expected to end, per node: the input of the tuner's wait estimate.
pub(super) struct Releases {
    /// (expected end, node index, GPUs) of the running jobs, by time.
    events: Vec<(i64, usize, u32)>,
    /// GPUs the plan took, by (expected end, node index): kept apart from `events` so taking
    /// costs a tree insert rather than shifting every later release.
    planned: BTreeMap<(i64, usize), u32>,
    free: Vec<u32>,
    /// GPUs of each node, busy or not.
    totals: Vec<u32>,
    rack_of: Vec<usize>,
    /// Nodes of each rack (by position).
    rack_nodes: Vec<Vec<usize>>,
    racks: usize,
    cache: HashMap<(u32, usize), Option<i64>>,
    /// GPUs the pending jobs ask for, per GPU in the cluster (capped at 10).
    pressure: f64,
}

impl Releases {
    /// From the snapshot's running jobs, before anything is planned on `cluster`.
    pub(super) fn new(
        snapshot: &Snapshot,
        cluster: &Cluster,
        ratio: f64,
        default_run_s: u32,
    ) -> Self {
        Self::with_ends(snapshot, cluster, cluster.free().to_vec(), |_, job| {
            let limit = job
                .time_limit_min
                .map_or(f64::from(default_run_s), |m| f64::from(m) * 60.0);
            let end = job.start_time + (limit * ratio) as i64;
            if end <= snapshot.time {
                // Ran past its expected time: assume it ends halfway to its limit.
                snapshot.time + ((job.start_time + limit as i64 - snapshot.time).max(0) / 2).max(1)
            } else {
                end
            }
        })
    }

    /// From the snapshot's running jobs and when each is expected to end (given its position
    /// in the snapshot and itself), with `free` GPUs per node (the cluster's before a plan took
    /// any).
    pub(super) fn with_ends(
        snapshot: &Snapshot,
        cluster: &Cluster,
        free: Vec<u32>,
        expected_end: impl Fn(usize, &RunningJob) -> i64,
    ) -> Self {
        let (rack_of, racks) = cluster.racks();
        let mut events = Vec::new();
        for (k, job) in snapshot.running.iter().enumerate() {
            let end = expected_end(k, job);
            // The snapshot does not say how a job's GPUs split over its nodes: evenly, the
            // remainder on its first nodes, so that all of them are released.
            let n = (job.nodes.len() as u32).max(1);
            for (k, node) in job.nodes.iter().enumerate() {
                if let Some(i) = cluster.node_index(node) {
                    let share = job.gpus / n + u32::from((k as u32) < job.gpus % n);
                    events.push((end, i, share));
                }
            }
        }
        events.sort_unstable();
        Releases {
            events,
            planned: BTreeMap::new(),
            free,
            totals: cluster.totals().to_vec(),
            rack_nodes: {
                let mut nodes = vec![Vec::new(); racks.max(1)];
                for (i, &r) in rack_of.iter().enumerate() {
                    nodes[r].push(i);
                }
                nodes
            },
            rack_of: rack_of.to_vec(),
            racks,
            cache: HashMap::new(),
            pressure: {
                let total: u64 = snapshot.nodes.iter().map(|n| u64::from(n.gpus_total)).sum();
                let asked: u64 = snapshot.pending.iter().map(|j| u64::from(j.gpus)).sum();
                (asked as f64 / total.max(1) as f64).min(10.0)
            },
        }
    }

    /// Whether `free` holds a level-`level` placement of `gpus` GPUs.
    fn fits(&self, free: &[u32], gpus: u32, ideal: Ideal, level: usize) -> bool {
        let mut per_rack: Vec<Vec<u32>> = vec![Vec::new(); self.racks.max(1)];
        for (i, &f) in free.iter().enumerate() {
            if f > 0 {
                per_rack[self.rack_of[i]].push(f);
            }
        }
        let top = |mut frees: Vec<u32>, k: usize| -> u64 {
            frees.sort_unstable_by(|a, b| b.cmp(a));
            frees.iter().take(k).map(|&f| u64::from(f)).sum()
        };
        let k = ideal.nodes as usize;
        match (level, ideal.one_rack) {
            (0, true) => per_rack.into_iter().any(|r| top(r, k) >= u64::from(gpus)),
            (0, false) => top(free.to_vec(), k) >= u64::from(gpus),
            _ => per_rack
                .into_iter()
                .any(|r| r.iter().map(|&f| u64::from(f)).sum::<u64>() >= u64::from(gpus)),
        }
    }

    /// When a level-`level` placement for `gpus` GPUs is expected to be free (partitions and
    /// other pending jobs aside), if running jobs ever free one.
    pub(super) fn expected_at(
        &mut self,
        now: i64,
        gpus: u32,
        ideal: Ideal,
        level: usize,
    ) -> Option<i64> {
        if let Some(&t) = self.cache.get(&(gpus, level)) {
            return t;
        }
        let found = self.walk(now, gpus, ideal, level);
        self.cache.insert((gpus, level), found);
        found
    }

    /// Releases in time order until a placement fits; only the rack a release touched is
    /// checked again (the whole cluster for a job bigger than any rack).
    fn walk(&self, now: i64, gpus: u32, ideal: Ideal, level: usize) -> Option<i64> {
        let mut free = self.free.clone();
        if self.fits(&free, gpus, ideal, level) {
            return Some(now);
        }
        let per_rack = level > 0 || ideal.one_rack;
        let mut running = self.events.iter().copied().peekable();
        let mut planned = self
            .planned
            .iter()
            .map(|(&(t, i), &g)| (t, i, g))
            .peekable();
        loop {
            let next = match (running.peek(), planned.peek()) {
                (Some(a), Some(b)) if a <= b => running.next(),
                (_, Some(_)) => planned.next(),
                (Some(_), None) => running.next(),
                (None, None) => break,
            };
            let Some((t, i, g)) = next else { break };
            free[i] += g;
            let fits = if per_rack {
                self.rack_fits(&free, self.rack_of[i], gpus, ideal, level)
            } else {
                self.fits(&free, gpus, ideal, level)
            };
            if fits {
                return Some(t);
            }
        }
        // Once every running job ended each node is whole again, whatever the guessed splits
        // left busy.
        let last = self
            .events
            .last()
            .map(|e| e.0)
            .max(self.planned.last_key_value().map(|(k, _)| k.0))?;
        self.fits(&self.totals, gpus, ideal, level).then_some(last)
    }

    /// Whether rack `rack` alone holds a level-`level` placement in `free`.
    fn rack_fits(&self, free: &[u32], rack: usize, gpus: u32, ideal: Ideal, level: usize) -> bool {
        let frees = self.rack_nodes[rack].iter().map(|&i| free[i]);
        if level > 0 {
            return frees.map(u64::from).sum::<u64>() >= u64::from(gpus);
        }
        if ideal.nodes <= 1 {
            return frees.max().unwrap_or(0) >= gpus;
        }
        let mut frees: Vec<u32> = frees.collect();
        frees.sort_unstable_by(|a, b| b.cmp(a));
        frees
            .iter()
            .take(ideal.nodes as usize)
            .map(|&f| u64::from(f))
            .sum::<u64>()
            >= u64::from(gpus)
    }

    /// When a best-shape placement (level 0) of `gpus` GPUs is expected free, and on which
    /// nodes (by position): the first rack, or the whole cluster for a job bigger than a rack,
    /// whose `ideal.nodes` freest nodes hold it, fewest nodes first.
    pub(super) fn first_best_shape(
        &self,
        now: i64,
        gpus: u32,
        ideal: Ideal,
    ) -> Option<(i64, Vec<usize>)> {
        let groups: Vec<Vec<usize>> = if ideal.one_rack {
            self.rack_nodes.clone()
        } else {
            vec![(0..self.free.len()).collect()]
        };
        let pick = |free: &[u32]| -> Option<Vec<usize>> {
            groups.iter().find_map(|group| {
                let mut nodes: Vec<usize> =
                    group.iter().copied().filter(|&i| free[i] > 0).collect();
                nodes.sort_by_key(|&i| (std::cmp::Reverse(free[i]), i));
                let mut sum = 0u64;
                let mut taken = Vec::new();
                for i in nodes.into_iter().take(ideal.nodes as usize) {
                    sum += u64::from(free[i]);
                    taken.push(i);
                    if sum >= u64::from(gpus) {
                        return Some(taken);
                    }
                }
                None
            })
        };
        let mut free = self.free.clone();
        if let Some(nodes) = pick(&free) {
            return Some((now, nodes));
        }
        let mut events: Vec<(i64, usize, u32)> = self
            .events
            .iter()
            .copied()
            .chain(self.planned.iter().map(|(&(t, i), &g)| (t, i, g)))
            .collect();
        events.sort_unstable();
        for (t, i, g) in events {
            free[i] += g;
            if let Some(nodes) = pick(&free) {
                return Some((t.max(now), nodes));
            }
        }
        None
    }

    /// GPUs a plan takes now on nodes (by position) until `end`: what later estimates see.
    pub(super) fn take(&mut self, taken: &[(usize, u32)], end: i64) {
        for &(i, g) in taken {
            self.free[i] = self.free[i].saturating_sub(g);
            *self.planned.entry((end, i)).or_default() += g;
        }
        self.cache.clear();
    }
}

impl Dally {
    /// Expected slowdown spread, from the app hint, else learned, else the default.
    pub fn sensitivity(
        &self,
        hints: &std::collections::BTreeMap<String, String>,
        key: &str,
        history: &History,
    ) -> Sensitivity {
        if let Some(app) = hints.get("app") {
            // What this cluster's network did to the application beats the quiet-network table.
            if let Some(s) = history.learned_app_slowdown(app, MIN_APP_RUNS) {
                return Sensitivity {
                    slowdown: s,
                    source: format!("app={app}, learned here"),
                };
            }
            if let Some(s) = app_slowdown(app) {
                return Sensitivity {
                    slowdown: s,
                    source: format!("app={app}"),
                };
            }
        }
        if let Some(s) = history.learned_slowdown(key) {
            return Sensitivity {
                slowdown: s,
                source: "learned from similar jobs".into(),
            };
        }
        Sensitivity {
            slowdown: self.0.default_slowdown,
            source: "default".into(),
        }
    }

    /// Fraction of their time limit jobs really run, learned, with a prior of one half.
    pub(super) fn run_ratio(history: &History) -> f64 {
        match history.limit_ratio() {
            Some(m) => {
                (m.value * m.count as f64 + PRIOR_RATIO * PRIOR_JOBS)
                    / (m.count as f64 + PRIOR_JOBS)
            }
            None => PRIOR_RATIO,
        }
    }

    fn expected_run_s(&self, limit_min: Option<u32>, ratio: f64) -> f64 {
        limit_min.map_or(f64::from(self.0.default_run_s), |m| {
            f64::from(m) * 60.0 * ratio
        })
    }

    /// Seconds a job waits at `level` before taking the next one, and how that was set.
    #[allow(clippy::too_many_arguments)]
    fn timer(
        &self,
        level: usize,
        job: &PendingJob,
        ideal: Ideal,
        slowdown: f64,
        run_s: f64,
        releases: &mut Releases,
        now: i64,
    ) -> (i64, &'static str) {
        let fixed = if level == 0 {
            self.0.node_timer_s
        } else {
            self.0.rack_timer_s
        };
        if let Some(t) = fixed {
            return (i64::from(t), "fixed");
        }
        // Spread, the job runs slowdown/(1 - slowdown) longer; while others wait, the GPU time
        // it wastes delays them too, so the break-even grows with the waiting demand.
        let break_even = run_s * slowdown / (1.0 - slowdown).max(0.05) * (1.0 + releases.pressure);
        let cap = f64::from(self.0.max_timer_s);
        match releases.expected_at(now, job.gpus, ideal, level) {
            Some(at) if ((at - now) as f64) <= break_even.min(cap) => {
                (break_even.min(cap) as i64, "auto: break-even")
            }
            Some(_) => (0, "auto: not expected to free in time"),
            None => (0, "auto: never free"),
        }
    }
}

impl Policy for Dally {
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        _rng: &mut SeededRng,
        history: &History,
    ) -> Vec<Decision> {
        let p = &self.0;
        let mut cluster = Cluster::new(snapshot);
        let sizes = Sizes {
            node_gpus: cluster.node_size(),
            rack_gpus: cluster.largest_rack_gpus(),
        };
        let ratio = Self::run_ratio(history);
        let mut releases = Releases::new(snapshot, &cluster, ratio, p.default_run_s);

        let mut order: Vec<&PendingJob> = snapshot
            .pending
            .iter()
            .filter(|j| j.gpus >= p.min_gpus)
            .collect();
        order.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.submit_time.cmp(&b.submit_time))
                .then(a.job_id.cmp(&b.job_id))
        });

        let mut decisions = Vec::with_capacity(order.len());
        for job in order {
            let explain = |why: String| Decision::explain(job.job_id, why, p.ttl_s);
            let key = job_key(&job.user, job.name.as_deref(), job.gpus);
            let sens = self.sensitivity(&job.hints, &key, history);
            let ideal = sizes.ideal(job.gpus);
            let since = job.submit_time.max(job.begin_time.unwrap_or(0));
            let waited = now - since;
            let run_s = self.expected_run_s(job.time_limit_min, ratio);

            // The level this job may take now: relax one level per expired timer.
            let mut allowed = 0;
            let mut relax_at = since;
            let mut how = "";
            if sens.slowdown < p.min_slowdown {
                allowed = 2;
            } else {
                while allowed < 2 {
                    let (t, h) = self.timer(
                        allowed,
                        job,
                        ideal,
                        sens.slowdown,
                        run_s,
                        &mut releases,
                        now,
                    );
                    if relax_at + t > now {
                        relax_at += t;
                        how = h;
                        break;
                    }
                    relax_at += t;
                    allowed = ideal.next_level(allowed);
                }
            }

            let before = cluster.save();
            let outcome = cluster.place(job, now, true);
            let decision = match outcome {
                Ok((placement, _)) => {
                    let level = ideal.level_of(placement.gpus_on.len() as u32, placement.racks);
                    if level <= allowed {
                        let mut nodes: Vec<String> =
                            placement.gpus_on.into_iter().map(|(n, _)| n).collect();
                        nodes.sort();
                        let count = nodes.len() as u32;
                        let why = if sens.slowdown < p.min_slowdown {
                            format!(
                                "compute-bound (slowdown {:.2}, {}): not delayed; pinned to \
                                 the fewest free nodes ({count})",
                                sens.slowdown, sens.source
                            )
                        } else {
                            format!(
                                "{} placement on {count} node{} after {waited} s (slowdown \
                                 {:.2} spread, {})",
                                LEVEL[level],
                                if count == 1 { "" } else { "s" },
                                sens.slowdown,
                                sens.source
                            )
                        };
                        Decision {
                            node_count: (count != job.min_nodes).then_some(count),
                            pin_nodes: Some(nodes),
                            ..explain(why)
                        }
                    } else {
                        cluster.restore(before);
                        Decision {
                            delay_until: Some(relax_at.max(now + 1)),
                            ..explain(format!(
                                "waits for a {} placement (slowdown {:.2} spread, {}); only {} \
                                 free now; timer {} s ({how}) ends at {}",
                                LEVEL[allowed],
                                sens.slowdown,
                                sens.source,
                                LEVEL[level],
                                relax_at - since,
                                crate::slurm_time::format_time(relax_at)
                            ))
                        }
                    }
                }
                Err(why) if allowed < 2 && why.starts_with("waits") => {
                    cluster.restore(before);
                    Decision {
                        delay_until: Some(relax_at.max(now + 1)),
                        ..explain(format!(
                            "waits for a {} placement (slowdown {:.2} spread, {}); timer {} s \
                             ({how}) ends at {}",
                            LEVEL[allowed],
                            sens.slowdown,
                            sens.source,
                            relax_at - since,
                            crate::slurm_time::format_time(relax_at)
                        ))
                    }
                }
                Err(why) => {
                    cluster.restore(before);
                    explain(why)
                }
            };
            decisions.push(decision);
        }

        if p.preempt && p.max_preemptions > 0 {
            for job in &snapshot.running {
                if let Some(d) =
                    self.consider_requeue(job, &mut cluster, history, ratio, sizes, now)
                {
                    decisions.push(d);
                }
            }
        }
        decisions
    }
}

impl Dally {
    /// A requeue decision for a running job, if it is worth it and allowed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn consider_requeue(
        &self,
        job: &RunningJob,
        cluster: &mut Cluster,
        history: &History,
        ratio: f64,
        sizes: Sizes,
        now: i64,
    ) -> Option<Decision> {
        let p = &self.0;
        // `ckpt=yes` only, as the apply path reads it: dally asked for requeues of `true` and `1`
        // before, which the apply path refused.
        let checkpoints = crate::hints::checkpoints(&job.hints);
        if job.gpus < p.min_gpus || !job.requeue || !checkpoints {
            return None;
        }
        if job.restarts >= p.max_preemptions {
            return None;
        }
        let ideal = sizes.ideal(job.gpus);
        let (rack_of, _) = cluster.racks();
        let mut racks: Vec<usize> = job
            .nodes
            .iter()
            .filter_map(|n| cluster.node_index(n).map(|i| rack_of[i]))
            .collect();
        racks.sort_unstable();
        racks.dedup();
        if ideal.level_of(job.nodes.len() as u32, racks.len()) == 0 {
            return None;
        }
        let key = job_key(&job.user, job.name.as_deref(), job.gpus);
        let sens = self.sensitivity(&job.hints, &key, history);
        if sens.slowdown < p.min_slowdown {
            return None;
        }
        let remaining = (job.start_time as f64 + self.expected_run_s(job.time_limit_min, ratio)
            - now as f64)
            .max(0.0);
        let gain = remaining * sens.slowdown;
        if gain <= f64::from(p.restart_cost_s) {
            return None;
        }
        // Plan it as if its own GPUs were free, and keep the plan only at level 0.
        let before = cluster.save();
        // The snapshot does not say how the job's GPUs split over its nodes: free them node by
        // node, as many as each node has busy.
        let mut left = job.gpus;
        for node in &job.nodes {
            left -= cluster.release(node, left);
        }
        let as_pending = PendingJob {
            name: job.name.clone(),
            time_limit_min: job.time_limit_min,
            hints: job.hints.clone(),
            ..PendingJob::new(job.job_id, job.user.clone(), job.gpus, job.start_time)
        };
        match cluster.place(&as_pending, now, true) {
            Ok((placement, _))
                if ideal.level_of(placement.gpus_on.len() as u32, placement.racks) == 0 =>
            {
                Some(Decision {
                    requeue: Some(true),
                    ..Decision::explain(
                        job.job_id,
                        format!(
                            "requeued to restart consolidated: runs spread on {} nodes \
                             (slowdown {:.2}, {}), ~{remaining:.0} s left, saves ~{gain:.0} s \
                             > restart cost {} s; restart {} of at most {}",
                            job.nodes.len(),
                            sens.slowdown,
                            sens.source,
                            p.restart_cost_s,
                            job.restarts + 1,
                            p.max_preemptions
                        ),
                        p.ttl_s,
                    )
                })
            }
            _ => {
                cluster.restore(before);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pending, snapshot};

    fn fixed(timer: u32) -> Dally {
        Dally(DallyParams {
            node_timer_s: Some(timer),
            rack_timer_s: Some(0),
            ..DallyParams::default()
        })
    }

    fn with_app(mut job: PendingJob, app: &str) -> PendingJob {
        job.hints.insert("app".into(), app.into());
        job
    }

    /// One rack: n1 and n2 half busy, n3 free: 16 GPUs fit only spread over all three.
    fn half_busy() -> Vec<crate::snapshot::Node> {
        vec![
            node("n1", 8, 4, "r1"),
            node("n2", 8, 4, "r1"),
            node("n3", 8, 0, "r1"),
        ]
    }

    fn decide(policy: &Dally, snap: &Snapshot, now: i64) -> Vec<Decision> {
        policy.decide(snap, now, &mut SeededRng::new(0), &History::default())
    }

    #[test]
    fn a_sensitive_job_waits_for_two_whole_nodes_until_its_timer_then_runs_spread() {
        let mut job = with_app(pending(1, 16), "bert");
        job.submit_time = 1000;
        let snap = snapshot(half_busy(), vec![job]);
        let d = decide(&fixed(60), &snap, 1010);
        assert_eq!(d[0].delay_until, Some(1060), "{d:?}");
        assert!(d[0].pin_nodes.is_none());
        assert!(d[0].reason.contains("waits for a consolidated placement"));
        // Timer over: level 1 (any nodes of the rack) is allowed, the spread set is pinned.
        let d = decide(&fixed(60), &snap, 1060);
        assert_eq!(d[0].delay_until, None);
        assert_eq!(d[0].pin_nodes.as_ref().unwrap().len(), 3, "{d:?}");
        assert!(d[0].reason.starts_with("one rack placement on 3 nodes"));
    }

    #[test]
    fn a_consolidated_placement_is_pinned_at_once_and_compute_bound_jobs_never_wait() {
        let mut nodes = half_busy();
        nodes.push(node("n4", 8, 0, "r1"));
        let d = decide(
            &fixed(600),
            &snapshot(nodes, vec![with_app(pending(1, 16), "bert")]),
            1_000_000,
        );
        assert_eq!(
            d[0].pin_nodes.as_deref(),
            Some(&["n3".to_string(), "n4".to_string()][..])
        );
        let d = decide(
            &fixed(600),
            &snapshot(half_busy(), vec![with_app(pending(2, 16), "cifar10")]),
            1_000_000,
        );
        assert_eq!(d[0].delay_until, None);
        assert_eq!(d[0].pin_nodes.as_ref().unwrap().len(), 3);
        assert!(d[0].reason.starts_with("compute-bound"), "{}", d[0].reason);
    }

    #[test]
    fn sensitivity_comes_from_the_app_then_history_then_the_default() {
        let dally = Dally(DallyParams::default());
        let hints = |app: &str| [("app".to_string(), app.to_string())].into();
        let none = History::default();
        assert_eq!(
            dally.sensitivity(&hints("BERT"), "k", &none).slowdown,
            0.487
        );
        let unknown = dally.sensitivity(&hints("gpt-x"), "k", &none);
        assert_eq!(unknown.slowdown, 0.2);
        assert_eq!(unknown.source, "default");
    }

    #[test]
    fn a_spread_checkpointing_job_is_requeued_once_when_consolidation_frees() {
        // Job 9 runs its 16 GPUs over n1 (4), n2 (4) and n3 (8) while n4 and n5 are free:
        // requeued, it can restart on two whole nodes.
        let mut nodes = half_busy();
        nodes[2].gpus_alloc = 8;
        nodes.push(node("n4", 8, 0, "r1"));
        nodes.push(node("n5", 8, 0, "r1"));
        let mut snap = snapshot(nodes, vec![]);
        let running = RunningJob {
            job_id: 9,
            user: "ann".into(),
            name: Some("big".into()),
            nodes: vec!["n1".into(), "n2".into(), "n3".into()],
            gpus: 16,
            start_time: snap.time - 600,
            time_limit_min: Some(24 * 60),
            requeue: true,
            restarts: 0,
            hints: [("app", "bert"), ("ckpt", "yes")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        snap.running.push(running.clone());
        let now = snap.time;
        let d = decide(&fixed(600), &snap, now);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].requeue, Some(true));
        assert!(
            d[0].reason.contains("restart 1 of at most 1"),
            "{}",
            d[0].reason
        );

        for change in [
            |j: &mut RunningJob| j.requeue = false,
            |j: &mut RunningJob| j.restarts = 1,
            |j: &mut RunningJob| {
                j.hints.remove("ckpt");
            },
            // Only `yes` says so (any case), as the apply path and the user's warning read it.
            |j: &mut RunningJob| {
                j.hints.insert("ckpt".into(), "true".into());
            },
            |j: &mut RunningJob| j.time_limit_min = Some(11), // nearly done: no gain
        ] {
            let mut job = running.clone();
            change(&mut job);
            snap.running = vec![job];
            assert!(decide(&fixed(600), &snap, now).is_empty());
        }
    }

    #[test]
    fn parameters_are_validated() {
        assert!(DallyParams::default().validate().is_ok());
        let bad = DallyParams {
            min_slowdown: 1.5,
            ..DallyParams::default()
        };
        assert!(bad.validate().unwrap_err().contains("min_slowdown"));
        let bad = DallyParams {
            node_timer_s: Some(10_000_000),
            ..DallyParams::default()
        };
        assert!(bad.validate().unwrap_err().contains("node_timer_s"));
    }
}
