//! The discrete-event core: jobs arrive, a simulated Slurm starts them where a [`Scheduler`]
//! says, they run at the speed the performance model gives their placement, and finish.
//!
//! The simulated Slurm is what slurmctld does with cons_tres and sched/backfill, reduced to
//! what matters for GPU jobs: it takes the pending jobs in priority order, skips those held or
//! with a begin time in the future, and starts each job where the scheduler places it. At
//! every event the main scheduler stops at the first job that cannot start; every `tick_s`
//! (`bf_interval`) while jobs wait, backfill tests them all and reserves GPUs for each job that
//! cannot start, and later jobs may only start if they delay none of those reservations
//! ([`backfill`]). `bf_max_job_test` bounds how many jobs one pass tries.
//!
//! Laid out by step: `state` (the settings, each job's state and the cluster's, a round's
//! actions, what a run returns), `events` (a pass, a job's start and stop, its idle tail),
//! `shards` (shared GPUs), `backfill` (the simulated Slurm's two schedulers), `queue` (the queue
//! as a pass takes it, in the policy's order), `last_order` (the agent's snapshot laid out in
//! the last look's order); the event loop (`Run`) here.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use super::cluster::ClusterSpec;
use cinch_core::models::corun::ShareMode;

use super::fairshare::{FairShare, Fairness, FairnessMeter, Multifactor};
use super::perf::{relative_speed, Network, Shape};
use super::workload::JobSpec;
use super::SimError;

mod backfill;
mod events;
pub(crate) mod last_order;
mod queue;
mod shards;
mod state;
use backfill::{backfill, PassKind};
use queue::Queue;

pub use events::*;
use shards::*;
pub use state::*;

/// A scheduler as the simulated Slurm consults it.
pub trait Scheduler {
    /// The name reports use.
    fn name(&self) -> String;

    /// Changes wanted before a pass (cinch's decisions, preemptions).
    fn prepare(&mut self, _state: &State, _now: f64) -> Vec<Action> {
        Vec::new()
    }

    /// Queue position of a pending job: lower goes first (ties: submit time, then id).
    fn order_key(&self, state: &State, job: usize, now: f64) -> f64;

    /// Where the job starts now, as (node, GPUs) pairs; `None` to leave it waiting.
    fn place(&self, state: &State, job: usize, now: f64) -> Option<Vec<(u32, u32)>>;

    /// A pass ended at `now` (jobs may have started): what a live agent's next round would see.
    fn after_pass(&mut self, _state: &State, _now: f64) {}

    /// Whether new multi-GPU jobs wait for this scheduler's next round, as cinch's submit hold
    /// keeps them from Slurm until its agent has looked (`SubmitHoldSeconds`).
    fn holds_new_jobs(&self) -> bool {
        false
    }

    /// The median delay timer applied to jobs (from submission to the end of the delay), for
    /// policies that delay jobs.
    fn median_delay_s(&self) -> Option<f64> {
        None
    }

    /// For policies that read running jobs' progress: the median |predicted / actual - 1| of the
    /// run a job's progress predicted at a tenth of its steps, and over how many ended jobs.
    fn progress_error(&self) -> Option<(f64, usize)> {
        None
    }

    /// For the portfolio: what its evaluations chose over the run, in a line.
    fn portfolio_summary(&self) -> Option<String> {
        None
    }

    /// Whether jobs' QoS targets are Slurm `--deadline`s: Slurm cancels a pending job once it
    /// can no longer end by its deadline (now + time limit past it; sbatch(1)).
    fn cancels_past_deadline(&self) -> bool {
        false
    }
}

/// Calls `progress(done, total)` now and then; the CLI draws its progress bar from it.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize);

/// Runs `jobs` (sorted by submit time or not) under `scheduler` to the end.
pub fn simulate(
    jobs: &[JobSpec],
    scheduler: &mut dyn Scheduler,
    config: SimConfig,
    progress: Progress<'_>,
) -> Result<Outcome, SimError> {
    simulate_window(jobs, &Window::default(), scheduler, config, progress)
}

