//! What happens to jobs: a pass of the simulated Slurm (its deadlines, a round's actions, then
//! backfill), a job's start and its stop, and its idle tail.

use super::*;

/// How long Slurm keeps a requeued job from starting again: its begin time becomes now +
/// `cred_expire` + 1 (slurmctld's job_mgr.c; `cred_expire` defaults to 120 s).
pub const REQUEUE_DELAY_S: f64 = cinch_core::slurm::scontrol::DEFAULT_REQUEUE_DELAY_S as f64;

/// One scheduling pass at `now`; whether it started any job.
pub(super) fn pass(
    state: &mut State,
    scheduler: &mut dyn Scheduler,
    now: f64,
    round: bool,
    kind: PassKind,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
    queue: &mut Queue,
) -> bool {
    if scheduler.cancels_past_deadline() {
        cancel_past_deadline(state, now);
    }
    if round {
        let actions = scheduler.prepare(state, now);
        carry_out(state, actions, now);
    }
    backfill(state, scheduler, now, kind, finishes, queue)
}

/// Cancels the pending jobs that can no longer end by their deadline (a policy that does).
pub(super) fn cancel_past_deadline(state: &mut State, now: f64) {
    let jobs = &mut state.jobs;
    let before = state.pending.len();
    state.pending.retain(|&j| {
        let job = &mut jobs[j];
        let past = job
            .spec
            .due
            .is_some_and(|due| now + job.spec.time_limit > due);
        if past {
            job.phase = Phase::Cancelled;
        }
        !past
    });
    if state.pending.len() != before {
        state.version += 1;
    }
}

/// Carries out a round's actions on the jobs they still apply to.
pub(super) fn carry_out(state: &mut State, actions: Vec<Action>, now: f64) {
    for action in actions {
        match action {
            Action::Preempt(job) | Action::RequeueIdle(job)
                if state.jobs[job].phase == Phase::Running =>
            {
                if let Action::RequeueIdle(_) = action {
                    let idle = in_idle_tail(&state.jobs[job], now);
                    let j = &mut state.jobs[job];
                    j.idle_requeues += 1;
                    j.busy_touched |= !idle;
                }
                stop(state, job, now);
                // The idle model: a job requeued in its idle tail has no work left (its script
                // finds its work done, or a hung run resumes): it ends once it restarts.
                if let Some(from) = state.jobs[job].spec.idle_from {
                    let j = &mut state.jobs[job];
                    if j.work_done >= from * j.spec.run_time * (1.0 - 1e-9) {
                        j.work_done = j.spec.run_time;
                    }
                }
                let j = &mut state.jobs[job];
                j.phase = Phase::Pending;
                j.restarts += 1;
                j.queued_since = now;
                // Slurm makes a requeued job wait out the launch credential's lifetime before
                // it may start again (begin time = now + cred_expire + 1, default 120 s).
                j.control.begin = Some(now + REQUEUE_DELAY_S);
                j.generation += 1;
                state.pending.push(job);
            }
            Action::Cancel(job)
                if state.jobs[job].phase == Phase::Running && state.jobs[job].shard.is_none() =>
            {
                state.jobs[job].busy_touched |= !in_idle_tail(&state.jobs[job], now);
                stop(state, job, now);
                let j = &mut state.jobs[job];
                j.phase = Phase::Done;
                j.finish = Some(now);
                j.cancelled = true;
                // A job cancelled in its idle tail had done its work; one cancelled before is
                // killed with its work lost.
                match j.spec.idle_from {
                    Some(from) if j.work_done >= from * j.spec.run_time * (1.0 - 1e-9) => {
                        j.work_done = j.spec.run_time;
                    }
                    _ => j.killed = true,
                }
            }
            Action::Control(job, control) if state.jobs[job].phase == Phase::Pending => {
                state.jobs[job].control = control;
            }
            Action::Resize(job, gpus)
                if state.jobs[job].phase == Phase::Pending
                    && gpus > 0
                    && gpus <= state.config.cluster.total_gpus()
                    && state.jobs[job].spec.elastic.is_some() =>
            {
                state.jobs[job].spec.gpus = gpus;
                state.version += 1;
            }
            _ => {}
        }
    }
}

