//! Self-simulation: a window of the cluster's own recent past, as the optimizer recorded it
//! ([`cinch_core::learn::record`]), replayed under each member of a portfolio of policies, to see
//! which would have served this cluster best (docs/policies/portfolio.md).
//!
//! Only what was known at the window's end goes in, and the types keep it so: a replay is built
//! from a [`Record`], which holds no run time of a job that has not ended. A job that ended is
//! replayed with its observed run; a job still running or waiting at the window's end gets a run
//! drawn from the run model given the service it had (several draws, each its own replay); the
//! replayed policies start from what the history knew at the window's start (the runs of the jobs
//! that had ended by then), as the live optimizer did.
//!
//! The window starts from the state recorded at its start: the jobs running then hold the nodes
//! they held (on the simulator's alike nodes, by name), the jobs waiting then arrive at its
//! first instant in their order, and the rest arrive when they were submitted. It stops at the
//! window's end; each job counts the time it spent in the system within the window.

use cinch_core::learn::history::History;
use cinch_core::learn::record::{Record, RecordedJob};
use cinch_core::util::rng::SeededRng;

use crate::engine::{simulate_window, RunningAtStart, SimConfig, Window};
use crate::perf::App;
use crate::sched::{CinchPolicy, SlurmDefault};
use crate::trace::cluster_of_nodes;
use crate::workload::{assign_app, JobSpec};
use crate::SimError;
use cinch_core::policy::PolicyConfig;

/// A time limit for jobs that stated none: long enough never to be reached in a window.
const NO_LIMIT_S: f64 = 365.0 * 86_400.0;

/// A window of the record, ready to replay under any policy.
pub struct Replay {
    /// Times relative to the window's start (0) .. its end (`window.until`).
    pub jobs: Vec<JobSpec>,
    pub window: Window,
    pub config: SimConfig,
    /// What the optimizer knew at the window's start.
    pub history: History,
    /// Jobs whose run was drawn (still running or waiting at the window's end).
    pub drawn: usize,
    /// Jobs left out, with why (a run on nodes the simulator does not have, ...).
    pub left_out: Vec<(u32, &'static str)>,
    /// What really happened to the replayed jobs under the policy that ran then, scored as the
    /// members are (each job's hours in the system within the window, to the first snapshot
    /// that no longer showed it): mean and 99th percentile. How far a member that ran the
    /// window itself replays from this is the replay's own error.
    pub observed_h: (f64, f64),
    /// Jobs that arrive after this (window seconds) are load, not score
    /// ([`Replay::following`]); `None`: every job is scored.
    pub scored_until: Option<f64>,
}

/// How each member did on a window.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemberResult {
    pub member: String,
    /// Mean over the window's jobs of the hours each spent in the system within the window,
    /// averaged over the draws: the default objective.
    pub mean_h: f64,
    /// The 99th percentile of the same, averaged over the draws.
    pub p99_h: f64,
    /// Jain's fairness index over the users' mean hours in the system (1: every user's jobs
    /// fared alike), averaged over the draws.
    pub fairness: f64,
    /// The window's jobs whose stated finish falls within it (the same for every member).
    pub qos_targeted: usize,
    /// The share of those that did not finish by it, averaged over the draws (0 with none).
    pub qos_missed: f64,
    pub jobs: usize,
    /// Wall-clock seconds its replays took.
    pub wall_s: f64,
}

impl Replay {
    /// The replay run on `drain_s` seconds past the window's end, no job arriving then: each of
    /// the window's jobs counts its time in the system up to its finish or the drain's end, so a
    /// member that puts work off past the window pays for it (docs/policies/portfolio.md).
    /// `observed_h` stays what the record shows within the window.
    pub fn drained(mut self, drain_s: f64) -> Self {
        self.window.until = self.window.until.map(|until| until + drain_s);
        self
    }

    /// The replay scoring only the jobs there before the window's last `follow_s` seconds:
    /// those arriving later still run, as load, and the scored ones are followed under it to
    /// their finish or the window's end. A window scored to its end counts a job starved at the
    /// end no worse under one member than another; followed, starving it while new jobs keep
    /// coming costs (docs/policies/portfolio.md). Simulation practice's measurement interval
    /// and cool-down. Before [`Replay::drained`], which then follows them past the end too.
    pub fn following(mut self, follow_s: f64) -> Self {
        if follow_s > 0.0 {
            self.scored_until = self.window.until.map(|until| until - follow_s);
        }
        self
    }
}