/// Where a replay of a window of the past starts and stops: the jobs already running at its
/// start, on the nodes they held, and a time after which nothing more is simulated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    pub running: Vec<RunningAtStart>,
    /// Stop at the first event after this (jobs then unfinished keep `finish: None`).
    pub until: Option<f64>,
    /// How often each job had been requeued by the window's start (its id, Slurm's restart
    /// count then), for the jobs waiting or running then: it counts on from there, as a policy's
    /// cap on a job's requeues (cinch's `max_preemptions`) and cinch.conf's `MaxRequeuesPerJob`
    /// read it. Without it a job requeued as often as its cap allows replays as one never
    /// requeued, and is requeued again.
    pub requeued: Vec<(u32, u32)>,
    /// Each user's fair-share usage at the window's time 0 (decayed GPU-seconds, as multifactor
    /// counted it then), for a run under multifactor: without it every user starts even, where
    /// live the weeks before had ranked them. Users with no job in the window are ignored.
    pub usage: Vec<(String, f64)>,
}

/// A job running when a window starts: its id ([`JobSpec::id`]), its GPUs per node and when its
/// run began (at or before the window's first instant). Its spec's run time and limit are its
/// whole run's, counted from that start.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningAtStart {
    pub job: u32,
    pub placement: Vec<(u32, u32)>,
    pub started: f64,
}

/// [`simulate`] from a window's start: `window.running` hold their nodes from the first instant
/// (their submission must be no later than it), and the run stops after `window.until`.
pub fn simulate_window(
    jobs: &[JobSpec],
    window: &Window,
    scheduler: &mut dyn Scheduler,
    config: SimConfig,
    progress: Progress<'_>,
) -> Result<Outcome, SimError> {
    let Admitted {
        mut specs,
        unschedulable,
        whole_gpus,
    } = admit(jobs, &config)?;
    specs.sort_by_key(|j| j.submit);
    let total = specs.len();
    let first_instant = specs.first().map_or(0.0, |j| j.submit as f64);
    let mut state = State::new(config, specs);
    let mut finishes: BinaryHeap<Reverse<(At, usize, u32)>> = BinaryHeap::new();
    start_window(&mut state, window, first_instant, &mut finishes)?;
    // The last round, and a round owed once the interval allows (something changed since).
    let interval = config.round_interval_s.max(0.0);
    let mut run = Run {
        holds: interval > 0.0 && scheduler.holds_new_jobs(),
        interval,
        state,
        finishes,
        whole_gpus,
        timeline: Vec::new(),
        next_arrival: 0,
        done: 0,
        passes: 0,
        next_tick: None,
        queue: Queue::default(),
        idle_ticks: 0,
        last_round: f64::NEG_INFINITY,
        round_version: u64::MAX,
        next_round: None,
    };
    let mut last_report = 0usize;
    progress(0, total);
    while let Some(now) = run.next_instant() {
        if window.until.is_some_and(|until| now > until) {
            break;
        }
        let started = run.step(scheduler, now);
        if run.done >= last_report + 100 || run.done == total {
            progress(run.done, total);
            last_report = run.done;
        }
        run.plan_next_tick(now);
        // A run where jobs wait, nothing runs or arrives, and passes start nothing is stuck.
        let state = &run.state;
        let waiting = !state.pending.is_empty();
        if waiting && state.running.is_empty() && run.next_arrival == state.jobs.len() && !started {
            run.idle_ticks += 1;
            if run.idle_ticks > 100_000 {
                return Err(SimError::Stalled {
                    policy: scheduler.name(),
                    waiting: state.pending.len(),
                });
            }
        } else {
            run.idle_ticks = 0;
        }
    }
    let state = run.state;
    if !state.shard_waiting.is_empty() && window.until.is_none() {
        return Err(SimError::Stalled {
            policy: scheduler.name(),
            waiting: state.shard_waiting.len(),
        });
    }
    progress(run.done, total);
    Ok(Outcome {
        fairness: state.meter.as_ref().and_then(FairnessMeter::fairness),
        jobs: state.jobs,
        timeline: run.timeline,
        unschedulable,
        passes: run.passes,
    })
}

