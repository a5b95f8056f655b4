//! cinch's parameters: their defaults, their ranges (`validate`) and what other parts read of them.

use super::*;

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

impl CinchParams {
    pub fn validate(&self) -> Result<(), String> {
        crate::policy::check_min_gpus(self.min_gpus)?;
        self.as_dally().validate()?;
        crate::policy::check_range("max_stretch", self.max_stretch, 0.0..=100.0)?;
        crate::policy::check_range("preempt_ratio", self.preempt_ratio, 1.5..=1000.0)?;
        crate::policy::check_range("qos_urgency", self.qos_urgency, 0.0..=1000.0)?;
        crate::policy::check_range(
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
        crate::policy::check_range(
            "resize_interval_s",
            f64::from(self.resize_interval_s),
            60.0..=604_800.0,
        )?;
        crate::policy::check_range(
            "search_generations",
            f64::from(self.search_generations),
            1.0..=1000.0,
        )?;
        crate::policy::check_range("max_resizes", f64::from(self.max_resizes), 0.0..=100.0)?;
        crate::policy::check_range(
            "max_preemptions_small",
            f64::from(self.max_preemptions_small),
            0.0..=100.0,
        )?;
        crate::policy::check_range(
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
