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

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use super::cluster::ClusterSpec;
use cinch_core::models::corun::ShareMode;

use super::fairshare::{FairShare, Fairness, FairnessMeter, Multifactor};
use super::perf::{relative_speed, Network, Shape};
use super::workload::JobSpec;
use super::SimError;

mod backfill;
pub(crate) mod last_order;
use backfill::{backfill, LastOrder, PassKind};

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

/// Simulator settings that are not the workload or the policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    pub cluster: ClusterSpec,
    pub network: Network,
    /// Seconds between scheduling passes while jobs wait (Slurm's backfill interval; cinch's
    /// agent rounds).
    pub tick_s: f64,
    /// Pending jobs one pass tries at most (Slurm's bf_max_job_test).
    pub max_job_test: usize,
    /// Seconds a preempted job loses when it restarts (checkpoint reload).
    pub restart_penalty_s: f64,
    /// Seconds from Slurm placing a job to its work starting (its GPUs held meanwhile): the
    /// launch (slurmd, the batch script, the program's start). 0 in trace studies, where it is
    /// lost in hours of run time; the live replay measures it on its local cluster.
    pub start_latency_s: f64,
    /// Least seconds between two rounds of a policy (its `prepare`): 0, a round at every pass
    /// (every arrival and end); more, as a live agent that looks every so often. A multi-GPU
    /// job that arrives between rounds waits for the next one (cinch's submit hold).
    pub round_interval_s: f64,
    /// cinch.conf's requeue bounds, applied by the apply path as live: requeues per job and
    /// per rolling hour across the cluster.
    pub max_requeues_per_job: u32,
    pub max_requeues_per_hour: u32,
    /// GPU sharing (docs/policies/sharing.md); `None`: every GPU is given whole.
    pub sharing: Option<SimSharing>,
    /// The site's priorities: multifactor with fair share (the jobs' users), which every policy
    /// that keeps Slurm's order follows and cinch's nice adds to; `None`: priority/basic (submit
    /// order).
    pub multifactor: Option<Multifactor>,
    /// Idle GPUs (docs/policies/idle.md): cinch.conf's rules and `IdleAction` for every job;
    /// `None`: none set (the jobs' GPUs are not watched).
    pub idle: Option<SimIdle>,
}

/// The site's idle-GPU settings in a simulation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimIdle {
    pub rules: cinch_core::wire::idle::IdleRules,
    pub action: cinch_core::wire::idle::IdleAction,
}

/// A cluster where the last `nodes` nodes are sharing nodes (their own partition, each GPU cut
/// into `shards_per_gpu` shards): opted-in jobs of one GPU are decided at submission with the
/// plugin's code ([`cinch_core::models::sharing::ShareView::decide`]); the other jobs never use them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimSharing {
    pub nodes: u32,
    pub shards_per_gpu: u32,
    /// What cinch assumes (memory, margin, interference), as cinch.conf says.
    pub params: cinch_core::models::sharing::ShareParams,
    /// How fast jobs sharing a GPU really run (cinch assumes `params.interference`).
    pub truth: SharingTruth,
    /// Whether the site's table lists each application's busy fraction alone (cinch.conf's
    /// `ShareModelBusy`, as `cinch share-table` makes it from sacct's `gres/gpuutil`): cinch
    /// then knows how busy a job is when the job names its application (hinted jobs); else it
    /// takes every job as fully busy.
    pub busy_table: bool,
    /// The sharing GPUs are fenced from whole-GPU jobs by Slurm, as `gres/mps` is (a GPU is
    /// allocated as `gpu` or as `mps`, not both): then each sharing node shares one GPU (Slurm
    /// does MPS on one GPU per node) that whole-GPU jobs use while no shared job does, the
    /// node's other GPUs stay whole, and no node is set aside. Unfenced (shards on Slurm 22.05),
    /// the sharing nodes are a partition of their own, every GPU cut into shards.
    pub fenced: bool,
}

impl SimSharing {
    /// Nodes that never give whole GPUs: the sharing nodes, unless fenced.
    pub fn set_aside(&self) -> u32 {
        if self.fenced {
            0
        } else {
            self.nodes
        }
    }
}

