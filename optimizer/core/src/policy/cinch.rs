//! `cinch`: cinch's own policy, the default. Three parts, each switchable so their effect can be
//! measured apart (docs/policies/cinch.md):
//!
//! - **Queue order** (`queue_order`): shortest predicted remaining service first. A job's
//!   service is its GPUs times its predicted remaining run time; the prediction comes from the
//!   source that has predicted best on this cluster so far (its time limit scaled by how much of
//!   their limits jobs really run, or how long similar jobs ran; [`History::predict_run_s`]).
//!   A job that already ran longer than predicted (a requeued one) is expected to run as long
//!   again, as least-attained-service does for jobs nobody can predict. The order becomes Slurm
//!   priorities, so Slurm's own scheduler and backfill start jobs in it.
//! - **Placement** (`consolidate`): multi-GPU jobs are pinned, in that order, to the most
//!   consolidated placement free now. A network-sensitive job whose best shape is not free waits
//!   for it (a begin time) only while the wait expected from the running jobs' predicted ends is
//!   shorter than what running spread would cost it; otherwise it takes the spread placement at
//!   once. GPUs are never held idle for a consolidation that is expected to lose.
//! - **Preemption** (`preempt`): a running job whose users opted in (`--requeue` and `ckpt=yes`)
//!   is requeued when waiting jobs with at least `preempt_ratio` times less remaining service
//!   need its GPUs, or when it runs spread, is network-sensitive and a consolidated placement is
//!   free for it; at most `max_preemptions` times per job. The plugin refuses any other requeue.
//! - **QoS targets** (`qos`; GENIE's Shortest Waiting Allowance First, docs/policies/qos.md): a
//!   job with a start or finish target ([`crate::models::qos`]) whose waiting allowance (target - now -
//!   predicted run) has shrunk to `qos_urgency` times its predicted run goes ahead of the jobs
//!   without one, the smallest allowance first; it does not wait for a consolidated shape that
//!   would make it miss. A target that cannot be met any more is said, not chased.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::fmt::Write as _;

use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

use super::dally::{Dally, DallyParams};
use super::shapes::{Ideal, Releases, Sizes};
use super::placement::Cluster;
use super::Sensitivity;
use super::{
    left_as_submitted, pin_decision, slurm_order_indices, Policy,
};
use crate::wire::decision::Decision;
use crate::learn::history::{History, Predictor, RunPrediction, RunSource};
use crate::models::qos::{self, QosClass, Targets};
use crate::util::rng::SeededRng;
use crate::learn::run_model::JobDistribution;
use crate::wire::snapshot::{PendingJob, RunningJob, Snapshot};

/// The priority of a job with no service left to predict; each e-fold of predicted service
/// lowers it by [`PRIORITY_PER_E_FOLD`]. 1e12 GPU-seconds still map above 1.
pub const TOP_PRIORITY: u32 = 1_000_000_000;
pub const PRIORITY_PER_E_FOLD: f64 = 1_000_000.0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct CinchParams {
    /// Order the queue by predicted remaining service (Slurm priorities); off: Slurm's order.
    pub queue_order: bool,
    /// Place multi-GPU jobs consolidated, waiting for their best shape while that pays off.
    pub consolidate: bool,
    /// Requeue opted-in running jobs for waiting ones with much less service.
    pub preempt: bool,
    /// Requeue opted-in running jobs that run spread, are network-sensitive and would restart
    /// consolidated on GPUs free now, when the time saved beats the restart.
    pub requeue_spread: bool,
    /// Jobs asking for at least this many GPUs are placed by this policy (2 or more).
    pub min_gpus: u32,
    /// Jobs expected to slow down less than this when spread (0 to 1) never wait for a shape.
    pub min_slowdown: f64,
    /// Slowdown assumed for a job whose application is unknown and not yet learned (0 to 0.95).
    pub default_slowdown: f64,
    /// Run time assumed for a job nothing predicts (no limit, no history), seconds (1 or more).
    pub default_run_s: u32,
    /// A job that has waited longer than this many times its predicted remaining run time goes
    /// ahead of every job that has not (0 = never): shortest-first never starves a long job
    /// for ever (0 to 100).
    pub max_stretch: f64,
    /// Longest a job waits for its best shape once a spread placement is free, seconds (0 to
    /// 604800).
    pub max_wait_s: u32,
    /// The first job (in cinch's order) that waits for its best shape is pinned to the nodes it
    /// is expected to free on first and put first in Slurm's order, so Slurm's backfill keeps
    /// the GPUs it waits for from later jobs that would still run then.
    pub reserve: bool,
    /// A network-sensitive job waits for its best shape whatever spreading would cost (up to
    /// `max_wait_s`), as strict consolidation does; off: only while waiting is expected to pay.
    pub wait_always: bool,
    /// A job that waits for its best shape (all but the reserved one) gets a begin time at the
    /// shape's expected release: Slurm starts it then on whatever is free, spread if the release
    /// came late. Off: it waits at least until the next round (60 s), which pins it where its
    /// shape is free, so no job held for a shape is started spread.
    pub start_at_release: bool,
    /// A running job is requeued for waiting jobs only if its predicted remaining service is at
    /// least this many times theirs (1.5 to 1000).
    pub preempt_ratio: f64,
    /// Most times one job of a whole node or more (as many GPUs as the largest node holds) is
    /// requeued by this policy (Slurm's restart count), 0 to 100.
    pub max_preemptions: u32,
    /// Most times one job on part of a node (fewer GPUs than the largest node holds) is
    /// requeued by this policy, 0 to 100: it runs again on any node with that many GPUs free,
    /// so a restart costs it little waiting, where a whole-node job waits for whole nodes.
    pub max_preemptions_small: u32,
    /// What a requeue costs the job besides Slurm's requeue delay (the snapshot's): its restart
    /// and checkpoint reload, s.
    pub restart_cost_s: u32,
    /// Order jobs with a QoS target by their waiting allowance once it runs short (GENIE's SWAF).
    pub qos: bool,
    /// Count the targets every user states in hints (`due`, `turnaround`, `start_within`); off
    /// (the default): only those of the accounts and QOS listed below count, besides Slurm's
    /// `--deadline` and the admin's classes.
    pub user_targets: bool,
    /// Accounts whose users' stated targets count even with `user_targets` off.
    pub user_target_accounts: Vec<String>,
    /// Slurm QOS whose jobs' stated targets count even with `user_targets` off.
    pub user_target_qos: Vec<String>,
    /// No stated target counts as sooner than this after the job's submission, seconds (0: as
    /// written; at most 30 days): how tight a user may ask.
    pub user_target_min_s: u32,
    /// Of one user's pending jobs, only the earliest this many have their stated targets
    /// counted (0: no limit): how many at once.
    pub user_target_max_pending: u32,
    /// A job with a target goes ahead of the jobs without one once its waiting allowance is at
    /// most this many times its predicted run time (0 to 1000; large: every targeted job first).
    pub qos_urgency: f64,
    /// Targets for jobs of Slurm QOS names or partitions (docs/policies/qos.md).
    pub qos_classes: Vec<QosClass>,
    /// Size elastic jobs (`elastic=MIN-MAX`) by ONES's evolutionary search: pending ones
    /// before they start, running ones by checkpoint-and-requeue (docs/policies/elastic.md).
    pub elastic: bool,
    /// A running elastic job is resized at most once per this many seconds of its run (60 to
    /// 604800).
    pub resize_interval_s: u32,
    /// Generations of the search per round: its budget (1 to 1000).
    pub search_generations: u32,
    /// A running elastic job is not shrunk once Slurm has restarted it this often (0 to 100);
    /// it may still grow.
    pub max_resizes: u32,
    /// Lifetime of each decision in seconds (1 to 86400).
    pub ttl_s: u32,
    /// How much cinch's order weighs against the site's own priorities (fair share, QOS, age):
    /// cinch raises a job by at most this many priority points, as a negative `nice` on top of
    /// the priority Slurm computes (0 to 60000). 0: cinch sets each ordered job's priority
    /// outright, so multifactor no longer decides for those jobs (docs/operations.md, "What
    /// cinch does to your priorities").
    pub order_weight: u32,
}

impl Default for CinchParams {
    fn default() -> Self {
        CinchParams {
            queue_order: true,
            consolidate: true,
            preempt: true,
            requeue_spread: false,
            min_gpus: 2,
            min_slowdown: 0.1,
            default_slowdown: 0.2,
            default_run_s: 3600,
            max_wait_s: 86_400,
            reserve: true,
            wait_always: true,
            start_at_release: true,
            max_stretch: 3.0,
            preempt_ratio: 2.0,
            max_preemptions: 3,
            max_preemptions_small: 5,
            restart_cost_s: 300,
            qos: true,
            user_targets: false,
            user_target_accounts: Vec::new(),
            user_target_qos: Vec::new(),
            user_target_min_s: 0,
            user_target_max_pending: 0,
            qos_urgency: 1.0,
            qos_classes: Vec::new(),
            elastic: true,
            resize_interval_s: 1800,
            search_generations: 30,
            max_resizes: 0,
            ttl_s: 300,
            order_weight: DEFAULT_ORDER_WEIGHT,
        }
    }
}

/// cinch's default reach over Slurm's own priorities, in priority points: with priority/basic
/// (one point per submission) it reorders the last ten thousand submissions; with multifactor
/// it outweighs a factor only where the site's weight for it is below this (a
/// `PriorityWeightFairshare=100000` still decides between users far apart in fair share).
pub const DEFAULT_ORDER_WEIGHT: u32 = 10_000;

/// The most `order_weight` may be: priority/basic starts jobs at 0xffff0000 and adds a negative
/// nice to that without a check, so more than 65,535 points could wrap a priority around.
pub const MAX_ORDER_WEIGHT: u32 = 60_000;

/// The priority cinch's order gives a ranked job, if any: urgent QoS targets by allowance, the
/// rest by predicted service when cinch orders the queue.
fn order_priority(p: &CinchParams, r: &Ranked) -> Option<u32> {
    match r.qos.as_ref().filter(|q| q.urgent) {
        Some(q) => Some(urgent_priority(q.allowance_s)),
        None => p.queue_order.then(|| priority_for(r.score, r.overdue)),
    }
}

/// Whether Slurm's own priorities order the round: cinch's order is a bounded nice on top of
/// them (`order_weight` > 0) and the agent reported every job's site priority.
fn site_order(p: &CinchParams, ranked: &[Ranked]) -> bool {
    p.order_weight > 0 && ranked.iter().all(|r| r.job.site_priority.is_some())
}

/// The priority Slurm will give a ranked job once cinch's nice is set: the site's priority less
/// that nice (never positive, so it only raises).
fn effective_priority(p: &CinchParams, r: &Ranked) -> i64 {
    let nice = order_priority(p, r).map_or(0, |q| nice_for(q, p.order_weight));
    i64::from(r.job.site_priority.unwrap_or(0)) - i64::from(nice)
}

/// The `nice` (from `-weight` to 0) that expresses cinch's `priority` on top of the priority
/// Slurm computes, keeping cinch's order: the job cinch reserves for is raised most, then urgent
/// QoS jobs, then jobs that have waited too long, then the rest by predicted service (fewer
/// GPU-hours, raised more). Never positive: multifactor floors a priority at 1, which would
/// erase the order among jobs lowered below it, so cinch only ever raises jobs. Within each band
/// the priority's logarithmic service steps are spread evenly; the ordinary jobs get most of the
/// range.
pub fn nice_for(priority: u32, weight: u32) -> i32 {
    let w = f64::from(weight.min(MAX_ORDER_WEIGHT));
    // Service steps beyond 1e8 GPU-seconds (about 28,000 GPU-hours) all map to the end.
    let max_steps = (1e8f64).ln_1p() * PRIORITY_PER_E_FOLD;
    // (the band's most favourable nice, its width, the priority at its top)
    let (low, width, top) = if priority >= RESERVED_PRIORITY {
        return -(w as i32);
    } else if priority > 2 * TOP_PRIORITY {
        (-w + 1.0, 0.125 * w - 1.0, 3 * TOP_PRIORITY)
    } else if priority > TOP_PRIORITY {
        (-0.875 * w + 1.0, 0.125 * w - 1.0, 2 * TOP_PRIORITY)
    } else {
        (-0.75 * w + 1.0, 0.75 * w - 1.0, TOP_PRIORITY)
    };
    let steps = f64::from(top.saturating_sub(priority)).min(max_steps);
    let nice = low + width.max(0.0) * steps / max_steps;
    nice.round().clamp(-w, 0.0) as i32
}

impl CinchParams {
    pub fn validate(&self) -> Result<(), String> {
        super::check_min_gpus(self.min_gpus)?;
        self.as_dally().validate()?;
        super::check_range("max_stretch", self.max_stretch, 0.0..=100.0)?;
        super::check_range("preempt_ratio", self.preempt_ratio, 1.5..=1000.0)?;
        super::check_range("qos_urgency", self.qos_urgency, 0.0..=1000.0)?;
        super::check_range(
            "user_target_min_s",
            f64::from(self.user_target_min_s),
            0.0..=2_592_000.0,
        )?;
        for (key, names) in [
            ("user_target_accounts", &self.user_target_accounts),
            ("user_target_qos", &self.user_target_qos),
        ] {
            if let Some(bad) = names
                .iter()
                .find(|n| n.is_empty() || n.contains(|c: char| c == ',' || c.is_whitespace()))
            {
                return Err(format!("{key}: '{bad}' is not one Slurm name"));
            }
        }
        super::check_range(
            "resize_interval_s",
            f64::from(self.resize_interval_s),
            60.0..=604_800.0,
        )?;
        super::check_range(
            "search_generations",
            f64::from(self.search_generations),
            1.0..=1000.0,
        )?;
        super::check_range("max_resizes", f64::from(self.max_resizes), 0.0..=100.0)?;
        super::check_range(
            "max_preemptions_small",
            f64::from(self.max_preemptions_small),
            0.0..=100.0,
        )?;
        super::check_range(
            "order_weight",
            f64::from(self.order_weight),
            0.0..=f64::from(MAX_ORDER_WEIGHT),
        )?;
        qos::parse_classes(&self.qos_classes)?;
        Ok(())
    }

