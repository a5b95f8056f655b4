//! A cinch policy in the simulator, run exactly as live: each round builds the [`Snapshot`] the
//! plugin's agent would send (what a live agent can see, no more: hints only from the jobs whose
//! users give them, the same cap on pending jobs), calls the policy's `decide` as the service
//! does, and hands the decisions to the core's one apply path ([`apply::plan`]), the very function
//! the plugin's reconcile calls. Its changes are carried out on the simulated Slurm the way
//! `slurm_update_job` carries them out live (a node list, a begin time, a hold, a priority, a nice
//! value), and what cinch applied is kept per job as the plugin keeps it in the AdminComment, so
//! TTLs, renewals, undo and every refusal rule hold here too.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{first_fit, pinned};
use crate::cluster::ClusterSpec;
use crate::engine::Scheduler;
use crate::engine::{Action, Control, JobState, Phase, State};
use cinch_core::apply::{self, Applied, PendingState, RunningState, PRIORITY_AUTOMATIC};
use cinch_core::decision::Decision;
use cinch_core::history::History;
use cinch_core::policy::{Mode, PolicyConfig};
use cinch_core::rng::SeededRng;
use cinch_core::snapshot::{
    Node, NodeState, PendingJob, RunningJob, Snapshot, MAX_SNAPSHOT_PENDING, SCHEMA_VERSION,
};

pub struct CinchPolicy {
    pub config: PolicyConfig,
    /// The name reports use.
    name: String,
    rounds: u64,
    /// Per delayed job, the longest delay applied (end of delay - queued since), seconds.
    delays: HashMap<usize, f64>,
    /// What the rounds' snapshots showed so far, as the service learns it.
    history: History,
    /// The state version the last round saw, unless its decisions depend on time (delays).
    settled_at: Option<u64>,
    /// What cinch applied to each pending job (the plugin's AdminComment record).
    records: HashMap<usize, Applied>,
    /// TTLs renewed since the record was written (the plugin's in-memory renewals).
    renewed: HashMap<usize, i64>,
    /// The cluster's node names, for validating pins.
    node_names: HashSet<String>,
    /// The state version the history last saw.
    observed: Option<u64>,
    /// Requeues of the last hour (made at the first round, from the simulation's settings).
    requeues: Option<apply::RequeueLimiter>,
    /// The snapshot of the last look at the cluster, refreshed incrementally.
    cache: SnapshotCache,
}

impl CinchPolicy {
    pub fn new(config: PolicyConfig, name: String) -> Self {
        CinchPolicy {
            config,
            name,
            rounds: 0,
            history: History::default(),
            delays: HashMap::new(),
            settled_at: None,
            records: HashMap::new(),
            renewed: HashMap::new(),
            node_names: HashSet::new(),
            observed: None,
            requeues: None,
            cache: SnapshotCache::default(),
        }
    }

    /// The core's plan for `decisions` on the simulated Slurm's jobs at `now`: the same
    /// [`apply::plan`] call the plugin makes, with the simulated jobs described as the plugin
    /// describes Slurm's.
    pub fn plan(&mut self, state: &State, decisions: &[Decision], now: i64) -> apply::Plan {
        if self.node_names.len() != state.cluster().nodes as usize {
            self.node_names = (0..state.cluster().nodes)
                .map(ClusterSpec::node_name)
                .collect();
        }
        let pending: Vec<PendingState> = state
            .pending
            .iter()
            .map(|&j| self.pending_state(state, j))
            .collect();
        // The apply path reads running jobs only to check requeues.
        let requeues = decisions.iter().any(|d| d.requeue.is_some());
        let running: Vec<RunningState> = state
            .running
            .iter()
            .filter(|_| requeues)
            .map(|&j| {
                let spec = &state.jobs[j].spec;
                RunningState {
                    job_id: spec.id,
                    requeue: spec.preemptible,
                    checkpoints: spec.preemptible,
                    requeues: state.jobs[j].restarts,
                    elastic: spec.elastic.as_ref().map(|e| e.range),
                    // The simulated site excludes no jobs (its traces are GPU jobs).
                    hands_off: None,
                }
            })
            .collect();
        apply::plan(
            &pending,
            &running,
            &apply::Input {
                now,
                mode: Mode::Enforce,
                decisions: Some(decisions),
                nodes: &self.node_names,
                requeue_limits: apply::RequeueLimits {
                    max_per_job: state.config.max_requeues_per_job,
                    budget: self
                        .requeues
                        .get_or_insert_with(|| {
                            apply::RequeueLimiter::new(state.config.max_requeues_per_hour)
                        })
                        .budget(now),
                },
            },
        )
    }