/// How fast the simulated jobs sharing a GPU really run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SharingTruth {
    /// n jobs each at 1 / (1 + alpha (n - 1)), whatever they run.
    Interference(f64),
    /// As measured on an H100 ([`cinch_core::models::corun`]): from each job's busy fraction alone,
    /// its application's as measured ([`crate::colocation::app_busy`]).
    Measured(cinch_core::models::corun::ShareMode),
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            cluster: ClusterSpec::default(),
            network: Network::default(),
            tick_s: 30.0,
            max_job_test: 500,
            restart_penalty_s: 30.0,
            start_latency_s: 0.0,
            round_interval_s: 0.0,
            max_requeues_per_job: cinch_core::enact::apply::RequeueLimits::DEFAULT_MAX_PER_JOB,
            max_requeues_per_hour: cinch_core::enact::apply::RequeueLimits::DEFAULT_MAX_PER_HOUR,
            sharing: None,
            multifactor: None,
            idle: None,
        }
    }
}

/// The longest a simulated agent goes without a round while idle GPUs are watched: the live
/// agent's `IDLE_REFRESH_MS`.
const IDLE_ROUND_S: f64 = (cinch_core::enact::round::IDLE_REFRESH_MS / 1000) as f64;

/// What cinch asked Slurm to do with a pending job (as the plugin applies decisions).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Control {
    pub pin: Option<Vec<u32>>,
    pub begin: Option<f64>,
    pub hold: bool,
    pub priority: Option<u32>,
    /// In user terms (0 = default); a higher nice lowers the job's priority.
    pub nice: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    NotArrived,
    Pending,
    Running,
    Done,
    /// Cancelled by Slurm before it started (past its `--deadline`).
    Cancelled,
}

/// One job's life in the simulation.
#[derive(Debug, Clone)]
pub struct JobState {
    pub spec: JobSpec,
    pub phase: Phase,
    pub control: Control,
    /// Ideal-placement seconds of work done.
    pub work_done: f64,
    pub first_start: Option<f64>,
    pub finish: Option<f64>,
    /// When the current run began (including the restart penalty).
    pub run_start: f64,
    pub penalty: f64,
    pub rate: f64,
    /// The part of `rate` from running on more or fewer GPUs than asked (elastic jobs; 1.0
    /// otherwise): the rest is the placement's communication overhead.
    pub scale: f64,
    pub placement: Vec<(u32, u32)>,
    pub shape: Shape,
    /// GPU-seconds the job has held (what Tiresias calls attained service).
    pub attained: f64,
    /// GPU-seconds lost to running slower than consolidated (communication overhead).
    pub comm_lost: f64,
    pub restarts: u32,
    /// When the job last entered the queue: its submission, or its latest preemption (what
    /// Slurm reports as the submit time of a requeued job).
    pub queued_since: f64,
    /// A job turned into shards at submission: (sharing node, shards, the GPU it runs on in
    /// [`State::shared`] once started).
    pub shard: Option<(u32, u32, Option<usize>)>,
    /// The most other jobs a shard job shared its GPU with.
    pub co_runners_max: u32,
    /// Runs on a shared GPU that failed for memory: over its cap under MPS, or out of the GPU's
    /// memory under shards (its own or a neighbour's understated peak). Each loses its work.
    pub share_failures: u32,
    /// When Slurm kills the current run: its start plus the job's time limit.
    pub limit_at: f64,
    /// Held at submission until the policy's next round (its begin time is that hold).
    submit_held: bool,
    /// Whether Slurm killed the job at its time limit (TIMEOUT) before its work was done: it
    /// ended (its JCT and makespan count), but its work did not.
    pub killed: bool,
    /// Whether cinch cancelled it for GPUs that sat idle (the admin's `IdleAction=cancel`).
    pub cancelled: bool,
    /// GPU-seconds it held in its idle tail (`JobSpec::idle_from`).
    pub idle_held: f64,
    /// Requeues cinch made for its idle GPUs.
    pub idle_requeues: u32,
    /// Whether cinch requeued or cancelled it for idle GPUs while it was busy.
    pub busy_touched: bool,
    generation: u32,
}

