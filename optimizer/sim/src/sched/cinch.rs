//! A cinch policy in the simulator, run exactly as live: each round builds the [`Snapshot`] the
//! plugin's agent would send (what a live agent can see, no more: hints only from the jobs whose
//! users give them, the same cap on pending jobs), calls the policy's `decide` as the service
//! does, and hands the decisions to the core's one apply path ([`apply::plan`]), the very function
//! the plugin's reconcile calls. Its changes are carried out on the simulated Slurm the way
//! `slurm_update_job` carries them out live (a node list, a begin time, a hold, a priority, a nice
//! value), and what cinch applied is kept per job as the plugin keeps it in the AdminComment, so
//! TTLs, renewals, undo and every refusal rule hold here too.

use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::HashSet;
use std::sync::Arc;

use super::{first_fit, pinned};
use crate::cluster::ClusterSpec;
use crate::engine::last_order::LastOrderFirst;
use crate::engine::Scheduler;
use crate::engine::{Action, Control, JobState, Phase, State, REQUEUE_DELAY_S};
use cinch_core::enact::apply::{self, Applied, PendingState, RunningState, PRIORITY_AUTOMATIC};
use cinch_core::enact::round::{
    self, AskError, ClusterError, InProcess, Level, Optimizer, Reading, Round,
};
use cinch_core::models::hints::Hints;
use cinch_core::policy::{Mode, PolicyConfig};
use cinch_core::slurm::order::{order_key, OrderKey};
use cinch_core::wire::decision::{Decision, Decisions};
use cinch_core::wire::snapshot::{
    JobProgress, Node, NodeState, PendingJob, RunningJob, Snapshot, MAX_SNAPSHOT_PENDING,
    SCHEMA_VERSION,
};

/// The seed the simulated optimizer mixes with each snapshot's time, as the service does with
/// its `seed` setting (default 0).
const OPTIMIZER_SEED: u64 = 0;

pub struct CinchPolicy {
    /// The name reports use.
    name: String,
    /// The agent's round, the one the plugin runs.
    round: Round,
    /// The optimizer in-process: the service's step (learn, then decide with its seed).
    optimizer: InProcess,
    slurm: SimSlurm,
}

/// What the simulated Slurm keeps for cinch: the plugin's AdminComment record per job, and what
/// the round's last look saw.
#[derive(Default)]
struct SimSlurm {
    /// Per delayed job, the longest delay applied (end of delay - queued since), seconds.
    delays: FxHashMap<usize, f64>,
    /// What cinch applied to each job, kept while it is queued or running (the plugin's
    /// AdminComment record, which outlives the job's start).
    records: FxHashMap<usize, Applied>,
    /// The cluster's node names, for validating pins.
    node_names: Arc<HashSet<String>>,
    /// The state version the last read saw.
    read_version: Option<u64>,
    /// The last round's reading, handed back if that round changed nothing: a round asked
    /// with the cluster as it was (its time came) reads it as the last did.
    kept_reading: Option<Reading>,
    /// The state version the history last saw.
    observed: Option<u64>,
    /// The snapshot of the last look at the cluster, refreshed incrementally.
    cache: SnapshotCache,
    /// The agent's log lines shown on stderr, up to this level (`CINCH_SIM_AGENT_LOG`).
    log_level: Option<Level>,
}

/// The level `CINCH_SIM_AGENT_LOG` asks for, if any.
fn agent_log_level() -> Option<Level> {
    match std::env::var("CINCH_SIM_AGENT_LOG")
        .ok()?
        .to_ascii_lowercase()
        .as_str()
    {
        "error" => Some(Level::Error),
        "info" => Some(Level::Info),
        "verbose" => Some(Level::Verbose),
        "debug" => Some(Level::Debug),
        _ => None,
    }
}

impl CinchPolicy {
    pub fn new(config: PolicyConfig, name: String) -> Self {
        CinchPolicy {
            name,
            round: Round::default(),
            optimizer: InProcess::new(config, OPTIMIZER_SEED),
            slurm: SimSlurm {
                log_level: agent_log_level(),
                ..SimSlurm::default()
            },
        }
    }

    /// The policy starting from what `history` knows (a replay of a window of the past starts
    /// from what the live optimizer knew at its start).
    pub fn with_history(
        config: PolicyConfig,
        name: String,
        history: cinch_core::learn::history::History,
    ) -> Self {
        let mut policy = CinchPolicy::new(config, name);
        policy.optimizer.history = history;
        policy
    }

    /// Keeps a record of what the snapshots show, as the service does
    /// ([`cinch_core::learn::record`]).
    pub fn keep_record(&mut self, limits: cinch_core::learn::record::RecordLimits) {
        self.optimizer.record = Some(cinch_core::learn::record::Record::new(limits));
    }

    /// The record kept since [`Self::keep_record`].
    pub fn record(&self) -> Option<&cinch_core::learn::record::Record> {
        self.optimizer.record.as_ref()
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.optimizer.policy
    }

    /// The perfect-knowledge reference: every job tells the policy exactly how much work it has
    /// and has done ([`truth_hints`]), which no site's users can. Its results are labelled a
    /// reference, never a policy to choose.
    pub fn told_run_times(mut self) -> Self {
        self.slurm.cache.told_run_times = true;
        self
    }

    /// Runs `policy` from the next round on (an admin's `cinch policy set`, or the portfolio's
    /// choice): what it learned stays.
    pub fn set_policy(&mut self, policy: PolicyConfig) {
        self.optimizer.policy = policy;
    }

