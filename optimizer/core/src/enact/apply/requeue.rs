//! Requeues: the per-job and cluster-wide bounds, the checks a requeue or idle decision must
//! pass, and the size a requeued elastic job is given while it waits.

use super::*;

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

/// A requeue is only for a running job whose user allowed it and checkpoints, that the admin
/// has not kept cinch off, that has not been requeued `max_per_job` times, and asks for nothing
/// else.
pub(super) fn check_requeue(
    d: &Decision,
    job: Option<&RunningState>,
    max_per_job: u32,
) -> Result<(), String> {
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
pub(super) fn check_idle(
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

/// A requeued elastic job's new size, set while it waits out Slurm's requeue delay. Slurm keeps
/// a requeued job's node list: cinch's pin from its last start is cleared with it, a user's is
/// kept. The record lets the size lapse like any other change unless a round renews it.
pub(super) fn size_after_requeue(job: &RunningState, gpus: u32, why: &str, now: i64) -> JobChange {
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