impl JobState {
    /// GPU-seconds held by a running job up to `now`, including the current run.
    pub fn attained_at(&self, now: f64) -> f64 {
        if self.phase == Phase::Running {
            self.attained + f64::from(self.spec.gpus) * (now - self.run_start).max(0.0)
        } else {
            self.attained
        }
    }

    /// When Slurm would expect a running job to end: start plus its time limit.
    fn expected_end(&self) -> f64 {
        self.limit_at
    }

    /// When the current run ends, as things stand at `now`: its work done at its current speed
    /// (after any start-up it still pays), or its time limit, whichever comes first.
    fn planned_end(&self, now: f64) -> f64 {
        let done = now + self.penalty + (self.spec.run_time - self.work_done).max(0.0) / self.rate;
        done.min(self.limit_at)
    }
}

/// The simulation's state, as schedulers see it.
pub struct State {
    pub config: SimConfig,
    pub jobs: Vec<JobState>,
    pub free: Vec<u32>,
    pub free_total: u32,
    pub pending: Vec<usize>,
    pub running: Vec<usize>,
    /// Bumped whenever a job arrives, starts or stops: a policy that sees the same version
    /// twice sees the same cluster.
    pub version: u64,
    /// The sharing nodes' GPUs (empty without sharing).
    pub shared: Vec<SharedGpuState>,
    /// Shard jobs waiting for room on their node, in submission order, and running.
    pub shard_waiting: Vec<usize>,
    pub shard_running: Vec<usize>,
    /// Users' usage and fair-share factors, with multifactor.
    pub fair_share: Option<FairShare>,
    /// Whether users get their share (two users or more).
    meter: Option<FairnessMeter>,
}

/// One GPU of a sharing node.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedGpuState {
    pub node: u32,
    pub index: u32,
    pub shards_free: u32,
    pub jobs: Vec<usize>,
}

impl State {
    /// The state before the first job arrives.
    fn new(config: SimConfig, specs: Vec<JobSpec>) -> State {
        let cluster = config.cluster;
        let users = || specs.iter().map(|s| s.user.as_str());
        let fair_share = config.multifactor.map(|m| FairShare::new(m, users()));
        let meter = FairnessMeter::new(users());
        let mut state = State {
            fair_share,
            meter,
            config,
            jobs: specs
                .into_iter()
                .map(|spec| JobState {
                    queued_since: spec.submit as f64,
                    shape: Shape {
                        gpus: spec.gpus,
                        nodes: 0,
                        racks: 0,
                    },
                    spec,
                    phase: Phase::NotArrived,
                    control: Control::default(),
                    work_done: 0.0,
                    first_start: None,
                    finish: None,
                    run_start: 0.0,
                    penalty: 0.0,
                    rate: 1.0,
                    scale: 1.0,
                    placement: Vec::new(),
                    attained: 0.0,
                    comm_lost: 0.0,
                    restarts: 0,
                    shard: None,
                    co_runners_max: 0,
                    share_failures: 0,
                    limit_at: f64::INFINITY,
                    submit_held: false,
                    killed: false,
                    cancelled: false,
                    idle_held: 0.0,
                    idle_requeues: 0,
                    busy_touched: false,
                    generation: 0,
                })
                .collect(),
            free: vec![cluster.gpus_per_node; cluster.nodes as usize],
            free_total: cluster.total_gpus(),
            pending: Vec::new(),
            running: Vec::new(),
            version: 0,
            shared: Vec::new(),
            shard_waiting: Vec::new(),
            shard_running: Vec::new(),
        };
        if let Some(sharing) = config.sharing {
            for node in cluster.nodes.saturating_sub(sharing.nodes)..cluster.nodes {
                if sharing.fenced {
                    // One GPU shared, claimed from the whole ones while shared jobs run on it.
                    state.shared.push(SharedGpuState {
                        node,
                        index: 0,
                        shards_free: sharing.shards_per_gpu,
                        jobs: Vec::new(),
                    });
                    continue;
                }
                // The sharing nodes are their own partition: no whole GPU is given there.
                state.free[node as usize] = 0;
                state.free_total -= cluster.gpus_per_node;
                for index in 0..cluster.gpus_per_node {
                    state.shared.push(SharedGpuState {
                        node,
                        index,
                        shards_free: sharing.shards_per_gpu,
                        jobs: Vec::new(),
                    });
                }
            }
        }
        state
    }

