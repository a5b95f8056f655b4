//! The one apply path: from what Slurm shows of each job, what cinch applied to it before, and the
//! optimizer's decisions, the change to make to each job (set, renew, undo or refuse, and why).
//!
//! The plugin and the simulator both call [`plan`]; the plugin keeps only its AdminComment record
//! and the Slurm calls, the simulator only its in-memory record and its simulated Slurm. So every
//! rule below holds the same way live and in every simulated result:
//!
//! - decisions are validated one by one (known pending job, known nodes, sane TTL, delay within 7
//!   days, priority and nice within Slurm's ranges); an invalid one is refused, the others apply;
//! - what was applied stands until its TTL runs out when a round's answer does not mention the job,
//!   and is renewed without touching Slurm when the answer repeats it;
//! - everything cinch applied is undone when the optimizer is lost or the mode is not `enforce`;
//! - what a user or admin set is never touched: a job's own node list, nice value, and any field
//!   someone else changed after cinch ([`Fields`]);
//! - a running job is requeued only if its user allowed it and said it checkpoints, and only in
//!   `enforce` mode; a requeue decision carries no other action; no job is requeued more than
//!   [`RequeueLimits::max_per_job`] times, nor the cluster more often than its budget
//!   ([`RequeueLimiter`]);
//! - a submit-time hold is released whatever happens;
//! - a job's GPU count changes only for a job whose user declared it elastic
//!   (`elastic=MIN-MAX`), only within that range, only for a request of total GPUs (`--gpus`),
//!   and for a running job only with a requeue (which needs the same opt-in as any requeue); the
//!   count a pending job was submitted with is restored when cinch's changes are undone.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::wire::decision::{Decision, IdleDecision};
use crate::wire::idle::{IdleAction, IdleRules};
use crate::wire::mode::Mode;
use crate::wire::reason::Reason;

/// Longest delay cinch will apply, whatever the optimizer says.
pub const MAX_DELAY_S: i64 = 7 * 86_400;
/// Longest decision lifetime cinch will accept.
pub const MAX_TTL_S: u32 = 7 * 86_400;
/// Slurm's nice range (NICE_OFFSET - 3 either way).
pub const MAX_NICE: i64 = 2_147_483_645;
/// Slurm's "recompute the priority" value (INFINITE), as `scontrol release` sends it.
pub const PRIORITY_AUTOMATIC: u32 = u32::MAX;

/// Job settings someone other than cinch changed (bit set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fields(pub u8);

impl Fields {
    pub const NODES: Fields = Fields(1);
    pub const BEGIN: Fields = Fields(2);
    pub const PRIORITY: Fields = Fields(4);
    pub const NICE: Fields = Fields(8);

    pub fn contains(self, other: Fields) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn union(self, other: Fields) -> Fields {
        Fields(self.0 | other.0)
    }
}

/// What cinch has applied to one job (the plugin keeps it in the job's AdminComment, the simulator
/// in memory).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// Shared, not copied: the simulated Slurm reads every job's record every round, and a
    /// running job keeps the pin it started on.
    pub pin: Option<Arc<[String]>>,
    /// The job's node count before cinch pinned it, restored on undo.
    pub nodes_was: Option<u32>,
    /// The job's maximum node count before cinch pinned it (0: none), restored on undo. A pin
    /// sets the maximum to the pinned nodes: Slurm takes a node list as nodes the job must
    /// include, and would add others to start it sooner (measured by the live replay,
    /// docs/simulator.md).
    pub max_nodes_was: Option<u32>,
    pub begin: Option<i64>,
    pub hold: bool,
    pub prio: Option<u32>,
    /// (the job's nice before cinch, the nice cinch set)
    pub nice: Option<(i64, i64)>,
    /// (the job's GPU count before cinch, the count cinch set): an elastic job's size.
    pub gpus: Option<(u32, u32)>,
    pub until: i64,
    /// Shared, not copied: the plan reads every pending job's record every round.
    pub why: Arc<str>,
}

impl Applied {
    pub fn is_empty(&self) -> bool {
        self.pin.is_none()
            && self.begin.is_none()
            && !self.hold
            && self.prio.is_none()
            && self.nice.is_none()
            && self.gpus.is_none()
    }
}

/// A pending job as Slurm shows it now, with what cinch knows about it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PendingState {
    pub job_id: u32,
    /// Whether the job has a node list (ReqNodeList), the user's or cinch's.
    pub has_node_list: bool,
    /// Slurm's node count (the minimum until the job runs).
    pub min_nodes: u32,
    /// Slurm's maximum node count (0: none).
    pub max_nodes: u32,
    /// When the job becomes eligible (0: unknown).
    pub eligible_time: i64,
    pub priority: u32,
    pub held: bool,
    /// In user terms (0 = default).
    pub nice: i64,
    /// What cinch applied before (empty: nothing).
    pub applied: Applied,
    /// The end of the submit-time hold, while the job still carries it.
    pub submit_hold: Option<i64>,
    /// Fields a user or admin changed.
    pub foreign: Fields,
    /// A TTL renewed in memory since `applied` was recorded.
    pub renewed_until: Option<i64>,
    /// The job's total GPU count when it is elastic (only elastic jobs are resized; callers may
    /// leave it 0 for the others).
    pub gpus: u32,
    /// The range its user declared (`elastic=MIN-MAX`), if the job is elastic and asks for a
    /// total GPU count (`--gpus`); `None` otherwise.
    pub elastic: Option<crate::models::elastic::Range>,
    /// Why the site's admin keeps cinch off this job (a CPU-only job, an excluded partition or
    /// QOS), if they do: decisions for it are refused, and what cinch applied before is undone.
    pub hands_off: Option<String>,
}

/// A running job, as far as a requeue decision needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunningState {
    pub job_id: u32,
    /// The user allowed Slurm to requeue the job (`--requeue`).
    pub requeue: bool,
    /// The user said the job resumes from a checkpoint (`ckpt=yes`).
    pub checkpoints: bool,
    /// How often the job has been requeued already (Slurm's restart count).
    pub requeues: u32,
    /// The range its user declared, as for [`PendingState::elastic`].
    pub elastic: Option<crate::models::elastic::Range>,
    /// As [`PendingState::hands_off`]: such a job is never requeued or resized by cinch.
    pub hands_off: Option<String>,
    /// Its GPU count now (read for an elastic job's resize only).
    pub gpus: u32,
    /// What cinch applied to it while it was pending (its record outlives the start).
    pub applied: Applied,
    /// What cinch.conf's `IdleAction` says for its partition and QOS.
    pub idle_action: IdleAction,
    /// Whether its record carries cinch's idle-GPU warning (the round takes it off once no
    /// answer gives it, even one written before slurmctld restarted).
    pub idle_warned: bool,
}

/// How long the size set after a requeue stands unless a round renews it (the job is pending
/// then, and the policy sizes it again every round).
pub const AFTER_REQUEUE_TTL_S: i64 = 600;

/// Bounds on requeues, whatever the optimizer asks (cinch.conf `MaxRequeuesPerJob`,
/// `MaxRequeuesPerHour`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequeueLimits {
    /// No job is requeued once it has been requeued this often.
    pub max_per_job: u32,
    /// Requeues allowed in this round (what the cluster-wide rate leaves, see
    /// [`RequeueLimiter::budget`]).
    pub budget: u32,
}