    /// Plans `decisions` through the apply path and turns the plan into the simulated Slurm's
    /// updates and requeues, keeping cinch's record of what it applied.
    pub fn carry_out(
        &mut self,
        state: &State,
        decisions: &[Decision],
        now: f64,
    ) -> (apply::Plan, Vec<Action>) {
        // What cinch applied to a job ends with its time in the queue (a requeued job starts
        // afresh, as the simulated Slurm resets it).
        self.records
            .retain(|j, _| state.jobs[*j].phase == Phase::Pending);
        self.renewed
            .retain(|j, _| state.jobs[*j].phase == Phase::Pending);
        let plan = self.plan(state, decisions, now as i64);
        if plan.requeues.is_empty() && plan.changes.is_empty() && plan.renewed.is_empty() {
            return (plan, Vec::new());
        }
        // Changes and renewals are of pending jobs, requeues of running ones.
        let running: &[usize] = if plan.requeues.is_empty() {
            &[]
        } else {
            &state.running
        };
        let index: HashMap<u32, usize> = state
            .pending
            .iter()
            .chain(running)
            .map(|&j| (state.jobs[j].spec.id, j))
            .collect();
        let mut actions = Vec::new();
        if let Some(limiter) = &mut self.requeues {
            limiter.record(now as i64, plan.requeues.len());
        }
        for (id, _why) in &plan.requeues {
            actions.push(Action::Preempt(index[id]));
        }
        // A resize rides on its requeue: the job is pending again when this applies.
        for (id, gpus) in &plan.requeue_sizes {
            actions.push(Action::Resize(index[id], *gpus));
        }
        for change in &plan.changes {
            let job = index[&change.job_id];
            let control = updated(&state.jobs[job].control, change);
            if let Some(until) = control.begin.filter(|&b| b > now) {
                let timer = until - state.jobs[job].queued_since;
                let longest = self.delays.entry(job).or_insert(timer);
                *longest = longest.max(timer);
            }
            if change.record.is_empty() {
                self.records.remove(&job);
            } else {
                self.records.insert(job, change.record.clone());
            }
            self.renewed.remove(&job);
            if let Some(gpus) = change.gpus {
                actions.push(Action::Resize(job, gpus));
            }
            actions.push(Action::Control(job, control));
        }
        for (id, until) in &plan.renewed {
            self.renewed.insert(index[id], *until);
        }
        (plan, actions)
    }

    /// A simulated pending job as the plugin describes a Slurm job to the apply path.
    fn pending_state(&self, state: &State, job: usize) -> PendingState {
        let j = &state.jobs[job];
        let control = &j.control;
        PendingState {
            job_id: j.spec.id,
            has_node_list: control.pin.is_some(),
            min_nodes: match &control.pin {
                Some(nodes) => nodes.len() as u32,
                None => default_min_nodes(&j.spec),
            },
            eligible_time: control.begin.unwrap_or(j.queued_since) as i64,
            priority: control.priority.unwrap_or(0),
            held: control.hold,
            nice: control.nice,
            applied: self.records.get(&job).cloned().unwrap_or_default(),
            submit_hold: None,
            foreign: apply::Fields::default(),
            renewed_until: self.renewed.get(&job).copied(),
            gpus: j.spec.gpus,
            elastic: j.spec.elastic.as_ref().map(|e| e.range),
            hands_off: None,
        }
    }
}