    /// Most requeues of a running job of `gpus` GPUs, on a cluster whose largest node has
    /// `node_gpus`: a job on part of a node runs again wherever that many GPUs are free, so it
    /// may be requeued more often than one that needs whole nodes back.
    fn max_restarts(&self, gpus: u32, node_gpus: u32) -> u32 {
        if gpus < node_gpus {
            self.max_preemptions_small
        } else {
            self.max_preemptions
        }
    }

    /// Whether any running job may be requeued at all (some cap above 0).
    fn may_requeue(&self) -> bool {
        self.max_preemptions > 0 || self.max_preemptions_small > 0
    }

    /// The Dally parameters this policy's placement and network requeue share (the network
    /// requeue sets `max_preemptions` per job, by [`Self::max_restarts`]).
    fn as_dally(&self) -> DallyParams {
        DallyParams {
            min_gpus: self.min_gpus,
            node_timer_s: None,
            rack_timer_s: None,
            max_timer_s: self.max_wait_s,
            min_slowdown: self.min_slowdown,
            default_slowdown: self.default_slowdown,
            default_run_s: self.default_run_s,
            preempt: self.requeue_spread,
            max_preemptions: self.max_preemptions,
            restart_cost_s: self.restart_cost_s,
            ttl_s: self.ttl_s,
        }
    }
}

pub struct Cinch(pub CinchParams);

/// A user's targets judged before their fit decides whether the next ones count.
const MIN_TARGETS_JUDGED: u64 = 3;
/// Below this share of a user's recent targets fitting their jobs' runs, the next ones do not
/// count ([`History::target_fit`]).
const MIN_TARGET_FIT: f64 = 0.5;

/// How soon a job kept from spreading is looked at again, seconds.
const RECHECK_S: i64 = 60;

/// Runs of each kind (consolidated, spread) on as many GPUs before their slowdown is used.
const MIN_CLASS_RUNS: u64 = 5;

/// Each running job's expected remaining run seconds, what is expected of its run and its GPUs,
/// by its position in the snapshot. Every round needs the remaining runs (the release model);
/// only preemption needs rank scores, and only of the jobs that may be requeued, so each score
/// is worked out when asked.
struct RunningLeft(Vec<(f64, Expectation, f64)>);

impl RunningLeft {
    fn of(&self, position: usize) -> f64 {
        self.0.get(position).map_or(0.0, |l| l.0)
    }

    /// GPU-seconds, as [`Ranked::score`]: GPUs times the job's size per GPU.
    fn score(&self, position: usize) -> f64 {
        self.0
            .get(position)
            .map_or(0.0, |(_, expectation, gpus)| gpus * expectation.per_gpu())
    }
}

/// What is expected of a job's run from here: under the run model, its distribution at the run
/// it has received; else the prediction as it is.
enum Expectation {
    Model(JobDistribution, f64),
    Plain(f64),
}

impl Expectation {
    /// Expected remaining run seconds: the run model's, else what is left of the prediction
    /// (as long again once past it).
    fn remaining(&self) -> f64 {
        match self {
            Expectation::Model(d, ran_s) => d.remaining(*ran_s),
            Expectation::Plain(remaining) => *remaining,
        }
    }

    /// The rank per GPU: its Gittins size under the run model (past every run seen: least
    /// attained service, as long again), else the remaining run.
    fn per_gpu(&self) -> f64 {
        match self {
            Expectation::Model(d, ran_s) => d
                .gittins(*ran_s)
                .map_or(ran_s.max(1.0), |g| 1.0 / g.max(1e-12)),
            Expectation::Plain(remaining) => *remaining,
        }
    }
}

/// The release model of a plan, built the first time a job has to wait (a round that starts
/// every pending job at once, most rounds of a cluster with room, never needs it); what the plan
/// took before is replayed onto it, so it is the model built at the start and kept up to date.
struct LazyReleases {
    built: Option<Releases>,
    /// Free GPUs per node before the plan took any.
    initial_free: Vec<u32>,
    taken: Vec<(Vec<(usize, u32)>, i64)>,
}

impl LazyReleases {
    fn new(initial_free: Vec<u32>) -> Self {
        LazyReleases {
            built: None,
            initial_free,
            taken: Vec::new(),
        }
    }

    fn take(&mut self, taken: &[(usize, u32)], end: i64) {
        match &mut self.built {
            Some(releases) => releases.take(taken, end),
            None => self.taken.push((taken.to_vec(), end)),
        }
    }

    fn get<'c>(
        &mut self,
        cluster: &Cluster<'c>,
        build: impl Fn(&Cluster<'c>, Vec<u32>) -> Releases,
    ) -> &mut Releases {
        if let Some(releases) = self.built.take() {
            return self.built.insert(releases);
        }
        let mut releases = build(cluster, std::mem::take(&mut self.initial_free));
        for (taken, end) in self.taken.drain(..) {
            releases.take(&taken, end);
        }
        self.built.insert(releases)
    }
}

/// A number shown with one decimal, without the float formatter's exact-digit machinery (this
/// runs for every pending job every round).
struct OneDecimal(f64);

impl std::fmt::Display for OneDecimal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tenths = (self.0 * 10.0).round();
        if !tenths.is_finite() || tenths.abs() >= 1e15 {
            return write!(f, "{:.1}", self.0);
        }
        // Digits written by hand: three of these go into every pending job's reason every
        // round, and the formatter's integer machinery was most of their cost.
        let tenths = tenths as i64;
        let mut buf = [0u8; 24];
        let mut at = buf.len();
        let mut push = |b: u8| {
            at -= 1;
            buf[at] = b;
        };
        let mut n = tenths.unsigned_abs();
        push(b'0' + (n % 10) as u8);
        push(b'.');
        n /= 10;
        loop {
            push(b'0' + (n % 10) as u8);
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if tenths < 0 {
            push(b'-');
        }
        f.write_str(std::str::from_utf8(&buf[at..]).map_err(|_| std::fmt::Error)?)
    }
}

/// A job's QoS target as this round sees it.
struct QosRank {
    targets: Targets,
    /// Seconds it can still wait and meet its targets (negative: it cannot).
    allowance_s: f64,
    /// Goes ahead of the jobs without a target (allowance short, still feasible).
    urgent: bool,
    /// Whether its run-time prediction is good enough to order by the allowance.
    trusted: bool,
}

/// The mean |ln(predicted / actual)| of a run-time source beyond which its allowances are not
/// acted on: ln 2, predictions off by 2x on average.
const TRUSTED_LOG_ERROR: f64 = std::f64::consts::LN_2;

/// A pending job with its predicted remaining service.
struct Ranked<'a> {
    job: &'a PendingJob,
    /// Waited longer than `max_stretch` times its predicted remaining run time: goes first.
    overdue: bool,
    /// Boxed: few jobs have targets, and a queue of large records is slow to order.
    qos: Option<Box<QosRank>>,
    prediction: RunPrediction,
    /// Expected remaining run seconds.
    remaining_s: f64,
    /// GPUs x expected remaining run.
    service: f64,
    /// What the queue is ordered by, smaller first: GPUs over the job's Gittins index under the
    /// run model (GPU-seconds; with exact predictions its remaining service), else its
    /// predicted remaining service.
    score: f64,
}

/// Remaining run seconds of a job predicted to run `predicted_s` that already ran `ran_s`: the
/// rest of the prediction, or, once past it, as long again (least attained service).
fn remaining_s(predicted_s: f64, ran_s: f64) -> f64 {
    if ran_s < predicted_s {
        predicted_s - ran_s
    } else {
        ran_s.max(1.0)
    }
}

/// The Slurm priority of a job with `service` GPU-seconds predicted: overdue jobs first, then
/// fewer GPU-seconds first.
pub fn priority_for(service: f64, overdue: bool) -> u32 {
    let steps = (service.max(0.0).ln_1p() * PRIORITY_PER_E_FOLD).min(f64::from(TOP_PRIORITY - 1));
    let top = if overdue {
        2 * TOP_PRIORITY
    } else {
        TOP_PRIORITY
    };
    top - steps as u32
}

/// The Slurm priority of an urgent job with `allowance_s` seconds to spare: above every job
/// without a target, the smallest allowance first. In steps of 5% of the allowance, so that a
/// shrinking allowance changes the job's priority (a Slurm update) now and then, not every round.
pub fn urgent_priority(allowance_s: f64) -> u32 {
    const STEP: f64 = 0.05;
    let buckets = (allowance_s.max(0.0).ln_1p() / STEP).floor();
    let steps = (buckets * STEP * PRIORITY_PER_E_FOLD).min(f64::from(TOP_PRIORITY - 1));
    3 * TOP_PRIORITY - steps as u32
}

/// A job's QoS targets, predicted finish and slack, and what cinch does about them, in words.
fn describe_qos(out: &mut String, q: &QosRank, r: &Ranked, now: i64) {
    for problem in &q.targets.problems {
        let _ = write!(out, "QoS {problem}; ");
    }
    if q.targets.is_empty() {
        return;
    }
    let finish = now.saturating_add(r.remaining_s.ceil() as i64);
    let _ = write!(
        out,
        "QoS target: {}; predicted finish {} if started now ({} to run, from {}), {}: ",
        q.targets.describe(),
        crate::slurm::slurm_time::format_time(finish),
        crate::slurm::slurm_time::format_duration(r.remaining_s.ceil() as i64),
        r.prediction.source.describe(),
        qos::describe_slack(q.allowance_s),
    );
    out.push_str(if q.urgent {
        "urgent, ahead of the jobs without a target (smallest slack first); "
    } else if !q.trusted {
        "run-time predictions here are off by more than 2x on average, too poor to order by \
         slack: usual order; "
    } else if q.allowance_s < 0.0 {
        "cannot be met any more, not chased (usual order); "
    } else {
        "enough slack, usual order for now; "
    });
}