    /// The core's plan for `decisions` on the simulated Slurm's jobs at `now`: the same
    /// [`apply::plan`] call the round makes, with the simulated jobs described as the plugin
    /// describes Slurm's (and the whole hour's requeue budget).
    pub fn plan(&mut self, state: &State, decisions: &[Decision], now: i64) -> apply::Plan {
        let reading = self.slurm.read(state);
        apply::plan(
            &reading.pending,
            &reading.running,
            &apply::Input {
                idle: state.config.idle.map_or_else(Default::default, |i| i.rules),
                now,
                mode: Mode::Enforce,
                decisions: Some(decisions),
                nodes: &reading.nodes,
                requeue_limits: apply::RequeueLimits {
                    max_per_job: state.config.max_requeues_per_job,
                    budget: state.config.max_requeues_per_hour,
                },
                renew_within_s: apply::renewal_margin_s(settings(state).interval_s),
                words: true,
            },
        )
    }

    /// One round at `now` with `optimizer`'s answer: the simulated Slurm's updates and requeues.
    pub fn round_with(
        &mut self,
        state: &State,
        now: f64,
        optimizer: &mut impl Optimizer,
    ) -> Vec<Action> {
        run_round(&mut self.round, &mut self.slurm, optimizer, state, now)
    }
}

/// The round's settings in the simulation: enforce, the simulation's round interval and
/// requeue limits, cinch.conf's default cap on decisions.
fn settings(state: &State) -> round::Settings {
    round::Settings {
        mode: Mode::Enforce,
        interval_s: state.config.round_interval_s.max(0.0) as u32,
        max_requeues_per_hour: state.config.max_requeues_per_hour,
        max_requeues_per_job: state.config.max_requeues_per_job,
        max_decisions: round::DEFAULT_MAX_DECISIONS,
        idle: state.config.idle.map_or_else(Default::default, |i| i.rules),
    }
}

fn run_round(
    round: &mut Round,
    slurm: &mut SimSlurm,
    optimizer: &mut impl Optimizer,
    state: &State,
    now: f64,
) -> Vec<Action> {
    let mut ports = SimPorts {
        slurm,
        optimizer,
        state,
        now,
        index: FxHashMap::default(),
        actions: Vec::new(),
        idle_decided: FxHashSet::default(),
    };
    round.run(
        &settings(state),
        &mut ports,
        (now * 1000.0) as i64,
        Vec::new(),
    );
    ports.actions
}

/// Below this many records beyond twice the jobs in view, those of ended jobs are not swept.
const MIN_SWEPT_RECORDS: usize = 1024;

impl SimSlurm {
    /// The simulated cluster as the plugin reads Slurm's: pending and running jobs with cinch's
    /// records, the node names.
    fn read(&mut self, state: &State) -> Reading {
        if self.node_names.len() != state.cluster().nodes as usize {
            self.node_names = Arc::new(
                (0..state.cluster().nodes)
                    .map(ClusterSpec::node_name)
                    .collect(),
            );
        }
        // What cinch applied to a job ends with the job. Only the records of queued and
        // running jobs are read, and an ended job never comes back, so those of ended jobs are
        // swept once the records outnumber twice the jobs in view (and MIN_SWEPT_RECORDS), not
        // every round (a pass over every record, each looking up its job, was about 1% of the
        // suite). The history sweeps its per-job sets the same way (`History::note_stated_targets`).
        if self.records.len() > 2 * (state.pending.len() + state.running.len()) + MIN_SWEPT_RECORDS
        {
            self.records
                .retain(|j, _| matches!(state.jobs[*j].phase, Phase::Pending | Phase::Running));
        }
        let unchanged = self.read_version == Some(state.version);
        self.read_version = Some(state.version);
        if let Some(kept) = self.kept_reading.take().filter(|_| unchanged) {
            debug_assert!(
                same_reading(&kept, &self.read_anew(state)),
                "the kept reading"
            );
            return kept;
        }
        self.read_anew(state)
    }

    /// [`SimSlurm::read`], built whole.
    fn read_anew(&self, state: &State) -> Reading {
        Reading {
            pending: (state.each_job(&state.pending))
                .map(|(j, job)| self.pending_state(job, j))
                .collect(),
            running: (state.each_job(&state.running))
                .map(|(j, job)| {
                    let spec = &job.spec;
                    RunningState {
                        idle_warned: Default::default(),
                        job_id: spec.id,
                        requeue: spec.preemptible,
                        checkpoints: spec.preemptible,
                        requeues: job.restarts,
                        elastic: spec.elastic.as_ref().map(|e| e.range),
                        // The simulated site excludes no jobs (its traces are GPU jobs).
                        hands_off: None,
                        gpus: spec.gpus,
                        applied: self.records.get(&j).cloned().unwrap_or_default(),
                        idle_action: state
                            .config
                            .idle
                            .map_or_else(Default::default, |i| i.action),
                    }
                })
                .collect(),
            nodes: self.node_names.clone(),
            unregistered: 0,
        }
    }

    /// A simulated pending job as the plugin describes a Slurm job to the apply path.
    fn pending_state(&self, j: &JobState, job: usize) -> PendingState {
        let control = &j.control;
        PendingState {
            job_id: j.spec.id,
            has_node_list: control.pin.is_some(),
            min_nodes: match &control.pin {
                Some(nodes) => nodes.len() as u32,
                None => default_min_nodes(&j.spec),
            },
            // A pinned job runs on its nodes only, as cinch's pin bounds it live.
            max_nodes: control.pin.as_ref().map_or(0, |nodes| nodes.len() as u32),
            eligible_time: control.begin.unwrap_or(j.queued_since) as i64,
            priority: control.priority.unwrap_or(0),
            held: control.hold,
            nice: control.nice,
            applied: self.records.get(&job).cloned().unwrap_or_default(),
            submit_hold: None,
            foreign: apply::Fields::default(),
            renewed_until: None,
            gpus: j.spec.gpus,
            elastic: j.spec.elastic.as_ref().map(|e| e.range),
            hands_off: None,
        }
    }
}