/// The jobs a run takes, those it cannot (name, why), and the GPUs outside the sharing nodes.
struct Admitted {
    specs: Vec<JobSpec>,
    unschedulable: Vec<(String, String)>,
    whole_gpus: u32,
}

/// Checks the configuration and sets aside the jobs the cluster can never run.
fn admit(jobs: &[JobSpec], config: &SimConfig) -> Result<Admitted, SimError> {
    config.cluster.validate().map_err(SimError::Invalid)?;
    config.network.validate().map_err(SimError::Invalid)?;
    let cluster = config.cluster;
    if let Some(s) = config.sharing {
        if s.set_aside() >= cluster.nodes || s.nodes > cluster.nodes || s.shards_per_gpu == 0 {
            return Err(SimError::Invalid(format!(
                "sharing needs fewer sharing nodes ({}) than nodes ({}) and at least one shard \
                 per GPU",
                s.nodes, cluster.nodes
            )));
        }
    }
    // Whole GPUs are only outside the sharing nodes.
    let whole_nodes = cluster.nodes - config.sharing.map_or(0, |s| s.set_aside());
    let whole_gpus = whole_nodes * cluster.gpus_per_node;
    let mut unschedulable = Vec::new();
    let mut specs: Vec<JobSpec> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let problem = if job.gpus > whole_gpus {
            Some(format!(
                "needs {} GPUs, the cluster has {whole_gpus} outside its sharing nodes",
                job.gpus,
            ))
        } else if job.gpus_per_node.is_some_and(|n| {
            n == 0 || n > cluster.gpus_per_node || job.gpus % n != 0 || job.gpus / n > whole_nodes
        }) {
            Some(format!(
                "asks for {:?} GPUs per node, the nodes have {}",
                job.gpus_per_node, cluster.gpus_per_node
            ))
        } else if !(job.run_time.is_finite() && job.run_time > 0.0) {
            Some(format!("run time {} is not positive", job.run_time))
        } else {
            None
        };
        match problem {
            Some(p) => unschedulable.push((job.name.clone(), p)),
            None => specs.push(job.clone()),
        }
    }
    Ok(Admitted {
        specs,
        unschedulable,
        whole_gpus,
    })
}

/// A run in progress: the state, the events to come, and what is recorded.
struct Run {
    state: State,
    /// Planned ends: (when, job, its run's generation).
    finishes: BinaryHeap<Reverse<(At, usize, u32)>>,
    whole_gpus: u32,
    timeline: Vec<Sample>,
    /// The next job to arrive (jobs are sorted by submission).
    next_arrival: usize,
    done: usize,
    passes: u64,
    /// The next periodic pass while jobs wait.
    next_tick: Option<f64>,
    /// The queue as a pass takes it (its buffers kept between passes).
    queue: Queue,
    /// Passes in a row where jobs wait and nothing can ever change.
    idle_ticks: u32,
    /// The round interval, and whether the policy holds new multi-GPU jobs for the next round.
    interval: f64,
    holds: bool,
    last_round: f64,
    /// The state's version at the last round.
    round_version: u64,
    /// A round owed once the interval allows (something changed since the last).
    next_round: Option<f64>,
}

impl Run {
    /// The next instant anything happens: an arrival, an end, a tick or a round owed.
    fn next_instant(&self) -> Option<f64> {
        let arrival = self
            .state
            .jobs
            .get(self.next_arrival)
            .map(|j| j.spec.submit as f64);
        let finish = self.finishes.peek().map(|Reverse((At(t), _, _))| *t);
        [arrival, finish, self.next_tick, self.next_round]
            .into_iter()
            .flatten()
            .min_by(f64::total_cmp)
    }