impl RequeueLimits {
    /// cinch.conf's defaults: a job is preempted at most 10 times; the budget is the caller's.
    pub const DEFAULT_MAX_PER_JOB: u32 = 10;
    /// At most this many requeues across the cluster in any rolling hour.
    pub const DEFAULT_MAX_PER_HOUR: u32 = 60;
}

/// The cluster-wide requeue rate: how many requeues the last rolling hour leaves for this
/// round. The plugin's agent and the simulator each keep one and record what they carried out.
#[derive(Debug, Clone)]
pub struct RequeueLimiter {
    per_hour: u32,
    /// When each requeue of the last hour happened (Unix s), oldest first.
    recent: std::collections::VecDeque<i64>,
}

impl RequeueLimiter {
    pub fn new(per_hour: u32) -> RequeueLimiter {
        RequeueLimiter {
            per_hour,
            recent: std::collections::VecDeque::new(),
        }
    }

    /// Requeues still allowed at `now`.
    pub fn budget(&mut self, now: i64) -> u32 {
        while self.recent.front().is_some_and(|&t| t <= now - 3_600) {
            self.recent.pop_front();
        }
        self.per_hour.saturating_sub(self.recent.len() as u32)
    }

    /// Notes `count` requeues carried out at `now`.
    pub fn record(&mut self, now: i64, count: usize) {
        self.recent.extend(std::iter::repeat_n(now, count));
    }
}

pub struct Input<'a> {
    pub now: i64,
    /// The mode in force (the stricter of cinch.conf's and the optimizer's).
    pub mode: Mode,
    /// `None` when there is no usable answer from the optimizer: cinch stands aside.
    pub decisions: Option<&'a [Decision]>,
    /// The cluster's node names.
    pub nodes: &'a HashSet<String>,
    pub requeue_limits: RequeueLimits,
    /// When a job's GPUs count as idle (cinch.conf's): no idle requeue or cancel comes before
    /// its grace and warning end.
    pub idle: IdleRules,
    /// A delay cinch applied stands, unrewritten, while it ends more than this many seconds from
    /// now and the decision wants it no earlier: it is renewed (moved to the decision's time)
    /// only once it comes this close, so a job that waits costs slurmctld one update per renewal,
    /// not one a round. The round sets it to three round intervals ([`renewal_margin_s`]), so one
    /// late round never lets a delay lapse that the policy still wants.
    pub renew_within_s: i64,
    /// Whether each change's words are wanted (its summary and the reason its record keeps):
    /// live always, in the simulator only when its agent log is shown
    /// ([`crate::enact::round::Cluster::wants_words`]). Without them a change says nothing and
    /// its record keeps no reason; what Slurm is told is the same.
    pub words: bool,
}

/// How close to its end a delay cinch applied is renewed, for rounds `interval_s` apart: three
/// intervals, as long as job_submit's hold window, so one late round does not let it lapse.
pub fn renewal_margin_s(interval_s: u32) -> i64 {
    3 * i64::from(interval_s)
}

/// One job's change: the Slurm fields to set and the record cinch keeps afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobChange {
    pub job_id: u32,
    /// The node list to set; an empty list clears it.
    pub req_nodes: Option<Vec<String>>,
    pub min_nodes: Option<u32>,
    /// The maximum node count to set (0: none).
    pub max_nodes: Option<u32>,
    pub begin_time: Option<i64>,
    /// 0 holds; [`PRIORITY_AUTOMATIC`] releases / recomputes.
    pub priority: Option<u32>,
    /// In user terms.
    pub nice: Option<i64>,
    /// The job's new total GPU count.
    pub gpus: Option<u32>,
    /// What cinch owns after this change (empty: drop the record).
    pub record: Applied,
    /// The job carried a submit-time hold marker, retired with this change.
    pub retire_submit_hold: bool,
    /// For the log: what and why.
    pub summary: String,
    /// When this change undoes all cinch had applied: why cinch stopped (for the job's
    /// history, which `cinch why` tells).
    pub undone_because: Option<String>,
    /// The round's time (Unix seconds): when cinch first changed the job, or stopped, for the
    /// job's history.
    pub at: i64,
}

/// Everything one round decides.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub changes: Vec<JobChange>,
    /// Decisions repeated unchanged: TTLs renewed in memory (job, until), by job id.
    pub renewed: Vec<(u32, i64)>,
    /// Decisions refused as invalid, with why.
    pub refused: Vec<String>,
    /// Decisions not applied because the mode is shadow (for the log).
    pub shadow: Vec<(u32, String)>,
    /// Running jobs to requeue, with why.
    pub requeues: Vec<(u32, String)>,
    /// Running jobs to cancel because their GPUs stayed idle (only where the admin's
    /// `IdleAction` is `cancel`), with why.
    pub cancels: Vec<(u32, String)>,
    /// Running jobs whose GPUs are idle, warned (logged) with what comes next.
    pub idle_warnings: Vec<(u32, String)>,
    /// Changes to make right after a job's requeue succeeded: a requeued elastic job's new size
    /// (and cinch's old pin cleared, so the new size is placed afresh), with its record.
    pub after_requeue: Vec<JobChange>,
}

/// What a decision asks for, once validated. `Default`: nothing (undo whatever cinch applied).
/// It borrows the decision's (or the record's) node list and reason: most rounds repeat last
/// round's decisions, which renew a record without copying either.
#[derive(Debug, Clone, Default)]
struct Target<'a> {
    pin: Option<&'a [String]>,
    node_count: Option<u32>,
    begin: Option<i64>,
    hold: bool,
    prio: Option<u32>,
    nice: Option<i64>,
    gpus: Option<u32>,
    ttl: u32,
    why: Why<'a>,
}

/// Why a target stands: a decision's reason, put into words only when Slurm is told something
/// (most rounds renew what stands and write no words), or the words of cinch's record.
#[derive(Debug, Clone, Copy)]
enum Why<'a> {
    Reason(&'a Reason),
    Words(&'a str),
}

impl Default for Why<'_> {
    fn default() -> Self {
        Why::Words("")
    }
}

impl Why<'_> {
    fn words(&self) -> Cow<'_, str> {
        match self {
            Why::Reason(reason) => Cow::Owned(reason.to_string()),
            Why::Words(words) => Cow::Borrowed(words),
        }
    }
}

impl<'a> Target<'a> {
    fn has_action(&self) -> bool {
        self.pin.is_some()
            || self.begin.is_some()
            || self.hold
            || self.prio.is_some()
            || self.nice.is_some()
            || self.gpus.is_some()
    }