/// The round's ports in the simulation: the simulated Slurm (changes become engine actions)
/// and the optimizer.
struct SimPorts<'a, O> {
    slurm: &'a mut SimSlurm,
    optimizer: &'a mut O,
    state: &'a State,
    now: f64,
    /// Job id -> job index, built at the first change or requeue.
    index: FxHashMap<u32, usize>,
    actions: Vec<Action>,
    /// The jobs the optimizer's answer flagged for idle GPUs (a requeue of one is an idle
    /// requeue, counted apart).
    idle_decided: FxHashSet<u32>,
}

impl<O> SimPorts<'_, O> {
    fn job(&mut self, id: u32) -> Result<usize, ClusterError> {
        if self.index.is_empty() {
            let state = self.state;
            self.index = state
                .pending
                .iter()
                .chain(&state.running)
                .map(|&j| (state.jobs[j].spec.id, j))
                .collect();
        }
        self.index.get(&id).copied().ok_or(ClusterError::Gone(id))
    }
}

impl<O> round::Cluster for SimPorts<'_, O> {
    fn unchanged(&mut self) -> bool {
        self.slurm.read_version == Some(self.state.version)
    }

    fn read(&mut self) -> Result<Reading, ClusterError> {
        Ok(self.slurm.read(self.state))
    }

    fn snapshot(&mut self, now: i64) -> Snapshot {
        debug_assert_eq!(now, self.now as i64);
        let told = self.slurm.cache.told_run_times;
        let snapshot = self.slurm.cache.refresh(self.state, self.now);
        debug_assert_eq!(
            *snapshot,
            snapshot_told(self.state, self.now, told),
            "the cached snapshot"
        );
        self.slurm.observed = Some(self.state.version);
        std::mem::replace(&mut self.slurm.cache.snapshot, SnapshotCache::empty())
    }

    fn reading_done(&mut self, reading: Reading) {
        // Kept only if the round asked the simulated Slurm for nothing: every change, requeue
        // and cancel is an action, and a change of a job's settings moves no state version.
        if self.actions.is_empty() {
            self.slurm.kept_reading = Some(reading);
        }
    }

    fn snapshot_done(&mut self, mut snapshot: Snapshot) {
        // Kept to build the next one incrementally (the agent's status is the round's).
        snapshot.agent = None;
        self.slurm.cache.snapshot = snapshot;
    }

    fn change(&mut self, change: &apply::JobChange) -> Result<(), ClusterError> {
        let job = self.job(change.job_id)?;
        let j = &self.state.jobs[job];
        let now = self.now;
        if j.phase == Phase::Running {
            // A requeued job's new size, applied after its requeue (`Action::Preempt`, already
            // queued): the requeue's begin time stands, cinch's old pin goes.
            if let Some(gpus) = change.gpus {
                self.actions.push(Action::Resize(job, gpus));
            }
            let control = Control {
                begin: Some(now + REQUEUE_DELAY_S),
                ..updated(&j.control, change)
            };
            self.actions.push(Action::Control(job, control));
        } else {
            let control = updated(&j.control, change);
            if let Some(until) = control.begin.filter(|&b| b > now) {
                let timer = until - j.queued_since;
                let longest = self.slurm.delays.entry(job).or_insert(timer);
                *longest = longest.max(timer);
            }
            if let Some(gpus) = change.gpus {
                self.actions.push(Action::Resize(job, gpus));
            }
            self.actions.push(Action::Control(job, control));
        }
        if change.record.is_empty() {
            self.slurm.records.remove(&job);
        } else {
            self.slurm.records.insert(job, change.record.clone());
        }
        Ok(())
    }

    fn requeue(&mut self, job_id: u32) -> Result<(), ClusterError> {
        let job = self.job(job_id)?;
        self.actions.push(if self.idle_decided.contains(&job_id) {
            Action::RequeueIdle(job)
        } else {
            Action::Preempt(job)
        });
        Ok(())
    }

    fn cancel(&mut self, job_id: u32) -> Result<(), ClusterError> {
        let job = self.job(job_id)?;
        self.actions.push(Action::Cancel(job));
        Ok(())
    }

    fn wants_words(&self) -> bool {
        self.slurm.log_level.is_some()
    }

    fn log(&mut self, level: Level, message: &str) {
        // The agent's log, as slurmctld.log would have it, for looking into a run:
        // `CINCH_SIM_AGENT_LOG=info` (or error, verbose, debug) prints it to stderr.
        if self.slurm.log_level.is_some_and(|shown| level <= shown) {
            eprintln!("[{:.0}] cinch: {message}", self.now);
        }
    }
}

impl<O: Optimizer> Optimizer for SimPorts<'_, O> {
    fn ask(&mut self, snapshot: &Snapshot) -> Result<Decisions, AskError> {
        let answer = self.optimizer.ask(snapshot)?;
        self.idle_decided = answer
            .decisions
            .iter()
            .filter(|d| d.idle.is_some())
            .map(|d| d.job_id)
            .collect();
        Ok(answer)
    }

    fn policy_version(&mut self) -> Result<u64, AskError> {
        self.optimizer.policy_version()
    }
}

/// How busy a working job keeps its GPUs in the simulation (any share over the idle threshold
/// would do: the idle model knows only working and idle).
const WORKING_BUSY_PERCENT: u32 = 90;