    /// GPUs outside the sharing nodes.
    pub fn whole_gpus(&self) -> u32 {
        let sharing = self.config.sharing.map_or(0, |s| s.set_aside());
        self.config.cluster.gpus_per_node * self.config.cluster.nodes.saturating_sub(sharing)
    }

    /// A state to test schedulers on: `pending` jobs queued, `running` jobs started at their
    /// submit time on the given (node, GPUs) placements.
    pub fn scenario(
        config: SimConfig,
        pending: Vec<JobSpec>,
        running: Vec<(JobSpec, Vec<(u32, u32)>)>,
    ) -> State {
        let first_running = pending.len();
        let (specs, placements): (Vec<JobSpec>, Vec<Vec<(u32, u32)>>) = pending
            .into_iter()
            .map(|spec| (spec, Vec::new()))
            .chain(running)
            .unzip();
        let mut state = State::new(config, specs);
        let mut finishes = BinaryHeap::new();
        for (job, placement) in placements.into_iter().enumerate() {
            state.jobs[job].phase = Phase::Pending;
            if job < first_running {
                state.pending.push(job);
            } else {
                let at = state.jobs[job].spec.submit as f64;
                start(&mut state, job, placement, at, &mut finishes);
            }
        }
        state
    }

    pub fn cluster(&self) -> &ClusterSpec {
        &self.config.cluster
    }

    /// The priority the site's own settings give a pending job at `now`, before any nice:
    /// multifactor's fair share and age; 0 under priority/basic, where submit order decides.
    pub fn site_priority(&self, job: usize, now: f64) -> f64 {
        self.fair_share.as_ref().map_or(0.0, |fs| {
            fs.priority(job, self.jobs[job].spec.submit as f64, now)
        })
    }

    fn eligible(&self, job: usize, now: f64) -> bool {
        let c = &self.jobs[job].control;
        !c.hold && c.begin.is_none_or(|b| b <= now)
    }
}

/// A change a scheduler asks for before a pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Requeue a running job (it keeps its progress and pays the restart penalty later).
    Preempt(usize),
    /// Replace what cinch controls of a pending job.
    Control(usize, Control),
    /// Change a pending elastic job's GPU count (`scontrol update TresPerJob=gres:gpu:N`).
    Resize(usize, u32),
    /// Cancel a running job (`scancel`): one whose GPUs sat idle, where the site says cancel.
    Cancel(usize),
    /// Requeue a running job for its idle GPUs (as `Preempt`, counted apart).
    RequeueIdle(usize),
}

/// One point of the cluster's timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub time: f64,
    pub busy_gpus: u32,
    pub pending: u32,
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub jobs: Vec<JobState>,
    pub timeline: Vec<Sample>,
    /// Jobs refused before the start because the cluster can never hold them.
    pub unschedulable: Vec<(String, String)>,
    pub passes: u64,
    /// How fairly users shared the GPUs while they competed (traces with two users or more).
    pub fairness: Option<Fairness>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct At(f64);