/// Slurm's node count of a job nobody pinned: one, or one per node of a per-node request.
fn default_min_nodes(spec: &crate::workload::JobSpec) -> u32 {
    spec.gpus_per_node.map_or(1, |p| spec.gpus / p)
}

/// The snapshot the plugin would send for this state at `now`: every node, every running job,
/// and the pending jobs in Slurm's order (priority, then submit time) up to the live agent's cap
/// ([`MAX_SNAPSHOT_PENDING`]). Hints only for the jobs whose users give them.
pub fn snapshot(state: &State, now: f64) -> Snapshot {
    let mut cache = SnapshotCache::default();
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
}

impl Default for SnapshotCache {
    fn default() -> Self {
        SnapshotCache {
            snapshot: Snapshot {
                agent: None,
                schema_version: SCHEMA_VERSION,
                time: 0,
                nodes: Vec::new(),
                running: Vec::new(),
                pending: Vec::new(),
            },
            running_of: Vec::new(),
            pending_of: Vec::new(),
        }
    }
}

impl SnapshotCache {
    pub(crate) fn refresh(&mut self, state: &State, now: f64) -> &Snapshot {
        let cluster = state.cluster();
        let snap = &mut self.snapshot;
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
                running_entry(&state.jobs[j], now)
            });
            self.running_of.clone_from(&state.running);
        }

        let mut queue: Vec<usize> = state.pending.clone();
        // Keys are unique (the job index last): an unstable sort gives the same order, faster.
        queue.sort_unstable_by_key(|&j| {
            let job = &state.jobs[j];
            (
                std::cmp::Reverse(shown_priority(job, site_priority(state, j, now))),
                job.queued_since as i64,
                j,
            )
        });
        queue.truncate(MAX_SNAPSHOT_PENDING);
        let pending = queue;
        if pending != self.pending_of {
            let old = std::mem::take(&mut snap.pending);
            snap.pending = reuse(&self.pending_of, old, &pending, |j| {
                pending_entry(&state.jobs[j], now)
            });
            self.pending_of = pending;
        }
        // What may change while a job waits: its priority (cinch sets it; the site's changes
        // with fair share and age) and queue time.
        for (entry, &j) in snap.pending.iter_mut().zip(&self.pending_of) {
            let job = &state.jobs[j];
            entry.site_priority = site_priority(state, j, now);
            entry.priority = shown_priority(job, entry.site_priority);
            entry.submit_time = job.queued_since as i64;
            entry.gpus = job.spec.gpus;
        }
        // An elastic job reports its progress as it runs.
        for (entry, &j) in snap.running.iter_mut().zip(&self.running_of) {
            let job = &state.jobs[j];
            if job.spec.elastic.is_some() {
                progress_hints(job, now, &mut entry.hints);
            }
        }
        &self.snapshot
    }
}

/// The entries for `keys`: the old entries (of `old_keys`) kept in place for the keys that come
/// in the same order (the engine appends jobs and removes them in place, so in the running list
/// every job still there does), the rest built with `build`. The result does not depend on what
/// is kept, only the cost does.
fn reuse<T>(
    old_keys: &[usize],
    mut old: Vec<T>,
    keys: &[usize],
    build: impl Fn(usize) -> T,
) -> Vec<T> {
    let mut matched = 0;
    let mut keep = old_keys.iter().map(|&key| {
        let hit = keys.get(matched) == Some(&key);
        matched += usize::from(hit);
        hit
    });
    // `retain` visits every entry once, in order.
    old.retain(|_| keep.next().unwrap_or(false));
    old.extend(keys[matched..].iter().map(|&j| build(j)));
    old
}