/// What the watchers on the running jobs' nodes read of their GPUs at `now`: idle in a job's
/// idle tail, busy otherwise (the idle model, docs/simulator.md, "Idle GPUs").
fn watch_gpus(
    tracker: &mut cinch_core::models::idle::IdleTracker,
    state: &State,
    rules: &cinch_core::wire::idle::IdleRules,
    now: f64,
) {
    for &j in &state.running {
        let job = &state.jobs[j];
        // The mean over the interval since the job's last reading (or its start), as NVML's
        // samples average: a reading that spans the start of the idle tail is partly busy.
        let since = tracker
            .job(job.spec.id)
            .map(|r| r.last_at as f64)
            .filter(|&at| at >= job.run_start)
            .unwrap_or(job.run_start);
        let span = now - since;
        let idle_part = match crate::engine::idle_tail_start(job) {
            Some(t) if span > 0.0 => (now - t.max(since)).clamp(0.0, span) / span,
            Some(t) => f64::from(u8::from(now >= t)),
            None => 0.0,
        };
        let busy = (f64::from(WORKING_BUSY_PERCENT) * (1.0 - idle_part)).round() as u32;
        let gpu = cinch_core::wire::watch::GpuUse {
            gpus: job.spec.gpus,
            busy_percent: busy,
            memory_mib: 0,
        };
        tracker.reading(job.spec.id, &job.spec.user, now as i64, gpu, rules);
    }
    let running: HashSet<u32> = state
        .running
        .iter()
        .map(|&j| state.jobs[j].spec.id)
        .collect();
    tracker.retain_running(|id| running.contains(&id));
}

/// Slurm's node count of a job nobody pinned: one, or one per node of a per-node request.
fn default_min_nodes(spec: &crate::workload::JobSpec) -> u32 {
    spec.gpus_per_node.map_or(1, |p| spec.gpus / p)
}

/// The snapshot the plugin would send for this state at `now`: every node, every running job,
/// and the pending jobs in Slurm's order (priority, then submit time) up to the live agent's cap
/// ([`MAX_SNAPSHOT_PENDING`]). Hints only for the jobs whose users give them.
pub fn snapshot(state: &State, now: f64) -> Snapshot {
    snapshot_told(state, now, false)
}

/// Whether a kept reading shows what a fresh one does, but for what the round fills in itself
/// (each pending job's `foreign` and `renewed_until`).
fn same_reading(kept: &Reading, fresh: &Reading) -> bool {
    let pending = |r: &Reading| -> Vec<PendingState> {
        (r.pending.iter())
            .map(|j| PendingState {
                foreign: Default::default(),
                renewed_until: None,
                ..j.clone()
            })
            .collect()
    };
    pending(kept) == pending(fresh)
        && kept.running == fresh.running
        && kept.nodes == fresh.nodes
        && kept.unregistered == fresh.unregistered
}

/// Whether `cached` shows what `fresh` does but, perhaps, the queue's order and what in its
/// entries changes while a job waits ([`SnapshotCache::refresh_jobs`]).
fn same_jobs(cached: &Snapshot, fresh: &Snapshot) -> bool {
    let queue = |s: &Snapshot| {
        let mut jobs: Vec<PendingJob> = (s.pending.iter())
            .map(|j| PendingJob {
                site_priority: None,
                priority: 0,
                gpus: 0,
                ..j.clone()
            })
            .collect();
        jobs.sort_by_key(|j| j.job_id);
        jobs
    };
    let others = |s: &Snapshot| Snapshot {
        pending: Vec::new(),
        ..s.clone()
    };
    others(cached) == others(fresh) && queue(cached) == queue(fresh)
}

/// [`snapshot`], with every job's true run told as a profile if `told_run_times`.
fn snapshot_told(state: &State, now: f64, told_run_times: bool) -> Snapshot {
    let mut cache = SnapshotCache {
        told_run_times,
        ..SnapshotCache::default()
    };
    cache.refresh(state, now);
    cache.snapshot
}

/// The last round's snapshot, kept so the next round rebuilds only what changed: node counts
/// in place, and entries only for jobs that arrived, started or were requeued since (a job's
/// entry is keyed by its job index). The result is the snapshot built afresh
/// (checked after every round in debug builds), at a fraction of the cost on long traces.
pub(crate) struct SnapshotCache {
    pub(crate) snapshot: Snapshot,
    /// The job index of each running and pending entry. Between two looks a job cannot leave
    /// the running list and come back (a requeued job waits out Slurm's requeue delay), and what
    /// a pending entry shows does not depend on earlier runs, so the index identifies an entry.
    running_of: Vec<usize>,
    pending_of: Vec<usize>,
    /// The positions in the running list of the jobs that report progress and of the elastic
    /// jobs: a refresh updates only their entries, without reading every running job.
    reporting: Vec<usize>,
    elastic: Vec<usize>,
    /// Whether each job (by index) reports progress ([`REPORTS`]) and is elastic ([`ELASTIC`]),
    /// a byte a job: the running list changes at most looks, and its positions above are then
    /// found again from these, not by reading every running job's state (a cache miss each).
    kinds: Vec<u8>,
    /// Every job's true run told as a profile (the perfect-knowledge reference).
    told_run_times: bool,
    /// What the told profile of each running job (by job index) last said, so a refresh
    /// writes a running entry's `iters_done` and `iter_rate` only when they changed.
    told: Vec<Option<Told>>,
    /// Lays the queue out in the order of the last look first.
    marks: LastOrderFirst,
}

/// [`SnapshotCache::kinds`]: the job reports its progress.
const REPORTS: u8 = 1;
/// [`SnapshotCache::kinds`]: the job is elastic.
const ELASTIC: u8 = 2;

/// The numbers a running job's told profile says ([`truth_hints`]).
#[derive(Clone, Copy, PartialEq)]
struct Told {
    done: u64,
    rate: f64,
}

impl SnapshotCache {
    fn empty() -> Snapshot {
        Snapshot {
            idle: Default::default(),
            agent: None,
            schema_version: SCHEMA_VERSION,
            time: 0,
            nodes: Vec::new(),
            running: Vec::new(),
            pending: Vec::new(),
            // The simulated Slurm's, as the agent reads it from the site's AuthInfo.
            requeue_delay_s: REQUEUE_DELAY_S as u32,
        }
    }
}