    /// Everything at `now`: ends, arrivals, shared GPUs, fair share, the pass (a round if one
    /// is due) and the timeline. Whether the pass started a job.
    fn step(&mut self, scheduler: &mut dyn Scheduler, now: f64) -> bool {
        // Finishes first, so their GPUs are free for this instant's pass.
        self.finish_until(now);
        let round = now >= self.last_round + self.interval;
        self.arrive(now, round);
        let state = &mut self.state;
        start_shard_jobs(state, now, &mut self.finishes);
        if let Some(fs) = state.fair_share.as_mut().filter(|fs| fs.due(now)) {
            // slurmctld's decay thread, every PriorityCalcPeriod.
            let running = state.running.iter().map(|&j| {
                let job = &state.jobs[j];
                (j, job.spec.gpus, job.run_start)
            });
            fs.recalc(now, running);
            // Priorities moved: a policy must look again.
            state.version += 1;
        }
        self.passes += 1;
        if round {
            self.last_round = now;
            self.next_round = None;
            // The round releases the jobs held at submission for it.
            for &j in &state.pending {
                let job = &mut state.jobs[j];
                if job.submit_held {
                    job.submit_held = false;
                    job.control.begin = None;
                }
            }
        }
        // Backfill at its interval on the clock; the main scheduler at every other event.
        let kind = if self.next_tick.is_some_and(|tick| now >= tick) {
            PassKind::Backfill
        } else {
            PassKind::Main
        };
        let started = pass(
            state,
            scheduler,
            now,
            round,
            kind,
            &mut self.finishes,
            &mut self.queue,
        );
        if round {
            self.round_version = state.version;
        } else if state.version != self.round_version {
            self.next_round = Some(self.last_round + self.interval);
        }
        // With idle GPUs watched, a round at least every minute while jobs run, as the live
        // agent asks the optimizer at least that often on a quiet cluster: the watchers'
        // readings change with no event.
        if state.config.idle.is_some() && !state.running.is_empty() {
            let due = self.last_round + self.interval.max(IDLE_ROUND_S);
            self.next_round = Some(self.next_round.map_or(due, |r| r.min(due)));
        }
        scheduler.after_pass(state, now);
        self.record(now);
        started
    }

    /// Ends every run planned to end by `now`.
    fn finish_until(&mut self, now: f64) {
        let state = &mut self.state;
        while let Some(&Reverse((At(t), job, generation))) = self.finishes.peek() {
            if t > now {
                break;
            }
            self.finishes.pop();
            if state.jobs[job].generation != generation || state.jobs[job].phase != Phase::Running {
                continue; // Preempted (or re-rated) since this finish was planned.
            }
            if state.jobs[job].shard.is_some() {
                stop_shard(state, job, t, &mut self.finishes);
            } else {
                stop(state, job, t);
            }
            let j = &mut state.jobs[job];
            j.phase = Phase::Done;
            j.finish = Some(t);
            // Slurm ends a run at its limit, done or not (TIMEOUT); one that ends first is done.
            if t >= j.limit_at && j.work_done < j.spec.run_time * (1.0 - 1e-9) {
                j.killed = true;
            } else {
                j.work_done = j.spec.run_time;
            }
            self.done += 1;
        }
    }

    /// Queues the jobs submitted by `now` (or puts them on a shared GPU at once); outside a
    /// round, a policy that holds new multi-GPU jobs holds them until the next.
    fn arrive(&mut self, now: f64, round: bool) {
        let state = &mut self.state;
        while self.next_arrival < state.jobs.len()
            && state.jobs[self.next_arrival].spec.submit as f64 <= now
        {
            let next = self.next_arrival;
            self.next_arrival += 1;
            // Running since before the window: it arrived long ago.
            if state.jobs[next].phase != Phase::NotArrived {
                continue;
            }
            state.jobs[next].phase = Phase::Pending;
            if !share_at_submit(state, next, now) {
                state.pending.push(next);
                let j = &mut state.jobs[next];
                if self.holds && !round && j.spec.gpus >= 2 {
                    j.control.begin = Some(self.last_round + self.interval);
                    j.submit_held = true;
                }
            }
            state.version += 1;
        }
    }