    /// What cinch already applied, for `remaining` more seconds.
    fn keep(applied: &'a Applied, remaining: i64) -> Target<'a> {
        Target {
            pin: applied.pin.as_deref(),
            node_count: applied.pin.as_ref().map(|p| p.len() as u32),
            begin: applied.begin,
            hold: applied.hold,
            prio: applied.prio,
            nice: applied.nice.map(|(_, n)| n),
            gpus: applied.gpus.map(|(_, n)| n),
            ttl: remaining.clamp(1, i64::from(MAX_TTL_S)) as u32,
            why: Why::Words(&applied.why),
        }
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(pin) = &self.pin {
            parts.push(format!("pin to {}", pin.join(",")));
        }
        if let Some(b) = self.begin {
            parts.push(format!(
                "delay until {}",
                crate::slurm::slurm_time::format_time(b)
            ));
        }
        if self.hold {
            parts.push("hold".into());
        }
        if let Some(p) = self.prio {
            parts.push(format!("priority {p}"));
        }
        if let Some(n) = self.nice {
            parts.push(format!("nice {n}"));
        }
        if let Some(n) = self.gpus {
            parts.push(crate::util::words::gpus(n).to_string());
        }
        format!("{}: {}", parts.join(", "), self.why.words())
    }
}

/// An elastic size: only for a job whose user declared a range, and within it.
fn check_size(
    job_id: u32,
    gpus: u32,
    elastic: Option<crate::models::elastic::Range>,
) -> Result<(), String> {
    match elastic {
        None => Err(format!(
            "job {job_id}: {gpus} GPUs asked for a job that is not elastic (its user declared no \
             elastic=MIN-MAX with a --gpus request)"
        )),
        Some(range) if !range.contains(gpus) => Err(format!(
            "job {job_id}: {gpus} GPUs is outside the range its user declared (elastic={}-{})",
            range.min, range.max
        )),
        Some(_) => Ok(()),
    }
}

fn validate<'a>(
    d: &'a Decision,
    job: &PendingState,
    now: i64,
    nodes: &HashSet<String>,
) -> Result<Target<'a>, String> {
    if let Some(gpus) = d.gpus {
        check_size(d.job_id, gpus, job.elastic)?;
    }
    if d.ttl_s == 0 || d.ttl_s > MAX_TTL_S {
        return Err(format!("job {}: ttl_s {} out of range", d.job_id, d.ttl_s));
    }
    if let Some(pin) = &d.pin_nodes {
        if pin.is_empty() {
            return Err(format!("job {}: empty pin_nodes", d.job_id));
        }
        if let Some(unknown) = pin.iter().find(|n| !nodes.contains(*n)) {
            return Err(format!("job {}: unknown node '{unknown}'", d.job_id));
        }
        let distinct: HashSet<&String> = pin.iter().collect();
        if distinct.len() != pin.len() {
            return Err(format!(
                "job {}: a node appears twice in pin_nodes",
                d.job_id
            ));
        }
    }
    if let Some(count) = d.node_count {
        let pinned = d.pin_nodes.as_ref().map_or(0, Vec::len) as u32;
        if count == 0 || count as usize > nodes.len() || (pinned > 0 && count != pinned) {
            return Err(format!(
                "job {}: node_count {count} is not possible",
                d.job_id
            ));
        }
    }
    if let Some(t) = d.delay_until {
        if t > now + MAX_DELAY_S {
            return Err(format!(
                "job {}: delay_until {t} is more than 7 days ahead",
                d.job_id
            ));
        }
    }
    if let Some(p) = d.priority {
        if p == 0 || p >= PRIORITY_AUTOMATIC - 1 {
            return Err(format!("job {}: priority {p} out of range", d.job_id));
        }
    }
    if let Some(n) = d.nice {
        if i64::from(n).abs() > MAX_NICE {
            return Err(format!("job {}: nice {n} out of range", d.job_id));
        }
    }
    Ok(Target {
        pin: d.pin_nodes.as_deref(),
        node_count: d
            .node_count
            .or(d.pin_nodes.as_ref().map(|p| p.len() as u32)),
        // A delay already in the past asks for nothing.
        begin: d.delay_until.filter(|&t| t > now),
        hold: d.hold == Some(true),
        prio: d.priority,
        nice: d.nice.map(i64::from),
        gpus: d.gpus,
        ttl: d.ttl_s,
        why: Why::Reason(&d.reason),
    })
}

/// A requeue is only for a running job whose user allowed it and checkpoints, that the admin
/// has not kept cinch off, that has not been requeued `max_per_job` times, and asks for nothing
/// else.
fn check_requeue(d: &Decision, job: Option<&RunningState>, max_per_job: u32) -> Result<(), String> {
    let Some(job) = job else {
        return Err(format!(
            "job {}: requeue of a job that is not running",
            d.job_id
        ));
    };
    if let Some(why) = &job.hands_off {
        return Err(hands_off_refusal(d.job_id, why));
    }
    if !job.requeue {
        return Err(format!(
            "job {}: requeue of a job submitted without --requeue",
            d.job_id
        ));
    }
    if !job.checkpoints {
        return Err(format!(
            "job {}: requeue of a job whose user did not say it checkpoints (ckpt=yes)",
            d.job_id
        ));
    }
    if job.requeues >= max_per_job {
        return Err(format!(
            "job {}: requeued {} times already, the most allowed (MaxRequeuesPerJob={max_per_job})",
            d.job_id, job.requeues
        ));
    }
    if let Some(gpus) = d.gpus {
        check_size(d.job_id, gpus, job.elastic)?;
    }
    let other = Decision {
        requeue: None,
        gpus: None,
        ..d.clone()
    };
    if other.is_action() {
        return Err(format!(
            "job {}: a requeue decision must not carry other actions",
            d.job_id
        ));
    }
    Ok(())
}

/// An idle decision is only for a running job the admin has not kept cinch off, idle since a
/// time past; a cancel only where the admin's `IdleAction` for the job is `cancel`, a requeue
/// only where it is `requeue`, either only once the job's grace and warning have run out (by
/// cinch.conf's rules, whatever the optimizer's), and a cancel with no other action.
fn check_idle(
    d: &Decision,
    idle: IdleDecision,
    job: Option<&RunningState>,
    input: &Input,
) -> Result<(), String> {
    let id = d.job_id;
    let Some(job) = job else {
        return Err(format!(
            "job {id}: idle decision for a job that is not running"
        ));
    };
    if let Some(why) = &job.hands_off {
        return Err(hands_off_refusal(id, why));
    }
    if idle.since <= 0 || idle.since > input.now {
        return Err(format!(
            "job {id}: idle since {}, not a time past",
            idle.since
        ));
    }
    let acting = match (idle.cancel, d.requeue == Some(true)) {
        (true, true) => {
            return Err(format!("job {id}: an idle cancel must not carry a requeue"));
        }
        (true, false) => Some(IdleAction::Cancel),
        (false, true) => Some(IdleAction::Requeue),
        (false, false) => None,
    };
    let Some(acting) = acting else {
        return Ok(());
    };
    if job.idle_action != acting {
        return Err(format!(
            "job {id}: idle {} of a job whose IdleAction is {} (cinch.conf)",
            acting.name(),
            job.idle_action.name()
        ));
    }
    let act_at = input.idle.act_at(idle.since);
    if input.now < act_at {
        return Err(format!(
            "job {id}: idle {} before its grace and warning end ({} s from now; \
             IdleGraceMinutes, IdleWarnMinutes)",
            acting.name(),
            act_at - input.now
        ));
    }
    let other = Decision {
        idle: None,
        requeue: None,
        gpus: None,
        ..d.clone()
    };
    if other.is_action() || (acting == IdleAction::Cancel && d.gpus.is_some()) {
        return Err(format!(
            "job {id}: an idle {} must not carry other actions",
            acting.name()
        ));
    }
    Ok(())
}

/// Why a decision for a job the admin keeps cinch off is refused.
fn hands_off_refusal(job_id: u32, why: &str) -> String {
    format!("job {job_id}: {why}, which cinch leaves alone")
}