impl Cinch {
    /// A job's predicted run time, from what it says of itself (its profile: iterations and
    /// the rate it measured) and the history.
    fn predict<'s>(
        &self,
        predictor: &Predictor<'_, 's>,
        user: &'s str,
        name: Option<&'s str>,
        gpus: u32,
        limit_min: Option<u32>,
        hints: &crate::slurm::job_hints::Hints,
    ) -> RunPrediction {
        if let Some(profile) = (!hints.is_empty()).then(|| qos::profile(hints)).flatten() {
            return RunPrediction {
                run_s: profile.run_s.max(1.0),
                source: RunSource::Profile,
                log_error: None,
            };
        }
        let limit_s = limit_min.map(|m| f64::from(m) * 60.0);
        predictor.predict_run_s(user, name, gpus, limit_s, f64::from(self.0.default_run_s))
    }

    /// A pending job's run-time prediction, its expected remaining run seconds and its rank per
    /// GPU: a requeued job's earlier runs count against the prediction.
    fn pending_remaining<'s>(
        &self,
        predictor: &Predictor<'_, 's>,
        job: &'s PendingJob,
        now: i64,
    ) -> (RunPrediction, f64, f64) {
        let prediction = self.predict(
            predictor,
            &job.user,
            job.name.as_deref(),
            job.gpus,
            job.time_limit_min,
            &job.hints,
        );
        let ran_s = predictor.history().attained_service(job.job_id, None, now)
            / f64::from(job.gpus.max(1));
        let expectation = self.expect(predictor, prediction, ran_s);
        (prediction, expectation.remaining(), expectation.per_gpu())
    }

    /// What is expected of a job predicted to run `prediction` that has run `ran_s`: under the
    /// run model when there is one (its distribution among the jobs predicted nearest, and its
    /// Gittins index there), else the prediction itself (what is left of it, or as long again
    /// once past it). A job's own profile is taken as exact.
    fn expect(&self, predictor: &Predictor, prediction: RunPrediction, ran_s: f64) -> Expectation {
        match predictor.model() {
            Some(model) if prediction.source != RunSource::Profile => {
                Expectation::Model(model.distribution(prediction.run_s), ran_s)
            }
            _ => Expectation::Plain(remaining_s(prediction.run_s, ran_s)),
        }
    }

    /// Whether the targets `job`'s user stated count, by the admin's settings.
    fn user_targets(
        &self,
        job: &PendingJob,
        beyond_cap: &FxHashSet<u32>,
        history: &History,
    ) -> qos::UserTargets {
        let p = &self.0;
        let listed = |list: &[String], name: &Option<String>| {
            name.as_ref().is_some_and(|n| list.contains(n))
        };
        if !(p.user_targets
            || listed(&p.user_target_accounts, &job.account)
            || listed(&p.user_target_qos, &job.qos))
        {
            let who = if p.user_target_accounts.is_empty() && p.user_target_qos.is_empty() {
                "this site does not count targets users state".to_string()
            } else {
                "this site counts stated targets only in some accounts and QOS, not this \
                 job's"
                    .to_string()
            };
            return qos::UserTargets::NotCounted(format!("{who} (admin: user_targets)"));
        }
        if beyond_cap.contains(&job.job_id) {
            return qos::UserTargets::NotCounted(format!(
                "{} has {} earlier pending jobs with targets, and only that many count at once \
                 (admin: user_target_max_pending)",
                job.user, p.user_target_max_pending
            ));
        }
        // A user whose recent targets were mostly shorter than their jobs' own runs (missed
        // however early the job started) states urgency it does not have: not counted until
        // their targets fit again (they are still learned).
        if let Some(fit) = history
            .target_fit(&job.user)
            .filter(|f| f.count >= MIN_TARGETS_JUDGED && f.value < MIN_TARGET_FIT)
        {
            return qos::UserTargets::NotCounted(format!(
                "{}'s recent targets were mostly shorter than their jobs' own runs (about {:.0}% \
                 could be met even starting at submission), so cinch counts them again once they fit",
                job.user,
                100.0 * fit.value
            ));
        }
        qos::UserTargets::Counted {
            floor_s: u64::from(p.user_target_min_s),
        }
    }

    /// The pending jobs whose stated targets would count but for their user's cap: beyond the
    /// earliest `user_target_max_pending` of that user's jobs with a target.
    fn beyond_cap(&self, pending: &[PendingJob], history: &History) -> FxHashSet<u32> {
        let cap = self.0.user_target_max_pending as usize;
        let none = FxHashSet::default();
        if cap == 0 || !self.0.qos {
            return none;
        }
        let mut stated: Vec<&PendingJob> = pending
            .iter()
            .filter(|j| qos::states_target(&j.hints))
            .filter(|j| {
                matches!(
                    self.user_targets(j, &none, history),
                    qos::UserTargets::Counted { .. }
                )
            })
            .collect();
        stated.sort_by_key(|j| (j.submit_time, j.job_id));
        let mut seen: FxHashMap<&str, usize> = FxHashMap::default();
        stated
            .into_iter()
            .filter(|j| {
                let n = seen.entry(j.user.as_str()).or_default();
                *n += 1;
                *n > cap
            })
            .map(|j| j.job_id)
            .collect()
    }

    /// A pending job with its prediction and remaining service.
    fn rank<'a>(
        &self,
        predictor: &Predictor<'_, 'a>,
        job: &'a PendingJob,
        classes: &[qos::Class],
        beyond_cap: &FxHashSet<u32>,
        now: i64,
    ) -> Ranked<'a> {
        let (prediction, remaining, per_gpu) = self.pending_remaining(predictor, job, now);
        let gpus = f64::from(job.gpus.max(1));
        // Since its submission or its user's own begin time: a requeued job's earlier runs count
        // as waiting, so it becomes overdue sooner (its waits alone lost on the tune half,
        // docs/policies/cinch.md).
        let waited = (now - job.submit_time.max(job.begin_time.unwrap_or(0))).max(0) as f64;
        let qos = self
            .0
            .qos
            .then(|| {
                let can_have =
                    job.deadline.is_some() || !classes.is_empty() || !job.hints.is_empty();
                can_have.then(|| {
                    let user = self.user_targets(job, beyond_cap, predictor.history());
                    qos::targets(job, classes, &user)
                })
            })
            .flatten()
            .filter(|t| !t.is_empty() || !t.problems.is_empty())
            .map(|targets| {
                let allowance_s = targets.allowance_s(now, remaining).unwrap_or(f64::INFINITY);
                // An allowance is only as good as the run-time prediction under it: from a
                // source that has been off by more than 2x on average here, SWAF would chase
                // targets it cannot judge, and shortest-first serves them better.
                let trusted = prediction.log_error.is_none_or(|e| e <= TRUSTED_LOG_ERROR);
                Box::new(QosRank {
                    urgent: !targets.is_empty()
                        && trusted
                        && allowance_s >= 0.0
                        && allowance_s <= self.0.qos_urgency * remaining,
                    trusted,
                    targets,
                    allowance_s,
                })
            });
        Ranked {
            job,
            overdue: self.0.max_stretch > 0.0 && waited > self.0.max_stretch * remaining,
            qos,
            prediction,
            remaining_s: remaining,
            service: gpus * remaining,
            score: gpus * per_gpu,
        }
    }

    /// Every running job's predicted remaining run seconds, computed on first use.
    fn running_left<'c, 's>(
        &self,
        cell: &'c OnceCell<RunningLeft>,
        snapshot: &'s Snapshot,
        predictor: &Predictor<'_, 's>,
        now: i64,
    ) -> &'c RunningLeft {
        cell.get_or_init(|| {
            RunningLeft(
                snapshot
                    .running
                    .iter()
                    .map(|j| self.running_remaining_s(predictor, j, now))
                    .collect(),
            )
        })
    }

    /// A running job's predicted remaining run seconds, what is expected of its run (its rank
    /// score is worked out from it when asked) and its GPUs.
    fn running_remaining_s<'s>(
        &self,
        predictor: &Predictor<'_, 's>,
        job: &'s RunningJob,
        now: i64,
    ) -> (f64, Expectation, f64) {
        let gpus = f64::from(job.gpus.max(1));
        if let Some(profile) = (!job.hints.is_empty())
            .then(|| qos::profile(&job.hints))
            .flatten()
        {
            // What the job said it has done, else its time in this run.
            let done = profile
                .done_s
                .unwrap_or((now - job.start_time).max(0) as f64);
            let left = (profile.run_s - done).max(1.0);
            return (left, Expectation::Plain(left), gpus);
        }
        let prediction = self.predict(
            predictor,
            &job.user,
            job.name.as_deref(),
            job.gpus,
            job.time_limit_min,
            &job.hints,
        );
        let attained =
            predictor
                .history()
                .attained_service(job.job_id, Some((job.gpus, job.start_time)), now);
        let expectation = self.expect(predictor, prediction, attained / gpus);
        (expectation.remaining(), expectation, gpus)
    }
}

impl Policy for Cinch {
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        rng: &mut SeededRng,
        history: &History,
    ) -> Vec<Decision> {
        let p = &self.0;
        // Elastic jobs sized first: the rest of the round plans the pending ones at their new
        // size, with the GPUs of running ones being resized free.
        let elastic = if p.elastic {
            self.size_elastic(snapshot, &history.predictor(), now, rng)
        } else {
            None
        };
        let snapshot = elastic
            .as_ref()
            .and_then(|e| e.snapshot.as_ref())
            .unwrap_or(snapshot);
        let released: Vec<u32> = elastic
            .as_ref()
            .map(|e| e.resizes.iter().map(|d| d.job_id).collect())
            .unwrap_or_default();
        // Validated when set; a class that no longer parses here would be a bug: no classes.
        let classes = if p.qos {
            qos::parse_classes(&p.qos_classes).unwrap_or_default()
        } else {
            Vec::new()
        };
        // Each user looked up once in the history this round.
        let predictor = history.predictor();
        let beyond_cap = self.beyond_cap(&snapshot.pending, history);
        // Ranked in the snapshot's order (a pass through memory, not a jump to each job in
        // Slurm's order): each job's rank is its own. The order is worked out on positions and
        // the ranked jobs are moved into it once.
        let by_position: Vec<Ranked> = snapshot
            .pending
            .iter()
            .map(|job| self.rank(&predictor, job, &classes, &beyond_cap, now))
            .collect();
        let mut order = slurm_order_indices(&snapshot.pending);
        let urgent = |r: &Ranked| r.qos.as_ref().filter(|q| q.urgent).map(|q| q.allowance_s);
        if p.queue_order || by_position.iter().any(|r| urgent(r).is_some()) {
            // Urgent targets first, smallest allowance first (SWAF); then, in cinch's order,
            // overdue jobs and shorter service. Stable: equals keep Slurm's order.
            let queue_order = p.queue_order;
            let mut keys: Vec<(Option<f64>, bool, f64, usize)> = order
                .iter()
                .map(|&i| {
                    let r = &by_position[i];
                    (urgent(r), r.overdue, r.score, i)
                })
                .collect();
            keys.sort_by(|a, b| match (a.0, b.0) {
                (Some(x), Some(y)) => x.total_cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) if queue_order => b.1.cmp(&a.1).then(a.2.total_cmp(&b.2)),
                (None, None) => std::cmp::Ordering::Equal,
            });
            order = keys.into_iter().map(|k| k.3).collect();
        }
        let mut slots: Vec<Option<Ranked>> = by_position.into_iter().map(Some).collect();
        let mut ranked: Vec<Ranked> = order.into_iter().filter_map(|i| slots[i].take()).collect();

        if site_order(p, &ranked) {
            // Slurm runs jobs by the site's priority less the nice cinch sets: planned in that
            // order, the GPUs free now go to the job the site's fair share, QOS and age put
            // first, never kept from it (by a delay) for a job only cinch's order prefers.
            // Stable: equals keep cinch's order. Each key once (a logarithm and a nice each).
            ranked.sort_by_cached_key(|r| std::cmp::Reverse(effective_priority(p, r)));
        }

        // Each running job's predicted remaining run, once per round, when first needed (a
        // round that starts every pending job at once never needs it).
        let left = OnceCell::new();
        let Plan {
            mut decisions,
            starved,
            ..
        } = self.plan(snapshot, &ranked, &released, &predictor, &left, now);
        // Jobs requeued to make way for waiting ones.
        let mut requeued: Vec<Decision> = Vec::new();
        // Only starving jobs (expected to wait longer than their Gittins size) displace anyone.
        if p.may_requeue() && p.preempt && !starved.is_empty() {
            let cluster = Cluster::new(snapshot);
            let left = self.running_left(&left, snapshot, &predictor, now);
            requeued = self.preemptions(snapshot, &cluster, &ranked, &starved, left);
            requeued.retain(|d| !released.contains(&d.job_id));
        }
        // Dally's network requeues: they make way for the job's own consolidated restart.
        let mut spread: Vec<Decision> = Vec::new();
        if p.may_requeue() && p.requeue_spread && p.consolidate {
            let mut cluster = Cluster::new(snapshot);
            let sizes = Sizes {
                node_gpus: cluster.node_size(),
                rack_gpus: cluster.largest_rack_gpus(),
            };
            let ratio = Dally::run_ratio(history);
            let mut dally = Dally(p.as_dally());
            for job in &snapshot.running {
                if requeued.iter().any(|d| d.job_id == job.job_id) {
                    continue;
                }
                if released.contains(&job.job_id) {
                    continue;
                }
                // One cap per job whatever it is requeued for: the walk's, by its size.
                dally.0.max_preemptions = p.max_restarts(job.gpus, sizes.node_gpus);
                if let Some(d) =
                    dally.consider_requeue(job, &mut cluster, history, ratio, sizes, now)
                {
                    spread.push(d);
                }
            }
        }
        if !requeued.is_empty() || !spread.is_empty() {
            // Plan again with the requeued jobs' GPUs free, so the jobs they make room for are
            // pinned there rather than left to Slurm's first fit.
            let replan = |requeued: &[Decision]| {
                let mut ids: Vec<u32> = requeued.iter().chain(&spread).map(|d| d.job_id).collect();
                ids.extend(&released);
                self.plan(snapshot, &ranked, &ids, &predictor, &left, now)
            };
            let plan = replan(&requeued);
            // A multi-GPU job requeued to make way is requeued only when the plan with its GPUs
            // free starts a job on its nodes now: whole nodes that no waiting job can take yet
            // (the jobs it makes way for wait for a shape it does not complete) would stand
            // idle, and it would pay its restart for nothing. Those kept, the round is planned
            // once more without the rest. (Jobs under `min_gpus` make way for jobs Slurm
            // places, which no pin shows.)
            let starting = plan.started_on();
            let before = requeued.len();
            requeued.retain(|d| {
                snapshot
                    .running
                    .iter()
                    .find(|j| j.job_id == d.job_id)
                    .is_none_or(|j| {
                        j.gpus < p.min_gpus || j.nodes.iter().any(|n| starting.contains(n.as_str()))
                    })
            });
            decisions = if requeued.len() != before {
                replan(&requeued).decisions
            } else {
                plan.decisions
            };
        }
        decisions.extend(requeued);
        decisions.extend(spread);
        if let Some(elastic) = elastic {
            elastic.annotate(&mut decisions, p.ttl_s);
        }
        if p.order_weight > 0 {
            // cinch's order as a bounded adjustment on top of Slurm's own priorities.
            for d in &mut decisions {
                if let Some(priority) = d.priority.take() {
                    d.nice = Some(nice_for(priority, p.order_weight));
                }
            }
        }
        decisions
    }
}

/// One placement pass's outcome.
struct Plan {
    decisions: Vec<Decision>,
    /// The jobs that cannot start and are expected to wait longer than they run (sorted ids).
    starved: Vec<u32>,
    /// Positions in `decisions` of the jobs it starts now, on the nodes they are pinned to
    /// (not those it delays or reserves nodes for, nor those it leaves to Slurm).
    started: Vec<usize>,
}

impl Plan {
    /// The nodes of the jobs the plan starts now.
    fn started_on(&self) -> FxHashSet<&str> {
        self.started
            .iter()
            .filter_map(|&k| self.decisions[k].pin_nodes.as_ref())
            .flatten()
            .map(String::as_str)
            .collect()
    }
}

/// What the elastic sizing decided this round.
struct ElasticRound {
    /// The snapshot with each sized pending job at its new GPU count; `None` when no count
    /// changed (the round's own snapshot then; no copy of a large queue for nothing).
    snapshot: Option<Snapshot>,
    /// Pending elastic jobs: job -> (the GPU count it is given, why).
    sized: HashMap<u32, (u32, String)>,
    /// Requeues of running jobs to restart at a new size.
    resizes: Vec<Decision>,
}

impl ElasticRound {
    /// Puts the sizes on the round's decisions (a sized job with no decision gets one).
    fn annotate(self, decisions: &mut Vec<Decision>, ttl_s: u32) {
        let mut sized = self.sized;
        for d in decisions.iter_mut() {
            if let Some((to, why)) = sized.remove(&d.job_id) {
                d.gpus = Some(to);
                d.reason = format!("{why}; {}", d.reason);
            }
        }
        let mut rest: Vec<(u32, (u32, String))> = sized.into_iter().collect();
        rest.sort_by_key(|(id, _)| *id);
        for (id, (to, why)) in rest {
            decisions.push(Decision {
                gpus: Some(to),
                ..Decision::explain(id, why, ttl_s)
            });
        }
        decisions.extend(self.resizes);
    }
}

