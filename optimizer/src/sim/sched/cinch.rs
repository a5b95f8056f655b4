//! A cinch policy in the simulator, run exactly as the service runs it: each pass builds the
//! [`Snapshot`] the plugin would send, calls the policy's `decide`, and applies the decisions
//! the way the plugin does through `slurm_update_job` (a pin becomes the job's node list, a
//! delay its begin time, plus holds and priorities); the simulated Slurm then schedules with
//! its own first fit for everything cinch leaves alone. The newest decision for a job replaces
//! the previous one, and a job without one loses what cinch set (the plugin's undo).

use std::collections::{BTreeMap, HashMap};

use super::{first_fit, pinned, Scheduler};
use crate::decision::Decision;
use crate::history::History;
use crate::policy::PolicyConfig;
use crate::rng::SeededRng;
use crate::sim::cluster::ClusterSpec;
use crate::sim::engine::{Action, Control, JobState, State};
use crate::snapshot::{Node, NodeState, PendingJob, RunningJob, Snapshot, SCHEMA_VERSION};

pub struct CinchPolicy {
    pub config: PolicyConfig,
    rounds: u64,
    /// Per delayed job, the longest delay applied (end of delay - queued since), seconds.
    delays: HashMap<usize, f64>,
    /// What the rounds' snapshots showed so far, as the service learns it.
    history: History,
    /// The state version the last round saw, unless its decisions depend on time (delays).
    settled_at: Option<u64>,
}

impl CinchPolicy {
    pub fn new(config: PolicyConfig) -> Self {
        CinchPolicy {
            config,
            rounds: 0,
            history: History::default(),
            delays: HashMap::new(),
            settled_at: None,
        }
    }
}

/// The snapshot the plugin would send for this state at `now`. To keep long overloaded runs
/// fast it lists only the first `max_job_test` pending jobs in Slurm's order (submit time):
/// jobs further back cannot start in this pass anyway (Slurm's bf_max_job_test).
pub fn snapshot(state: &State, now: f64) -> Snapshot {
    let cluster = state.cluster();
    let nodes = (0..cluster.nodes)
        .map(|n| {
            let alloc = cluster.gpus_per_node - state.free[n as usize];
            Node {
                name: ClusterSpec::node_name(n),
                gpus_total: cluster.gpus_per_node,
                gpus_alloc: alloc,
                state: match alloc {
                    0 => NodeState::Idle,
                    a if a == cluster.gpus_per_node => NodeState::Allocated,
                    _ => NodeState::Mixed,
                },
                features: Vec::new(),
                partitions: Vec::new(),
                rack: Some(ClusterSpec::rack_name(cluster.rack_of(n))),
            }
        })
        .collect();
    let running = state
        .running
        .iter()
        .map(|&j| {
            let job = &state.jobs[j];
            RunningJob {
                job_id: job.spec.id,
                user: job.spec.user.clone(),
                name: Some(job.spec.name.clone()),
                // Every simulated job may be requeued and resumes from a checkpoint (as
                // Tiresias assumes); the restart costs the engine's restart penalty.
                requeue: true,
                restarts: job.restarts,
                hints: hints(job),
                nodes: job
                    .placement
                    .iter()
                    .map(|&(n, _)| ClusterSpec::node_name(n))
                    .collect(),
                gpus: job.spec.gpus,
                start_time: job.run_start as i64,
                time_limit_min: Some((job.spec.time_limit / 60.0).ceil() as u32),
            }
        })
        .collect();
    let mut queue: Vec<usize> = state.pending.clone();
    queue.sort_by_key(|&j| (state.jobs[j].spec.submit, j));
    queue.truncate(state.config.max_job_test);
    let pending = queue
        .iter()
        .map(|&j| {
            let spec = &state.jobs[j].spec;
            PendingJob {
                job_id: spec.id,
                user: spec.user.clone(),
                account: None,
                partition: None,
                name: Some(spec.name.clone()),
                gpus: spec.gpus,
                gpus_per_node: spec.gpus_per_node,
                min_nodes: spec.gpus_per_node.map_or(1, |p| spec.gpus / p),
                max_nodes: None,
                time_limit_min: Some((spec.time_limit / 60.0).ceil() as u32),
                submit_time: state.jobs[j].queued_since as i64,
                priority: 0,
                deadline: None,
                begin_time: None,
                required_nodes: Vec::new(),
                excluded_nodes: Vec::new(),
                constraint: None,
                hints: hints(&state.jobs[j]),
            }
        })
        .collect();
    Snapshot {
        schema_version: SCHEMA_VERSION,
        time: now as i64,
        nodes,
        running,
        pending,
    }
}