/// The round's plan for `pending` and `running` jobs (array meta-records and heterogeneous jobs
/// are the caller's to leave out).
pub fn plan<'a>(pending: &'a [PendingState], running: &[RunningState], input: &Input<'a>) -> Plan {
    let mut out = Plan::default();
    // (FxHash: these maps hold every pending job and decision, and the plugin plans inside
    // slurmctld every round.)
    let mut known: FxHashMap<u32, &PendingState> =
        FxHashMap::with_capacity_and_hasher(pending.len(), Default::default());
    known.extend(pending.iter().map(|j| (j.job_id, j)));

    let mut targets: FxHashMap<u32, Target<'a>> = FxHashMap::default();
    if let Some(decisions) = input.decisions {
        targets.reserve(decisions.len());
        // Looked up only for requeues, which most rounds have none of.
        let running: FxHashMap<u32, &RunningState> = if decisions
            .iter()
            .any(|d| d.requeue.is_some() || d.idle.is_some())
        {
            running.iter().map(|j| (j.job_id, j)).collect()
        } else {
            FxHashMap::default()
        };
        for d in decisions {
            if let Some(idle) = d.idle {
                let job = running.get(&d.job_id).copied();
                if let Err(why) = check_idle(d, idle, job, input) {
                    out.refused.push(why);
                    continue;
                }
                if idle.cancel {
                    match input.mode {
                        Mode::Enforce if out.cancels.iter().any(|(j, _)| *j == d.job_id) => out
                            .refused
                            .push(format!("job {}: cancelled twice; first kept", d.job_id)),
                        Mode::Enforce => out.cancels.push((d.job_id, d.reason.to_string())),
                        Mode::Shadow => {
                            out.shadow.push((d.job_id, format!("cancel: {}", d.reason)))
                        }
                        Mode::Off => {}
                    }
                    continue;
                }
                if d.requeue != Some(true) {
                    out.idle_warnings.push((d.job_id, d.reason.to_string()));
                    continue;
                }
                // An idle requeue: checked as every requeue below.
            }
            if d.requeue == Some(true) {
                let limits = input.requeue_limits;
                match check_requeue(d, running.get(&d.job_id).copied(), limits.max_per_job) {
                    Ok(()) if input.mode == Mode::Enforce => {
                        if out.requeues.iter().any(|(j, _)| *j == d.job_id) {
                            out.refused
                                .push(format!("job {}: requeued twice; first kept", d.job_id));
                        } else if out.requeues.len() as u32 >= limits.budget {
                            out.refused.push(format!(
                                "job {}: requeue over the cluster's rate limit \
                                 (MaxRequeuesPerHour); not requeued",
                                d.job_id
                            ));
                        } else {
                            let why = d.reason.to_string();
                            if let (Some(gpus), Some(job)) = (d.gpus, running.get(&d.job_id)) {
                                out.after_requeue
                                    .push(size_after_requeue(job, gpus, &why, input.now));
                            }
                            out.requeues.push((d.job_id, why));
                        }
                    }
                    Ok(()) if input.mode == Mode::Shadow => out
                        .shadow
                        .push((d.job_id, format!("requeue: {}", d.reason))),
                    Ok(()) => {}
                    Err(why) => out.refused.push(why),
                }
                continue;
            }
            let Some(job) = known.get(&d.job_id) else {
                out.refused
                    .push(format!("job {}: not a pending job", d.job_id));
                continue;
            };
            if let Some(why) = &job.hands_off {
                out.refused.push(hands_off_refusal(d.job_id, why));
                continue;
            }
            if targets.contains_key(&d.job_id) {
                out.refused
                    .push(format!("job {}: decided twice; first kept", d.job_id));
                continue;
            }
            match validate(d, job, input.now, input.nodes) {
                Ok(t) => {
                    targets.insert(d.job_id, t);
                }
                Err(why) => out.refused.push(why),
            }
        }
    }

    let mut order: Vec<&PendingState> = pending.iter().collect();
    order.sort_unstable_by_key(|j| j.job_id);
    for job in order {
        if let Some(change) = job_plan(job, &mut targets, input, &mut out) {
            out.changes.push(change);
        }
    }
    out
}

/// A requeued elastic job's new size, set while it waits out Slurm's requeue delay. Slurm keeps
/// a requeued job's node list: cinch's pin from its last start is cleared with it, a user's is
/// kept. The record lets the size lapse like any other change unless a round renews it.
fn size_after_requeue(job: &RunningState, gpus: u32, why: &str, now: i64) -> JobChange {
    let was = job.gpus;
    let applied = &job.applied;
    JobChange {
        job_id: job.job_id,
        req_nodes: applied.pin.as_ref().map(|_| Vec::new()),
        min_nodes: applied.pin.as_ref().and(applied.nodes_was),
        max_nodes: applied.pin.as_ref().and(applied.max_nodes_was),
        gpus: Some(gpus),
        record: Applied {
            gpus: Some((applied.gpus.map_or(was, |g| g.0), gpus)),
            until: now + AFTER_REQUEUE_TTL_S,
            why: why.into(),
            ..Applied::default()
        },
        summary: format!("{gpus} GPUs after the requeue (was {was}): {why}"),
        ..JobChange::default()
    }
}

/// One pending job's change, if Slurm must be told anything.
fn job_plan<'a>(
    job: &'a PendingState,
    targets: &mut FxHashMap<u32, Target<'a>>,
    input: &Input,
    out: &mut Plan,
) -> Option<JobChange> {
    let id = job.job_id;
    let (target, lapsed) = round_target(job, targets, input, out)?;
    let target = target.map(|t| leave_theirs(t, job)).unwrap_or_default();
    let mut fields = FieldPlan {
        change: JobChange {
            job_id: id,
            retire_submit_hold: job.submit_hold.is_some(),
            at: input.now,
            ..JobChange::default()
        },
        // The record after this round; its node list and reason are set only if Slurm is told
        // anything (a renewal keeps the record as it is).
        next: Applied {
            until: input.now + i64::from(target.ttl),
            ..Applied::default()
        },
        next_pin: None,
        said: Vec::new(),
    };
    fields.node_list(&target, job);
    fields.begin_time(&target, job, input);
    fields.hold_and_priority(&target, job);
    fields.nice(&target, job);
    fields.gpu_count(&target, job);

    let FieldPlan {
        mut change,
        mut next,
        next_pin,
        said,
    } = fields;
    let changes = change.req_nodes.is_some()
        || change.min_nodes.is_some()
        || change.max_nodes.is_some()
        || change.begin_time.is_some()
        || change.priority.is_some()
        || change.nice.is_some()
        || change.gpus.is_some();
    if !changes {
        if !next.is_empty() || next_pin.is_some() {
            out.renewed.push((id, next.until));
        }
        return None;
    }
    next.pin = next_pin.map(Arc::from);
    if next.is_empty() {
        change.undone_because = Some(undone_because(job, input, lapsed));
    }
    if input.words {
        let why = target.why.words();
        next.why = if *job.applied.why == *why {
            job.applied.why.clone()
        } else {
            why.as_ref().into()
        };
        change.summary = if next.is_empty() {
            format!("{} (cinch's changes undone)", said.join(", "))
        } else {
            format!("{}: {}", said.join(", "), why)
        };
    }
    change.record = next;
    Some(change)
}