impl Cinch {
    /// ONES's search over the elastic jobs' GPU counts (crate::models::elastic), when there are any:
    /// pending jobs are sized into the GPUs free after the non-elastic jobs that would start now,
    /// running ones past their resize interval may be resized when that pays for the restart.
    fn size_elastic<'s>(
        &self,
        snapshot: &'s Snapshot,
        predictor: &Predictor<'_, 's>,
        now: i64,
        rng: &mut SeededRng,
    ) -> Option<ElasticRound> {
        let history = predictor.history();
        use crate::models::elastic::{self, Candidate};
        let p = &self.0;
        let app = |hints: &crate::slurm::job_hints::Hints| {
            elastic::serial_of(hints.get("app").map(String::as_str))
        };
        let pending_range = |job: &PendingJob| {
            elastic::range(&job.hints).filter(|_| {
                job.gpus_per_node.is_none()
                    && left_as_submitted(job, now).is_none()
                    && job.hints.checkpoints()
            })
        };
        let mut jobs: Vec<Candidate> = Vec::new();
        let mut pending_of: Vec<usize> = Vec::new();
        let mut free: u32 = snapshot.nodes.iter().map(|n| n.gpus_free()).sum();
        for job in &snapshot.running {
            let Some(range) = elastic::range(&job.hints) else {
                continue;
            };
            let resizable = job.requeue
                && job.hints.checkpoints()
                && now - job.start_time >= i64::from(p.resize_interval_s);
            if resizable {
                free += job.gpus;
            }
            // What the job reports of its progress, else the usual prediction.
            let (remaining_s, reference) = elastic::reported_remaining(&job.hints)
                .unwrap_or_else(|| (self.running_remaining_s(predictor, job, now).0, job.gpus));
            jobs.push(Candidate {
                job_id: job.job_id,
                range,
                current: job.gpus,
                resizable,
                may_shrink: job.restarts < p.max_resizes,
                remaining_s,
                reference,
                serial: app(&job.hints),
            });
        }
        // No elastic job to size (no running one may be resized, no pending one is elastic):
        // returned before ordering the queue for a search with nothing to do.
        let none_resizable = jobs.iter().all(|j| !j.resizable);
        if none_resizable && !snapshot.pending.iter().any(|j| pending_range(j).is_some()) {
            return None;
        }
        // Non-elastic jobs that would start now, in Slurm's order, keep their GPUs.
        for position in slurm_order_indices(&snapshot.pending) {
            let job = &snapshot.pending[position];
            match pending_range(job) {
                Some(range) => {
                    let attained = history.attained_service(job.job_id, None, now);
                    let reported = elastic::reported_remaining(&job.hints);
                    let (remaining, reference) = reported.unwrap_or_else(|| {
                        (self.pending_remaining(predictor, job, now).1, job.gpus)
                    });
                    // A job requeued to be resized never restarts on fewer GPUs than its
                    // latest run: it waits for them instead.
                    let range = match reported {
                        Some((_, last)) if attained > 0.0 => elastic::Range {
                            min: last.clamp(range.min, range.max),
                            max: range.max,
                        },
                        _ => range,
                    };
                    jobs.push(Candidate {
                        job_id: job.job_id,
                        range,
                        current: 0,
                        resizable: true,
                        may_shrink: true,
                        remaining_s: remaining,
                        reference,
                        serial: app(&job.hints),
                    });
                    pending_of.push(position);
                }
                None if job.gpus <= free => free -= job.gpus,
                None => {}
            }
        }
        let pending_count = pending_of.len();
        // Candidates: running ones first (as pushed), then pending; the search keeps order.
        let params = elastic::SearchParams {
            generations: p.search_generations as usize,
            restart_s: f64::from(p.restart_cost_s),
            ..elastic::SearchParams::default()
        };
        let sizes = elastic::search(&jobs, free, params, rng);
        let total = jobs.len();
        let mut round = ElasticRound {
            snapshot: None,
            sized: HashMap::new(),
            resizes: Vec::new(),
        };
        let running_count = total - pending_count;
        for (k, (&size, job)) in sizes.iter().zip(&jobs).enumerate() {
            let range = job.range;
            let say = |to: u32| {
                format!(
                    "elastic {}-{}: {to} GPUs (ONES search over {total} elastic jobs and {free} \
                     GPUs; predicted {} h left on {to})",
                    range.min,
                    range.max,
                    OneDecimal(job.remaining_on(to) / 3600.0)
                )
            };
            if k < running_count {
                if job.resizable && size != job.current && size > 0 {
                    round.resizes.push(Decision {
                        requeue: Some(true),
                        gpus: Some(size),
                        ..Decision::explain(
                            job.job_id,
                            format!(
                                "{}; resized from {} GPUs by checkpoint and requeue",
                                say(size),
                                job.current
                            ),
                            p.ttl_s,
                        )
                    });
                }
                continue;
            }
            let position = pending_of[k - running_count];
            let asks = snapshot.pending[position].gpus;
            if size > 0 && size != asks {
                round.sized.insert(job.job_id, (size, say(size)));
                let entry = &mut round
                    .snapshot
                    .get_or_insert_with(|| snapshot.clone())
                    .pending[position];
                entry.gpus = size;
                entry.min_nodes = 1;
                entry.max_nodes = None;
            } else {
                // It waits (or keeps its count): said every round, so that a count cinch set
                // stands (a size not renewed is undone, as everything cinch applies).
                let why = format!(
                    "elastic {}-{}: keeps {asks} GPUs{}",
                    range.min,
                    range.max,
                    if size == 0 { ", waits for them" } else { "" }
                );
                round.sized.insert(job.job_id, (asks, why));
            }
        }
        Some(round)
    }

    /// One placement pass over the ranked jobs, with the GPUs of `requeued` running jobs free.
    fn plan<'s>(
        &self,
        snapshot: &'s Snapshot,
        ranked: &[Ranked],
        requeued: &[u32],
        predictor: &Predictor<'_, 's>,
        left: &OnceCell<RunningLeft>,
        now: i64,
    ) -> Plan {
        let history = predictor.history();
        let p = &self.0;
        let ttl = p.ttl_s;
        let mut cluster = Cluster::new(snapshot);
        for job in snapshot
            .running
            .iter()
            .filter(|j| requeued.contains(&j.job_id))
        {
            let mut left = job.gpus;
            for node in &job.nodes {
                left -= cluster.release(node, left);
            }
        }
        let sizes = Sizes {
            node_gpus: cluster.node_size(),
            rack_gpus: cluster.largest_rack_gpus(),
        };
        let mut releases = LazyReleases::new(cluster.free().to_vec());
        let build = |cluster: &Cluster, free: Vec<u32>| {
            let left = self.running_left(left, snapshot, predictor, now);
            Releases::with_ends(snapshot, cluster, free, |k, _| {
                now + left.of(k).ceil() as i64
            })
        };
        let total_gpus = cluster.schedulable_gpus(snapshot);
        // GPUs the jobs behind each job in the order ask for.
        let mut waiting_gpus: u64 = ranked.iter().map(|r| u64::from(r.job.gpus)).sum();
        let mut decisions = Vec::with_capacity(ranked.len());
        let by_site = site_order(p, ranked);
        // Jobs that cannot start now and are expected to wait longer than their Gittins size.
        let mut starved: Vec<u32> = Vec::new();
        let mut started: Vec<usize> = Vec::new();
        // Whether a job of this round already has the reservation.
        let mut reserved = false;
        // What every job's reason says of the run model, written once a round.
        let model_note = predictor.model().map(|m| {
            format!(
                "predictions here order run times with rank correlation {:.2}, so it is judged \
                 by the runs of the {} ended jobs predicted nearest",
                m.rho, m.window
            )
        });
        let starving = |releases: &mut Releases, r: &Ranked| {
            let ideal = sizes.ideal(r.job.gpus);
            let at = releases.expected_at(now, r.job.gpus, ideal, 2);
            // An urgent job starves once its expected wait is longer than its allowance; any
            // other once it is longer than its size as the queue ranks it (its Gittins size, the
            // rank per GPU; its expected remaining run when predictions are taken as they are):
            // where predictions tell little, a new job's expected remaining run is the mean of a
            // heavy-tailed distribution, hours, while the rank takes it for the probably short
            // job it is, and a job the queue puts first would never count as starved.
            let size = r.remaining_s.min(r.score / f64::from(r.job.gpus.max(1)));
            let patience = match r.qos.as_ref().filter(|q| q.urgent) {
                Some(q) => q.allowance_s.min(r.remaining_s),
                None => size,
            };
            match at {
                Some(at) if ((at - now) as f64) <= patience => 0,
                _ => r.job.job_id,
            }
        };
        for r in ranked {
            waiting_gpus -= u64::from(r.job.gpus);
            let job = r.job;
            let urgent_allowance = r.qos.as_ref().filter(|q| q.urgent).map(|q| q.allowance_s);
            let priority = order_priority(p, r);
            // One string per job, built once: this runs for every pending job every round. Room
            // for the run model's note and the rest of a typical reason, so it is not grown.
            let mut order = String::with_capacity(320 + model_note.as_ref().map_or(0, String::len));
            if let Some(q) = &r.qos {
                describe_qos(&mut order, q, r, now);
            }
            if urgent_allowance.is_some() {
                // Said above.
            } else if p.queue_order {
                match &model_note {
                    Some(note) if r.prediction.source != RunSource::Profile => {
                        let _ = write!(
                            order,
                            "predicted {} h (from {}); {note}: {} GPU-hours expected left, \
                             ranked as {} (Gittins); lower first; ",
                            OneDecimal(r.prediction.run_s / 3600.0),
                            r.prediction.source.describe(),
                            OneDecimal(r.service / 3600.0),
                            OneDecimal(r.score / 3600.0),
                        );
                    }
                    _ => {
                        let _ = write!(
                            order,
                            "predicted {} GPU-hours left ({} h on {} GPUs, from {}): shorter \
                             first; ",
                            OneDecimal(r.service / 3600.0),
                            OneDecimal(r.remaining_s / 3600.0),
                            job.gpus,
                            r.prediction.source.describe()
                        );
                    }
                }
            } else {
                order.push_str("Slurm's order; ");
            }
            if by_site {
                let _ = write!(
                    order,
                    "Slurm's priority {} with cinch's nice {} puts it at {}; ",
                    job.site_priority.unwrap_or(0),
                    priority.map_or(0, |q| nice_for(q, p.order_weight)),
                    effective_priority(p, r),
                );
            }
            let explain = |mut order: String, why: &str| {
                order.push_str(why);
                Decision {
                    priority,
                    ..Decision::explain(job.job_id, order, ttl)
                }
            };
            if let Some(why) = left_as_submitted(job, now) {
                decisions.push(explain(order, &why));
                continue;
            }
            if job.gpus < p.min_gpus {
                match cluster.take_best_fit_node(job) {
                    Some(i) => releases.take(&[(i, job.gpus)], now + r.remaining_s.ceil() as i64),
                    None => starved.push(starving(releases.get(&cluster, build), r)),
                }
                decisions.push(explain(order, "Slurm places it"));
                continue;
            }
            let before = cluster.save();
            let decision = match cluster.place(job, now, true) {
                Ok((placement, reason)) => {
                    let ideal = sizes.ideal(job.gpus);
                    let level = ideal.level_of(placement.gpus_on.len() as u32, placement.racks);
                    let wait = if p.consolidate && level > 0 {
                        let share = waiting_gpus as f64 / total_gpus.max(1) as f64;
                        let releases = releases.get(&cluster, build);
                        self.worth_waiting(job, r, ideal, level, releases, history, share, now)
                    } else {
                        Err(String::new())
                    };
                    match wait {
                        Ok((until, why)) => {
                            cluster.restore(before);
                            let reservation = (p.reserve && !reserved)
                                .then(|| {
                                    self.reservation(
                                        job,
                                        &cluster,
                                        releases.get(&cluster, build),
                                        now,
                                    )
                                })
                                .flatten();
                            match reservation {
                                Some((nodes, at)) => {
                                    reserved = true;
                                    self.reserve_decision(job, nodes, at, order, &why)
                                }
                                // A begin time that passes between rounds lets Slurm start
                                // the job on whatever is free then: at once on its shape if the
                                // release came on time, spread if it came late (predictions are
                                // off by 2x). Held to the next round, it is pinned on its shape.
                                None => {
                                    let held = !p.start_at_release && until < now + RECHECK_S;
                                    let why = if held {
                                        format!(
                                            "{why}; not started before it is looked at again \
                                             in {RECHECK_S} s, so never spread"
                                        )
                                    } else {
                                        why
                                    };
                                    Decision {
                                        delay_until: Some(if held { now + RECHECK_S } else { until }),
                                        ..explain(order, &why)
                                    }
                                }
                            }
                        }
                        Err(why_not) => {
                            let taken: Vec<(usize, u32)> = placement
                                .gpus_on
                                .iter()
                                .filter_map(|(n, g)| Some((cluster.node_index(n)?, *g)))
                                .collect();
                            releases.take(&taken, now + r.remaining_s.ceil() as i64);
                            order.push_str(&reason);
                            if !why_not.is_empty() {
                                order.push_str("; ");
                                order.push_str(&why_not);
                            }
                            let mut d = pin_decision(job, placement, order, ttl);
                            d.priority = priority;
                            started.push(decisions.len());
                            d
                        }
                    }
                }
                Err(why) => {
                    cluster.restore(before);
                    starved.push(starving(releases.get(&cluster, build), r));
                    // The GPUs free now went to jobs ahead of it in the plan; if Slurm still
                    // finds enough (jobs ahead may not start), it would spread a job that is
                    // expected to lose to that: keep it until the next round looks again.
                    let sens = p
                        .consolidate
                        .then(|| self.sensitivity(job, 2, history))
                        .filter(|sens| sens.slowdown >= p.min_slowdown);
                    let sensitive = sens.is_some();
                    let reservation = (sensitive && p.reserve && !reserved)
                        .then(|| {
                            self.reservation(job, &cluster, releases.get(&cluster, build), now)
                        })
                        .flatten();
                    // Whether or not Slurm sees room for it now, GPUs may free before the
                    // next round: a job that must not start spread waits for that round.
                    if let Some((nodes, at)) = reservation {
                        reserved = true;
                        self.reserve_decision(
                            job,
                            nodes,
                            at,
                            order,
                            "waits for its best shape, the first in cinch's order to",
                        )
                    } else if let Some(sens) = sens {
                        Decision {
                            delay_until: Some(now + RECHECK_S),
                            ..explain(
                                order,
                                &format!(
                                    "waits: no room for its best shape now; not started spread \
                                     (slowdown {:.2}, {}), looked at again in {RECHECK_S} s",
                                    sens.slowdown, sens.source
                                ),
                            )
                        }
                    } else {
                        explain(order, &why)
                    }
                }
            };
            decisions.push(decision);
        }

        starved.retain(|&id| id != 0);
        starved.sort_unstable();
        Plan {
            decisions,
            starved,
            started,
        }
    }
}