pub(super) fn start(
    state: &mut State,
    job: usize,
    placement: Vec<(u32, u32)>,
    now: f64,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) {
    let cluster = state.config.cluster;
    let mut racks: Vec<u32> = placement.iter().map(|&(n, _)| cluster.rack_of(n)).collect();
    racks.sort_unstable();
    racks.dedup();
    let used: u32 = placement.iter().map(|&(_, g)| g).sum();
    debug_assert_eq!(
        used, state.jobs[job].spec.gpus,
        "placement must give the job its GPUs"
    );
    for &(node, gpus) in &placement {
        let free = &mut state.free[node as usize];
        assert!(*free >= gpus, "node {node} over-allocated");
        *free -= gpus;
    }
    state.free_total -= used;
    state.version += 1;
    let network = state.config.network;
    let penalty = state.config.restart_penalty_s;
    let j = &mut state.jobs[job];
    j.shape = Shape {
        gpus: used,
        nodes: placement.len() as u32,
        racks: racks.len() as u32,
    };
    j.rate = relative_speed(
        j.spec.app,
        j.shape,
        cluster.ideal_shape(used),
        j.spec.local_bsz,
        &network,
    );
    j.scale = j.spec.elastic.as_ref().map_or(1.0, |e| e.speed_on(used));
    j.rate *= j.scale;
    j.penalty = state.config.start_latency_s + if j.restarts > 0 { penalty } else { 0.0 };
    j.placement = placement;
    j.run_start = now;
    j.limit_at = now + j.spec.time_limit;
    j.first_start.get_or_insert(now);
    j.phase = Phase::Running;
    j.control = Control::default();
    finishes.push(Reverse((At(j.planned_end(now)), job, j.generation)));
    let limit_at = j.limit_at;
    let at = state.limit_ends.partition_point(|r| r.0 <= limit_at);
    (state.limit_ends).splice(at..at, j.placement.iter().map(|&(n, g)| (limit_at, n, g)));
    state.running.push(job);
}

/// Ends a job's current run at `now`: its progress and overheads are booked, GPUs freed.
pub(super) fn stop(state: &mut State, job: usize, now: f64) {
    if let Some(fs) = state.fair_share.as_mut() {
        let j = &state.jobs[job];
        fs.ran(job, j.spec.gpus, j.run_start, now);
    }
    let j = &mut state.jobs[job];
    let wall = (now - j.run_start).max(0.0);
    let working = (wall - j.penalty).max(0.0);
    let before = j.work_done;
    j.work_done = (j.work_done + working * j.rate).min(j.spec.run_time);
    if let Some(from) = j.spec.idle_from {
        // The GPU time this run spent in the job's idle tail.
        let tail_from = from * j.spec.run_time;
        if j.work_done > tail_from && j.rate > 0.0 {
            j.idle_held += f64::from(j.spec.gpus) * (j.work_done - before.max(tail_from)) / j.rate;
        }
    }
    j.attained += f64::from(j.spec.gpus) * wall;
    j.comm_lost += f64::from(j.spec.gpus) * working * (1.0 - j.rate / j.scale);
    for &(node, gpus) in &j.placement {
        state.free[node as usize] += gpus;
        let ends = &mut state.limit_ends;
        let from = ends.partition_point(|r| r.0 < j.limit_at);
        let same = ends[from..]
            .iter()
            .position(|r| *r == (j.limit_at, node, gpus));
        debug_assert!(
            same.is_some(),
            "a running job's GPUs are among the limit ends"
        );
        if let Some(k) = same {
            ends.remove(from + k);
        }
    }
    state.free_total += j.spec.gpus;
    state.version += 1;
    j.placement.clear();
    state.running.retain(|&r| r != job);
}

/// Whether a running job is in its idle tail at `now` (its GPUs idle: the idle model,
/// [`JobSpec::idle_from`]).
pub fn in_idle_tail(job: &JobState, now: f64) -> bool {
    idle_tail_start(job).is_some_and(|t| now >= t - 1e-6)
}

/// When a running job's current run enters its idle tail (the idle model), if it has one.
pub fn idle_tail_start(job: &JobState) -> Option<f64> {
    let from = job.spec.idle_from?;
    let left = (from * job.spec.run_time - job.work_done).max(0.0);
    Some(
        job.run_start
            + job.penalty
            + if left > 0.0 {
                left / job.rate.max(1e-12)
            } else {
                0.0
            },
    )
}