/// The replay of `record`'s window from `start` to `end` (the record's own times), with the runs
/// not yet known drawn from `seed`'s stream; `config` gives everything but the cluster, which is
/// the record's.
pub fn replay(
    record: &Record,
    start: i64,
    end: i64,
    config: SimConfig,
    seed: u64,
) -> Result<Replay, SimError> {
    if end <= start {
        return Err(SimError::Invalid(format!(
            "a window ends after it starts ({start} .. {end})"
        )));
    }
    let Some((cluster, _, names)) = cluster_of_nodes(record.nodes()) else {
        return Err(SimError::Invalid(
            "the record names no node with GPUs".into(),
        ));
    };
    let node_of: std::collections::HashMap<&str, u32> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i as u32))
        .collect();
    let config = SimConfig { cluster, ..config };
    let (mut history, known) = histories(record, start, end);
    let model = known.run_model();
    let mut rng = SeededRng::new(seed ^ 0x5E1F_5111);
    let mut app_rng = SeededRng::new(seed ^ 0xA11C_A7E5);
    let (mut jobs, mut running, mut requeued, mut drawn) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let mut observed: Vec<f64> = Vec::new();
    let (placed, mut left_out) = running_at_start(record, start, &node_of, cluster.gpus_per_node);
    for job in record.jobs() {
        let in_window = job.submit < end && job.left.is_none_or(|left| left > start);
        if !in_window || job.gpus == 0 || left_out.iter().any(|(id, _)| *id == job.job_id) {
            continue;
        }
        // Its runs within the window: what ran before the start is done work.
        let before: i64 = job
            .runs
            .iter()
            .filter(|r| r.end.is_some_and(|e| e <= start))
            .map(|r| r.end.unwrap_or(start) - r.start)
            .sum();
        let at_start = job
            .runs
            .iter()
            .find(|r| r.start <= start && r.end.is_none_or(|e| e > start));
        let carried = job.submit <= start;
        let (submit, started) = match at_start {
            Some(run) if carried => (0, Some((run.start - start) as f64)),
            _ if carried => (0, None),
            _ => (job.submit - start, None),
        };
        let id = jobs.len() as u32 + 1;
        // What its runs before the start received, as the live history kept it: cinch's and
        // Tiresias's ranks count a requeued job's attained service (without it a job requeued
        // for days replays as fresh, ahead of the queue).
        let requeues_before = (job.runs.iter())
            .filter(|r| r.requeued && r.end.is_some_and(|e| e <= start))
            .count() as u32;
        if requeues_before > 0 {
            requeued.push((id, requeues_before));
        }
        if let Some(requeued_at) = (job.runs.iter())
            .filter_map(|r| r.end.filter(|&e| e <= start && r.requeued))
            .max()
        {
            let service: i64 = (job.runs.iter())
                .filter_map(|r| {
                    Some((r.end.filter(|&e| e <= start)? - r.start) * i64::from(r.gpus))
                })
                .sum();
            history.import_requeued(id, service as f64, requeued_at - start);
        }
        if let Some(started) = started {
            let Some(placement) = placed.get(&job.job_id) else {
                left_out.push((job.job_id, "running at the start, not placed"));
                continue;
            };
            running.push(RunningAtStart {
                job: id,
                placement: placement.clone(),
                started,
            });
        }
        let run_s = match ended_run(job).filter(|&(_, at)| at <= end) {
            Some((run_s, _)) => run_s,
            None => {
                drawn += 1;
                drawn_run(job, end, &known, model.as_deref(), rng.unit())
            }
        };
        observed.push(
            (job.left.unwrap_or(end).min(end) - job.submit.max(start)).max(0) as f64 / 3600.0,
        );
        // What is left of its work; a run that began before the start keeps its limit from its
        // own start.
        let remaining = (run_s - before as f64).max(1.0);
        jobs.push(job_spec(job, id, (submit, start), remaining, &mut app_rng));
    }
    let usage = (config.multifactor)
        .map(|m| usage_at(record, start, m.half_life_s))
        .unwrap_or_default();
    let window = Window {
        running,
        until: Some((end - start) as f64),
        requeued,
        usage,
    };
    check_room(&window, &config)?;
    let observed_h = mean_and_p99(observed);
    Ok(Replay {
        observed_h,
        jobs,
        window,
        config,
        history,
        drawn,
        left_out,
        scored_until: None,
    })
}

/// What the history knew of `record`'s ended jobs at `start` (the replayed policies start from
/// it), and at `end` (what the runs not yet ended are drawn from).
fn histories(record: &Record, start: i64, end: i64) -> (History, History) {
    let mut at_start = History::default();
    let mut at_end = History::default();
    for job in record.jobs() {
        if let Some((run_s, ended_at)) = ended_run(job) {
            let limit_s = job.time_limit_min.map(|m| f64::from(m) * 60.0);
            let (user, name) = (job.user.as_str(), job.name.as_deref());
            if ended_at <= start {
                at_start.import_run(user, name, job.gpus, limit_s, run_s);
            }
            if ended_at <= end {
                at_end.import_run(user, name, job.gpus, limit_s, run_s);
            }
        }
    }
    (at_start, at_end)
}

/// A whole run for a job not ended by `end`, given the service it had by then: drawn (`u`) from
/// the run model's distribution for its prediction, else its prediction (as long again once
/// it outran it); never past its time limit.
fn drawn_run(
    job: &RecordedJob,
    end: i64,
    known: &History,
    model: Option<&cinch_core::learn::run_model::RunModel>,
    u: f64,
) -> f64 {
    let had: i64 = job
        .runs
        .iter()
        .map(|r| r.end.unwrap_or(end).min(end) - r.start)
        .filter(|&s| s > 0)
        .sum();
    let had = had as f64;
    let limit_s = job.time_limit_min.map(|m| f64::from(m) * 60.0);
    let predicted = known
        .predict_run_s(&job.user, job.name.as_deref(), job.gpus, limit_s, 3600.0)
        .run_s;
    let run = match model {
        Some(m) => m.distribution(predicted).sample(had, u),
        None if predicted > had => predicted,
        None => 2.0 * had.max(1.0),
    };
    limit_s.map_or(run, |l| run.min(l + 1.0))
}

