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
//!
//! Laid out by step: `state` (what Slurm shows of a job and the record cinch keeps), `validate`
//! (a decision to the target it asks for, or why it is refused), `requeue` (requeue and idle
//! checks, the per-job and cluster-wide bounds), `plan` (one pending job's change, field by
//! field); [`plan()`] puts them together for a round.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::wire::decision::{Decision, IdleDecision};
use crate::wire::idle::{IdleAction, IdleRules};
use crate::wire::mode::Mode;
use crate::wire::reason::Reason;

mod plan;
mod requeue;
mod state;
#[cfg(test)]
mod tests;
mod validate;

use plan::job_plan;
use requeue::{check_idle, check_requeue, size_after_requeue};
pub use requeue::{RequeueLimiter, RequeueLimits, AFTER_REQUEUE_TTL_S};
pub use state::{Applied, Fields, PendingState, RunningState, SharedText};
use validate::{check_size, hands_off_refusal, validate, Target};

/// Longest delay cinch will apply, whatever the optimizer says.
pub const MAX_DELAY_S: i64 = 7 * 86_400;
/// Longest decision lifetime cinch will accept.
pub const MAX_TTL_S: u32 = 7 * 86_400;
/// Slurm's nice range (NICE_OFFSET - 3 either way).
pub const MAX_NICE: i64 = 2_147_483_645;
/// Slurm's "recompute the priority" value (INFINITE), as `scontrol release` sends it.
pub const PRIORITY_AUTOMATIC: u32 = u32::MAX;

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