/// The Slurm priority of the job cinch reserves for: above every job it orders.
pub const RESERVED_PRIORITY: u32 = 4 * TOP_PRIORITY;

impl Cinch {
    /// The nodes a waiting job's best shape is expected to free on first (by the release model)
    /// and when; `None` when no release frees one.
    fn reservation(
        &self,
        job: &PendingJob,
        cluster: &Cluster,
        releases: &mut Releases,
        now: i64,
    ) -> Option<(Vec<String>, i64)> {
        if job.gpus_per_node.is_some() || left_as_submitted(job, now).is_some() {
            return None;
        }
        let sizes = Sizes {
            node_gpus: cluster.node_size(),
            rack_gpus: cluster.largest_rack_gpus(),
        };
        let (at, positions) = releases.first_best_shape(now, job.gpus, sizes.ideal(job.gpus))?;
        let mut names: Vec<String> = positions
            .iter()
            .map(|&i| cluster.name(i).to_string())
            .collect();
        names.sort();
        Some((names, at))
    }

    /// The decision that reserves `nodes` for `job`: pinned there, first in Slurm's order.
    fn reserve_decision(
        &self,
        job: &PendingJob,
        nodes: Vec<String>,
        at: i64,
        mut order: String,
        why: &str,
    ) -> Decision {
        let _ = write!(
            order,
            "{why}; reserved: pinned to {} (expected free at {}) and first in Slurm's order, so \
             backfill keeps later jobs off those GPUs",
            nodes.join(","),
            crate::slurm::slurm_time::format_time(at)
        );
        let count = nodes.len() as u32;
        Decision {
            node_count: (count != job.min_nodes).then_some(count),
            pin_nodes: Some(nodes),
            priority: Some(RESERVED_PRIORITY),
            ..Decision::explain(job.job_id, order, self.0.ttl_s)
        }
    }

    /// Whether a job whose best shape is not free should wait for it: only while the wait the
    /// running jobs' predicted ends give is shorter than the extra run time spread would cost
    /// (and at most `max_wait_s` since it was queued). `Ok((until, why))` to wait, `Err(why)`
    /// to take the spread placement now.
    #[allow(clippy::too_many_arguments)]
    fn worth_waiting(
        &self,
        job: &PendingJob,
        r: &Ranked,
        ideal: Ideal,
        level: usize,
        releases: &mut Releases,
        history: &History,
        waiting_share: f64,
        now: i64,
    ) -> Result<(i64, String), String> {
        let sens = self.sensitivity(job, level, history);
        if sens.slowdown < self.0.min_slowdown {
            return Err(format!(
                "compute-bound (slowdown {:.2} spread, {}): not worth waiting",
                sens.slowdown, sens.source
            ));
        }
        // Spread, the job runs remaining / (1 - slowdown): that much longer than consolidated,
        // and the GPU-seconds it wastes delay every job waiting behind it by their share of the
        // cluster. While it waits, others use the GPUs that free: its wait costs only itself.
        let own_s = r.remaining_s * sens.slowdown / (1.0 - sens.slowdown).max(0.05);
        let cost_s = if self.0.wait_always {
            f64::INFINITY
        } else {
            own_s * (1.0 + waiting_share)
        };
        match releases.expected_at(now, job.gpus, ideal, 0) {
            Some(at)
                if at > now
                    && r.qos.as_ref().is_some_and(|q| {
                        !q.targets.is_empty()
                            && q.allowance_s >= 0.0
                            && (at - now) as f64 > q.allowance_s
                    }) =>
            {
                Err(format!(
                    "spread: waiting {} s for a consolidated placement would miss its QoS target",
                    at - now
                ))
            }
            Some(at)
                if at > now
                    && ((at - now) as f64) < cost_s
                    && at - now <= i64::from(self.0.max_wait_s) =>
            {
                Ok((
                at,
                format!(
                    // The time, not the seconds to it: a reason that changes every round
                    // would be a new decision in the log every round.
                    "waits for a consolidated placement, expected free at {}; spread would \
                     cost it ~{cost_s:.0} s (slowdown {:.2}, {})",
                    crate::slurm::slurm_time::format_time(at),
                    sens.slowdown,
                    sens.source
                ),
            ))
            }
            Some(at) if at > now => Err(format!(
                "spread: a consolidated placement is expected only in {} s, more than the ~{cost_s:.0} s spread costs or the {} s wait allowed",
                at - now,
                self.0.max_wait_s
            )),
            _ => Err("spread: no consolidated placement is expected to free".into()),
        }
    }

    /// A job's expected slowdown on a placement of `level` (1: several nodes of one rack, 2:
    /// across racks). What was observed on this cluster, under its current congestion, comes
    /// before the quiet-network table: runs of the same application (`app=` hint), of the same
    /// job, of every job on as many GPUs; then the application's measured slowdown; then the
    /// default. Across racks, cross-rack runs are used where enough were seen.
    fn sensitivity(&self, job: &PendingJob, level: usize, history: &History) -> Sensitivity {
        let app = job.hints.get("app").map(|a| a.to_ascii_lowercase());
        if !history.knows_slowdowns() {
            // Nothing learned yet: the keys below would only be built to miss.
            return self.table_or_default(app);
        }
        // Only a named job has runs of its own to compare (the key is built only then).
        let key = job
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(|name| crate::learn::history::job_key(&job.user, Some(name), job.gpus));
        // (history key, runs of each kind needed, what it is): descriptions are built only for
        // the one that answers, as this runs for many pending jobs every round.
        enum Class {
            App,
            Similar,
            Gpus,
        }
        // Runs of different jobs compare by run time over time limit: only where limits
        // predict run times (within 2x on average here), else that ratio is noise. Runs of the
        // same job compare directly, but only a named job has runs of its own to compare.
        let ratios_tell = history
            .limit_log_error()
            .is_some_and(|e| e <= TRUSTED_LOG_ERROR);
        let app_key = app
            .as_ref()
            .filter(|_| ratios_tell)
            .map(|app| format!("app={app}"));
        let gpus_key = ratios_tell.then(|| format!("gpus={}", job.gpus));
        let classes = [
            app_key.as_deref().map(|k| (k, MIN_CLASS_RUNS, Class::App)),
            key.as_deref().map(|k| (k, 1, Class::Similar)),
            gpus_key
                .as_deref()
                .map(|k| (k, MIN_CLASS_RUNS, Class::Gpus)),
        ];
        for (class, min_runs, what) in classes.into_iter().flatten() {
            let learned = if level >= 2 {
                history
                    .learned_cross_rack_slowdown(class, min_runs)
                    .map(|s| (s, " across racks"))
                    .or_else(|| {
                        history
                            .learned_class_slowdown(class, min_runs)
                            .map(|s| (s, ""))
                    })
            } else {
                history
                    .learned_class_slowdown(class, min_runs)
                    .map(|s| (s, ""))
            };
            if let Some((slowdown, across)) = learned {
                let what = match what {
                    Class::App => class.to_string(),
                    Class::Similar => "similar jobs".to_string(),
                    Class::Gpus => format!("{}-GPU jobs", job.gpus),
                };
                return Sensitivity {
                    slowdown,
                    source: format!("{what}, learned here{across}"),
                };
            }
        }
        self.table_or_default(app)
    }

    /// A job's slowdown from its application's measured table entry, else the default.
    fn table_or_default(&self, app: Option<String>) -> Sensitivity {
        if let Some(slowdown) = app.as_deref().and_then(super::app_slowdown) {
            return Sensitivity {
                slowdown,
                source: format!("app={}", app.unwrap_or_default()),
            };
        }
        Sensitivity {
            slowdown: self.0.default_slowdown,
            source: "default".into(),
        }
    }