/// The simulator's job for a recorded one: `remaining` seconds of work from `submit` (window
/// time, the window starting at `window_start` in the record's), its application from its `app` hint (else the simulator's rule by GPU-time), in the
/// preemptible set if its user opted in, held to the finish its hints state (`due`,
/// `turnaround`).
fn job_spec(
    job: &RecordedJob,
    id: u32,
    (submit, window_start): (i64, i64),
    remaining: f64,
    app_rng: &mut SeededRng,
) -> JobSpec {
    let drawn_app = assign_app(job.gpus, remaining, app_rng);
    let app = job
        .hints
        .get("app")
        .and_then(|a| a.parse::<App>().ok())
        .unwrap_or(drawn_app);
    let limit = job
        .time_limit_min
        .map_or(NO_LIMIT_S, |m| f64::from(m) * 60.0);
    let opted_in = job.opted_in();
    JobSpec {
        idle_from: None,
        id,
        name: job.job_id.to_string(),
        job_name: job.name.clone(),
        user: job.user.clone(),
        submit,
        gpus: job.gpus,
        gpus_per_node: job.gpus_per_node,
        app,
        local_bsz: f64::from(app.model().typical_local_bsz),
        run_time: remaining,
        time_limit: limit.max(60.0),
        hinted: opted_in,
        preemptible: opted_in,
        // The finish its user stated (a start target the simulator does not model).
        due: cinch_core::models::qos::stated_finish_by(&job.hints, job.submit)
            .map(|t| (t - window_start) as f64),
        elastic: None,
        share: None,
        progress: None,
    }
}

/// How close to the window's start a run's recorded end may be for it to have ended before: the
/// record sees an end at the first snapshot after it (within a round interval), while the job
/// that took its GPUs started at its exact time.
const END_SLACK_S: i64 = 300;

/// GPUs per node of each job running at a window's start, by job id.
type Placements = std::collections::HashMap<u32, Vec<(u32, u32)>>;