    /// The fairness meter's look, and a timeline sample when busy GPUs or the queue changed.
    fn record(&mut self, now: f64) {
        let state = &mut self.state;
        if let Some(meter) = state.meter.as_mut() {
            let jobs = &state.jobs;
            meter.observe(
                now,
                self.whole_gpus,
                state.version,
                state.running.iter().map(|&j| (j, jobs[j].spec.gpus)),
                state.pending.iter().map(|&j| (j, jobs[j].spec.gpus)),
            );
        }
        // A fenced shared GPU in use is claimed from the whole ones (counted in free_total).
        let fenced = state.config.sharing.is_some_and(|s| s.fenced);
        let busy = self.whole_gpus - state.free_total
            + if fenced {
                0
            } else {
                state.shared.iter().filter(|g| !g.jobs.is_empty()).count() as u32
            };
        let sample = Sample {
            time: now,
            busy_gpus: busy,
            pending: state.pending.len() as u32,
        };
        if self
            .timeline
            .last()
            .is_none_or(|s: &Sample| s.busy_gpus != busy || s.pending != sample.pending)
        {
            self.timeline.push(sample);
        }
    }

    /// While jobs wait, a backfill pass at the next tick. Backfill runs on the clock (every
    /// tick_s from 0), as Slurm's thread does, not relative to the last event; a begin time
    /// that passes wakes neither scheduler, so a job cinch delayed starts at the next pass
    /// after it, as live.
    fn plan_next_tick(&mut self, now: f64) {
        let state = &self.state;
        self.next_tick = if state.pending.is_empty() {
            None
        } else {
            let tick_s = state.config.tick_s;
            Some(((now / tick_s).floor() + 1.0) * tick_s)
        };
    }
}

/// Fair share from the users' usage at the window's time 0.
fn start_usage(state: &mut State, usage: &[(String, f64)]) -> Result<(), SimError> {
    let Some(fs) = state.fair_share.as_mut() else {
        return Err(SimError::Invalid(
            "window: users' usage given for a run without multifactor priorities".into(),
        ));
    };
    if let Some((user, gpu_s)) = usage.iter().find(|(_, g)| !g.is_finite() || *g < 0.0) {
        return Err(SimError::Invalid(format!(
            "window: user {user}: usage {gpu_s} is not a number of GPU-seconds"
        )));
    }
    fs.start_from(0.0, usage.iter().map(|(user, g)| (user.as_str(), *g)));
    Ok(())
}

/// Starts a window's running jobs on their nodes, as they ran before its first instant.
fn start_window(
    state: &mut State,
    window: &Window,
    first_instant: f64,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) -> Result<(), SimError> {
    if !window.usage.is_empty() {
        start_usage(state, &window.usage)?;
    }
    if window.running.is_empty() && window.requeued.is_empty() {
        return Ok(());
    }
    let index: HashMap<u32, usize> = state
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.spec.id, i))
        .collect();
    let nodes = state.config.cluster.nodes;
    for run in &window.running {
        let bad = |why: String| SimError::Invalid(format!("window: job {}: {why}", run.job));
        let &job = index
            .get(&run.job)
            .ok_or_else(|| bad("not among the jobs".into()))?;
        let j = &state.jobs[job];
        if j.phase != Phase::NotArrived {
            return Err(bad("listed twice".into()));
        }
        if j.spec.submit as f64 > first_instant || run.started > first_instant {
            return Err(bad(format!(
                "submitted or started after the window's first instant ({first_instant})"
            )));
        }
        let gpus: u32 = run.placement.iter().map(|&(_, g)| g).sum();
        if gpus != j.spec.gpus || j.shard.is_some() {
            return Err(bad(format!(
                "holds {gpus} GPUs on its nodes, asks for {}",
                j.spec.gpus
            )));
        }
        for &(node, g) in &run.placement {
            if node >= nodes || state.free[node as usize] < g {
                return Err(bad(format!("node {node} does not have {g} GPUs free")));
            }
        }
        start(state, job, run.placement.clone(), run.started, finishes);
    }
    // Counted after the starts above: a run that began before the window paid its restart's
    // reload within it.
    for &(id, requeues) in &window.requeued {
        let &job = index.get(&id).ok_or_else(|| {
            SimError::Invalid(format!(
                "window: job {id}: requeued before it, not among the jobs"
            ))
        })?;
        let j = &mut state.jobs[job];
        if j.spec.submit as f64 > first_instant {
            return Err(SimError::Invalid(format!(
                "window: job {id}: requeued before it, submitted after its first instant \
                 ({first_instant})"
            )));
        }
        j.restarts = requeues;
    }
    Ok(())
}