    /// Walk running opted-in jobs and waiting jobs by remaining service over the cluster's GPUs:
    /// a running job that no longer fits behind waiting jobs with `preempt_ratio` times less
    /// service is requeued.
    fn preemptions(
        &self,
        snapshot: &Snapshot,
        cluster: &Cluster,
        ranked: &[Ranked],
        starved: &[u32],
        left: &RunningLeft,
    ) -> Vec<Decision> {
        let p = &self.0;
        let mut capacity = cluster.schedulable_gpus(snapshot);
        // (service, waiting, job id, GPUs, remaining s, restarts)
        let mut walk: Vec<(f64, bool, u32, u32, f64, u32)> = Vec::new();
        let node_gpus = cluster.node_size();
        for (k, job) in snapshot.running.iter().enumerate() {
            let remaining = left.of(k);
            if job.requeue
                && job.hints.checkpoints()
                && job.restarts < p.max_restarts(job.gpus, node_gpus)
            {
                walk.push((
                    left.score(k),
                    false,
                    job.job_id,
                    job.gpus,
                    remaining,
                    job.restarts,
                ));
            } else {
                capacity = capacity.saturating_sub(u64::from(job.gpus));
            }
        }
        for r in ranked {
            if starved.binary_search(&r.job.job_id).is_ok() {
                // An urgent job goes first in the walk, as in the queue.
                let urgent = r.qos.as_ref().is_some_and(|q| q.urgent);
                let service = if urgent { 0.0 } else { r.score };
                walk.push((service, true, r.job.job_id, r.job.gpus, r.remaining_s, 0));
            }
        }
        walk.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut decisions = Vec::new();
        // The largest service among waiting jobs that took GPUs so far in the walk.
        // A multi-GPU job gives up whole nodes that it needs back whole: only waiting multi-GPU
        // jobs, which take nodes alike, may displace it (small ones would fragment them).
        // (largest rank, longest expected remaining run) among them.
        let mut displacing: Option<(f64, f64)> = None;
        let mut displacing_multi: Option<(f64, f64)> = None;
        let raise = |d: &mut Option<(f64, f64)>, service: f64, remaining: f64| {
            *d = Some(d.map_or((service, remaining), |(s, r)| {
                (s.max(service), r.max(remaining))
            }))
        };
        // What a requeue costs the job: its restart and checkpoint reload, and Slurm's wait
        // before it may start again (the site's credential lifetime + 1).
        let cost = f64::from(p.restart_cost_s) + f64::from(snapshot.requeue_delay_s);
        for (service, waiting, id, gpus, remaining, restarts) in walk {
            if u64::from(gpus) <= capacity {
                capacity -= u64::from(gpus);
                if waiting {
                    raise(&mut displacing, service, remaining);
                    if gpus >= p.min_gpus {
                        raise(&mut displacing_multi, service, remaining);
                    }
                }
                continue;
            }
            let ahead = if gpus >= p.min_gpus {
                displacing_multi
            } else {
                displacing
            };
            let Some((ahead, ahead_remaining)) = ahead else {
                continue;
            };
            // It pays when the jobs it makes way for are expected to end sooner than it would,
            // by more than the requeue costs it (SRPT's exchange argument, on expectations).
            if waiting || service < p.preempt_ratio * ahead || remaining - ahead_remaining < cost {
                continue;
            }
            decisions.push(Decision {
                requeue: Some(true),
                ..Decision::explain(
                    id,
                    format!(
                        "requeued: ranked {:.1} (about {:.1} h left), waiting jobs ranked \
                         {:.1} or less need its GPUs; restart {} of at most {}",
                        service / 3600.0,
                        remaining / 3600.0,
                        ahead / 3600.0,
                        restarts + 1,
                        p.max_restarts(gpus, node_gpus)
                    ),
                    p.ttl_s,
                )
            });
        }
        decisions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parameters these tests order by: priorities set outright (`order_weight=0`), whose
    /// numbers show cinch's order directly; the default expresses the same order as bounded
    /// `nice` values ([`nice_for`], tested below).
    fn absolute() -> CinchParams {
        CinchParams {
            order_weight: 0,
            ..CinchParams::default()
        }
    }
    use crate::wire::snapshot::{NodeState, RunningJob};
    use crate::testing::{node, pending, snapshot};

    fn running(id: u32, node_name: &str, gpus: u32, start: i64, limit_min: u32) -> RunningJob {
        RunningJob {
            job_id: id,
            user: "ann".into(),
            name: Some(format!("r{id}")),
            nodes: vec![node_name.into()],
            gpus,
            start_time: start,
            time_limit_min: Some(limit_min),
            ..RunningJob::default()
        }
    }

    fn decide(params: CinchParams, snap: &Snapshot) -> Vec<Decision> {
        Cinch(params).decide(snap, snap.time, &mut SeededRng::new(1), &History::default())
    }

    fn find(d: &[Decision], id: u32) -> &Decision {
        d.iter().find(|d| d.job_id == id).expect("decided")
    }

    /// 4 nodes x 4 GPUs in racks {n1,n2}, {n3,n4}; 3 GPUs busy on n1 and n2 until ~5000 s,
    /// 2 busy on n3 until ~`n3_end`; a bert job asks for 8 GPUs at t=10.
    fn no_rack_holds_it(n3_limit_min: u32) -> Snapshot {
        let mut nodes = vec![
            node("n1", 4, 3, "r1"),
            node("n2", 4, 3, "r1"),
            node("n3", 4, 2, "r2"),
            node("n4", 4, 0, "r2"),
        ];
        nodes[0].state = NodeState::Mixed;
        let mut bert = pending(4, 8);
        bert.hints.insert("app".into(), "bert".into());
        bert.time_limit_min = Some(34);
        bert.submit_time = 10;
        let mut snap = snapshot(nodes, vec![bert]);
        snap.time = 10;
        snap.running = vec![
            running(1, "n1", 3, 0, 167),
            running(2, "n2", 3, 0, 167),
            running(3, "n3", 2, 0, n3_limit_min),
        ];
        snap
    }

    #[test]
    fn a_sensitive_job_waits_for_its_shape_with_a_reservation() {
        // By default a network-sensitive job waits for its best shape, and the first such job
        // is pinned where that shape frees first (job 3 is expected to end at 17 min x 60 x 0.5
        // = 510 s, freeing n3+n4), first in Slurm's order: Slurm's backfill reserves them.
        let d = decide(absolute(), &no_rack_holds_it(17));
        let bert = find(&d, 4);
        assert_eq!(
            bert.pin_nodes,
            Some(vec!["n3".to_string(), "n4".to_string()]),
            "{bert:?}"
        );
        assert_eq!(bert.priority, Some(RESERVED_PRIORITY));
        assert_eq!(bert.delay_until, None);
        assert!(
            bert.reason
                .contains("reserved: pinned to n3,n4 (expected free at 1970-01-01T00:08:30Z)"),
            "{}",
            bert.reason
        );
        // Even when its shape is expected only at 5010 s.
        let d = decide(absolute(), &no_rack_holds_it(167));
        let bert = find(&d, 4);
        assert_eq!(bert.pin_nodes.as_ref().map(Vec::len), Some(2), "{bert:?}");
        assert_eq!(bert.priority, Some(RESERVED_PRIORITY));
    }

    #[test]
    fn a_job_waiting_for_its_shape_starts_at_its_release_or_after_the_next_round() {
        // Job 3 is expected to end at 1 min x 60 x 0.5 = 30 s, 20 s from now. By default bert's
        // begin time is then: Slurm starts it on whatever is free at 30 s, spread if job 3 ends
        // late. With `start_at_release` off it waits for the round after, which pins it where
        // its shape is free by then.
        let no_reservation = CinchParams {
            reserve: false,
            ..absolute()
        };
        for (start_at_release, begin) in [(true, 30), (false, 10 + RECHECK_S)] {
            let params = CinchParams {
                start_at_release,
                ..no_reservation.clone()
            };
            let d = decide(params, &no_rack_holds_it(1));
            let bert = find(&d, 4);
            assert!(bert.pin_nodes.is_none(), "{bert:?}");
            assert_eq!(bert.delay_until, Some(begin), "{bert:?}");
            assert!(
                bert.reason.contains(
                    "waits for a consolidated placement, expected free at 1970-01-01T00:00:30Z"
                ),
                "{}",
                bert.reason
            );
            assert_eq!(
                bert.reason.contains("not started before it is looked at again in 60 s"),
                !start_at_release,
                "{}",
                bert.reason
            );
        }
    }

    #[test]
    fn a_sensitive_job_waits_for_its_shape_only_when_the_wait_is_shorter_than_spreading_costs() {
        // With `wait_always` off (and no reservation): expected run 34 min x 0.5 (no history) =
        // 1020 s; spread across racks bert loses 0.487 (app table): 1020 x 0.487 / 0.513 = 968
        // s. Job 3 is expected to end at 17 min x 60 x 0.5 = 510 s, freeing n3+n4: 500 s of
        // waiting beats spreading.
        let pays = CinchParams {
            wait_always: false,
            reserve: false,
            ..absolute()
        };
        let d = decide(pays.clone(), &no_rack_holds_it(17));
        let bert = find(&d, 4);
        assert_eq!(bert.delay_until, Some(510), "{bert:?}");
        assert!(bert.pin_nodes.is_none());
        assert!(
            bert.reason.contains(
                "waits for a consolidated placement, expected free at 1970-01-01T00:08:30Z"
            ),
            "times in reasons read as dates: {}",
            bert.reason
        );
        // Job 3 expected at 5010 s: waiting 5000 s loses to the 968 s spreading costs.
        let d = decide(pays, &no_rack_holds_it(167));
        let bert = find(&d, 4);
        assert_eq!(bert.delay_until, None, "{bert:?}");
        assert_eq!(bert.pin_nodes.as_ref().map(Vec::len), Some(4), "{bert:?}");
        assert!(bert
            .reason
            .contains("spread: a consolidated placement is expected only in"));
        // Without the consolidation part it never waits.
        let params = CinchParams {
            consolidate: false,
            ..absolute()
        };
        let d = decide(params, &no_rack_holds_it(17));
        assert_eq!(find(&d, 4).delay_until, None);
    }

    /// A history whose 60 ended jobs ran `run(i)` seconds under limits of `limit(i)` minutes.
    fn learned(run: impl Fn(u32) -> f64, limit: impl Fn(u32) -> u32) -> History {
        let mut h = History::default();
        for i in 0..60u32 {
            let name = format!("once-{i}");
            h.import_run(
                "ann",
                Some(&name),
                4,
                Some(f64::from(limit(i)) * 60.0),
                run(i),
            );
        }
        h
    }

    #[test]
    fn the_queue_order_follows_predictions_when_they_tell_and_attained_service_when_not() {
        // Three 4-GPU jobs wait on a full node: job 1 asks for 600 min, job 2 for 10 and
        // job 3 for 10 but has already run 2 h before a requeue.
        let job = |id, limit| {
            let mut j = pending(id, 4);
            j.user = "ann".into();
            j.time_limit_min = Some(limit);
            j.submit_time = 1_000_000;
            j
        };
        let mut snap = snapshot(
            crate::testing::cluster(1, 8, 1),
            vec![job(1, 600), job(2, 10), job(3, 10)],
        );
        for n in &mut snap.nodes {
            n.gpus_alloc = 8;
            n.state = NodeState::Allocated;
        }
        let ranks = |h: &History| {
            let d = Cinch(absolute()).decide(&snap, snap.time, &mut SeededRng::new(1), h);
            (1..=3)
                .map(|id| find(&d, id).priority.unwrap())
                .collect::<Vec<u32>>()
        };
        // Limits that tell: every job ran a tenth of its limit. Shorter predicted first.
        let telling = learned(|i| f64::from(10 + i * 50) * 6.0, |i| 10 + i * 50);
        let model = telling.run_model().expect("60 ended jobs");
        assert!(model.informativeness > 0.9, "{model:?}");
        let p = ranks(&telling);
        assert!(p[1] > p[0], "{p:?}");
        // Limits that tell nothing: runs unrelated to limits. Every new job ranks alike (first
        // come, first served among them, as Tiresias's first queue).
        let mute = learned(|i| f64::from((i * 37) % 60 + 1) * 600.0, |i| 10 + i * 50);
        let model = mute.run_model().expect("60 ended jobs");
        assert_eq!(model.informativeness, 0.0, "{model:?}");
        let p = ranks(&mute);
        assert_eq!(p[0], p[1], "{p:?}");
    }

    #[test]
    fn one_decimal_reads_as_the_float_formatter_writes() {
        for x in [0.0, 0.04, 0.26, 1.0, 12.34, 99.96, 1234.5678, -3.21, 7.0e9] {
            assert_eq!(OneDecimal(x).to_string(), format!("{x:.1}"), "{x}");
        }
        assert_eq!(OneDecimal(f64::INFINITY).to_string(), "inf");
    }

    #[test]
    fn shorter_predicted_service_gets_the_higher_priority_and_waiting_long_overrides_it() {
        let job = |id, gpus, limit| {
            let mut j = pending(id, gpus);
            j.time_limit_min = Some(limit);
            j.submit_time = 1_000_000;
            j
        };
        let jobs = vec![job(1, 4, 600), job(2, 4, 10), job(3, 8, 10)];
        let mut snap = snapshot(crate::testing::cluster(1, 8, 1), jobs);
        for n in &mut snap.nodes {
            n.gpus_alloc = 8;
            n.state = NodeState::Allocated;
        }
        let d = decide(absolute(), &snap);
        let p = |id| find(&d, id).priority.unwrap();
        // 4 GPUs x 5 min < 8 GPUs x 5 min < 4 GPUs x 300 min.
        assert!(p(2) > p(3) && p(3) > p(1), "{d:?}");
        // The long job has waited more than max_stretch (3) times its predicted run (300 min)
        // when the short ones arrive: it goes first.
        snap.time = snap.pending[0].submit_time + 901 * 60;
        snap.pending[1].submit_time = snap.time;
        snap.pending[2].submit_time = snap.time;
        let d = decide(absolute(), &snap);
        let p = |id| find(&d, id).priority.unwrap();
        assert!(p(1) > p(2) && p(1) > p(3), "{d:?}");
        // queue_order off: Slurm's order, no priorities.
        let params = CinchParams {
            queue_order: false,
            ..absolute()
        };
        assert!(decide(params, &snap).iter().all(|d| d.priority.is_none()));
    }

    /// By default cinch's order is a bounded `nice` on top of the site's own priorities: the same
    /// order as the priorities it would set outright, within `order_weight` points either way,
    /// and no priority set at all.
    #[test]
    fn by_default_the_order_is_a_bounded_nice_that_keeps_it() {
        let job = |id, gpus, limit| {
            let mut j = pending(id, gpus);
            j.time_limit_min = Some(limit);
            j.submit_time = 1_000_000;
            j
        };
        let mut snap = snapshot(
            crate::testing::cluster(1, 8, 1),
            vec![job(1, 4, 600), job(2, 4, 10), job(3, 8, 10), job(4, 1, 60)],
        );
        for n in &mut snap.nodes {
            n.gpus_alloc = 8;
            n.state = NodeState::Allocated;
        }
        let outright = decide(absolute(), &snap);
        let default = decide(CinchParams::default(), &snap);
        assert!(default.iter().all(|d| d.priority.is_none()), "{default:?}");
        let w = DEFAULT_ORDER_WEIGHT as i32;
        let nice = |id| find(&default, id).nice.unwrap();
        let prio = |id| find(&outright, id).priority.unwrap();
        for a in 1..=4 {
            assert!((-w..=0).contains(&nice(a)), "{}", nice(a));
            for b in 1..=4 {
                if prio(a) > prio(b) {
                    assert!(nice(a) < nice(b), "jobs {a}, {b}: {default:?}");
                }
            }
        }
        // The weight is the admin's: a smaller one moves jobs less.
        let light = CinchParams {
            order_weight: 100,
            ..CinchParams::default()
        };
        let d = decide(light, &snap);
        assert!(
            d.iter().all(|d| d.nice.is_some_and(|n| n.abs() <= 100)),
            "{d:?}"
        );
    }

    /// With the site's priorities reported, the round is planned in the order Slurm will run:
    /// the site's priority less cinch's nice. A job the site's fair share puts far ahead gets the
    /// free GPUs although cinch prefers the other (shorter) one; when the site cannot tell them
    /// apart, cinch's order decides.
    #[test]
    fn the_free_gpus_go_first_to_the_job_the_site_priority_puts_first() {
        let job = |id, limit, site| {
            let mut j = pending(id, 8);
            j.time_limit_min = Some(limit);
            j.submit_time = 1_000_000 + i64::from(id);
            j.site_priority = Some(site);
            j
        };
        let mut snap = snapshot(
            crate::testing::cluster(2, 8, 2),
            vec![job(1, 10, 10_000), job(2, 600, 60_000)],
        );
        snap.nodes[0].gpus_alloc = 8;
        snap.nodes[0].state = NodeState::Allocated;
        snap.time = 1_000_100;
        let d = decide(CinchParams::default(), &snap);
        let (short, long) = (find(&d, 1), find(&d, 2));
        assert!(short.nice.unwrap() < long.nice.unwrap(), "{d:?}");
        // long starts now on the free node; short waits (reserved for after it).
        let starts = |d: &Decision| d.reason.contains("consolidated") && d.delay_until.is_none();
        assert!(starts(long) && !starts(short), "{d:?}");
        assert!(
            long.reason
                .contains("Slurm's priority 60000 with cinch's nice"),
            "{}",
            long.reason
        );
        // Equal site priorities: the shorter job, cinch's choice, gets them.
        snap.pending[1].site_priority = Some(10_000);
        let d = decide(CinchParams::default(), &snap);
        assert!(starts(find(&d, 1)) && !starts(find(&d, 2)), "{d:?}");
        // An agent that does not report site priorities: cinch's own order, as before.
        snap.pending[1].site_priority = None;
        snap.pending[1].priority = 60_000;
        let d = decide(CinchParams::default(), &snap);
        assert!(starts(find(&d, 1)) && !starts(find(&d, 2)), "{d:?}");
    }

    #[test]
    fn nice_for_keeps_the_bands_in_order_within_the_weight() {
        let w = 10_000;
        let order = [
            RESERVED_PRIORITY,
            urgent_priority(60.0),
            urgent_priority(86_400.0),
            priority_for(1e6, true),
            priority_for(0.0, false),
            priority_for(3_600.0, false),
            priority_for(3_700.0, false),
            priority_for(1e7, false),
            priority_for(1e12, false),
        ];
        let nices: Vec<i32> = order.iter().map(|&p| nice_for(p, w)).collect();
        assert_eq!(nices[0], -10_000, "{nices:?}");
        assert!(nices.windows(2).all(|n| n[0] < n[1]), "{nices:?}");
        assert!(nices.iter().all(|n| (-10_000..=0).contains(n)), "{nices:?}");
        assert_eq!(nice_for(RESERVED_PRIORITY, 1), -1);
        assert!((-1..=0).contains(&nice_for(priority_for(5.0, false), 1)));
        // Beyond what priority/basic can take, the weight is capped.
        assert_eq!(nice_for(RESERVED_PRIORITY, 1_000_000), -60_000);
    }

    /// A full 8-GPU node; three 4-GPU jobs submitted at t=0 wait: a short one (10 min limit),
    /// and two long ones (600 min), the second with a QoS target given as `hint`.
    fn swaf_case(hint: (&str, &str), now: i64) -> Snapshot {
        let job = |id, limit| {
            let mut j = pending(id, 4);
            j.time_limit_min = Some(limit);
            j.submit_time = 0;
            j
        };
        let mut targeted = job(3, 600);
        targeted.hints.insert(hint.0.into(), hint.1.into());
        let mut snap = snapshot(
            crate::testing::cluster(1, 8, 1),
            vec![job(1, 10), job(2, 600), targeted],
        );
        for n in &mut snap.nodes {
            n.gpus_alloc = 8;
            n.state = NodeState::Allocated;
        }
        snap.time = now;
        snap
    }

    #[test]
    fn a_job_whose_slack_runs_short_goes_ahead_of_jobs_without_a_target_smallest_slack_first() {
        // Predicted run of the long jobs: 600 min x 0.5 = 5 h. Due at 11 h: 6 h of slack at
        // t=0, more than its 5 h run (qos_urgency 1): usual order, behind the short job.
        let d = decide(targets_counted(), &swaf_case(("turnaround", "11:00:00"), 0));
        let p = |d: &[Decision], id| find(d, id).priority.unwrap();
        assert!(p(&d, 1) > p(&d, 3), "{d:?}");
        let reason = &find(&d, 3).reason;
        assert!(reason.contains("QoS target: finish by 1970-01-01T11:00:00Z (hint turnaround)"));
        assert!(
            reason.contains("slack 06:00:00") && reason.contains("usual order"),
            "{reason}"
        );
        // Two hours later its slack (4 h) is below its run: it goes ahead of everyone.
        let d = decide(
            targets_counted(),
            &swaf_case(("turnaround", "11:00:00"), 7200),
        );
        assert!(p(&d, 3) > p(&d, 1) && p(&d, 3) > p(&d, 2), "{d:?}");
        let reason = &find(&d, 3).reason;
        assert!(
            reason.contains("slack 04:00:00") && reason.contains("urgent"),
            "{reason}"
        );
        // Two urgent jobs: the smaller slack first.
        let mut snap = swaf_case(("turnaround", "11:00:00"), 7200);
        snap.pending[1].hints.insert("due".into(), "36000".into());
        let d = decide(targets_counted(), &snap);
        assert!(p(&d, 2) > p(&d, 3), "{d:?}");
        // A target that can no longer be met is said and not chased.
        let d = decide(targets_counted(), &swaf_case(("due", "3600"), 0));
        assert!(p(&d, 1) > p(&d, 3), "{d:?}");
        let reason = &find(&d, 3).reason;
        assert!(
            reason.contains("misses by 04:00:00") && reason.contains("not chased"),
            "{reason}"
        );
        // qos off: the target is not looked at.
        let params = CinchParams {
            qos: false,
            ..targets_counted()
        };
        let d = decide(params, &swaf_case(("turnaround", "11:00:00"), 7200));
        assert!(p(&d, 1) > p(&d, 3), "{d:?}");
        assert!(!find(&d, 3).reason.contains("QoS"));
        // Users' targets not counted (the default): not chased, and the job's reason says why.
        let d = decide(absolute(), &swaf_case(("turnaround", "11:00:00"), 7200));
        assert!(p(&d, 1) > p(&d, 3), "{d:?}");
        let reason = &find(&d, 3).reason;
        assert!(
            reason.contains("QoS hint turnaround not counted: this site does not count targets")
                && !reason.contains("urgent"),
            "{reason}"
        );
    }

    /// The settings under which users' stated targets count, as a site that allows them has.
    fn targets_counted() -> CinchParams {
        CinchParams {
            user_targets: true,
            ..absolute()
        }
    }

    #[test]
    fn stated_targets_count_only_where_the_admin_allows_within_the_floor_and_the_cap() {
        let urgent = |params: CinchParams, snap: &Snapshot| {
            let d = decide(params, snap);
            let (p3, p1) = (find(&d, 3).priority, find(&d, 1).priority);
            (p3 > p1, find(&d, 3).reason.clone())
        };
        let mut snap = swaf_case(("turnaround", "11:00:00"), 7200);
        snap.pending[2].account = Some("physics".into());
        snap.pending[2].qos = Some("normal".into());
        // Listed by account, or by QOS: counted; another account: not.
        let by_account = CinchParams {
            user_target_accounts: vec!["physics".into()],
            ..absolute()
        };
        assert!(urgent(by_account, &snap).0);
        let by_qos = CinchParams {
            user_target_qos: vec!["normal".into()],
            ..absolute()
        };
        assert!(urgent(by_qos, &snap).0);
        let other = CinchParams {
            user_target_accounts: vec!["chemistry".into()],
            ..absolute()
        };
        let (ahead, reason) = urgent(other, &snap);
        assert!(
            !ahead && reason.contains("only in some accounts and QOS"),
            "{reason}"
        );
        // A one-minute turnaround counted as the site's floor of 20 h: not urgent at t=2 h.
        let tight = swaf_case(("turnaround", "1:00"), 7200);
        let floor = CinchParams {
            user_target_min_s: 20 * 3600,
            ..targets_counted()
        };
        let (ahead, reason) = urgent(floor.clone(), &tight);
        assert!(
            !ahead && reason.contains("no sooner than 20:00:00"),
            "{reason}"
        );
        // As written, it was missed long ago.
        let (_, reason) = urgent(targets_counted(), &tight);
        assert!(reason.contains("misses by"), "{reason}");
        // The cap: one counted target per user at once; the user's earlier targeted job (2)
        // holds it, so job 3's does not count.
        let mut capped = swaf_case(("turnaround", "11:00:00"), 7200);
        capped.pending[1]
            .hints
            .insert("turnaround".into(), "100:00:00".into());
        capped.pending[1].user = capped.pending[2].user.clone();
        let cap = CinchParams {
            user_target_max_pending: 1,
            ..targets_counted()
        };
        let (ahead, reason) = urgent(cap.clone(), &capped);
        assert!(
            !ahead && reason.contains("user_target_max_pending"),
            "{reason}"
        );
        // Another user's earlier target does not use this user's cap.
        capped.pending[1].user = "someone-else".into();
        assert!(urgent(cap, &capped).0);
        // A user whose last targets were all shorter than their jobs' own runs: the next one
        // does not count, and the reason says why.
        let mut history = History::default();
        let mut snap_h = swaf_case(("app", "bert"), 0);
        let user = snap.pending[2].user.clone();
        for (k, j) in snap_h.pending.iter_mut().enumerate() {
            j.job_id = 100 + k as u32;
            j.user = user.clone();
            j.hints.insert("turnaround".into(), "1:00".into());
        }
        snap_h.nodes.iter_mut().for_each(|n| {
            n.gpus_alloc = 0;
            n.state = NodeState::Idle;
        });
        history.observe(&snap_h);
        let mut ran = snap_h.clone();
        ran.pending.clear();
        ran.running = snap_h
            .pending
            .iter()
            .map(|j| RunningJob {
                job_id: j.job_id,
                user: user.clone(),
                nodes: vec!["n1".into()],
                gpus: 1,
                start_time: 0,
                ..RunningJob::default()
            })
            .collect();
        ran.time = 10;
        history.observe(&ran);
        ran.running.clear();
        ran.time = 3600;
        history.observe(&ran);
        assert_eq!(history.target_fit(&user).map(|f| f.count), Some(3));
        let d = Cinch(targets_counted()).decide(&snap, 7200, &mut SeededRng::new(1), &history);
        let reason = &find(&d, 3).reason;
        assert!(
            find(&d, 3).priority <= find(&d, 1).priority
                && reason.contains("recent targets were mostly shorter than their jobs' own runs"),
            "{reason}"
        );
        // Bad settings are refused.
        for bad in [
            CinchParams {
                user_target_min_s: 40 * 86_400,
                ..absolute()
            },
            CinchParams {
                user_target_accounts: vec!["a b".into()],
                ..absolute()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_target_is_not_chased_on_predictions_that_have_been_off_by_more_than_2x() {
        // Jobs here ran 90% or 5% of their limits, alternately: the limit source is off by
        // far more than 2x on average.
        let mut history = History::default();
        for i in 0..40 {
            let ratio = if i % 2 == 0 { 0.9 } else { 0.05 };
            let name = format!("once-{i}");
            history.import_run("other", Some(&name), 4, Some(36_000.0), 36_000.0 * ratio);
        }
        let snap = swaf_case(("turnaround", "11:00:00"), 7200);
        let d = Cinch(targets_counted()).decide(&snap, 7200, &mut SeededRng::new(1), &history);
        let job = find(&d, 3);
        // Not ahead of job 1: these predictions tell nothing here, so the three jobs rank alike
        // and keep Slurm's order.
        assert!(job.priority <= find(&d, 1).priority, "{d:?}");
        assert!(
            job.reason.contains("too poor to order by slack"),
            "{}",
            job.reason
        );
    }

    #[test]
    fn admin_classes_and_slurm_deadlines_are_targets_and_malformed_hints_are_said() {
        let class = QosClass {
            name: "interactive".into(),
            qos: vec!["debug".into()],
            partitions: Vec::new(),
            start_within: Some("15:00".into()),
            turnaround: None,
            finish_by: None,
        };
        let params = CinchParams {
            qos_classes: vec![class],
            ..targets_counted()
        };
        assert_eq!(params.validate(), Ok(()));
        let mut snap = swaf_case(("app", "bert"), 600);
        snap.pending[2].qos = Some("debug".into());
        let d = decide(params.clone(), &snap);
        let reason = &find(&d, 3).reason;
        assert!(
            reason.contains("start by 1970-01-01T00:15:00Z (class interactive)"),
            "{reason}"
        );
        assert!(reason.contains("urgent"), "{reason}");
        let mut snap = swaf_case(("app", "bert"), 7200);
        snap.pending[2].deadline = Some(36_000);
        let d = decide(params, &snap);
        let reason = &find(&d, 3).reason;
        assert!(
            reason.contains("(--deadline)") && reason.contains("urgent"),
            "{reason}"
        );
        let d = decide(targets_counted(), &swaf_case(("due", "friday"), 0));
        let reason = &find(&d, 3).reason;
        assert!(
            reason.contains("QoS hint due ignored: 'friday' is not a time"),
            "{reason}"
        );
        // A class that does not parse is refused when set.
        let bad = CinchParams {
            qos_classes: vec![QosClass {
                name: "x".into(),
                qos: vec!["q".into()],
                partitions: Vec::new(),
                start_within: None,
                turnaround: Some("soon".into()),
                finish_by: None,
            }],
            ..absolute()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .contains("QoS class 'x' turnaround"));
    }

    #[test]
    fn a_jobs_own_profile_predicts_its_run() {
        let mut snap = swaf_case(("iters", "1000"), 0);
        snap.pending[2]
            .hints
            .insert("iter_rate".into(), "10".into());
        let d = decide(absolute(), &snap);
        // 100 s of run: the shortest of the three.
        assert!(find(&d, 3).priority > find(&d, 1).priority, "{d:?}");
        assert!(find(&d, 3)
            .reason
            .contains("the job's own iterations and rate"));
    }

    /// One 8-GPU node, all of it held by job 1 (`--requeue`, `ckpt=yes`), started `ran_s` ago
    /// with a limit of `limit_min`; job 2, of `waiting_gpus` GPUs and a limit of
    /// `waiting_limit_min`, waits.
    fn one_node_held_by_an_opted_in_job(
        ran_s: i64,
        limit_min: u32,
        waiting_gpus: u32,
        waiting_limit_min: u32,
    ) -> Snapshot {
        let mut nodes = crate::testing::cluster(1, 8, 1);
        nodes[0].gpus_alloc = 8;
        nodes[0].state = NodeState::Allocated;
        let mut waiting = pending(2, waiting_gpus);
        waiting.time_limit_min = Some(waiting_limit_min);
        let mut snap = snapshot(nodes, vec![waiting]);
        let mut held = running(1, "n1", 8, snap.time - ran_s, limit_min);
        held.requeue = true;
        held.hints.insert("ckpt".into(), "yes".into());
        snap.running.push(held);
        snap
    }

    #[test]
    fn an_opted_in_long_job_is_requeued_for_short_waiting_ones_and_an_opted_out_one_never() {
        // One 8-GPU node, all busy with an 8-GPU job 10 h from its end; a 4-GPU 10-min job
        // waits. With preemption, the long job is requeued and the short one pinned onto the
        // GPUs it frees. (Only multi-GPU jobs displace a multi-GPU one.)
        let mut snap = one_node_held_by_an_opted_in_job(3600, 22 * 60, 4, 20);
        let d = decide(absolute(), &snap);
        let requeued: Vec<u32> = d
            .iter()
            .filter(|d| d.requeue == Some(true))
            .map(|d| d.job_id)
            .collect();
        assert_eq!(requeued, vec![1], "{d:?}");
        assert!(find(&d, 1).reason.contains("restart 1 of at most 3"));
        assert_eq!(find(&d, 2).pin_nodes, Some(vec!["n1".to_string()]), "{d:?}");
        // Without the opt-in, or with preemption off, nobody is requeued.
        snap.running[0].hints.clear();
        assert!(decide(absolute(), &snap)
            .iter()
            .all(|d| d.requeue.is_none()));
        snap.running[0].hints.insert("ckpt".into(), "yes".into());
        let params = CinchParams {
            preempt: false,
            ..absolute()
        };
        assert!(decide(params, &snap).iter().all(|d| d.requeue.is_none()));
        // Past its preemption cap it keeps its GPUs.
        snap.running[0].restarts = 3;
        assert!(decide(absolute(), &snap)
            .iter()
            .all(|d| d.requeue.is_none()));
    }

    #[test]
    fn a_job_on_part_of_a_node_may_be_requeued_more_often_than_a_whole_node_job() {
        // One 8-GPU node: an opted-in 4-GPU job 21 h from its end and another job on the other
        // 4 GPUs that may not be requeued; a short 4-GPU job waits. The 4-GPU job runs again on
        // any node with 4 GPUs free, so `max_preemptions_small` (5), not `max_preemptions` (3),
        // bounds its requeues.
        let mut snap = one_node_held_by_an_opted_in_job(3600, 22 * 60, 4, 20);
        snap.running[0].gpus = 4;
        snap.running.push(running(3, "n1", 4, snap.time - 3600, 22 * 60));
        let requeued = |snap: &Snapshot| -> Vec<(u32, String)> {
            decide(absolute(), snap)
                .into_iter()
                .filter(|d| d.requeue == Some(true))
                .map(|d| (d.job_id, d.reason))
                .collect()
        };
        snap.running[0].restarts = 3;
        let d = requeued(&snap);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].0, 1);
        assert!(d[0].1.contains("restart 4 of at most 5"), "{}", d[0].1);
        snap.running[0].restarts = 5;
        assert_eq!(requeued(&snap), Vec::new());
        // With the same cap for both, it keeps its GPUs after 3.
        snap.running[0].restarts = 3;
        let params = CinchParams {
            max_preemptions_small: 3,
            ..absolute()
        };
        assert!(decide(params, &snap).iter().all(|d| d.requeue.is_none()));
        // Past the range, the setting is refused and says why.
        let bad = CinchParams {
            max_preemptions_small: 101,
            ..absolute()
        };
        assert_eq!(
            bad.validate(),
            Err("max_preemptions_small must be from 0 to 100, not 101".into())
        );
    }

    #[test]
    fn a_requeue_that_pays_under_slurms_default_delay_does_not_where_the_site_waits_longer() {
        // One 8-GPU node busy with an opted-in 8-GPU job predicted to run 20 more minutes (half
        // its 60-minute limit, 10 minutes done); an 8-GPU job predicted at 5 minutes waits.
        // Requeued, the long job loses 300 s of restart plus Slurm's requeue delay, so its
        // remaining 1,200 s must outlast the short one's 300 s by more than that: it does with
        // Slurm's default delay (121 s), not on a site whose credential lifetime is 1,200 s.
        let mut snap = one_node_held_by_an_opted_in_job(600, 60, 8, 10);
        let requeued = |snap: &Snapshot| -> Vec<u32> {
            decide(absolute(), snap)
                .iter()
                .filter(|d| d.requeue == Some(true))
                .map(|d| d.job_id)
                .collect()
        };
        assert_eq!(snap.requeue_delay_s, 121);
        assert_eq!(requeued(&snap), vec![1]);
        snap.requeue_delay_s = 1_201;
        assert_eq!(requeued(&snap), Vec::<u32>::new());
    }

    #[test]
    fn where_predictions_tell_nothing_a_running_job_is_demoted_by_attained_service_then_requeued()
    {
        let h = history_where_predictions_tell_nothing();
        let model = h.run_model().expect("60 ended jobs");
        assert!(model.rho < 0.0, "{model:?}");
        assert_eq!(model.informativeness, 0.0, "{model:?}");
        // One 8-GPU node busy with an opted-in job of that kind; another like it waits.
        let mut nodes = crate::testing::cluster(1, 8, 1);
        nodes[0].gpus_alloc = 8;
        nodes[0].state = NodeState::Allocated;
        let mut waiting = pending(2, 8);
        waiting.time_limit_min = Some(600);
        let mut snap = snapshot(nodes, vec![waiting]);
        let mut first = running(1, "n1", 8, snap.time, 600);
        first.requeue = true;
        first.hints.insert("ckpt".into(), "yes".into());
        snap.running.push(first);
        let requeued_after = |ran_s: i64| {
            let mut snap = snap.clone();
            snap.running[0].start_time = snap.time - ran_s;
            let d = Cinch(absolute()).decide(&snap, snap.time, &mut SeededRng::new(1), &h);
            let waiting = find(&d, 2).reason.clone();
            (
                d.iter().any(|d| d.job_id == 1 && d.requeue == Some(true)),
                waiting,
            )
        };
        // Both are alike while the running one might still be one of the minute-long jobs:
        // nothing is gained by swapping them.
        for ran_s in [5, 30, 55] {
            let (requeued, reason) = requeued_after(ran_s);
            assert!(!requeued, "after {ran_s} s: {reason}");
            assert!(reason.contains("the 60 ended jobs"), "{reason}");
        }
        // Once it has outrun every minute-long job it is one of the long ones: the waiting
        // job, a new one, ranks far ahead and is expected to be done hours sooner.
        for ran_s in [75, 120, 600] {
            let (requeued, reason) = requeued_after(ran_s);
            assert!(requeued, "after {ran_s} s: {reason}");
        }
    }

    /// Nodes of 8 GPUs in `racks` racks, every GPU allocated.
    fn busy_nodes(count: u32, racks: u32) -> Vec<crate::wire::snapshot::Node> {
        let mut nodes = crate::testing::cluster(count, 8, racks);
        for n in &mut nodes {
            n.gpus_alloc = 8;
            n.state = NodeState::Allocated;
        }
        nodes
    }

    /// `job` in the site's preemptible set: `--requeue` and `ckpt=yes`.
    fn opted_in(mut job: RunningJob) -> RunningJob {
        job.requeue = true;
        job.hints.insert("ckpt".into(), "yes".into());
        job
    }

    /// The jobs `decisions` requeue.
    fn requeued(decisions: &[Decision]) -> Vec<u32> {
        decisions
            .iter()
            .filter(|d| d.requeue == Some(true))
            .map(|d| d.job_id)
            .collect()
    }

    #[test]
    fn a_spread_job_requeued_to_restart_consolidated_is_not_held_to_starting_a_waiting_job() {
        // `requeue_spread`: job 9 runs its 16 GPUs spread over n1, n2 and n3 while n4 and n5
        // are free; requeued, it restarts on two whole nodes. Nothing waits, so no job starts
        // on its nodes now: the rule for jobs requeued to make way does not apply to it.
        let mut nodes = vec![
            node("n1", 8, 4, "r1"),
            node("n2", 8, 4, "r1"),
            node("n3", 8, 8, "r1"),
            node("n4", 8, 0, "r1"),
            node("n5", 8, 0, "r1"),
        ];
        nodes[2].state = NodeState::Allocated;
        let mut snap = snapshot(nodes, vec![]);
        let mut big = opted_in(running(9, "n1", 16, snap.time - 600, 24 * 60));
        big.nodes = vec!["n1".into(), "n2".into(), "n3".into()];
        big.hints.insert("app".into(), "bert".into());
        snap.running.push(big);
        let spread = CinchParams {
            requeue_spread: true,
            ..absolute()
        };
        assert_eq!(requeued(&decide(spread, &snap)), vec![9]);
        assert!(requeued(&decide(absolute(), &snap)).is_empty());
    }

    #[test]
    fn a_spread_job_on_part_of_a_node_has_the_same_requeue_cap_whatever_it_is_requeued_for() {
        // `requeue_spread`: job 9 runs its 4 GPUs spread, 2 on n1 and 2 on n2 (each full with
        // a job that may not be requeued), while n3 is free: requeued, it restarts on one node.
        // A 4-GPU job on 8-GPU nodes may be requeued `max_preemptions_small` (5) times by the
        // walk, so the network requeue counts to the same cap, not `max_preemptions` (3).
        let mut snap = snapshot(busy_nodes(2, 1), vec![]);
        snap.nodes.push(node("n3", 8, 0, "r1"));
        snap.running.push(running(1, "n1", 6, snap.time - 600, 24 * 60));
        snap.running.push(running(2, "n2", 6, snap.time - 600, 24 * 60));
        let mut small = opted_in(running(9, "n1", 4, snap.time - 600, 24 * 60));
        small.nodes = vec!["n1".into(), "n2".into()];
        small.hints.insert("app".into(), "bert".into());
        snap.running.push(small);
        let spread = CinchParams {
            requeue_spread: true,
            ..absolute()
        };
        snap.running[2].restarts = 3;
        let d = decide(spread.clone(), &snap);
        assert_eq!(requeued(&d), vec![9], "{d:?}");
        let reason = &find(&d, 9).reason;
        assert!(reason.contains("restart 4 of at most 5"), "{reason}");
        snap.running[2].restarts = 5;
        assert!(requeued(&decide(spread.clone(), &snap)).is_empty());
        // With the same cap for both, it keeps its GPUs after 3.
        snap.running[2].restarts = 3;
        let same_cap = CinchParams {
            max_preemptions_small: 3,
            ..spread
        };
        assert!(requeued(&decide(same_cap, &snap)).is_empty());
    }

    /// Every limit here says 10 h; four in five jobs ran about a minute, the fifth 6-7 h, and
    /// nothing told which (the order the end-to-end test imports from sacct).
    fn history_where_predictions_tell_nothing() -> History {
        let mut h = History::default();
        for i in 0..60u32 {
            let run = if i % 5 == 0 {
                21_600.0 + f64::from(i) * 60.0
            } else {
                61.0 + f64::from(i % 10)
            };
            h.import_run("ann", Some(&format!("hist-{i}")), 8, Some(36_000.0), run);
        }
        h
    }

    #[test]
    fn a_new_job_starves_by_its_gittins_size_not_by_the_heavy_tails_mean() {
        // Two 8-GPU nodes where predictions tell nothing. n1 holds a job that cannot be
        // requeued, 55 s into its run: expected to end in about 1.3 h (the mean of every run
        // seen). n2 holds an opted-in job 10 minutes in: one of the long ones, hours left. A new
        // 8-GPU job waits. Its expected remaining run is that same mean, 1.3 h, so by it the
        // job would not starve (n1 is expected to free sooner); its Gittins size, what the
        // queue ranks it by, is under two minutes (four in five such jobs end within 70 s): a
        // wait of an hour is many times that. The long job is requeued for it, and the new job
        // starts on n2.
        let h = history_where_predictions_tell_nothing();
        let mut waiting = pending(3, 8);
        waiting.time_limit_min = Some(600);
        let mut snap = snapshot(busy_nodes(2, 1), vec![waiting]);
        snap.running.push(running(1, "n1", 8, snap.time - 55, 600));
        snap.running
            .push(opted_in(running(2, "n2", 8, snap.time - 600, 600)));
        let d = Cinch(absolute()).decide(&snap, snap.time, &mut SeededRng::new(1), &h);
        assert_eq!(requeued(&d), vec![2], "{d:?}");
        assert_eq!(find(&d, 3).pin_nodes, Some(vec!["n2".to_string()]), "{d:?}");
        assert_eq!(find(&d, 3).delay_until, None, "{d:?}");
    }

    #[test]
    fn no_job_is_requeued_for_gpus_that_no_waiting_job_can_start_on_now() {
        // Three 8-GPU nodes, n1 and n2 in rack r1, n3 in r2. n1 holds a job that cannot be
        // requeued, 22 h from its end; n2 and n3 hold opted-in jobs as long. A 16-GPU job of
        // 20 minutes waits: requeuing n2 and n3 would give it 16 GPUs, but across two racks,
        // where it does not start (it waits for its best shape, n1 and n2): both would pay a
        // restart for GPUs left idle. Nobody is requeued; the job keeps waiting.
        let mut waiting = pending(4, 16);
        waiting.time_limit_min = Some(20);
        let mut snap = snapshot(busy_nodes(3, 2), vec![waiting]);
        snap.running.push(running(1, "n1", 8, snap.time - 3600, 23 * 60));
        for (id, node) in [(2, "n2"), (3, "n3")] {
            snap.running
                .push(opted_in(running(id, node, 8, snap.time - 3600, 23 * 60)));
        }
        let d = decide(absolute(), &snap);
        assert!(requeued(&d).is_empty(), "{d:?}");
        let job = find(&d, 4);
        assert!(
            job.delay_until.is_some() || job.priority == Some(RESERVED_PRIORITY),
            "{d:?}"
        );
    }

    #[test]
    fn the_run_time_source_that_predicted_best_here_wins() {
        // Ann's jobs run 100 s whatever their limit says (60 min): after enough of them the
        // similar-job history beats the limit.
        let mut h = History::default();
        let mut t = 0;
        for id in 1..=12u32 {
            let mut snap = snapshot(crate::testing::cluster(1, 8, 1), Vec::new());
            snap.time = t;
            let mut job = running(id, "n1", 1, t, 60);
            job.name = Some("train".into());
            snap.running.push(job);
            h.observe(&snap);
            let mut after = snapshot(crate::testing::cluster(1, 8, 1), Vec::new());
            after.time = t + 100;
            h.observe(&after);
            t += 200;
        }
        let p = h.predict_run_s("ann", Some("train"), 1, Some(3600.0), 3600.0);
        assert_eq!(p.source, crate::learn::history::RunSource::Similar, "{p:?}");
        assert!((p.run_s - 100.0).abs() < 1.0, "{p:?}");
        // A job the history knows nothing of falls back to its limit (scaled by what jobs
        // really ran of theirs here: 100 s of 3600).
        let p = h.predict_run_s("bob", Some("other"), 1, Some(3600.0), 3600.0);
        assert_eq!(p.source, crate::learn::history::RunSource::Limit, "{p:?}");
        assert!((p.run_s - 100.0).abs() < 1.0, "{p:?}");
    }

    fn elastic_hints(range: &str) -> crate::slurm::job_hints::Hints {
        [("app", "cifar10"), ("elastic", range), ("ckpt", "yes")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_elastic_job_starts_on_the_free_gpus_and_a_rigid_one_waits_for_its_own() {
        // n1 full, n2 half busy: 4 GPUs free. Both jobs ask for 8.
        let mut snap = snapshot(
            vec![node("n1", 8, 8, "r1"), node("n2", 8, 4, "r1")],
            vec![
                PendingJob {
                    hints: elastic_hints("2-16"),
                    ..pending(1, 8)
                },
                pending(2, 8),
            ],
        );
        snap.running = vec![running(9, "n1", 8, 0, 600)];
        let d = decide(absolute(), &snap);
        let elastic = find(&d, 1);
        assert_eq!(elastic.gpus, Some(4), "{elastic:?}");
        assert_eq!(elastic.pin_nodes.as_deref(), Some(&["n2".to_string()][..]));
        assert!(
            elastic.reason.starts_with("elastic 2-16: 4 GPUs"),
            "{elastic:?}"
        );
        assert_eq!(
            find(&d, 2).gpus,
            None,
            "a job that did not opt in keeps its request"
        );
        // Off: no sizes at all.
        let d = decide(
            CinchParams {
                elastic: false,
                ..absolute()
            },
            &snap,
        );
        assert!(d.iter().all(|d| d.gpus.is_none()), "{d:?}");
    }

    #[test]
    fn a_running_elastic_job_grows_into_an_idle_cluster_only_after_its_interval() {
        let job = |start: i64| RunningJob {
            requeue: true,
            hints: elastic_hints("2-16"),
            ..running(1, "n1", 4, start, 600)
        };
        let mut snap = snapshot(vec![node("n1", 8, 4, "r1"), node("n2", 8, 0, "r1")], vec![]);
        snap.time = 10_000;
        snap.running = vec![job(10_000 - 600)];
        let d = decide(absolute(), &snap);
        assert!(d.is_empty(), "within its resize interval: {d:?}");
        snap.running = vec![job(10_000 - 1_800)];
        let d = decide(absolute(), &snap);
        let grow = find(&d, 1);
        assert_eq!(
            (grow.requeue, grow.gpus),
            (Some(true), Some(16)),
            "{grow:?}"
        );
        // Without --requeue it is never resized.
        snap.running[0].requeue = false;
        assert!(decide(absolute(), &snap).is_empty());
    }
}