/// The placements of the jobs running at `start`, the latest to start placed first (Slurm's start
/// times are exact; a recorded end may be a round late): a run whose nodes are already full then
/// had ended just before the start, if its recorded end is that close, else it is left out with
/// why. Returns the placements by job id and the jobs left out.
///
/// A snapshot names a job's nodes, not how its GPUs split over them, so each split is found
/// ([`Splits`]): one that fits every node beside the runs placed before, at least one GPU on
/// each node a run names. An even split is not enough: a job of 12 GPUs may hold 8 and 4 beside
/// another job's 4, and split 6 and 6 it would not fit; left out, its GPUs would be free in the
/// replay (docs/policies/portfolio.md: on a heavy-tailed workload, whose big long jobs span
/// nodes, a replay of what ran gave as little as 0.38 of the recorded mean).
fn running_at_start(
    record: &Record,
    start: i64,
    node_of: &std::collections::HashMap<&str, u32>,
    gpus_per_node: u32,
) -> (Placements, Vec<(u32, &'static str)>) {
    let mut runs: Vec<(&RecordedJob, &cinch_core::learn::record::RecordedRun)> = record
        .jobs()
        .into_iter()
        .filter(|j| j.submit <= start && j.gpus > 0)
        .filter_map(|j| {
            j.runs
                .iter()
                .find(|r| r.start <= start && r.end.is_none_or(|e| e > start))
                .map(|r| (j, r))
        })
        .collect();
    runs.sort_by_key(|(j, r)| (std::cmp::Reverse(r.start), j.job_id));
    let mut splits = Splits::new(node_of.len(), gpus_per_node);
    let mut left_out = Vec::new();
    for (job, run) in runs {
        let nodes: Option<Vec<u32>> = run
            .nodes
            .iter()
            .map(|n| node_of.get(n.as_str()).copied())
            .collect();
        let Some(mut nodes) = nodes.filter(|n| !n.is_empty() && run.gpus > 0) else {
            left_out.push((job.job_id, "ran on nodes the simulator does not have"));
            continue;
        };
        let mut named = rustc_hash::FxHashSet::default();
        nodes.retain(|n| named.insert(*n));
        if !splits.add(job.job_id, &nodes, run.gpus) {
            left_out.push((
                job.job_id,
                if run.end.is_some_and(|e| e - start <= END_SLACK_S) {
                    "ended as the window began (its GPUs already held by a later start)"
                } else {
                    "its nodes were full at the window's start as the record shows them"
                },
            ));
        }
    }
    (splits.placements(), left_out)
}

/// Splits of runs' GPUs over the nodes each names, found one run at a time: its GPUs go to its
/// freest nodes, and where its nodes are full, runs placed before move GPUs to another of their
/// own nodes to make room (a chain of such moves, found breadth first: augmenting paths of a
/// bipartite transport problem).
struct Splits {
    free: Vec<u32>,
    /// Per run placed: its id, and its GPUs on each of its nodes (node, GPUs).
    runs: Vec<(u32, Vec<(u32, u32)>)>,
    /// The runs on each node (positions in `runs`).
    on_node: Vec<Vec<usize>>,
    /// The moves made for the run being added (run, from node, to node), undone if it does
    /// not fit: cheaper than a copy of everything per run (a big site has thousands running).
    moves: Vec<(usize, u32, u32)>,
}

impl Splits {
    fn new(nodes: usize, gpus_per_node: u32) -> Self {
        Splits {
            free: vec![gpus_per_node; nodes],
            runs: Vec::new(),
            on_node: vec![Vec::new(); nodes],
            moves: Vec::new(),
        }
    }

    /// Places a run of `gpus` GPUs on `nodes` (distinct, at least one), at least one GPU on
    /// each while it has as many; false, and nothing changed, if no split fits beside the runs
    /// placed.
    fn add(&mut self, id: u32, nodes: &[u32], gpus: u32) -> bool {
        self.moves.clear();
        let k = self.runs.len();
        self.runs
            .push((id, nodes.iter().map(|&n| (n, 0)).collect()));
        for &n in nodes {
            self.on_node[n as usize].push(k);
        }
        // One GPU on each of its nodes first (Slurm lists a node only if the job holds some of
        // it), then the rest on its freest.
        let firsts = nodes.iter().enumerate().take(gpus as usize);
        let mut placed = true;
        for (i, &n) in firsts {
            if !self.room_on(&[n]) {
                placed = false;
                break;
            }
            self.free[n as usize] -= 1;
            self.runs[k].1[i].1 += 1;
        }
        let mut left = gpus.saturating_sub(nodes.len() as u32);
        while placed && left > 0 {
            if !self.room_on(nodes) {
                placed = false;
                break;
            }
            let i = (0..nodes.len())
                .max_by_key(|&i| (self.free[nodes[i] as usize], std::cmp::Reverse(i)))
                .expect("a run names a node");
            self.free[nodes[i] as usize] -= 1;
            self.runs[k].1[i].1 += 1;
            left -= 1;
        }
        if !placed {
            self.undo(k);
        }
        placed
    }

    /// Takes back run `k`, the last added, and the moves made for it, in reverse.
    fn undo(&mut self, k: usize) {
        let (_, split) = self.runs.pop().expect("the run being added");
        for (n, g) in split {
            self.free[n as usize] += g;
            self.on_node[n as usize].pop();
        }
        while let Some((r, from, to)) = self.moves.pop() {
            self.shift(r, to, from);
        }
        debug_assert_eq!(self.runs.len(), k);
    }

    /// Moves one of run `r`'s GPUs from node `from` to node `to`.
    fn shift(&mut self, r: usize, from: u32, to: u32) {
        for p in self.runs[r].1.iter_mut() {
            if p.0 == from {
                p.1 -= 1;
            } else if p.0 == to {
                p.1 += 1;
            }
        }
        self.free[to as usize] -= 1;
        self.free[from as usize] += 1;
    }

    /// Makes a GPU free on one of `targets` if none is: finds, breadth first, a chain of runs,
    /// each moving one GPU from a node the chain must free to another of its own nodes, that
    /// ends at a node with a free GPU, and makes the moves. False if there is none.
    fn room_on(&mut self, targets: &[u32]) -> bool {
        if targets.iter().any(|&n| self.free[n as usize] > 0) {
            return true;
        }
        // For each node reached, how: the run that would move a GPU from the node before in the
        // chain to it, and that node.
        let mut came: Vec<Option<(usize, u32)>> = vec![None; self.free.len()];
        let mut seen = vec![false; self.free.len()];
        let mut queue = std::collections::VecDeque::new();
        for &n in targets {
            seen[n as usize] = true;
            queue.push_back(n);
        }
        while let Some(n) = queue.pop_front() {
            for &r in &self.on_node[n as usize] {
                // A run keeps at least one GPU on each of its nodes.
                let holds = self.runs[r].1.iter().find(|p| p.0 == n).map_or(0, |p| p.1);
                if holds < 2 {
                    continue;
                }
                for &(m, _) in &self.runs[r].1 {
                    if seen[m as usize] {
                        continue;
                    }
                    seen[m as usize] = true;
                    came[m as usize] = Some((r, n));
                    if self.free[m as usize] > 0 {
                        self.shift_back(m, &came);
                        return true;
                    }
                    queue.push_back(m);
                }
            }
        }
        false
    }

    /// Makes the moves of the chain that ends at `last`, a node with a free GPU: each run in it
    /// moves one GPU from the node before in the chain to the next, which frees one at the
    /// chain's start.
    fn shift_back(&mut self, last: u32, came: &[Option<(usize, u32)>]) {
        let mut to = last;
        while let Some((r, from)) = came[to as usize] {
            self.shift(r, from, to);
            self.moves.push((r, from, to));
            to = from;
        }
    }

    fn placements(self) -> Placements {
        self.runs
            .into_iter()
            .map(|(id, split)| (id, split.into_iter().filter(|p| p.1 > 0).collect()))
            .collect()
    }
}

/// Refuses a window whose running jobs hold more GPUs on a node than it has.
fn check_room(window: &Window, config: &SimConfig) -> Result<(), SimError> {
    let mut used = vec![0u32; config.cluster.nodes as usize];
    for run in &window.running {
        for &(node, gpus) in &run.placement {
            used[node as usize] += gpus;
            if used[node as usize] > config.cluster.gpus_per_node {
                return Err(SimError::Invalid(format!(
                    "the record's running jobs hold more than {} GPUs on node {node}",
                    config.cluster.gpus_per_node
                )));
            }
        }
    }
    Ok(())
}

/// A job's whole run and when it ended, if it ended (its last run over and not requeued).
fn ended_run(job: &RecordedJob) -> Option<(f64, i64)> {
    let last = job.runs.last()?;
    let end = last.end.filter(|_| !last.requeued)?;
    let run: i64 = job
        .runs
        .iter()
        .map(|r| r.end.unwrap_or(end) - r.start)
        .sum();
    Some(((run as f64).max(1.0), end))
}

/// A policy a window is replayed under.
#[derive(Debug, Clone, PartialEq)]
pub enum Member {
    /// The engine's model of Slurm alone.
    SlurmAlone,
    /// A policy of the core through the agent's live path (Slurm alone is `passthrough`).
    Policy(PolicyConfig),
}

/// Runs `jobs` under `member` with its optimizer keeping a record, as a live one does, and
/// returns the record (Slurm alone is recorded as cinch's `passthrough`: the agent sees and
/// decides nothing).
pub fn record_run(
    jobs: &[JobSpec],
    member: &Member,
    config: SimConfig,
) -> Result<Record, SimError> {
    let (policy, name) = match member {
        Member::Policy(config) => (config.clone(), config.name().to_string()),
        Member::SlurmAlone => (
            PolicyConfig::defaults_for("passthrough").expect("known"),
            "slurm".to_string(),
        ),
    };
    let mut scheduler = CinchPolicy::new(policy, name);
    // Everything the run shows: a record as long as the trace.
    scheduler.keep_record(cinch_core::learn::record::RecordLimits::UNBOUNDED);
    crate::engine::simulate(jobs, &mut scheduler, config, &mut |_, _| {})?;
    Ok(scheduler.record().cloned().expect("kept above"))
}

/// Each member's result on `replays` (one per draw): the replays run the members through the
/// same code as `cinch sim`, the policies starting from the history at the window's start.
pub fn evaluate(
    replays: &[Replay],
    members: &[(String, Member)],
) -> Result<Vec<MemberResult>, SimError> {
    let mut results = Vec::with_capacity(members.len());
    for (name, member) in members {
        let started = std::time::Instant::now();
        let (mut mean, mut p99, mut fairness, mut jobs) = (0.0, 0.0, 0.0, 0);
        let (mut targeted, mut missed) = (0, 0.0);
        for replay in replays {
            // Through the agent, as the portfolio runs it (its `passthrough` with the submit
            // hold); Slurm alone as the engine models it.
            let mut scheduler: Box<dyn crate::engine::Scheduler> = match member {
                Member::Policy(config) => Box::new(CinchPolicy::with_history(
                    config.clone(),
                    name.clone(),
                    replay.history.clone(),
                )),
                Member::SlurmAlone => Box::new(SlurmDefault),
            };
            let outcome = simulate_window(
                &replay.jobs,
                &replay.window,
                scheduler.as_mut(),
                replay.config,
                &mut |_, _| {},
            )?;
            let until = replay.window.until.unwrap_or(f64::INFINITY);
            let scored_until = replay.scored_until.unwrap_or(f64::INFINITY);
            let scored = || (outcome.jobs.iter()).filter(|j| j.spec.submit as f64 <= scored_until);
            let in_system: Vec<f64> = scored()
                .map(|j| {
                    (j.finish.unwrap_or(until).min(until) - j.spec.submit as f64).max(0.0) / 3600.0
                })
                .collect();
            jobs = in_system.len();
            fairness += jain_over_users(scored().map(|j| j.spec.user.as_str()), &in_system);
            let (m, p) = mean_and_p99(in_system);
            mean += m;
            p99 += p;
            // Only targets due within the window are judged: one past its end no member could
            // be held to yet, one before its start every member missed alike.
            let judged: Vec<bool> = outcome
                .jobs
                .iter()
                .filter_map(|j| {
                    let due = j.spec.due.filter(|&d| (0.0..=until).contains(&d))?;
                    Some(j.finish.is_none_or(|f| f > due))
                })
                .collect();
            targeted = judged.len();
            if !judged.is_empty() {
                missed += judged.iter().filter(|&&m| m).count() as f64 / judged.len() as f64;
            }
        }
        let draws = replays.len().max(1) as f64;
        results.push(MemberResult {
            member: name.clone(),
            mean_h: mean / draws,
            p99_h: p99 / draws,
            fairness: fairness / draws,
            qos_targeted: targeted,
            qos_missed: missed / draws,
            jobs,
            wall_s: started.elapsed().as_secs_f64(),
        });
    }
    Ok(results)
}

/// Each user's fair-share usage at `at` from the runs the record shows before it: GPU-seconds,
/// each decayed by `half_life_s` from when it was used, as multifactor's decay counts it
/// (continuously here; slurmctld every `PriorityCalcPeriod`). Only what the record holds: a
/// site's usage from before its record began is not known.
fn usage_at(record: &Record, at: i64, half_life_s: f64) -> Vec<(String, f64)> {
    let mut by_user: std::collections::BTreeMap<&str, f64> = Default::default();
    for job in record.jobs() {
        for run in &job.runs {
            let until = run.end.map_or(at, |e| e.min(at));
            if until <= run.start {
                continue;
            }
            let (from_ago, until_ago) = ((at - run.start) as f64, (at - until) as f64);
            // The integral of 2^(-age / half-life) over the run's ages.
            let weight = if half_life_s > 0.0 {
                half_life_s / std::f64::consts::LN_2
                    * (0.5f64.powf(until_ago / half_life_s) - 0.5f64.powf(from_ago / half_life_s))
            } else {
                from_ago - until_ago
            };
            *by_user.entry(job.user.as_str()).or_default() += f64::from(run.gpus) * weight;
        }
    }
    (by_user.into_iter())
        .map(|(user, gpu_s)| (user.to_string(), gpu_s))
        .collect()
}

/// Jain's index over the users' mean of `hours` (each job's, its user from `users`):
/// (sum x)^2 / (n sum x^2), 1 when every user's mean is the same; 1 with no time at all.
fn jain_over_users<'u>(users: impl Iterator<Item = &'u str>, hours: &[f64]) -> f64 {
    let mut by_user: std::collections::BTreeMap<&str, (f64, usize)> = Default::default();
    for (user, h) in users.zip(hours) {
        let e = by_user.entry(user).or_default();
        e.0 += h;
        e.1 += 1;
    }
    let means: Vec<f64> = by_user.values().map(|(sum, n)| sum / *n as f64).collect();
    let sum: f64 = means.iter().sum();
    let squares: f64 = means.iter().map(|x| x * x).sum();
    if squares <= 0.0 {
        1.0
    } else {
        sum * sum / (means.len() as f64 * squares)
    }
}

