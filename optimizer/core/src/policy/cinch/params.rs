//! cinch's parameters: their defaults, their ranges (`validate`) and what other parts read of them.

use super::*;
use crate::policy::param_table::ParamError;

/// The priority of a job with no service left to predict; each e-fold of predicted service
/// lowers it by [`PRIORITY_PER_E_FOLD`]. 1e12 GPU-seconds still map above 1.
pub const TOP_PRIORITY: u32 = 1_000_000_000;
pub const PRIORITY_PER_E_FOLD: f64 = 1_000_000.0;

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    pub struct CinchParams {
        /// Order the queue by predicted remaining service (Slurm priorities); off: Slurm's order.
        queue_order: bool = true;
        /// Place multi-GPU jobs consolidated, waiting for their best shape while that pays off.
        consolidate: bool = true;
        /// Requeue opted-in running jobs for waiting ones with much less service.
        preempt: bool = true;
        /// Requeue opted-in running jobs that run spread, are network-sensitive and would restart
        /// consolidated on GPUs free now, when the time saved beats the restart.
        requeue_spread: bool = false;
        /// Jobs asking for at least this many GPUs are placed by this policy.
        min_gpus: u32 = 2, range(2, 1_000_000, " (a 1-GPU job is always on one node)");
        /// Jobs expected to slow down less than this when spread never wait for a shape.
        min_slowdown: f64 = 0.1, range(0.0, 1.0);
        /// Slowdown assumed for a job whose application is unknown and not yet learned.
        default_slowdown: f64 = 0.2, range(0.0, 0.95);
        /// Run time assumed for a job nothing predicts (no limit, no history), seconds.
        default_run_s: u32 = 3600, at_least(1);
        /// A job that has waited longer than this many times its predicted remaining run time goes
        /// ahead of every job that has not (0 = never): shortest-first never starves a long job
        /// for ever.
        max_stretch: f64 = 3.0, range(0.0, 100.0);
        /// Longest a job waits for its best shape once a spread placement is free, seconds.
        max_wait_s: u32 = 86_400, range(0, 604_800, " (7 days)");
        /// The first job (in cinch's order) that waits for its best shape is pinned to the nodes it
        /// is expected to free on first and put first in Slurm's order, so Slurm's backfill keeps
        /// the GPUs it waits for from later jobs that would still run then.
        reserve: bool = true;
        /// A network-sensitive job waits for its best shape whatever spreading would cost (up to
        /// `max_wait_s`), as strict consolidation does; off: only while waiting is expected to pay.
        wait_always: bool = true;
        /// A job that waits for its best shape (all but the reserved one) gets a begin time at the
        /// shape's expected release: Slurm starts it then on whatever is free, spread if the release
        /// came late. Off: a release expected within a minute is not waited for by a begin time:
        /// the job is held (a TTL long, renewed while it waits) and the round that finds its
        /// shape free pins it there, so no job held for a shape is started spread.
        start_at_release: bool = true;
        /// A running job is requeued for waiting jobs only if its predicted remaining service is at
        /// least this many times theirs.
        preempt_ratio: f64 = 2.0, range(1.5, 1000.0);
        /// Most times one job of a whole node or more (as many GPUs as the largest node holds) is
        /// requeued by this policy (Slurm's restart count).
        max_preemptions: u32 = 3, range(0, 100);
        /// Most times one job on part of a node (fewer GPUs than the largest node holds) is
        /// requeued by this policy: it runs again on any node with that many GPUs free,
        /// so a restart costs it little waiting, where a whole-node job waits for whole nodes.
        max_preemptions_small: u32 = 5, range(0, 100);
        /// What a requeue costs the job besides Slurm's requeue delay (the snapshot's): its restart
        /// and checkpoint reload, s.
        restart_cost_s: u32 = 300;
        /// Order jobs with a QoS target by their waiting allowance once it runs short (GENIE's SWAF).
        qos: bool = true;
        /// Count the targets every user states in hints (`due`, `turnaround`, `start_within`); off
        /// (the default): only those of the accounts and QOS listed below count, besides Slurm's
        /// `--deadline` and the admin's classes.
        user_targets: bool = false;
        /// Accounts whose users' stated targets count even with `user_targets` off.
        user_target_accounts: Vec<String> = Vec::new();
        /// Slurm QOS whose jobs' stated targets count even with `user_targets` off.
        user_target_qos: Vec<String> = Vec::new();
        /// No stated target counts as sooner than this after the job's submission, seconds (0: as
        /// written): how tight a user may ask.
        user_target_min_s: u32 = 0, range(0, 2_592_000);
        /// Of one user's pending jobs, only the earliest this many have their stated targets
        /// counted (0: no limit): how many at once.
        user_target_max_pending: u32 = 0;
        /// A job with a target goes ahead of the jobs without one once its waiting allowance is at
        /// most this many times its predicted run time (large: every targeted job first).
        qos_urgency: f64 = 1.0, range(0.0, 1000.0);
        /// Targets for jobs of Slurm QOS names or partitions (docs/policies/qos.md).
        qos_classes: Vec<QosClass> = Vec::new();
        /// Size elastic jobs (`elastic=MIN-MAX`) by ONES's evolutionary search: pending ones
        /// before they start, running ones by checkpoint-and-requeue (docs/policies/elastic.md).
        elastic: bool = true;
        /// A running elastic job is resized at most once per this many seconds of its run.
        resize_interval_s: u32 = 1800, range(60, 604_800);
        /// Generations of the search per round: its budget.
        search_generations: u32 = 30, range(1, 1000);
        /// A running elastic job is not shrunk once Slurm has restarted it this often;
        /// it may still grow.
        max_resizes: u32 = 0, range(0, 100);
        /// Take a running job's own progress, as its watcher reads it from the job's output, for
        /// what is expected of it (its end and its rank), while progress has predicted run times
        /// better here than the other sources. Off by default: on the simulator's tune half it
        /// did not pay (docs/policies/progress.md).
        progress: bool = false;
        /// Lifetime of each decision in seconds.
        ttl_s: u32 = 300, range(1, 86_400);
        /// How much cinch's order weighs against the site's own priorities (fair share, QOS, age):
        /// cinch raises a job by at most this many priority points, as a negative `nice` on top of
        /// the priority Slurm computes. 0: cinch sets each ordered job's priority
        /// outright, so multifactor no longer decides for those jobs (docs/operations.md, "What
        /// cinch does to your priorities").
        order_weight: u32 = DEFAULT_ORDER_WEIGHT, range(0, MAX_ORDER_WEIGHT);
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

impl CinchParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        self.check_ranges()?;
        for (name, names) in [
            ("user_target_accounts", &self.user_target_accounts),
            ("user_target_qos", &self.user_target_qos),
        ] {
            if let Some(bad) = names
                .iter()
                .find(|n| n.is_empty() || n.contains(|c: char| c == ',' || c.is_whitespace()))
            {
                return Err(ParamError::Invalid {
                    name,
                    why: format!("'{bad}' is not one Slurm name"),
                });
            }
        }
        qos::parse_classes(&self.qos_classes).map_err(|why| ParamError::Invalid {
            name: "qos_classes",
            why,
        })?;
        Ok(())
    }

    /// Most requeues of a running job of `gpus` GPUs, on a cluster whose largest node has
    /// `node_gpus`: a job on part of a node runs again wherever that many GPUs are free, so it
    /// may be requeued more often than one that needs whole nodes back.
    pub(super) fn max_restarts(&self, gpus: u32, node_gpus: u32) -> u32 {
        if gpus < node_gpus {
            self.max_preemptions_small
        } else {
            self.max_preemptions
        }
    }

    /// Whether any running job may be requeued at all (some cap above 0).
    pub(super) fn may_requeue(&self) -> bool {
        self.max_preemptions > 0 || self.max_preemptions_small > 0
    }

    /// The Dally parameters this policy's placement and network requeue share (the network
    /// requeue sets `max_preemptions` per job, by [`Self::max_restarts`]).
    pub(super) fn as_dally(&self) -> DallyParams {
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