/// A running job as the agent describes it.
fn running_entry(job: &JobState, now: f64) -> RunningJob {
    RunningJob {
        job_id: job.spec.id,
        user: job.spec.user.clone(),
        name: job.spec.job_name.clone(),
        // Only the site's preemptible jobs (`--requeue`, `ckpt=yes`) may be requeued.
        requeue: job.spec.preemptible,
        restarts: job.restarts,
        hints: hints(job, now),
        nodes: job
            .placement
            .iter()
            .map(|&(n, _)| ClusterSpec::node_name(n))
            .collect(),
        gpus: job.spec.gpus,
        start_time: job.run_start as i64,
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
fn pending_entry(job: &JobState, now: f64) -> PendingJob {
    let spec = &job.spec;
    PendingJob {
        name: spec.job_name.clone(),
        gpus_per_node: spec.gpus_per_node,
        min_nodes: default_min_nodes(spec),
        time_limit_min: Some((spec.time_limit / 60.0).ceil() as u32),
        hints: hints(job, now),
        ..PendingJob::new(
            spec.id,
            spec.user.clone(),
            spec.gpus,
            job.queued_since as i64,
        )
    }
}

/// The hints a simulated job's user gives, if any: its application (hinted jobs), that it
/// checkpoints (the preemptible ones), its QoS target as `due` (targeted jobs).
fn hints(job: &JobState, now: f64) -> BTreeMap<String, String> {
    let mut hints = BTreeMap::new();
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
            cinch_core::elastic::HINT_ELASTIC.to_string(),
            format!("{}-{}", e.range.min, e.range.max),
        );
        progress_hints(job, now, &mut hints);
    }
    hints
}

/// An elastic job's progress as the helper reports it (`cinch_elastic.py`, into the job's
/// comment): per-mille of its work done, and the rate it measured on the GPUs of its latest run.
/// Nothing before it has run (nothing measured yet).
fn progress_hints(job: &JobState, now: f64, hints: &mut BTreeMap<String, String>) {
    use cinch_core::elastic::HINT_RATE_GPUS;
    use cinch_core::qos::{HINT_ITERS, HINT_ITERS_DONE, HINT_ITER_RATE};
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
        // The same cluster gets the same decisions from a policy that set no delays: skip the
        // round (this keeps long, overloaded runs fast).
        if self.settled_at == Some(state.version) {
            return Vec::new();
        }
        self.rounds += 1;
        let snapshot = self.cache.refresh(state, now);
        debug_assert_eq!(*snapshot, self::snapshot(state, now), "the cached snapshot");
        self.history.observe(snapshot);
        self.observed = Some(state.version);
        let mut rng = SeededRng::new(self.rounds);
        let decisions = self
            .config
            .decide(snapshot, now as i64, &mut rng, &self.history);
        // Decisions that depend on time, or a job whose begin time is still ahead (a requeued
        // job waits out Slurm's requeue delay): the next pass needs a fresh round.
        let timed = decisions
            .iter()
            .any(|d| d.delay_until.is_some() || d.hold.is_some())
            || state
                .pending
                .iter()
                .any(|&j| state.jobs[j].control.begin.is_some_and(|b| b > now));
        self.settled_at = (!timed).then_some(state.version);
        self.carry_out(state, &decisions, now).1
    }

    fn holds_new_jobs(&self) -> bool {
        true
    }

    fn after_pass(&mut self, state: &State, now: f64) {
        // The live agent sees a started job at its next round (every interval, busy or not); the
        // simulator passes only at events, so it looks once more after a pass that started or
        // stopped a job, or a job that starts and ends between two events would go unseen.
        // Arrivals alone teach the history nothing.
        if self.observed != Some(state.version) && state.running != self.cache.running_of {
            let snapshot = self.cache.refresh(state, now);
            debug_assert_eq!(*snapshot, self::snapshot(state, now), "the cached snapshot");
            self.history.observe(snapshot);
            self.observed = Some(state.version);
        }
    }

    fn median_delay_s(&self) -> Option<f64> {
        let mut delays: Vec<f64> = self.delays.values().copied().collect();
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
    }
}