/// The mean and 99th percentile (nearest rank) of `values`; zeros when there are none.
fn mean_and_p99(mut values: Vec<f64>) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let p99 = values[((n as f64 * 0.99).ceil() as usize).clamp(1, n) - 1];
    (values.iter().sum::<f64>() / n as f64, p99)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinch_core::learn::record::RecordLimits;
    use cinch_core::testing::{cluster, pending, snapshot};
    use cinch_core::wire::snapshot::RunningJob;

    /// A job of 12 GPUs on two nodes of 8 beside a job of 4 on the first: split evenly (6 and
    /// 6) it would not fit, and was left out with its GPUs free in the replay; 4 and 8 fit.
    #[test]
    fn a_run_on_several_nodes_takes_the_split_that_fits() {
        let mut splits = Splits::new(2, 8);
        assert!(splits.add(1, &[0], 4));
        assert!(splits.add(2, &[0, 1], 12));
        let placements = splits.placements();
        assert_eq!(placements[&1], vec![(0, 4)]);
        assert_eq!(placements[&2], vec![(0, 4), (1, 8)]);
    }

    /// Where a run's node is full, a run placed before moves a GPU to another of its nodes to
    /// make room; where no move can, the run is refused and nothing changes.
    #[test]
    fn runs_placed_before_move_gpus_to_make_room_or_nothing_changes() {
        let mut splits = Splits::new(3, 4);
        // 5 GPUs on nodes 0 and 1: 3 on node 0 (the freest first, ties to the first named).
        assert!(splits.add(1, &[0, 1], 5));
        // 2 on node 0, which has 1 free: run 1 moves one of its GPUs from node 0 to node 1.
        assert!(splits.add(2, &[0], 2));
        let before = (splits.free.clone(), splits.runs.clone());
        assert_eq!(before.0, vec![0, 1, 4]);
        // 3 more on node 0: run 1 can give up one more GPU there (it keeps one), run 2 none
        // (it has no other node), so no split fits.
        assert!(!splits.add(3, &[0], 3));
        assert_eq!((splits.free.clone(), splits.runs.clone()), before);
        // A run on nodes 1 and 2 fits beside them.
        assert!(splits.add(4, &[1, 2], 5));
        let placements = splits.placements();
        assert_eq!(placements[&1], vec![(0, 2), (1, 3)]);
        assert_eq!(placements[&2], vec![(0, 2)]);
        assert_eq!(placements[&4], vec![(1, 1), (2, 4)]);
        assert!(!placements.contains_key(&3));
    }

    #[test]
    fn fairness_is_jains_index_over_the_users_means() {
        // Alice's jobs average 2 h, Bob's 2 h: alike.
        let users = ["alice", "alice", "bob"];
        assert_eq!(jain_over_users(users.into_iter(), &[1.0, 3.0, 2.0]), 1.0);
        // 1 h against 3 h: (1 + 3)^2 / (2 * (1 + 9)) = 0.8.
        let j = jain_over_users(["alice", "bob"].into_iter(), &[1.0, 3.0]);
        assert!((j - 0.8).abs() < 1e-12, "{j}");
        assert_eq!(jain_over_users(std::iter::empty(), &[]), 1.0);
    }

    /// A record of 4x8 GPUs: job 1 (8 GPUs) runs from before the window to past its end, job 2
    /// waits through it, job 3 arrives in it and ends.
    fn recorded() -> Record {
        recorded_with(&[])
    }

    /// [`recorded`], the jobs giving the hints listed (job id, key, value).
    fn recorded_with(hints: &[(u32, &str, &str)]) -> Record {
        let mut record = Record::new(RecordLimits::default());
        let hints_of = |id: u32| -> cinch_core::slurm::job_hints::Hints {
            hints
                .iter()
                .filter(|(j, _, _)| *j == id)
                .map(|(_, k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut look = |t: i64, pending: Vec<u32>, running: Vec<(u32, i64, &str)>| {
            let mut snap = snapshot(cluster(4, 8, 2), vec![]);
            snap.time = t;
            for id in pending {
                let mut job = pending_job(id);
                job.submit_time = if id == 3 { 1000 } else { 10 };
                job.hints = hints_of(id);
                snap.pending.push(job);
            }
            for (id, start, node) in running {
                snap.running.push(RunningJob {
                    job_id: id,
                    user: "u".into(),
                    nodes: vec![node.into()],
                    gpus: 8,
                    start_time: start,
                    submit_time: Some(0),
                    time_limit_min: Some(600),
                    hints: hints_of(id),
                    ..RunningJob::default()
                });
            }
            record.observe(&snap);
        };
        fn pending_job(id: u32) -> cinch_core::wire::snapshot::PendingJob {
            let mut job = pending(id, 8);
            job.user = "u".into();
            job.time_limit_min = Some(600);
            job
        }
        look(0, vec![2], vec![(1, 0, "n1")]);
        look(1000, vec![2, 3], vec![(1, 0, "n1")]);
        look(1100, vec![2], vec![(1, 0, "n1"), (3, 1050, "n2")]);
        look(2000, vec![2], vec![(1, 0, "n1")]);
        look(5000, vec![2], vec![(1, 0, "n1")]);
        record
    }

    /// A user's fair-share usage at a time is the GPU-seconds of the runs the record shows
    /// before it, each second decayed by its age: job 1 (8 GPUs from 0) and job 3 (8 GPUs from
    /// 1050) of user u; a run after the time counts nothing, a run still going counts up to it.
    #[test]
    fn usage_at_a_time_is_the_records_gpu_seconds_before_it_decayed_by_their_age() {
        let record = recorded();
        let of = |at: i64, half_life_s: f64| -> Vec<(String, f64)> {
            usage_at(&record, at, half_life_s)
        };
        // Without decay, plain GPU-seconds: job 3 has not started at 1000.
        assert_eq!(of(1000, 0.0), vec![("u".to_string(), 8.0 * 1000.0)]);
        assert_eq!(
            of(1100, 0.0),
            vec![("u".to_string(), 8.0 * 1100.0 + 8.0 * 50.0)]
        );
        // A half-life of 1000 s: the integral of 8 x 2^(-age / 1000) over ages 0 to 1000 s,
        // 8 x 1000 / ln 2 x (1 - 1/2).
        let decayed = of(1000, 1000.0);
        let expected = 8.0 * 1000.0 / std::f64::consts::LN_2 * 0.5;
        assert_eq!(decayed.len(), 1);
        assert!((decayed[0].1 - expected).abs() < 1e-6, "{decayed:?}");
        // Nothing ran before the record's first instant.
        assert!(of(0, 1000.0).is_empty());
    }

    #[test]
    fn a_window_starts_from_the_recorded_state_and_draws_only_what_was_not_seen() {
        let record = recorded();
        let replay = replay(&record, 500, 5000, SimConfig::default(), 1).unwrap();
        assert_eq!(
            (
                replay.config.cluster.nodes,
                replay.config.cluster.gpus_per_node
            ),
            (4, 8)
        );
        let by_name = |name: &str| replay.jobs.iter().find(|j| j.name == name).unwrap();
        // Job 1 runs since 0 on n1 (node 0) and had not ended: its run is drawn, at least the
        // 5000 s it had had, within its limit.
        let one = by_name("1");
        assert_eq!(one.submit, 0);
        let started = replay
            .window
            .running
            .iter()
            .find(|r| r.job == one.id)
            .unwrap();
        assert_eq!(
            (started.started, started.placement.clone()),
            (-500.0, vec![(0, 8)])
        );
        assert!(
            one.run_time >= 5000.0 && one.run_time <= 36_001.0,
            "{}",
            one.run_time
        );
        // Job 3 ended: its observed run (1050 .. 2000), submitted at 1000 (500 into the window).
        let three = by_name("3");
        assert_eq!((three.submit, three.run_time), (500, 950.0));
        // Job 2 waited the whole window: carried in at its start, its run drawn.
        assert_eq!(by_name("2").submit, 0);
        assert_eq!(replay.drawn, 2);
        assert!(replay.left_out.is_empty());
        assert_eq!(replay.window.until, Some(4500.0));
    }

    #[test]
    fn every_member_replays_the_same_window_and_is_scored_on_it() {
        let record = recorded();
        let replays: Vec<Replay> = (1..=2)
            .map(|seed| replay(&record, 500, 5000, SimConfig::default(), seed).unwrap())
            .collect();
        let members: Vec<(String, Member)> = ["slurm", "tiresias", "cinch"]
            .iter()
            .map(|m| m.parse::<crate::SchedulerKind>().unwrap().member().unwrap())
            .collect();
        let results = evaluate(&replays, &members).unwrap();
        assert_eq!(results.len(), 3);
        for r in &results {
            assert_eq!(r.jobs, 3, "{r:?}");
            // Job 1 is in the system all 4500 s, job 3 from 500 s; nobody beats that.
            assert!(r.mean_h >= (4500.0 + 950.0) / 3.0 / 3600.0, "{r:?}");
            assert!(r.mean_h <= 4500.0 / 3600.0 + 1e-9, "{r:?}");
        }
    }

    #[test]
    fn a_drained_replay_counts_each_job_to_its_finish_past_the_windows_end() {
        let record = recorded();
        let replay = |drain_s: f64| {
            super::replay(&record, 500, 5000, SimConfig::default(), 1)
                .unwrap()
                .drained(drain_s)
        };
        assert_eq!(replay(0.0).window.until, Some(4500.0));
        // Past every limit (600 min): every job finishes within the drain.
        let drained = replay(36_000.0);
        assert_eq!(drained.window.until, Some(40_500.0));
        let run_of = |name: &str| {
            drained
                .jobs
                .iter()
                .find(|j| j.name == name)
                .unwrap()
                .run_time
        };
        // Job 1 ran from 500 s before the window (its drawn run, more than the 5000 s it had
        // had), job 2 waits at most its own run on this empty cluster, job 3 ran 950 s.
        let (one, two) = (run_of("1") - 500.0, run_of("2"));
        assert!(one > 4500.0, "job 1 runs past the window: {one}");
        let members: Vec<(String, Member)> = ["slurm", "tiresias", "cinch"]
            .iter()
            .map(|m| m.parse::<crate::SchedulerKind>().unwrap().member().unwrap())
            .collect();
        let within = evaluate(&[replay(0.0)], &members).unwrap();
        let past = evaluate(&[drained], &members).unwrap();
        for (w, d) in within.iter().zip(&past) {
            // Within the window job 1 counts 4500 s at most; drained, its whole stay.
            assert!(w.mean_h <= 4500.0 / 3600.0 + 1e-9, "{w:?}");
            let least = (one + two + 950.0) / 3.0 / 3600.0;
            assert!(d.mean_h >= least - 1e-9, "{d:?}: at least {least}");
            assert!(d.mean_h > w.mean_h, "{d:?} against {w:?}");
        }
    }

    #[test]
    fn a_followed_replay_scores_only_the_jobs_there_before_its_last_hours_and_runs_the_rest() {
        let record = recorded();
        let replay = || super::replay(&record, 500, 5000, SimConfig::default(), 1).unwrap();
        // The window's last 4200 s are load: jobs 1 and 2 (there from its start) are scored,
        // job 3 (arriving 500 s in) is not.
        let followed = replay().following(4200.0);
        assert_eq!(followed.scored_until, Some(300.0));
        assert_eq!(replay().following(0.0).scored_until, None);
        let members: Vec<(String, Member)> = ["slurm", "tiresias", "cinch"]
            .iter()
            .map(|m| m.parse::<crate::SchedulerKind>().unwrap().member().unwrap())
            .collect();
        let all = evaluate(&[replay()], &members).unwrap();
        let scored = evaluate(&[followed], &members).unwrap();
        for (a, s) in all.iter().zip(&scored) {
            assert_eq!((a.jobs, s.jobs), (3, 2), "{a:?} {s:?}");
            // The same run, scored apart: what the third job adds is its own stay, at least
            // its 950 s of work and at most the 4000 s from its arrival to the window's end.
            let third_h = 3.0 * a.mean_h - 2.0 * s.mean_h;
            assert!(
                (950.0 / 3600.0 - 1e-9..=4000.0 / 3600.0 + 1e-9).contains(&third_h),
                "{a:?} {s:?}: {third_h}"
            );
        }
    }

    #[test]
    fn a_replayed_job_is_held_to_the_finish_it_stated_and_only_targets_due_in_the_window_count() {
        let members: Vec<(String, Member)> = ["slurm", "tiresias", "cinch"]
            .iter()
            .map(|m| m.parse::<crate::SchedulerKind>().unwrap().member().unwrap())
            .collect();
        // Job 3 (submitted at 1000, 950 s of work) asks to be done within 20 min: 1700 s into
        // the window that starts at 500, which it makes under every member. Job 1's target
        // passed before the window, job 2's lies after it: neither is judged.
        let turnaround = |within: &'static str| {
            recorded_with(&[
                (1, "due", "100"),
                (2, "due", "100000"),
                (3, "turnaround", within),
            ])
        };
        let record = turnaround("20:00");
        let replay = replay(&record, 500, 5000, SimConfig::default(), 1).unwrap();
        let due = |name: &str| replay.jobs.iter().find(|j| j.name == name).unwrap().due;
        assert_eq!(
            (due("1"), due("2"), due("3")),
            (Some(-400.0), Some(99_500.0), Some(1_700.0))
        );
        for r in evaluate(std::slice::from_ref(&replay), &members).unwrap() {
            assert_eq!((r.qos_targeted, r.qos_missed), (1, 0.0), "{r:?}");
        }
        // Within 10 min (1100 s into the window) it cannot be done: missed under every member.
        let record = turnaround("10:00");
        let replay = super::replay(&record, 500, 5000, SimConfig::default(), 1).unwrap();
        for r in evaluate(&[replay], &members).unwrap() {
            assert_eq!((r.qos_targeted, r.qos_missed), (1, 1.0), "{r:?}");
        }
        // Without a stated finish: nothing judged.
        let replay = super::replay(&recorded(), 500, 5000, SimConfig::default(), 1).unwrap();
        for r in evaluate(&[replay], &members).unwrap() {
            assert_eq!((r.qos_targeted, r.qos_missed), (0, 0.0), "{r:?}");
        }
    }

    /// Job 5 (8 GPUs) ran 100 s twice, each time back in the queue after; the window starts
    /// while it waits. Job 6 ran 300 s, was requeued, and runs again at the window's start.
    #[test]
    fn a_job_requeued_before_the_window_keeps_its_requeues_and_attained_service() {
        let mut record = Record::new(RecordLimits::default());
        let job = |id: u32| RunningJob {
            job_id: id,
            user: "u".into(),
            gpus: 8,
            submit_time: Some(0),
            time_limit_min: Some(600),
            requeue: true,
            ..RunningJob::default()
        };
        let mut look = |t: i64, running: &[(u32, i64, &str)], waiting: &[u32]| {
            let mut snap = snapshot(cluster(4, 8, 2), vec![]);
            snap.time = t;
            for &(id, start, node) in running {
                snap.running.push(RunningJob {
                    nodes: vec![node.into()],
                    start_time: start,
                    ..job(id)
                });
            }
            for &id in waiting {
                let mut p = pending(id, 8);
                (p.user, p.submit_time, p.time_limit_min) = ("u".into(), 0, Some(600));
                snap.pending.push(p);
            }
            record.observe(&snap);
        };
        look(0, &[(5, 0, "n1"), (6, 0, "n2")], &[]);
        look(100, &[(6, 0, "n2")], &[5]);
        look(200, &[(5, 200, "n1"), (6, 0, "n2")], &[]);
        look(300, &[], &[5, 6]);
        look(400, &[(6, 400, "n2")], &[5]);
        look(600, &[(6, 400, "n2")], &[5]);
        let replay = replay(&record, 500, 600, SimConfig::default(), 1).unwrap();
        let id_of = |name: &str| replay.jobs.iter().find(|j| j.name == name).unwrap().id;
        let (five, six) = (id_of("5"), id_of("6"));
        let mut requeued = replay.window.requeued.clone();
        requeued.sort_unstable();
        assert_eq!(requeued, [(five, 2), (six, 1)]);
        // Window time: the start is 0. Five's service is 8 GPUs x (100 + 100) s, requeued at
        // 300; six's 8 x 300 s, and its run since 400 counts on top while it runs.
        let history = &replay.history;
        assert_eq!(history.attained_service(five, None, 0), 1600.0);
        assert_eq!(history.attained_service(six, Some((8, -100)), 0), 3200.0);
        // The engine starts from those counts.
        let mut slurm = SlurmDefault;
        let outcome = simulate_window(
            &replay.jobs,
            &replay.window,
            &mut slurm,
            replay.config,
            &mut |_, _| {},
        )
        .unwrap();
        let restarts = |id: u32| outcome.job(id).unwrap().restarts;
        assert_eq!((restarts(five), restarts(six)), (2, 1));
    }

    #[test]
    fn a_window_that_ends_before_it_starts_or_a_record_without_gpus_is_refused() {
        let record = recorded();
        assert!(replay(&record, 500, 500, SimConfig::default(), 1).is_err());
        let empty = Record::new(RecordLimits::default());
        let err = replay(&empty, 0, 10, SimConfig::default(), 1)
            .err()
            .unwrap();
        assert!(err.to_string().contains("no node with GPUs"), "{err}");
    }
}
