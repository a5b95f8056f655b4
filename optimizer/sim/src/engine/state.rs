//! What the simulation is made of: its settings, each job's state and the cluster's, the
//! actions a round hands the simulated Slurm, and what a run returns.

use super::*;

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
pub(super) const IDLE_ROUND_S: f64 = (cinch_core::enact::round::IDLE_REFRESH_MS / 1000) as f64;

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
    pub(super) submit_held: bool,
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
    pub(super) generation: u32,
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
    pub(super) fn expected_end(&self) -> f64 {
        self.limit_at
    }

    /// When the current run ends, as things stand at `now`: its work done at its current speed
    /// (after any start-up it still pays), or its time limit, whichever comes first.
    pub(super) fn planned_end(&self, now: f64) -> f64 {
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
    /// The running jobs' GPUs on each node with the time their limits give them back,
    /// `(limit end, node, GPUs)` in time order: kept as jobs start and stop, so backfill's plan
    /// of the nodes starts from it rather than from a sort.
    pub(super) limit_ends: Vec<(f64, u32, u32)>,
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
    pub(super) meter: Option<FairnessMeter>,
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
    /// The jobs of `indices` (the queue, the running list) with their states, in order, each
    /// state asked for a few jobs before it is read: states lie in submission order, and a
    /// pass over a list in another order waits for each one (a cache miss a job).
    pub(crate) fn each_job<'a>(
        &'a self,
        indices: &'a [usize],
    ) -> impl Iterator<Item = (usize, &'a JobState)> + 'a {
        cinch_core::util::fetch_ahead(indices, |&a| self.jobs.get(a)).map(|&j| (j, &self.jobs[j]))
    }

    /// The state before the first job arrives.
    pub(super) fn new(config: SimConfig, specs: Vec<JobSpec>) -> State {
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
            limit_ends: Vec::new(),
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

    pub(super) fn eligible(&self, job: usize, now: f64) -> bool {
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

impl Outcome {
    /// The job of this id as the run left it.
    pub fn job(&self, id: u32) -> Option<&JobState> {
        self.jobs.iter().find(|j| j.spec.id == id)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct At(pub(super) f64);
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