/// What this round wants of the job, and whether its decision lapsed (not renewed in time).
/// `None` when nothing is to change at all: what was applied stands, no hold to release.
fn round_target<'a>(
    job: &'a PendingState,
    targets: &mut FxHashMap<u32, Target<'a>>,
    input: &Input,
    out: &mut Plan,
) -> Option<(Option<Target<'a>>, bool)> {
    let applied = &job.applied;
    let until = applied.until.max(job.renewed_until.unwrap_or(0));
    let target = match (input.mode, input.decisions) {
        // Kept off by the admin: whatever cinch applied before is undone now.
        _ if job.hands_off.is_some() => None,
        (Mode::Enforce, Some(_)) => match targets.remove(&job.job_id) {
            Some(t) => Some(t),
            // Not mentioned this round: what was applied stands until its TTL.
            // Nothing to change then, unless a submit hold still needs releasing.
            None if !applied.is_empty() && until > input.now => {
                job.submit_hold?;
                Some(Target::keep(applied, until - input.now))
            }
            None => return Some((None, true)),
        },
        (Mode::Shadow, Some(_)) => {
            if let Some(t) = targets.get(&job.job_id) {
                if t.has_action() {
                    out.shadow.push((job.job_id, t.describe()));
                }
            }
            None
        }
        _ => None,
    };
    Some((target, false))
}

/// What the user or an admin set is theirs: the target leaves those fields alone.
fn leave_theirs<'a>(mut t: Target<'a>, job: &PendingState) -> Target<'a> {
    let (foreign, applied) = (job.foreign, &job.applied);
    if foreign.contains(Fields::NODES) || (job.has_node_list && applied.pin.is_none()) {
        t.pin = None;
        t.node_count = None;
    }
    if foreign.contains(Fields::BEGIN) {
        t.begin = None;
    }
    if foreign.contains(Fields::PRIORITY) {
        t.hold = false;
        t.prio = None;
    }
    if foreign.contains(Fields::NICE) || (job.nice != 0 && applied.nice.is_none()) {
        t.nice = None;
    }
    if t.hold {
        t.prio = None; // a hold is priority 0: nothing else to set
    }
    t
}

/// Why cinch's changes to a job are undone this round, in words for its record.
fn undone_because(job: &PendingState, input: &Input, lapsed: bool) -> String {
    match (&job.hands_off, input.mode, input.decisions) {
        (Some(why), _, _) => format!("the admin keeps cinch off this job ({why})"),
        (None, Mode::Enforce, Some(_)) if lapsed => {
            "its decision lapsed: the optimizer no longer asked for it".to_string()
        }
        (None, Mode::Enforce, Some(_)) => "the optimizer no longer asks for it".to_string(),
        (None, Mode::Enforce, None) => {
            "the optimizer could not be reached, so Slurm's own settings are back".to_string()
        }
        (None, mode, _) => format!("cinch's mode is {mode} now: it changes no job"),
    }
}

/// One job's update as it is worked out field by field: what Slurm is told, the record after
/// this round and what the change list says.
struct FieldPlan<'t> {
    change: JobChange,
    next: Applied,
    next_pin: Option<&'t [String]>,
    said: Vec<String>,
}

impl<'t> FieldPlan<'t> {
    /// The node list. (Someone else changed it: it is theirs now; cinch's pin is forgotten.)
    fn node_list(&mut self, target: &Target<'t>, job: &PendingState) {
        let applied = &job.applied;
        if job.foreign.contains(Fields::NODES) {
            return;
        }
        match (target.pin, &applied.pin) {
            // A pin recorded before cinch bounded the node count is bounded now.
            (Some(want), have)
                if have.as_deref() != Some(want) || applied.max_nodes_was.is_none() =>
            {
                self.change.req_nodes = Some(want.to_vec());
                self.change.min_nodes = target.node_count;
                self.change.max_nodes = target.node_count;
                self.said.push(format!("pin to {}", want.join(",")));
            }
            (None, Some(_)) => {
                self.change.req_nodes = Some(Vec::new());
                self.change.min_nodes = applied.nodes_was;
                self.change.max_nodes = applied.max_nodes_was;
                self.said.push("unpin".to_string());
            }
            _ => {}
        }
        if target.pin.is_some() {
            self.next_pin = target.pin;
            self.next.nodes_was = applied.nodes_was.or(Some(job.min_nodes));
            self.next.max_nodes_was = applied.max_nodes_was.or(Some(job.max_nodes));
        }
    }

    /// The begin time: a decision's delay, or releasing cinch's delay / submit-time hold.
    fn begin_time(&mut self, target: &Target<'t>, job: &PendingState, input: &Input) {
        let applied = &job.applied;
        if job.foreign.contains(Fields::BEGIN) {
            return;
        }
        let ours_now = applied.begin.or(job
            .submit_hold
            .filter(|&t| t == job.eligible_time || job.eligible_time == 0));
        match (target.begin, ours_now) {
            // The delay in force still holds the job long enough, and the decision does not
            // want it to start sooner: it stands, and Slurm is not told anything.
            (Some(want), _)
                if applied.begin.is_some_and(|have| {
                    want >= have && have > input.now + input.renew_within_s
                }) =>
            {
                self.next.begin = applied.begin;
            }
            (Some(want), have) if have != Some(want) => {
                self.change.begin_time = Some(want);
                self.said.push(format!(
                    "delay until {}",
                    crate::slurm::slurm_time::format_time(want)
                ));
                self.next.begin = Some(want);
            }
            (None, Some(_)) if job.eligible_time > input.now || job.eligible_time == 0 => {
                self.change.begin_time = Some(input.now);
                self.said.push("release delay".to_string());
            }
            _ => self.next.begin = target.begin,
        }
    }

    /// Hold and priority.
    fn hold_and_priority(&mut self, target: &Target<'t>, job: &PendingState) {
        let applied = &job.applied;
        if job.foreign.contains(Fields::PRIORITY) {
            return;
        }
        if target.hold && !applied.hold {
            self.change.priority = Some(0);
            self.said.push("hold".to_string());
        } else if !target.hold && applied.hold && job.held {
            self.change.priority = Some(PRIORITY_AUTOMATIC);
            self.said.push("release hold".to_string());
        }
        self.next.hold = target.hold;
        match (target.prio, applied.prio) {
            (Some(want), have) if have != Some(want) && !target.hold => {
                self.change.priority = Some(want);
                self.said.push(format!("priority {want}"));
            }
            (None, Some(ours)) if job.priority == ours && !target.hold => {
                self.change.priority = Some(PRIORITY_AUTOMATIC);
                self.said.push("automatic priority".to_string());
            }
            _ => {}
        }
        self.next.prio = target.prio;
    }

    /// Nice. (One update may release cinch's priority and set a nice: slurmctld handles the
    /// priority first, and ignores a nice only while a priority is set outright.)
    fn nice(&mut self, target: &Target<'t>, job: &PendingState) {
        let applied = &job.applied;
        if job.foreign.contains(Fields::NICE) {
            return;
        }
        let was = applied.nice.map_or(job.nice, |(was, _)| was);
        match (target.nice, applied.nice) {
            (Some(want), have) if have.map(|(_, n)| n) != Some(want) => {
                self.change.nice = Some(want);
                self.said.push(format!("nice {want}"));
            }
            (None, Some((was, ours))) if job.nice == ours => {
                self.change.nice = Some(was);
                self.said.push(format!("nice back to {was}"));
            }
            _ => {}
        }
        self.next.nice = target.nice.map(|n| (was, n));
    }