/// The hints a simulated job's user gives: its application, and that it checkpoints.
fn hints(job: &JobState) -> BTreeMap<String, String> {
    [
        ("app".to_string(), job.spec.app.name().to_string()),
        ("ckpt".to_string(), "yes".to_string()),
    ]
    .into()
}

/// What a decision changes for the simulated Slurm; `None` if it names an unknown node.
fn control_of(decision: &Decision, nodes: u32) -> Option<Control> {
    let pin = match &decision.pin_nodes {
        Some(names) => {
            let mut ids = Vec::with_capacity(names.len());
            for name in names {
                let id: u32 = name.strip_prefix('n')?.parse().ok()?;
                if id == 0 || id > nodes {
                    return None;
                }
                ids.push(id - 1);
            }
            Some(ids)
        }
        None => None,
    };
    Some(Control {
        pin,
        begin: decision.delay_until.map(|t| t as f64),
        hold: decision.hold.unwrap_or(false),
        priority: decision.priority,
    })
}

impl Scheduler for CinchPolicy {
    fn name(&self) -> String {
        format!("cinch-{}", self.config.name())
    }

    fn prepare(&mut self, state: &State, now: f64) -> Vec<Action> {
        // The same cluster gets the same decisions from a policy that set no delays: skip the
        // round (this keeps long, overloaded runs fast).
        if self.settled_at == Some(state.version) {
            // Nothing started or stopped since the last round: every job seen running then
            // still runs.
            self.history.still_running_at(now as i64);
            return Vec::new();
        }
        self.rounds += 1;
        let snapshot = snapshot(state, now);
        self.history.observe(&snapshot);
        let mut rng = SeededRng::new(self.rounds);
        let decisions = self
            .config
            .decide(&snapshot, now as i64, &mut rng, &self.history);
        let timed = decisions
            .iter()
            .any(|d| d.delay_until.is_some() || d.hold.is_some());
        self.settled_at = (!timed).then_some(state.version);
        let index: HashMap<u32, usize> = state
            .pending
            .iter()
            .map(|&j| (state.jobs[j].spec.id, j))
            .collect();
        let running: HashMap<u32, usize> = state
            .running
            .iter()
            .map(|&j| (state.jobs[j].spec.id, j))
            .collect();
        let mut decided: HashMap<usize, Control> = HashMap::new();
        let mut actions = Vec::new();
        // A decision naming an unknown job or node is refused, as the plugin refuses it.
        for decision in &decisions {
            if decision.requeue == Some(true) {
                if let Some(&job) = running.get(&decision.job_id) {
                    actions.push(Action::Preempt(job));
                }
                continue;
            }
            if let (Some(&job), Some(control)) = (
                index.get(&decision.job_id),
                control_of(decision, state.cluster().nodes),
            ) {
                if let Some(until) = control.begin {
                    let timer = until - state.jobs[job].queued_since;
                    let longest = self.delays.entry(job).or_insert(timer);
                    *longest = longest.max(timer);
                }
                decided.insert(job, control);
            }
        }
        actions.extend(state.pending.iter().filter_map(|&j| {
            let control = decided.remove(&j).unwrap_or_default();
            (state.jobs[j].control != control).then_some(Action::Control(j, control))
        }));
        actions
    }

    fn median_delay_s(&self) -> Option<f64> {
        let mut delays: Vec<f64> = self.delays.values().copied().collect();
        if delays.is_empty() {
            return None;
        }
        delays.sort_by(f64::total_cmp);
        Some(delays[delays.len() / 2])
    }

    fn order_key(&self, state: &State, job: usize, _now: f64) -> f64 {
        // Slurm runs higher priority first.
        -f64::from(state.jobs[job].control.priority.unwrap_or(0))
    }

    fn place(&self, state: &State, job: usize, _now: f64) -> Option<Vec<(u32, u32)>> {
        match &state.jobs[job].control.pin {
            Some(nodes) => pinned(state, job, nodes),
            None => first_fit(state, job),
        }
    }
}