impl Default for SnapshotCache {
    fn default() -> Self {
        SnapshotCache {
            snapshot: SnapshotCache::empty(),
            running_of: Vec::new(),
            pending_of: Vec::new(),
            reporting: Vec::new(),
            elastic: Vec::new(),
            kinds: Vec::new(),
            told_run_times: false,
            told: Vec::new(),
            marks: LastOrderFirst::default(),
        }
    }
}

impl SnapshotCache {
    /// The snapshot a round is shown.
    pub(crate) fn refresh(&mut self, state: &State, now: f64) -> &Snapshot {
        self.refresh_with(state, now, true)
    }

    /// The snapshot the history's look after a pass reads ([`History::observe`]): as
    /// [`SnapshotCache::refresh`] but for the queue, which lists the jobs waiting now (new ones
    /// last) in the last look's order, each entry as it was when it came in. The look reads
    /// which jobs wait and what they stated, not their order or priorities; working those out
    /// (each job's site priority, then a sort) was half of this refresh, and the next round's
    /// refresh works them out anyway. A queue longer than the snapshot shows is refreshed
    /// whole, as which of its jobs are shown depends on the order.
    pub(crate) fn refresh_jobs(&mut self, state: &State, now: f64) -> &Snapshot {
        self.refresh_with(state, now, false)
    }

    fn refresh_with(&mut self, state: &State, now: f64, ordered: bool) -> &Snapshot {
        let cluster = state.cluster();
        let snap = &mut self.snapshot;
        let told = self.told_run_times;
        snap.time = now as i64;
        if snap.nodes.len() != cluster.nodes as usize {
            snap.nodes = (0..cluster.nodes)
                .map(|n| Node {
                    name: ClusterSpec::node_name(n),
                    gpus_total: cluster.gpus_per_node,
                    gpus_alloc: 0,
                    state: NodeState::Idle,
                    features: Vec::new(),
                    partitions: Vec::new(),
                    rack: Some(ClusterSpec::rack_name(cluster.rack_of(n))),
                })
                .collect();
        }
        for (node, &free) in snap.nodes.iter_mut().zip(&state.free) {
            let alloc = cluster.gpus_per_node - free;
            node.gpus_alloc = alloc;
            node.state = match alloc {
                0 => NodeState::Idle,
                a if a == cluster.gpus_per_node => NodeState::Allocated,
                _ => NodeState::Mixed,
            };
        }

        if state.running != self.running_of {
            let old = std::mem::take(&mut snap.running);
            snap.running = reuse(&self.running_of, old, &state.running, |j| {
                running_entry(&state.jobs[j], now, told)
            });
            self.running_of.clone_from(&state.running);
            // A job's spec says both, and neither changes while it is simulated.
            if self.kinds.len() != state.jobs.len() {
                self.kinds = (state.jobs.iter())
                    .map(|job| {
                        (REPORTS * u8::from(job.spec.progress.is_some()))
                            | (ELASTIC * u8::from(job.spec.elastic.is_some()))
                    })
                    .collect();
            }
            self.reporting.clear();
            self.elastic.clear();
            for (k, &j) in state.running.iter().enumerate() {
                if self.kinds[j] & REPORTS != 0 {
                    self.reporting.push(k);
                }
                if self.kinds[j] & ELASTIC != 0 {
                    self.elastic.push(k);
                }
            }
        }
        // What the watchers read changes every round: the progress of the jobs that show it.
        for &k in &self.reporting {
            snap.running[k].progress = progress_reading(&state.jobs[self.running_of[k]], now);
        }
        // cinch.conf's idle settings, as the agent sends them.
        snap.idle = state.config.idle.map(|i| i.rules);
        if let Some(idle) = state.config.idle {
            for entry in &mut snap.running {
                entry.idle_action = idle.action;
            }
        }

        if !ordered && state.pending.len() <= MAX_SNAPSHOT_PENDING {
            // The jobs waiting now in the last look's order, new ones last.
            let mut pending = Vec::with_capacity(state.pending.len());
            (self.marks).keys(
                state.jobs.len(),
                &self.pending_of,
                &state.pending,
                |j| j,
                &mut pending,
            );
            self.lay_out_pending(state, now, pending);
        } else {
            self.order_pending(state, now);
        }
        self.refresh_running_hints(state, now);
        &self.snapshot
    }

    /// The queue's entries laid out as `pending` lists the jobs: those already shown moved, the
    /// rest made.
    fn lay_out_pending(&mut self, state: &State, now: f64, pending: Vec<usize>) {
        if pending != self.pending_of {
            let told = self.told_run_times;
            let old = std::mem::take(&mut self.snapshot.pending);
            self.snapshot.pending = reuse(&self.pending_of, old, &pending, |j| {
                pending_entry(&state.jobs[j], now, told)
            });
            self.pending_of = pending;
        }
    }