    /// The GPU count (elastic jobs; validated against the declared range).
    fn gpu_count(&mut self, target: &Target<'t>, job: &PendingState) {
        let applied = &job.applied;
        let was = applied.gpus.map_or(job.gpus, |(was, _)| was);
        match (target.gpus, applied.gpus) {
            (Some(want), _) if want != job.gpus => {
                self.change.gpus = Some(want);
                self.said
                    .push(format!("{} (asked {was})", crate::util::words::gpus(want)));
            }
            (None, Some((was, ours))) if job.gpus == ours && was != ours => {
                self.change.gpus = Some(was);
                self.said
                    .push(format!("back to {}", crate::util::words::gpus(was)));
            }
            _ => {}
        }
        self.next.gpus = target.gpus.filter(|&n| n != was).map(|n| (was, n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_requeue_budget_is_a_rolling_hour() {
        let mut limiter = RequeueLimiter::new(3);
        assert_eq!(limiter.budget(0), 3);
        limiter.record(0, 2);
        assert_eq!(limiter.budget(10), 1);
        limiter.record(1_800, 1);
        assert_eq!(limiter.budget(3_599), 0);
        // The first two leave the window an hour after they happened, the third later.
        assert_eq!(limiter.budget(3_600), 2);
        assert_eq!(limiter.budget(5_400), 3);
    }

    fn running(job_id: u32, requeues: u32) -> RunningState {
        RunningState {
            job_id,
            requeue: true,
            checkpoints: true,
            requeues,
            ..RunningState::default()
        }
    }

    fn requeue(job_id: u32) -> Decision {
        Decision {
            requeue: Some(true),
            ..Decision::explain(job_id, "make room", 300)
        }
    }

    /// An idle running job (job 1) whose admin's `IdleAction` is `action`.
    fn idle_job(action: IdleAction) -> RunningState {
        RunningState {
            idle_action: action,
            ..running(1, 0)
        }
    }

    /// The optimizer's idle decision for job 1: idle since `since`, with a cancel or requeue.
    fn idle_decision(since: i64, cancel: bool, requeue: bool) -> Decision {
        Decision {
            idle: Some(IdleDecision { since, cancel }),
            requeue: requeue.then_some(true),
            ..Decision::explain(1, "idle", 60)
        }
    }

    /// The plan for one running job and one decision, with a 600 s grace and a 300 s warning.
    fn idle_plan(job: RunningState, d: Decision, now: i64, mode: Mode) -> Plan {
        plan(
            &[],
            &[job],
            &Input {
                now,
                mode,
                decisions: Some(&[d]),
                nodes: &HashSet::new(),
                requeue_limits: RequeueLimits {
                    max_per_job: 3,
                    budget: 10,
                },
                idle: IdleRules {
                    gpu_percent: 5,
                    grace_s: 600,
                    warn_s: 300,
                },
                renew_within_s: 0,
                words: true,
            },
        )
    }

    /// Idle decisions: a warning is logged in any mode; a cancel or an idle requeue is carried
    /// out only where the admin's `IdleAction` for the job says so, only after cinch.conf's
    /// grace and warning (whatever the optimizer claims), and never for a job kept off.
    #[test]
    fn idle_cancels_and_requeues_follow_the_admins_idle_action_and_wait_out_the_warning() {
        let (with, idle, run) = (idle_job, idle_decision, idle_plan);
        let now = 10_000;
        let since = now - 900;
        // A warning: logged, nothing done.
        let p = run(
            with(IdleAction::Cancel),
            idle(since + 1, false, false),
            now,
            Mode::Enforce,
        );
        assert_eq!(p.idle_warnings, vec![(1, "idle".to_string())]);
        assert!(p.cancels.is_empty() && p.requeues.is_empty() && p.refused.is_empty());
        // Due: cancelled, requeued, where the admin said so; shadow mode only logs the cancel.
        let p = run(
            with(IdleAction::Cancel),
            idle(since, true, false),
            now,
            Mode::Enforce,
        );
        assert_eq!(p.cancels, vec![(1, "idle".to_string())]);
        let p = run(
            with(IdleAction::Cancel),
            idle(since, true, false),
            now,
            Mode::Shadow,
        );
        assert!(p.cancels.is_empty());
        assert_eq!(p.shadow, vec![(1, "cancel: idle".to_string())]);
        let p = run(
            with(IdleAction::Requeue),
            idle(since, false, true),
            now,
            Mode::Enforce,
        );
        assert_eq!(p.requeues, vec![(1, "idle".to_string())]);
    }

    /// The refusals: an idle cancel or requeue before the warning ran out, against the admin's
    /// `IdleAction`, for a job kept off or not running, or with the wrong fields.
    #[test]
    fn idle_cancels_and_requeues_are_refused_against_the_admins_rules() {
        let (with, idle, run) = (idle_job, idle_decision, idle_plan);
        let now = 10_000;
        let since = now - 900;
        // Refused: before the warning ran out, against the admin's action, for a job kept off,
        // a job not running, a cancel with a requeue, an idle requeue without the opt-in.
        let refused = |job: RunningState, d: Decision, what: &str| {
            let p = run(job, d, now, Mode::Enforce);
            assert!(p.cancels.is_empty() && p.requeues.is_empty(), "{what}");
            assert_eq!(p.refused.len(), 1, "{what}: {:?}", p.refused);
            assert!(p.refused[0].contains(what), "{what}: {}", p.refused[0]);
        };
        refused(
            with(IdleAction::Cancel),
            idle(since + 1, true, false),
            "before its grace",
        );
        refused(
            with(IdleAction::Requeue),
            idle(since, true, false),
            "IdleAction is requeue",
        );
        refused(
            with(IdleAction::Report),
            idle(since, false, true),
            "IdleAction is report",
        );
        refused(
            RunningState {
                hands_off: Some("partition debug is excluded".into()),
                ..with(IdleAction::Cancel)
            },
            idle(since, true, false),
            "leaves alone",
        );
        refused(
            RunningState {
                job_id: 2,
                ..with(IdleAction::Cancel)
            },
            idle(since, true, false),
            "not running",
        );
        refused(
            with(IdleAction::Cancel),
            idle(since, true, true),
            "must not carry a requeue",
        );
        refused(
            with(IdleAction::Cancel),
            idle(now + 5, false, false),
            "not a time past",
        );
        refused(
            RunningState {
                checkpoints: false,
                ..with(IdleAction::Requeue)
            },
            idle(since, false, true),
            "checkpoints",
        );
        let mut pinned = idle(since, true, false);
        pinned.nice = Some(5);
        refused(with(IdleAction::Cancel), pinned, "other actions");
    }

    #[test]
    fn requeues_stop_at_the_per_job_cap_and_the_round_budget() {
        let jobs = [running(1, 0), running(2, 3), running(3, 1), running(4, 0)];
        let decisions = [requeue(1), requeue(2), requeue(3), requeue(4), requeue(1)];
        let nodes = HashSet::new();
        let plan = plan(
            &[],
            &jobs,
            &Input {
                idle: Default::default(),
                now: 0,
                mode: Mode::Enforce,
                decisions: Some(&decisions),
                nodes: &nodes,
                requeue_limits: RequeueLimits {
                    max_per_job: 3,
                    budget: 2,
                },
                renew_within_s: 0,
                words: true,
            },
        );
        let ids: Vec<u32> = plan.requeues.iter().map(|(j, _)| *j).collect();
        assert_eq!(
            ids,
            vec![1, 3],
            "job 2 is at its cap, job 4 over the budget"
        );
        assert_eq!(plan.refused.len(), 3, "{:?}", plan.refused);
        assert!(plan.refused[0].contains("requeued 3 times already"));
        assert!(plan.refused[1].contains("rate limit"));
        assert!(plan.refused[2].contains("requeued twice"));
    }

    /// A job the admin keeps cinch off: decisions for it are refused (pending or running), and
    /// what cinch applied before the admin did so is undone.
    #[test]
    fn jobs_the_admin_keeps_cinch_off_are_refused_and_undone() {
        let off = Some("a CPU-only job (OrderCpuJobs=no)".to_string());
        let pending = [
            PendingState {
                job_id: 1,
                min_nodes: 1,
                priority: 5_000,
                applied: Applied {
                    prio: Some(5_000),
                    until: 1_000,
                    why: "ordered before".into(),
                    ..Applied::default()
                },
                hands_off: off.clone(),
                ..PendingState::default()
            },
            PendingState {
                job_id: 2,
                min_nodes: 1,
                priority: 7,
                ..PendingState::default()
            },
        ];
        let kept_off_running = RunningState {
            hands_off: off.clone(),
            ..running(3, 0)
        };
        let prio = |job_id| Decision {
            priority: Some(9_000),
            ..Decision::explain(job_id, "shorter first", 300)
        };
        let decisions = [prio(1), prio(2), requeue(3)];
        let nodes = HashSet::new();
        let plan = plan(
            &pending,
            &[kept_off_running],
            &Input {
                idle: Default::default(),
                now: 100,
                mode: Mode::Enforce,
                decisions: Some(&decisions),
                nodes: &nodes,
                requeue_limits: RequeueLimits {
                    max_per_job: 3,
                    budget: 5,
                },
                renew_within_s: 0,
                words: true,
            },
        );
        assert!(plan.requeues.is_empty(), "{plan:?}");
        assert_eq!(plan.refused.len(), 2, "{:?}", plan.refused);
        for (refused, job) in plan.refused.iter().zip(["job 1:", "job 3:"]) {
            assert!(refused.starts_with(job), "{refused}");
            assert!(refused.contains("CPU-only job (OrderCpuJobs=no), which cinch leaves alone"));
        }
        let change = |id| plan.changes.iter().find(|c| c.job_id == id);
        let undone = change(1).expect("job 1's earlier priority is undone");
        assert_eq!(undone.priority, Some(PRIORITY_AUTOMATIC));
        assert!(undone.record.is_empty(), "{undone:?}");
        assert_eq!(change(2).and_then(|c| c.priority), Some(9_000));
    }

    #[test]
    fn decisions_meet_their_jobs_in_any_order_and_the_first_of_two_is_kept() {
        let waiting = |job_id| PendingState {
            job_id,
            min_nodes: 1,
            priority: 7,
            ..PendingState::default()
        };
        // Slurm's order is not the jobs' ids'; neither is the optimizer's.
        let pending = [waiting(30), waiting(10), waiting(20)];
        let prio = |job_id, priority| Decision {
            priority: Some(priority),
            ..Decision::explain(job_id, "ordered", 300)
        };
        let decisions = [
            prio(20, 900),
            prio(99, 1),
            prio(10, 500),
            prio(20, 100),
            prio(5, 1),
        ];
        let nodes = HashSet::new();
        let plan = plan(&pending, &[], &enforce(Some(&decisions), &nodes));
        let changed: Vec<(u32, Option<u32>)> = plan
            .changes
            .iter()
            .map(|c| (c.job_id, c.priority))
            .collect();
        assert_eq!(changed, [(10, Some(500)), (20, Some(900))], "in job order");
        assert_eq!(
            plan.refused,
            [
                "job 99: not a pending job",
                "job 20: decided twice; first kept",
                "job 5: not a pending job",
            ],
            "in the decisions' order"
        );
        // In shadow mode the same decisions are only described, each once.
        let shadow = super::plan(
            &pending,
            &[],
            &Input {
                mode: Mode::Shadow,
                ..enforce(Some(&decisions), &nodes)
            },
        );
        assert!(shadow.changes.is_empty(), "{:?}", shadow.changes);
        let described: Vec<u32> = shadow.shadow.iter().map(|(id, _)| *id).collect();
        assert_eq!(described, [10, 20]);
    }

    /// Without words (the simulator's rounds, when nobody reads its agent log), each change
    /// tells Slurm the same and keeps the same record but for its reason, and says nothing: a
    /// pin, the same pin again, a priority on top, the undo.
    #[test]
    fn a_change_without_words_tells_slurm_the_same_and_says_nothing() {
        let nodes: HashSet<String> = ["n1", "n2"].iter().map(|s| s.to_string()).collect();
        let pin = Decision {
            pin_nodes: Some(vec!["n1".into()]),
            ..Decision::explain(1, "consolidated", 300)
        };
        let rounds = [
            pin.clone(),
            pin.clone(),
            Decision {
                priority: Some(700),
                ..pin
            },
            Decision::explain(1, "Slurm places it", 300),
        ];
        let mut applied = [Applied::default(), Applied::default()];
        for (k, decision) in rounds.iter().enumerate() {
            let [worded, silent] = [true, false].map(|words| {
                let job = PendingState {
                    job_id: 1,
                    min_nodes: 1,
                    eligible_time: 1_000,
                    applied: applied[usize::from(!words)].clone(),
                    ..PendingState::default()
                };
                plan(
                    &[job],
                    &[],
                    &Input {
                        now: 1_000 + 10 * k as i64,
                        words,
                        ..enforce(Some(std::slice::from_ref(decision)), &nodes)
                    },
                )
                .changes
            });
            assert_eq!(worded.len(), silent.len(), "round {k}");
            assert_eq!(
                worded.is_empty(),
                k == 1,
                "round {k}: the same pin again changes nothing"
            );
            for (w, s) in worded.iter().zip(&silent) {
                assert!(!w.summary.is_empty() && !w.record.why.is_empty(), "{w:?}");
                assert!(s.summary.is_empty() && s.record.why.is_empty(), "{s:?}");
                let unworded = |c: &JobChange| JobChange {
                    summary: String::new(),
                    record: Applied {
                        why: "".into(),
                        ..c.record.clone()
                    },
                    ..c.clone()
                };
                assert_eq!(unworded(w), unworded(s), "round {k}");
                applied = [w.record.clone(), s.record.clone()];
            }
        }
        assert!(applied[1].is_empty(), "undone");
    }

    #[test]
    fn a_pin_bounds_the_node_count_to_the_pinned_nodes_and_its_undo_restores_the_users() {
        // Slurm takes a node list as nodes a job must include: without a maximum it would add
        // other nodes to a pinned job and start it spread (measured by the live replay).
        let nodes: HashSet<String> = ["n1", "n2", "n3"].iter().map(|s| s.to_string()).collect();
        let waiting = |applied: Applied| PendingState {
            job_id: 1,
            min_nodes: 1,
            max_nodes: 0,
            eligible_time: 1_000,
            applied,
            ..PendingState::default()
        };
        let pin = Decision {
            pin_nodes: Some(vec!["n1".into()]),
            ..Decision::explain(1, "consolidated", 300)
        };
        let at = |job: &PendingState, decisions: &[Decision]| {
            plan(
                std::slice::from_ref(job),
                &[],
                &Input {
                    now: 1_000,
                    ..enforce(Some(decisions), &nodes)
                },
            )
        };
        let pinned = at(&waiting(Applied::default()), std::slice::from_ref(&pin));
        let change = &pinned.changes[0];
        assert_eq!(change.req_nodes, Some(vec!["n1".to_string()]));
        assert_eq!((change.min_nodes, change.max_nodes), (Some(1), Some(1)));
        assert_eq!(
            (change.record.nodes_was, change.record.max_nodes_was),
            (Some(1), Some(0)),
            "the user's counts, kept for the undo"
        );
        // The same pin next round: nothing to tell Slurm.
        let job = waiting(change.record.clone());
        let again = at(&job, std::slice::from_ref(&pin));
        assert!(again.changes.is_empty(), "{:?}", again.changes);
        // Undone (a decision that asks for nothing): the node list cleared, both counts back
        // to the user's (0: no maximum).
        let undone = at(&job, &[Decision::explain(1, "Slurm places it", 300)]);
        let change = &undone.changes[0];
        assert_eq!(change.req_nodes, Some(Vec::new()));
        assert_eq!((change.min_nodes, change.max_nodes), (Some(1), Some(0)));
        // A pin recorded before cinch bounded pins (no max_nodes_was) is bounded now.
        let old = waiting(Applied {
            max_nodes_was: None,
            ..job.applied.clone()
        });
        let bounded = at(&old, std::slice::from_ref(&pin));
        assert_eq!(bounded.changes[0].max_nodes, Some(1));
        assert_eq!(bounded.changes[0].record.max_nodes_was, Some(0));
    }

    #[test]
    fn a_delay_in_force_is_renewed_near_its_end_not_every_round() {
        // Job 1 was delayed by cinch until 1_060 (a round at 1_000 with "look again in 60 s").
        let delayed = |begin: i64, priority| PendingState {
            job_id: 1,
            min_nodes: 1,
            eligible_time: begin,
            applied: Applied {
                begin: Some(begin),
                prio: priority,
                until: 1_300,
                ..Applied::default()
            },
            ..PendingState::default()
        };
        let delay = |until, priority| Decision {
            delay_until: Some(until),
            priority,
            ..Decision::explain(1, "waits for its shape", 300)
        };
        let nodes = HashSet::new();
        let at = |now, job: &PendingState, decision: &Decision| {
            plan(
                std::slice::from_ref(job),
                &[],
                &Input {
                    now,
                    renew_within_s: renewal_margin_s(5),
                    words: true,
                    ..enforce(Some(std::slice::from_ref(decision)), &nodes)
                },
            )
        };
        let job = delayed(1_060, None);
        // Later rounds want it later still: the delay in force stands, Slurm is told nothing,
        // the decision is renewed in memory.
        for now in [1_005, 1_020, 1_044] {
            let plan = at(now, &job, &delay(now + 60, None));
            assert!(plan.changes.is_empty(), "at {now}: {:?}", plan.changes);
            assert_eq!(plan.renewed, [(1, now + 300)], "at {now}");
        }
        // Within three intervals (15 s) of its end it is moved to the decision's time.
        let plan = at(1_045, &job, &delay(1_105, None));
        assert_eq!(plan.changes.len(), 1, "{:?}", plan);
        assert_eq!(plan.changes[0].begin_time, Some(1_105));
        assert_eq!(plan.changes[0].record.begin, Some(1_105));
        // A decision that wants it sooner moves it at once.
        let plan = at(1_005, &job, &delay(1_030, None));
        assert_eq!(plan.changes[0].begin_time, Some(1_030));
        // Another field that changes rewrites the record with the delay still in force.
        let plan = at(1_005, &job, &delay(1_065, Some(400)));
        let change = &plan.changes[0];
        assert_eq!((change.begin_time, change.priority), (None, Some(400)));
        assert_eq!(
            change.record.begin,
            Some(1_060),
            "Slurm's begin time, not the wanted one"
        );
        // A job whose delay is not cinch's (a submit hold) is not left to lapse: it gets cinch's.
        let held = PendingState {
            submit_hold: Some(1_010),
            applied: Applied::default(),
            ..delayed(1_010, None)
        };
        let plan = at(1_005, &held, &delay(1_065, None));
        assert_eq!(plan.changes[0].begin_time, Some(1_065));
        // With no margin (rounds at every pass, as a simulation without an interval runs),
        // a delay stands until it ends.
        let plan = super::plan(
            std::slice::from_ref(&job),
            &[],
            &enforce(Some(&[delay(1_070, None)]), &nodes),
        );
        assert!(plan.changes.is_empty(), "{:?}", plan.changes);
    }

    fn elastic_pending(job_id: u32, gpus: u32) -> PendingState {
        PendingState {
            job_id,
            min_nodes: 1,
            gpus,
            elastic: Some(crate::models::elastic::Range { min: 2, max: 16 }),
            ..PendingState::default()
        }
    }

    fn sized(job_id: u32, gpus: u32) -> Decision {
        Decision {
            gpus: Some(gpus),
            ..Decision::explain(job_id, "sized", 300)
        }
    }

    fn enforce<'a>(decisions: Option<&'a [Decision]>, nodes: &'a HashSet<String>) -> Input<'a> {
        Input {
            idle: Default::default(),
            now: 1_000,
            mode: Mode::Enforce,
            decisions,
            nodes,
            requeue_limits: RequeueLimits {
                max_per_job: 10,
                budget: 10,
            },
            renew_within_s: 0,
            words: true,
        }
    }

    #[test]
    fn an_elastic_size_applies_only_within_the_declared_range_and_is_undone_with_the_rest() {
        let nodes = HashSet::new();
        let plain = PendingState {
            elastic: None,
            ..elastic_pending(3, 4)
        };
        let jobs = [elastic_pending(1, 4), elastic_pending(2, 4), plain];
        let decisions = [sized(1, 8), sized(2, 32), sized(3, 8)];
        let plan = plan(&jobs, &[], &enforce(Some(&decisions), &nodes));
        assert_eq!(plan.changes.len(), 1, "{:?}", plan.refused);
        assert_eq!(plan.changes[0].gpus, Some(8));
        assert_eq!(plan.changes[0].record.gpus, Some((4, 8)));
        assert!(plan.refused[0].contains("outside the range its user declared (elastic=2-16)"));
        assert!(plan.refused[1].contains("not elastic"));

        // The optimizer is lost: the size the user asked for comes back.
        let resized = PendingState {
            applied: plan.changes[0].record.clone(),
            ..elastic_pending(1, 8)
        };
        let undo = super::plan(&[resized], &[], &enforce(None, &nodes));
        assert_eq!(undo.changes[0].gpus, Some(4), "{:?}", undo.changes);
        assert!(undo.changes[0].record.is_empty());
    }

    #[test]
    fn a_running_elastic_job_is_resized_only_by_a_requeue_it_opted_in_to() {
        let nodes = HashSet::new();
        let elastic = RunningState {
            elastic: Some(crate::models::elastic::Range { min: 2, max: 16 }),
            ..running(1, 0)
        };
        let not_elastic = running(2, 0);
        let resize = |id, gpus| Decision {
            requeue: Some(true),
            gpus: Some(gpus),
            ..Decision::explain(id, "grow", 300)
        };
        let decisions = [resize(1, 16), resize(2, 8)];
        let plan = plan(
            &[],
            &[elastic.clone(), not_elastic],
            &enforce(Some(&decisions), &nodes),
        );
        let resized: Vec<(u32, Option<u32>)> = plan
            .after_requeue
            .iter()
            .map(|c| (c.job_id, c.gpus))
            .collect();
        assert_eq!(resized, [(1, Some(16))]);
        assert_eq!(plan.requeues.len(), 1);
        assert!(
            plan.refused[0].contains("not elastic"),
            "{:?}",
            plan.refused
        );
        // Without a requeue a running job's size is not a pending job's change.
        let plan2 = super::plan(&[], &[elastic], &enforce(Some(&[sized(1, 8)]), &nodes));
        assert!(plan2.refused[0].contains("not a pending job"));
    }
}