impl Eq for At {}
impl PartialOrd for At {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for At {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
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
        last_order: LastOrder::default(),
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
    /// The queue's order at the last pass (backfill's sort starts from it).
    last_order: LastOrder,
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
            &mut self.last_order,
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

/// Starts a window's running jobs on their nodes, as they ran before its first instant.
fn start_window(
    state: &mut State,
    window: &Window,
    first_instant: f64,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) -> Result<(), SimError> {
    if window.running.is_empty() {
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
    Ok(())
}

/// How long Slurm keeps a requeued job from starting again: its begin time becomes now +
/// `cred_expire` + 1 (slurmctld's job_mgr.c; `cred_expire` defaults to 120 s).
pub const REQUEUE_DELAY_S: f64 = cinch_core::slurm::scontrol::DEFAULT_REQUEUE_DELAY_S as f64;

/// One scheduling pass at `now`; whether it started any job.
fn pass(
    state: &mut State,
    scheduler: &mut dyn Scheduler,
    now: f64,
    round: bool,
    kind: PassKind,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
    last_order: &mut LastOrder,
) -> bool {
    if scheduler.cancels_past_deadline() {
        cancel_past_deadline(state, now);
    }
    if round {
        let actions = scheduler.prepare(state, now);
        carry_out(state, actions, now);
    }
    backfill(state, scheduler, now, kind, finishes, last_order)
}

/// Cancels the pending jobs that can no longer end by their deadline (a policy that does).
fn cancel_past_deadline(state: &mut State, now: f64) {
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
fn carry_out(state: &mut State, actions: Vec<Action>, now: f64) {
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

fn start(
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
    state.running.push(job);
}

/// Ends a job's current run at `now`: its progress and overheads are booked, GPUs freed.
fn stop(state: &mut State, job: usize, now: f64) {
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

/// The sharing decision for an opted-in job arriving at `now`, with what the live agent's view
/// would hold: the sharing GPUs (shards free, the jobs on each and their time limits, shard jobs
/// waiting counted where they would go), the whole-GPU nodes (free GPUs, the first time limit
/// to run out). Returns whether the job became a shard job.
fn share_at_submit(state: &mut State, job: usize, now: f64) -> bool {
    use cinch_core::models::sharing::{
        self, CoRunner, ShareJob, ShareView, SharedGpu, Verdict, WholeGpuNode,
    };
    let (Some(sharing), Some(share)) = (state.config.sharing, state.jobs[job].spec.share) else {
        return false;
    };
    let left = |j: usize| -> i64 {
        let job = &state.jobs[j];
        (job.first_start.unwrap_or(now) + job.spec.time_limit - now).max(60.0) as i64
    };
    // What the live agent would know of a job's busy fraction: the site's table's entry for the
    // application it names, if the job names one.
    let busy = |j: usize| -> sharing::Busy {
        let spec = &state.jobs[j].spec;
        if sharing.busy_table && spec.hinted {
            sharing::Busy {
                fraction: crate::colocation::app_busy(spec.app),
                source: sharing::BusySource::Table,
            }
        } else {
            sharing::Busy::UNKNOWN
        }
    };
    // The GPUs whole, then what the plugin's agent would count on them (`ShareView::add_running`,
    // `add_waiting`: the same rules as `plugin/src/share.rs::build`).
    let mut view = ShareView {
        gpus: state
            .shared
            .iter()
            .map(|g| SharedGpu {
                node: g.node.to_string(),
                index: g.index,
                shards_total: sharing.shards_per_gpu,
                // A fenced GPU no shared job holds is only there while a whole one is free.
                shards_free: if sharing.fenced
                    && g.jobs.is_empty()
                    && state.free[g.node as usize] == 0
                {
                    0
                } else {
                    sharing.shards_per_gpu
                },
                co_runners: Vec::new(),
            })
            .collect(),
        whole: Vec::new(),
        reports: sharing::ReportBook::default(),
        mix: sharing::ShareMix::default(),
    };
    for g in &state.shared {
        for &j in &g.jobs {
            let Some((_, shards, _)) = state.jobs[j].shard else {
                continue;
            };
            let co_runner = CoRunner {
                left_s: left(j),
                busy: busy(j).fraction,
                user: Some(user_id(&state.jobs[j].spec.user)),
            };
            view.add_running(&g.node.to_string(), Some(g.index), shards, co_runner);
        }
    }
    debug_assert!(
        view.gpus
            .iter()
            .zip(&state.shared)
            .all(|(v, g)| v.shards_free == g.shards_free || v.shards_free == 0),
        "the view counts the shards the engine holds"
    );
    for &w in &state.shard_waiting {
        if let Some((node, shards, _)) = state.jobs[w].shard {
            let pinned = ShareJob {
                prediction: None,
                busy: busy(w),
                run_s: state.jobs[w].spec.time_limit as i64,
                user: Some(user_id(&state.jobs[w].spec.user)),
            };
            view.add_waiting(&node.to_string(), shards, &pinned, &sharing.params);
        }
    }
    let whole_nodes = state.config.cluster.nodes - sharing.set_aside();
    let mut first_end = vec![None::<f64>; whole_nodes as usize];
    for &r in &state.running {
        let end = state.jobs[r].expected_end();
        for &(node, _) in &state.jobs[r].placement {
            let e = &mut first_end[node as usize];
            *e = Some(e.map_or(end, |e: f64| e.min(end)));
        }
    }
    view.whole = (0..whole_nodes as usize)
        .map(|n| WholeGpuNode {
            partitions: Vec::new(),
            gpus_free: state.free[n],
            first_end: first_end[n].map(|e| e as i64),
        })
        .collect();
    let asking = ShareJob {
        prediction: sharing::predict(Some(share.stated_gib), None, None),
        busy: busy(job),
        run_s: state.jobs[job].spec.time_limit as i64,
        user: Some(user_id(&state.jobs[job].spec.user)),
    };
    match view.decide(&asking, None, now as i64, &sharing.params) {
        Verdict::Share { node, shards, .. } => {
            let node: u32 = node.parse().expect("the view names nodes by index");
            state.jobs[job].shard = Some((node, shards, None));
            state.shard_waiting.push(job);
            true
        }
        Verdict::Whole(_) => false,
    }
}

/// A simulated user's numeric id (as Slurm knows users by uid): a hash of the name (FNV-1a).
fn user_id(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Starts the waiting shard jobs that fit, in submission order, each on the first GPU of its
/// node with room (Slurm's order). A job's true peak decides whether its run holds: under MPS
/// one over its memory cap fails at once and its user resubmits it whole; under shards, when
/// the true peaks on a GPU pass its memory, every job there runs out of memory and is
/// resubmitted (whole, the ones that understated their peak; the others asking to share again).
fn start_shard_jobs(
    state: &mut State,
    now: f64,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) {
    let Some(sharing) = state.config.sharing else {
        return;
    };
    let mut failed: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < state.shard_waiting.len() {
        let job = state.shard_waiting[i];
        let Some((node, shards, _)) = state.jobs[job].shard else {
            i += 1;
            continue;
        };
        let claimable = |g: &SharedGpuState| {
            !sharing.fenced || !g.jobs.is_empty() || state.free[g.node as usize] > 0
        };
        let Some(gpu) = state
            .shared
            .iter()
            .position(|g| g.node == node && g.shards_free >= shards && claimable(g))
        else {
            i += 1;
            continue;
        };
        state.shard_waiting.remove(i);
        if sharing.fenced && state.shared[gpu].jobs.is_empty() {
            claim_fenced(state, node, true);
        }
        let g = &mut state.shared[gpu];
        g.shards_free -= shards;
        g.jobs.push(job);
        let j = &mut state.jobs[job];
        j.shard = Some((node, shards, Some(gpu)));
        j.phase = Phase::Running;
        j.first_start.get_or_insert(now);
        j.run_start = now;
        j.limit_at = now + j.spec.time_limit;
        j.penalty = state.config.start_latency_s;
        j.shape = Shape {
            gpus: 1,
            nodes: 1,
            racks: 1,
        };
        state.shard_running.push(job);
        state.version += 1;
        let peak = |j: usize| state.jobs[j].spec.share.map_or(0.0, |s| s.peak_gib);
        let fails = match sharing.params.mode {
            ShareMode::Mps => {
                peak(job) > sharing.params.mem_cap_gib(shards, sharing.shards_per_gpu) + 1e-9
            }
            ShareMode::TimeSlice => {
                state.shared[gpu].jobs.iter().map(|&j| peak(j)).sum::<f64>()
                    > sharing.params.gpu_mem_gib + 1e-9
            }
        };
        if fails {
            let crashed = match sharing.params.mode {
                ShareMode::Mps => vec![job],
                ShareMode::TimeSlice => state.shared[gpu].jobs.clone(),
            };
            for j in crashed {
                book(&mut state.jobs[j], now);
                let g = &mut state.shared[gpu];
                g.shards_free += state.jobs[j].shard.map_or(0, |(_, units, _)| units);
                g.jobs.retain(|&k| k != j);
                state.shard_running.retain(|&k| k != j);
                failed.push(j);
            }
            if sharing.fenced && state.shared[gpu].jobs.is_empty() {
                claim_fenced(state, node, false);
            }
        }
        rerate_gpu(state, gpu, now, finishes);
    }
    for job in failed {
        let j = &mut state.jobs[job];
        let understated = j.spec.share.is_some_and(|s| s.peak_gib > s.stated_gib);
        j.shard = None;
        j.phase = Phase::Pending;
        j.work_done = 0.0;
        j.queued_since = now;
        j.generation += 1;
        j.share_failures += 1;
        if understated {
            // Its user saw it fail for memory: it comes back asking for a whole GPU.
            j.spec.share = None;
        }
        state.version += 1;
        if understated || !share_at_submit(state, job, now) {
            state.pending.push(job);
        }
    }
}

/// Books the progress of every job on shared GPU `gpu` at its old speed and plans its finish at
/// the speed the jobs now on that GPU allow.
fn rerate_gpu(
    state: &mut State,
    gpu: usize,
    now: f64,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) {
    let truth = state
        .config
        .sharing
        .map_or(SharingTruth::Interference(0.0), |s| s.truth);
    let jobs = state.shared[gpu].jobs.clone();
    let rate_jobs = jobs.len() as u32;
    let rate = match truth {
        SharingTruth::Interference(alpha) => {
            1.0 / (1.0 + alpha * f64::from(rate_jobs.saturating_sub(1)))
        }
        SharingTruth::Measured(mode) => {
            let busy: Vec<f64> = jobs
                .iter()
                .map(|&j| crate::colocation::app_busy(state.jobs[j].spec.app))
                .collect();
            cinch_core::models::corun::CorunModel::default().speed(mode, &busy)
        }
    };
    for job in jobs {
        let j = &mut state.jobs[job];
        book(j, now);
        j.co_runners_max = j.co_runners_max.max(rate_jobs.saturating_sub(1));
        j.rate = rate;
        j.generation += 1;
        finishes.push(Reverse((At(j.planned_end(now)), job, j.generation)));
    }
}

/// Adds a running job's progress since `run_start` and moves `run_start` to `now`.
fn book(j: &mut JobState, now: f64) {
    let wall = (now - j.run_start).max(0.0);
    let working = (wall - j.penalty).max(0.0);
    j.work_done = (j.work_done + working * j.rate).min(j.spec.run_time);
    j.attained += f64::from(j.spec.gpus) * wall;
    j.penalty = (j.penalty - wall).max(0.0);
    j.run_start = now;
}

/// Ends a shard job at `now`: its shards are freed, the jobs left on its GPU speed up, and
/// waiting shard jobs may start.
fn stop_shard(
    state: &mut State,
    job: usize,
    now: f64,
    finishes: &mut BinaryHeap<Reverse<(At, usize, u32)>>,
) {
    book(&mut state.jobs[job], now);
    let Some((_, shards, Some(gpu))) = state.jobs[job].shard else {
        return;
    };
    let g = &mut state.shared[gpu];
    g.shards_free += shards;
    g.jobs.retain(|&j| j != job);
    let (node, emptied) = (g.node, g.jobs.is_empty());
    if emptied && state.config.sharing.is_some_and(|s| s.fenced) {
        claim_fenced(state, node, false);
    }
    state.shard_running.retain(|&j| j != job);
    state.version += 1;
    rerate_gpu(state, gpu, now, finishes);
    start_shard_jobs(state, now, finishes);
}

/// Takes a fenced shared GPU of `node` from the whole ones when its first shared job starts
/// (`claim`), or gives it back when its last one ends.
fn claim_fenced(state: &mut State, node: u32, claim: bool) {
    let free = &mut state.free[node as usize];
    if claim {
        *free -= 1;
        state.free_total -= 1;
    } else {
        *free += 1;
        state.free_total += 1;
    }
    state.version += 1;
}