    /// The queue in Slurm's order, each entry's priority and queue time as now.
    fn order_pending(&mut self, state: &State, now: f64) {
        // Each job's site priority is worked out once (not once per comparison), then the jobs
        // are sorted in Slurm's order, or only the first MAX_SNAPSHOT_PENDING of a longer queue
        // are. Keys are unique (job ids are), so any sort gives the one order. The jobs come in
        // the order of the last look first, as the order moves little between two looks: the
        // sort, which merges the runs it finds, costs about a pass.
        let key_of = |j: usize| {
            let job = &state.jobs[j];
            let site = site_priority(state, j, now);
            let key = order_key(
                shown_priority(job, site),
                job.queued_since as i64,
                job.spec.id,
            );
            (key, j, site)
        };
        let mut keyed: Vec<(OrderKey, usize, Option<u32>)> =
            Vec::with_capacity(state.pending.len());
        if state.pending.len() <= MAX_SNAPSHOT_PENDING {
            self.marks.keys(
                state.jobs.len(),
                &self.pending_of,
                &state.pending,
                key_of,
                &mut keyed,
            );
            keyed.sort();
        } else {
            keyed.extend(state.pending.iter().map(|&j| key_of(j)));
            keyed.select_nth_unstable(MAX_SNAPSHOT_PENDING);
            keyed.truncate(MAX_SNAPSHOT_PENDING);
            keyed.sort_unstable();
        }
        self.lay_out_pending(state, now, keyed.iter().map(|k| k.1).collect());
        // What may change while a job waits: its priority (cinch sets it; the site's changes
        // with fair share and age) and queue time.
        for (entry, &((std::cmp::Reverse(priority), _, _), j, site)) in
            self.snapshot.pending.iter_mut().zip(&keyed)
        {
            let job = &state.jobs[j];
            entry.site_priority = site;
            entry.priority = priority;
            entry.submit_time = job.queued_since as i64;
            entry.gpus = job.spec.gpus;
        }
    }

    /// What running jobs say of themselves as they run: an elastic job's progress, and every
    /// job's true run when told.
    fn refresh_running_hints(&mut self, state: &State, now: f64) {
        let snap = &mut self.snapshot;
        let told = self.told_run_times;
        for &k in &self.elastic {
            progress_hints(
                &state.jobs[self.running_of[k]],
                now,
                &mut snap.running[k].hints,
            );
        }
        if told {
            self.told.resize(state.jobs.len(), None);
            for (entry, &j) in snap.running.iter_mut().zip(&self.running_of) {
                let job = &state.jobs[j];
                // Rewritten only when its numbers changed: an entry built this refresh already
                // says the current ones, and one kept says what was last written.
                let current = told_numbers(job, now);
                let last = self.told[j];
                if last != Some(current) {
                    write_told(current, last, job.phase == Phase::Running, &mut entry.hints);
                    self.told[j] = Some(current);
                }
            }
        }
    }
}

/// The entries for `keys`: the old entries (of `old_keys`) kept in place for the keys that come
/// in the same order (the engine appends jobs and removes them in place, so in the running list
/// every job still there does), moved for the keys that come in another order (the queue, as
/// priorities change with age and fair share), the rest built with `build`. The result does not
/// depend on what is kept, only the cost does.
fn reuse<T>(
    old_keys: &[usize],
    mut old: Vec<T>,
    keys: &[usize],
    build: impl Fn(usize) -> T,
) -> Vec<T> {
    // The entries of keys that come in the same order stay where they are (none moves before
    // the first that goes); the others are taken out, to be moved to their new place or dropped.
    let mut matched = 0;
    let mut position = 0;
    // Entries are large: each taken one moves out once and in once, found by its place in
    // `taken`, sized first (the pass below keeps the same ones). Collected without knowing how
    // many, the list grew by copying what it held, a thirtieth of a long run.
    let kept = (old_keys.iter().take(old.len())).fold(0, |kept, &key| {
        kept + usize::from(keys.get(kept) == Some(&key))
    });
    let mut taken_at: FxHashMap<usize, usize> =
        FxHashMap::with_capacity_and_hasher(old.len() - kept, Default::default());
    let mut taken: Vec<Option<T>> = Vec::with_capacity(old.len() - kept);
    taken.extend(
        old.extract_if(.., |_| {
            let key = old_keys.get(position).copied();
            position += 1;
            if key.is_some() && keys.get(matched).copied() == key {
                matched += 1;
                false
            } else {
                if let Some(key) = key {
                    taken_at.insert(key, position - 1 - matched);
                }
                true
            }
        })
        .map(Some),
    );
    debug_assert_eq!(matched, kept, "the entries kept");
    old.extend(keys[matched..].iter().map(|&j| {
        taken_at
            .get(&j)
            .and_then(|&at| taken.get_mut(at)?.take())
            .unwrap_or_else(|| build(j))
    }));
    old
}

/// A running job as the agent describes it.
fn running_entry(job: &JobState, now: f64, told_run_times: bool) -> RunningJob {
    RunningJob {
        idle_action: Default::default(),
        job_id: job.spec.id,
        user: job.spec.user.clone(),
        name: job.spec.job_name.clone(),
        // Only the site's preemptible jobs (`--requeue`, `ckpt=yes`) may be requeued.
        requeue: job.spec.preemptible,
        restarts: job.restarts,
        hints: hints(job, now, told_run_times),
        progress: progress_reading(job, now),
        nodes: job
            .placement
            .iter()
            .map(|&(n, _)| ClusterSpec::node_name(n))
            .collect(),
        gpus: job.spec.gpus,
        start_time: job.run_start as i64,
        submit_time: Some(job.spec.submit),
        time_limit_min: Some((job.spec.time_limit / 60.0).ceil() as u32),
    }
}

/// The site's priority of a pending job as the agent reports it (Slurm's priority plus nice),
/// where the simulation has multifactor; without it, priority/basic's submit order, which the
/// agent would report too but which leaves cinch's own order standing within `order_weight`
/// (as it is here, where jobs tie at 0), so it is not reported.
fn site_priority(state: &State, job: usize, now: f64) -> Option<u32> {
    state.config.multifactor.map(|_| {
        state
            .site_priority(job, now)
            .clamp(0.0, f64::from(u32::MAX)) as u32
    })
}

/// The priority Slurm shows for a pending job: cinch's outright one, else the site's less the
/// nice (0 without multifactor, as the engine orders those jobs by submission).
fn shown_priority(job: &JobState, site_priority: Option<u32>) -> u32 {
    match (job.control.priority, site_priority) {
        (Some(p), _) => p,
        (None, Some(site)) => {
            (i64::from(site) - job.control.nice).clamp(0, i64::from(u32::MAX)) as u32
        }
        (None, None) => 0,
    }
}

/// A pending job as the agent describes it.
/// Its priorities, which change while it waits, are set with the other such fields in
/// [`SnapshotCache::refresh`].
fn pending_entry(job: &JobState, now: f64, told_run_times: bool) -> PendingJob {
    let spec = &job.spec;
    PendingJob {
        name: spec.job_name.clone(),
        gpus_per_node: spec.gpus_per_node,
        min_nodes: default_min_nodes(spec),
        time_limit_min: Some((spec.time_limit / 60.0).ceil() as u32),
        hints: hints(job, now, told_run_times),
        ..PendingJob::new(
            spec.id,
            spec.user.clone(),
            spec.gpus,
            job.queued_since as i64,
        )
    }
}

/// The hints a simulated job's user gives, if any: its application (hinted jobs), that it
/// checkpoints (the preemptible ones), its QoS target as `due` (targeted jobs); in the
/// perfect-knowledge reference, its true run ([`truth_hints`]).
fn hints(job: &JobState, now: f64, told_run_times: bool) -> Hints {
    let mut hints = Hints::default();
    if job.spec.hinted {
        hints.insert("app".to_string(), job.spec.app.name().to_string());
    }
    if job.spec.preemptible {
        hints.insert("ckpt".to_string(), "yes".to_string());
    }
    if let Some(due) = job.spec.due {
        hints.insert("due".to_string(), (due.floor() as i64).to_string());
    }
    if let Some(e) = &job.spec.elastic {
        hints.insert(
            cinch_core::models::elastic::HINT_ELASTIC.to_string(),
            format!("{}-{}", e.range.min, e.range.max),
        );
        progress_hints(job, now, &mut hints);
    }
    if told_run_times {
        truth_hints(job, now, &mut hints);
    }
    hints
}

/// What the perfect-knowledge reference tells the policy of a job, as the profile a job may
/// give of itself (`iters`, `iters_done`, `iter_rate`; [`cinch_core::models::qos::profile`],
/// which cinch takes as exact): its work in thousandths, the thousandths done (while it runs),
/// and its rate on its current placement (on its best one while it waits). Its run is its work at that rate,
/// whether or not its time limit will cut it short (the limit is the policy's to read).
fn truth_hints(job: &JobState, now: f64, hints: &mut Hints) {
    write_told(
        told_numbers(job, now),
        None,
        job.phase == Phase::Running,
        hints,
    );
}

/// The work told in thousandths.
const TOLD_UNITS: f64 = 1000.0;

/// A job's told profile in numbers: the thousandths done (while it runs) and its rate.
fn told_numbers(job: &JobState, now: f64) -> Told {
    let running = job.phase == Phase::Running;
    let rate = if running { job.rate } else { 1.0 };
    let done = if running {
        let working = (now - job.run_start - job.penalty).max(0.0);
        let done = ((job.work_done + working * rate) / job.spec.run_time).min(1.0);
        (done * TOLD_UNITS).floor() as u64
    } else {
        0
    };
    Told {
        done,
        rate: TOLD_UNITS * rate / job.spec.run_time,
    }
}

/// Writes a told profile into `hints`: only a running job's part done is read (a waiting one's
/// whole run is), so a waiting job's entry stays what it was when it was queued. `last` is what
/// the entry says already, if anything: its rate (formatting it is most of the cost, and the
/// perfect-knowledge reference rewrites every running job's part done every round) is written
/// only when it changed.
fn write_told(told: Told, last: Option<Told>, running: bool, hints: &mut Hints) {
    use cinch_core::models::qos::{HINT_ITERS, HINT_ITERS_DONE, HINT_ITER_RATE};
    if last.is_none_or(|last| last.rate.to_bits() != told.rate.to_bits()) {
        set_hint(hints, HINT_ITERS, TOLD_UNITS as u64);
        set_hint(hints, HINT_ITER_RATE, format_args!("{:.6e}", told.rate));
    }
    if running {
        set_hint(hints, HINT_ITERS_DONE, told.done);
    }
}

/// Sets hint `key` to `value`, reusing the entry's strings where it has one.
fn set_hint(hints: &mut Hints, key: &str, value: impl std::fmt::Display) {
    use std::fmt::Write;
    match hints.0.get_mut(key) {
        Some(kept) => {
            kept.clear();
            let _ = write!(kept, "{value}");
        }
        None => {
            hints.0.insert(key.to_string(), value.to_string());
        }
    }
}

/// An elastic job's progress as the helper reports it (`cinch_elastic.py`, into the job's
/// comment): per-mille of its work done, and the rate it measured on the GPUs of its latest run.
/// Nothing before it has run (nothing measured yet).
fn progress_hints(job: &JobState, now: f64, hints: &mut Hints) {
    use cinch_core::models::elastic::HINT_RATE_GPUS;
    use cinch_core::models::qos::{HINT_ITERS, HINT_ITERS_DONE, HINT_ITER_RATE};
    if job.first_start.is_none() {
        return;
    }
    const UNITS: f64 = 1000.0;
    let running = job.phase == Phase::Running;
    let working = if running {
        (now - job.run_start - job.penalty).max(0.0)
    } else {
        0.0
    };
    let done = ((job.work_done + working * job.rate) / job.spec.run_time).min(1.0);
    let gpus: u32 = job.shape.gpus;
    hints.insert(HINT_ITERS.to_string(), (UNITS as u64).to_string());
    hints.insert(
        HINT_ITERS_DONE.to_string(),
        ((done * UNITS).floor() as u64).to_string(),
    );
    hints.insert(
        HINT_ITER_RATE.to_string(),
        format!("{:.6e}", UNITS * job.rate / job.spec.run_time),
    );
    hints.insert(HINT_RATE_GPUS.to_string(), gpus.to_string());
}

/// What the watcher on a running job's node last read of its progress, if its output shows
/// any ([`crate::workload::ShownProgress::reading`]).
fn progress_reading(job: &JobState, now: f64) -> Option<JobProgress> {
    let shown = job.spec.progress?;
    if job.phase != Phase::Running {
        return None;
    }
    shown.reading(
        job.spec.run_time,
        job.work_done,
        job.run_start + job.penalty,
        job.rate,
        now,
    )
}

/// A node name of the simulated cluster (`n1`..) as its index.
fn node_id(name: &str) -> Option<u32> {
    name.strip_prefix('n')?.parse::<u32>().ok()?.checked_sub(1)
}

/// The simulated Slurm's job after `change`, as `slurm_update_job` would leave it.
fn updated(control: &Control, change: &apply::JobChange) -> Control {
    let mut next = control.clone();
    if let Some(nodes) = &change.req_nodes {
        // The apply path only pins to known nodes: every name parses.
        next.pin = (!nodes.is_empty()).then(|| nodes.iter().filter_map(|n| node_id(n)).collect());
    }
    if let Some(t) = change.begin_time {
        next.begin = Some(t as f64);
    }
    match change.priority {
        Some(0) => next.hold = true,
        Some(PRIORITY_AUTOMATIC) => {
            next.hold = false;
            next.priority = None;
        }
        Some(p) => {
            next.hold = false;
            next.priority = Some(p);
        }
        None => {}
    }
    if let Some(n) = change.nice {
        next.nice = n;
    }
    next
}

impl Scheduler for CinchPolicy {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn prepare(&mut self, state: &State, now: f64) -> Vec<Action> {
        if let Some(idle) = state.config.idle {
            watch_gpus(&mut self.optimizer.idle, state, &idle.rules, now);
        }
        run_round(
            &mut self.round,
            &mut self.slurm,
            &mut self.optimizer,
            state,
            now,
        )
    }

    fn holds_new_jobs(&self) -> bool {
        true
    }

    fn after_pass(&mut self, state: &State, now: f64) {
        // The live agent sees a started job at its next round (every interval, busy or not); the
        // simulator passes only at events, so it looks once more after a pass that started or
        // stopped a job, or a job that starts and ends between two events would go unseen.
        // Arrivals alone teach the history nothing.
        let slurm = &mut self.slurm;
        if slurm.observed != Some(state.version) && state.running != slurm.cache.running_of {
            let told = slurm.cache.told_run_times;
            // The queue's order matters to the look only where its stated targets could fill
            // the history's room for them: the first in the order would be kept.
            let history = &mut self.optimizer.history;
            let snapshot = if state.pending.len() < history.stated_target_room() {
                slurm.cache.refresh_jobs(state, now)
            } else {
                slurm.cache.refresh(state, now)
            };
            debug_assert!(
                same_jobs(snapshot, &snapshot_told(state, now, told)),
                "the cached snapshot"
            );
            history.observe(snapshot);
            slurm.observed = Some(state.version);
        }
    }

    fn progress_error(&self) -> Option<(f64, usize)> {
        self.optimizer.history.progress_median_error()
    }

    fn median_delay_s(&self) -> Option<f64> {
        let mut delays: Vec<f64> = self.slurm.delays.values().copied().collect();
        if delays.is_empty() {
            return None;
        }
        delays.sort_by(f64::total_cmp);
        Some(delays[delays.len() / 2])
    }

    fn order_key(&self, state: &State, job: usize, now: f64) -> f64 {
        // Slurm runs higher priority first; nice lowers it. A priority cinch set outright
        // replaces the site's.
        let control = &state.jobs[job].control;
        let base = match control.priority {
            Some(p) => f64::from(p),
            None => state.site_priority(job, now),
        };
        -base + control.nice as f64
    }

    fn place(&self, state: &State, job: usize, _now: f64) -> Option<Vec<(u32, u32)>> {
        match &state.jobs[job].control.pin {
            Some(nodes) => pinned(state, job, nodes),
            None => first_fit(state, job),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reuse;

    #[test]
    fn reused_entries_are_the_entries_of_the_new_keys_whatever_the_change() {
        // Entries are (key, generation): generation 0 was built before, 1 now.
        let old_keys = [3, 1, 4, 5, 9];
        let old: Vec<(usize, u8)> = old_keys.iter().map(|&k| (k, 0)).collect();
        let cases: [&[usize]; 5] = [
            &[3, 1, 4, 5, 9], // unchanged
            &[3, 4, 9, 2, 6], // two ended, two started
            &[9, 5, 4, 1, 3], // reordered
            &[],              // all gone
            &[1, 1, 7],       // odd input
        ];
        for keys in cases {
            let got = reuse(&old_keys, old.clone(), keys, |k| (k, 1));
            let ids: Vec<usize> = got.iter().map(|e| e.0).collect();
            assert_eq!(ids, keys, "{keys:?}");
        }
        // Kept in place where the order allows: only the started jobs are built.
        let got = reuse(&old_keys, old.clone(), &[3, 4, 9, 2, 6], |k| (k, 1));
        assert_eq!(got, [(3, 0), (4, 0), (9, 0), (2, 1), (6, 1)]);
        // Moved where the order changed: nothing is built again.
        let got = reuse(&old_keys, old.clone(), &[9, 5, 4, 1, 3], |k| (k, 1));
        assert_eq!(got, [(9, 0), (5, 0), (4, 0), (1, 0), (3, 0)]);
        // A key asked twice gets the old entry once.
        let got = reuse(&old_keys, old.clone(), &[1, 1, 7], |k| (k, 1));
        assert_eq!(got, [(1, 0), (1, 1), (7, 1)]);
    }
}
