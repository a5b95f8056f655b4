//! The round's rules, with a recording double for both ports: a cluster of two nodes whose
//! pending jobs carry cinch's record as the cluster keeps it, and scripted optimizer answers.

use super::*;
use crate::enact::apply::PRIORITY_AUTOMATIC;
use crate::models::elastic::Range;
use crate::testing::{answer, pin_job_1};
use std::collections::HashMap;

/// A cluster of two nodes, scripted optimizer answers, and every call recorded.
struct Double {
    pending: Vec<PendingState>,
    running: Vec<RunningState>,
    unregistered: usize,
    answers: Vec<Result<Decisions, AskError>>,
    changes: Vec<JobChange>,
    requeues: Vec<u32>,
    /// Requeues and changes in the order they were made.
    calls: Vec<String>,
    asked: usize,
    logs: Vec<String>,
    /// Whether the cluster can say "no change" at all (off: every round sees a change).
    quiet: bool,
    /// The cluster changed since the last read (set by tests; read once).
    changed: bool,
    unchanged_checks: usize,
    reads: usize,
    /// What the optimizer's health check says (`None`: it does not answer).
    policy_version: Option<u64>,
    /// Whether the optimizer can be asked at all (a token, live).
    ready: bool,
    /// The pending jobs of each snapshot the optimizer was sent.
    sent_pending: Vec<Vec<u32>>,
    /// Each `read_used` call: whether the round decided with its read.
    used: Vec<bool>,
    /// The answers handed back once the round was done with them.
    given_back: Vec<Decisions>,
    /// The pending jobs of each reading handed back once the round was done with it.
    readings_back: Vec<Vec<u32>>,
    /// What the cluster answers a change or requeue of these jobs instead of doing it.
    fails: HashMap<u32, ClusterError>,
}

fn pending(id: u32) -> PendingState {
    PendingState {
        job_id: id,
        min_nodes: 1,
        eligible_time: T0 / 1000 - 60,
        priority: 1_000,
        ..PendingState::default()
    }
}

fn running(id: u32) -> RunningState {
    RunningState {
        job_id: id,
        requeue: true,
        checkpoints: true,
        gpus: 8,
        ..RunningState::default()
    }
}

impl Double {
    fn new(pending: Vec<PendingState>) -> Double {
        Double {
            pending,
            running: Vec::new(),
            unregistered: 0,
            answers: Vec::new(),
            changes: Vec::new(),
            requeues: Vec::new(),
            calls: Vec::new(),
            asked: 0,
            logs: Vec::new(),
            quiet: false,
            changed: false,
            unchanged_checks: 0,
            reads: 0,
            policy_version: Some(1),
            ready: true,
            sent_pending: Vec::new(),
            used: Vec::new(),
            given_back: Vec::new(),
            readings_back: Vec::new(),
            fails: HashMap::new(),
        }
    }

    /// The next answer the optimizer gives.
    fn answers(&mut self, answer: Result<Decisions, AskError>) -> &mut Self {
        self.answers.push(answer);
        self
    }

    /// The cluster carries out the recorded changes, keeping each record, as Slurm does with
    /// the plugin's updates and AdminComment.
    fn apply_changes(&mut self) {
        for c in std::mem::take(&mut self.changes) {
            let Some(j) = self.pending.iter_mut().find(|j| j.job_id == c.job_id) else {
                continue;
            };
            if let Some(nodes) = &c.req_nodes {
                j.has_node_list = !nodes.is_empty();
            }
            if let Some(n) = c.min_nodes {
                j.min_nodes = n;
            }
            if let Some(n) = c.max_nodes {
                j.max_nodes = n;
            }
            if let Some(t) = c.begin_time {
                j.eligible_time = t;
            }
            match c.priority {
                Some(0) => j.held = true,
                Some(PRIORITY_AUTOMATIC) => j.held = false,
                Some(p) => j.priority = p,
                None => {}
            }
            if let Some(n) = c.nice {
                j.nice = n;
            }
            j.applied = c.record;
        }
    }
}

impl Cluster for Double {
    fn unchanged(&mut self) -> bool {
        self.unchanged_checks += 1;
        self.quiet && !std::mem::take(&mut self.changed)
    }
    fn read(&mut self) -> Result<Reading, ClusterError> {
        self.reads += 1;
        Ok(Reading {
            pending: self.pending.clone(),
            running: self.running.clone(),
            nodes: Arc::new(["n1", "n2"].iter().map(|n| n.to_string()).collect()),
            unregistered: self.unregistered,
        })
    }
    fn reading_done(&mut self, reading: Reading) {
        (self.readings_back).push(reading.pending.iter().map(|j| j.job_id).collect());
    }
    fn snapshot(&mut self, now: i64) -> Snapshot {
        Snapshot {
            idle: Default::default(),
            agent: None,
            schema_version: SCHEMA_VERSION,
            time: now,
            requeue_delay_s: crate::slurm::scontrol::DEFAULT_REQUEUE_DELAY_S,
            nodes: Vec::new(),
            running: self
                .running
                .iter()
                .map(|j| crate::wire::snapshot::RunningJob {
                    job_id: j.job_id,
                    gpus: j.gpus,
                    ..crate::wire::snapshot::RunningJob::default()
                })
                .collect(),
            pending: self
                .pending
                .iter()
                .map(|j| crate::wire::snapshot::PendingJob::new(j.job_id, "u", 8, 0))
                .collect(),
        }
    }
    fn change(&mut self, change: &JobChange) -> Result<(), ClusterError> {
        self.calls.push(format!("change {}", change.job_id));
        if let Some(e) = self.fails.get(&change.job_id) {
            return Err(e.clone());
        }
        self.changes.push(change.clone());
        Ok(())
    }
    fn requeue(&mut self, job_id: u32) -> Result<(), ClusterError> {
        self.calls.push(format!("requeue {job_id}"));
        if let Some(e) = self.fails.get(&job_id) {
            return Err(e.clone());
        }
        self.requeues.push(job_id);
        Ok(())
    }
    fn cancel(&mut self, job_id: u32) -> Result<(), ClusterError> {
        self.calls.push(format!("cancel {job_id}"));
        Ok(())
    }
    fn log(&mut self, _level: Level, message: &str) {
        self.logs.push(message.to_string());
    }
    fn read_used(&mut self, _now_ms: i64, used: bool) {
        self.used.push(used);
    }
}

impl Optimizer for Double {
    fn ready(&mut self) -> bool {
        self.ready
    }
    fn ask(&mut self, snapshot: &Snapshot) -> Result<Decisions, AskError> {
        self.asked += 1;
        self.sent_pending
            .push(snapshot.pending.iter().map(|j| j.job_id).collect());
        if self.answers.is_empty() {
            return Err(AskError::Unreachable("no answer scripted".into()));
        }
        self.answers.remove(0)
    }
    fn policy_version(&mut self) -> Result<u64, AskError> {
        self.policy_version
            .ok_or_else(|| AskError::Unreachable("optimizer down".to_string()))
    }
    fn answer_done(&mut self, answer: Decisions) {
        self.given_back.push(answer);
    }
}

fn enforce() -> Settings {
    Settings {
        idle: Default::default(),
        mode: Mode::Enforce,
        interval_s: 10,
        max_requeues_per_hour: apply::RequeueLimits::DEFAULT_MAX_PER_HOUR,
        max_requeues_per_job: apply::RequeueLimits::DEFAULT_MAX_PER_JOB,
        max_decisions: DEFAULT_MAX_DECISIONS,
    }
}

const T0: i64 = 1_000_000_000;

fn run(round: &mut Round, settings: &Settings, cluster: &mut Double, now_ms: i64) -> Outcome {
    round.run(settings, cluster, now_ms, Vec::new())
}

#[test]
fn a_passing_failure_keeps_decisions_until_the_breaker_opens() {
    let mut cluster = Double::new(vec![pending(1)]);
    let mut round = Round::default();
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    let out = run(&mut round, &enforce(), &mut cluster, T0);
    assert_eq!(cluster.changes.len(), 1, "pinned");
    assert_eq!(
        out.enforcing_until_ms,
        T0 + 30_000,
        "3 intervals of hold window"
    );
    cluster.apply_changes();

    // Two failures: the pin stands (its TTL runs), no hold window while there is no answer.
    for i in 1..=2 {
        let out = run(&mut round, &enforce(), &mut cluster, T0 + i * 10_000);
        assert!(
            cluster.changes.is_empty(),
            "round {i}: {:?}",
            cluster.changes
        );
        assert_eq!(out.enforcing_until_ms, 0);
    }
    // The third opens the breaker: cinch stands aside and undoes its pin.
    run(&mut round, &enforce(), &mut cluster, T0 + 30_000);
    assert_eq!(cluster.changes.len(), 1);
    assert_eq!(cluster.changes[0].req_nodes, Some(Vec::new()));
    assert!(cluster
        .logs
        .iter()
        .any(|l| l.contains("unusable after 3 tries")));
    assert!(round.breaker().is_open());

    // While open the optimizer is not asked; after the back-off one answer closes it.
    let asked = cluster.asked;
    run(&mut round, &enforce(), &mut cluster, T0 + 30_500);
    assert_eq!(cluster.asked, asked, "backing off");
    cluster.answers(answer(Mode::Enforce, vec![]));
    let out = run(&mut round, &enforce(), &mut cluster, T0 + 40_000);
    assert_eq!(cluster.asked, asked + 1);
    assert!(cluster.logs.iter().any(|l| l.contains("answers again")));
    assert_eq!(out.enforcing_until_ms, T0 + 70_000);
}

#[test]
fn an_optimizer_that_cannot_be_asked_stands_cinch_aside_without_the_breaker() {
    let mut cluster = Double::new(vec![pending(1)]);
    let mut round = Round::default();
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    run(&mut round, &enforce(), &mut cluster, T0);
    cluster.apply_changes();
    // No token: not asked, not a failure, and what cinch applied is undone at once.
    cluster.ready = false;
    let out = run(&mut round, &enforce(), &mut cluster, T0 + 10_000);
    assert_eq!(cluster.asked, 1);
    assert_eq!(out.enforcing_until_ms, 0);
    assert_eq!(cluster.changes.len(), 1);
    assert_eq!(cluster.changes[0].req_nodes, Some(Vec::new()));
    assert!(!round.breaker().is_open());
}

#[test]
fn rounds_wait_for_nodes_to_register_after_a_start_but_not_for_ever() {
    // After the controller restarts, a node reads UNKNOWN until its daemon registers: the pin
    // cinch applied before must not be undone for want of free GPUs.
    let mut pinned = pending(1);
    pinned.has_node_list = true;
    pinned.applied = Applied {
        pin: Some(vec!["n1".into(), "n2".into()].into()),
        until: T0 / 1000 + 300,
        why: "consolidated".into(),
        ..Applied::default()
    };
    let mut cluster = Double::new(vec![pinned]);
    cluster.unregistered = 1;
    let mut round = Round::default();
    for t in [T0, T0 + 10_000] {
        let out = run(&mut round, &enforce(), &mut cluster, t);
        assert!(cluster.changes.is_empty(), "{:?}", cluster.changes);
        assert_eq!(cluster.asked, 0, "not asked while nodes register");
        assert_eq!(
            out.enforcing_until_ms,
            t + 30_000,
            "new jobs are still held"
        );
    }
    assert_eq!(cluster.used, [false, false], "no sharing view from it");
    assert_eq!(
        cluster
            .logs
            .iter()
            .filter(|l| l.contains("waiting for 1 node(s) to register"))
            .count(),
        1,
        "{:?}",
        cluster.logs
    );
    // Registered: the round decides again.
    cluster.unregistered = 0;
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    run(&mut round, &enforce(), &mut cluster, T0 + 20_000);
    assert_eq!(cluster.asked, 1);
    assert!(cluster.logs.iter().any(|l| l.contains("nodes registered")));

    // A node that never registers is waited for at most NODE_REGISTRATION_WAIT_MS.
    let mut cluster = Double::new(vec![pending(1)]);
    cluster.unregistered = 1;
    let mut round = Round::default();
    run(&mut round, &enforce(), &mut cluster, T0);
    assert_eq!(cluster.asked, 0);
    cluster.answers(answer(Mode::Enforce, vec![]));
    run(
        &mut round,
        &enforce(),
        &mut cluster,
        T0 + NODE_REGISTRATION_WAIT_MS,
    );
    assert_eq!(cluster.asked, 1, "decides without it after the wait");
    assert!(
        cluster
            .logs
            .iter()
            .any(|l| l.contains("1 node(s) still not registered after 60 s")),
        "{:?}",
        cluster.logs
    );
}

#[test]
fn the_stricter_mode_wins() {
    let mut cluster = Double::new(vec![pending(1)]);
    let mut round = Round::default();
    // The settings say enforce, the optimizer shadow: shadow it is, logged once.
    cluster.answers(answer(Mode::Shadow, vec![pin_job_1()]));
    cluster.answers(answer(Mode::Shadow, vec![pin_job_1()]));
    let out = run(&mut round, &enforce(), &mut cluster, T0);
    run(&mut round, &enforce(), &mut cluster, T0 + 10_000);
    assert!(cluster.changes.is_empty());
    assert_eq!(out.enforcing_until_ms, 0);
    let shadow_lines = cluster
        .logs
        .iter()
        .filter(|l| l.starts_with("shadow:"))
        .count();
    assert_eq!(shadow_lines, 1, "{:?}", cluster.logs);

    // The settings say off: the optimizer is not even asked.
    let off = Settings {
        mode: Mode::Off,
        ..enforce()
    };
    let asked = cluster.asked;
    run(&mut round, &off, &mut cluster, T0 + 20_000);
    assert_eq!(cluster.asked, asked);
}

#[test]
fn what_a_user_changed_is_left_alone() {
    let mut cluster = Double::new(vec![pending(1)]);
    let mut round = Round::default();
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    // The user changed job 1's node list before this round: the pin is not applied, then or
    // later (the round remembers while the job waits).
    round.run(&enforce(), &mut cluster, T0, vec![(1, Fields::NODES)]);
    run(&mut round, &enforce(), &mut cluster, T0 + 10_000);
    assert!(cluster.changes.is_empty(), "{:?}", cluster.changes);
    assert_eq!(cluster.asked, 2);
}

/// Three rounds answered with `decisions` apply nothing, hold no new jobs, and open the breaker
/// with a line that says `why`.
fn three_answers_open_the_breaker(mut cluster: Double, decisions: Vec<Decision>, why: &str) {
    let mut round = Round::default();
    for i in 0..3 {
        cluster.answers(answer(Mode::Enforce, decisions.clone()));
        let out = run(&mut round, &enforce(), &mut cluster, T0 + i * 10_000);
        assert!(
            cluster.changes.is_empty(),
            "round {i}: {:?}",
            cluster.changes
        );
        assert_eq!(out.enforcing_until_ms, 0);
    }
    assert!(
        cluster
            .logs
            .iter()
            .any(|l| l.contains("unusable after 3 tries") && l.contains(why)),
        "{:?}",
        cluster.logs
    );
}

#[test]
fn an_answer_with_more_decisions_than_jobs_is_a_failed_round() {
    // One job in the snapshot, two decisions: nothing of it is applied.
    three_answers_open_the_breaker(
        Double::new(vec![pending(1)]),
        vec![pin_job_1(), Decision::explain(99, "unknown", 300)],
        "more than the 1 allowed",
    );
}

#[test]
fn an_answer_made_mostly_of_refused_decisions_counts_against_the_breaker() {
    // Job 1 pinned validly, three pins to nodes that do not exist.
    let bad = |id| Decision {
        pin_nodes: Some(vec!["nowhere".into()]),
        ..Decision::explain(id, "bogus", 300)
    };
    three_answers_open_the_breaker(
        Double::new((1..=4).map(pending).collect()),
        vec![pin_job_1(), bad(2), bad(3), bad(4)],
        "3 of its 4 decisions refused",
    );
    // A few refusals among good decisions are only logged: job 1's pin applies.
    let mut cluster = Double::new((1..=4).map(pending).collect());
    let mut round = Round::default();
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1(), bad(2)]));
    run(&mut round, &enforce(), &mut cluster, T0);
    assert_eq!(cluster.changes.len(), 1);
    assert!(cluster.logs.iter().any(|l| l.contains("refused 1 invalid")));
}

/// The round hands the reading it decided with back to the cluster's port (the simulator reads
/// an unchanged cluster from it), whether or not the optimizer answered; a round that waits
/// for nodes to register keeps nothing of its read.
#[test]
fn every_reading_decided_with_is_handed_back() {
    let mut cluster = Double::new((1..=3).map(pending).collect());
    let mut round = Round::default();
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    cluster.answers(Err(AskError::Unreachable("connection refused".into())));
    run(&mut round, &enforce(), &mut cluster, T0);
    run(&mut round, &enforce(), &mut cluster, T0 + 10_000);
    assert_eq!(cluster.readings_back, [vec![1, 2, 3], vec![1, 2, 3]]);

    let mut waiting = Double::new((1..=3).map(pending).collect());
    waiting.unregistered = 1;
    run(&mut Round::default(), &enforce(), &mut waiting, T0);
    assert_eq!(waiting.reads, 1);
    assert!(waiting.readings_back.is_empty());
}

/// The round hands every answer it took back to the optimizer's port, used or refused (the
/// delta exchange builds the next answer on it), and none when asking failed.
#[test]
fn every_answer_taken_is_handed_back() {
    let bad = |id| Decision {
        pin_nodes: Some(vec!["nowhere".into()]),
        ..Decision::explain(id, "bogus", 300)
    };
    let good = answer(Mode::Enforce, vec![pin_job_1()]).unwrap();
    let refused = answer(Mode::Enforce, vec![bad(2), bad(3), bad(4)]).unwrap();
    let mut cluster = Double::new((1..=4).map(pending).collect());
    let mut round = Round::default();
    cluster.answers(Ok(good.clone()));
    cluster.answers(Ok(refused.clone()));
    cluster.answers(Err(AskError::Unreachable("connection refused".into())));
    for i in 0..3 {
        run(&mut round, &enforce(), &mut cluster, T0 + i * 10_000);
    }
    assert_eq!(cluster.asked, 3);
    assert_eq!(cluster.given_back, [good, refused]);
    // Each failed round says what kind of failure it was.
    let said = |text: &str| cluster.logs.iter().any(|l| l.contains(text));
    assert!(
        said("no usable answer this round: invalid answer: 3 of its 3 decisions refused"),
        "{:?}",
        cluster.logs
    );
    assert!(
        said("no usable answer this round: unreachable: connection refused"),
        "{:?}",
        cluster.logs
    );
}

#[test]
fn a_gone_job_is_news_a_refusal_an_error_and_an_unreachable_slurm_is_asked_nothing_more() {
    let pin = |id| Decision {
        pin_nodes: Some(vec!["n1".into()]),
        ..Decision::explain(id, "consolidated", 300)
    };
    let mut cluster = Double::new((1..=4).map(pending).collect());
    cluster.running = vec![running(9)];
    cluster.fails.insert(1, ClusterError::Gone(1));
    cluster
        .fails
        .insert(2, ClusterError::Refused("Invalid node name".into()));
    cluster
        .fails
        .insert(3, ClusterError::Unreachable("Connection refused".into()));
    let mut decisions: Vec<Decision> = (1..=4).map(pin).collect();
    decisions.push(Decision {
        requeue: Some(true),
        ..Decision::explain(9, "make room", 300)
    });
    cluster.answers(answer(Mode::Enforce, decisions));
    run(&mut Round::default(), &enforce(), &mut cluster, T0);
    // Job 4's change and job 9's requeue were not asked: Slurm stopped answering at job 3.
    assert_eq!(cluster.calls, ["change 1", "change 2", "change 3"]);
    let said = |needle: &str| cluster.logs.iter().any(|l| l.contains(needle));
    assert!(said("job 1: 'pin to n1"), "{:?}", cluster.logs);
    assert!(
        said("not made: job 1 is no longer as the round read it"),
        "{:?}",
        cluster.logs
    );
    assert!(
        said("job 2: Slurm refused 'pin to n1"),
        "{:?}",
        cluster.logs
    );
    assert!(
        said("agent: Slurm cannot be reached (Connection refused): 'pin to n1"),
        "{:?}",
        cluster.logs
    );
    assert!(!said("job 4:") && !said("requeued"), "{:?}", cluster.logs);
}

#[test]
fn requeues_stay_within_the_hourly_limit_across_rounds() {
    let mut cluster = Double::new(Vec::new());
    cluster.running = (1..=5).map(running).collect();
    let mut round = Round::default();
    let settings = Settings {
        max_requeues_per_hour: 3,
        ..enforce()
    };
    let requeue_all = || {
        answer(
            Mode::Enforce,
            (1..=5)
                .map(|id| Decision {
                    requeue: Some(true),
                    ..Decision::explain(id, "make room", 300)
                })
                .collect(),
        )
    };
    cluster.answers(requeue_all());
    run(&mut round, &settings, &mut cluster, T0);
    assert_eq!(cluster.requeues, vec![1, 2, 3]);
    // Ten minutes later the hour's budget is spent.
    cluster.answers(requeue_all());
    run(&mut round, &settings, &mut cluster, T0 + 600_000);
    assert_eq!(cluster.requeues.len(), 3);
    // An hour after the first ones, the budget is back.
    cluster.answers(requeue_all());
    run(&mut round, &settings, &mut cluster, T0 + 3_600_000);
    assert_eq!(cluster.requeues, vec![1, 2, 3, 1, 2, 3]);
}

#[test]
fn a_requeued_elastic_job_is_resized_right_after_its_requeue_with_a_record_that_lapses() {
    let mut cluster = Double::new(Vec::new());
    cluster.running = vec![RunningState {
        elastic: Some(Range { min: 2, max: 16 }),
        gpus: 4,
        applied: Applied {
            pin: Some(vec!["n1".into()].into()),
            nodes_was: Some(1),
            until: 1,
            why: "placed".into(),
            ..Applied::default()
        },
        ..running(7)
    }];
    cluster.answers(answer(
        Mode::Enforce,
        vec![Decision {
            requeue: Some(true),
            gpus: Some(16),
            ..Decision::explain(7, "grow", 300)
        }],
    ));
    run(&mut Round::default(), &enforce(), &mut cluster, T0);
    assert_eq!(cluster.calls, ["requeue 7", "change 7"]);
    let resize = &cluster.changes[0];
    assert_eq!(resize.gpus, Some(16));
    assert_eq!(resize.req_nodes, Some(Vec::new()), "cinch's old pin goes");
    assert_eq!(resize.min_nodes, Some(1));
    assert_eq!(resize.record.gpus, Some((4, 16)));
    assert_eq!(resize.record.until, T0 / 1000 + apply::AFTER_REQUEUE_TTL_S);
}

#[test]
fn rounds_are_skipped_while_the_cluster_shows_no_change_but_not_past_a_refresh_or_an_expiry() {
    let mut cluster = Double::new(vec![pending(1), pending(2)]);
    let mut round = Round::default();
    // Job 1 pinned for 300 s.
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    let first = run(&mut round, &enforce(), &mut cluster, T0);
    assert!(!first.skipped);
    cluster.apply_changes();
    cluster.quiet = true;
    let (asked, reads) = (cluster.asked, cluster.reads);

    // Nothing changes: rounds are skipped, and new jobs are still held for the next one.
    for i in 1..=5 {
        let out = run(
            &mut round,
            &enforce(),
            &mut cluster,
            T0 + i * 10_000 - 5_000,
        );
        assert!(out.skipped, "round {i}");
        assert_eq!(out.enforcing_until_ms, T0 + i * 10_000 - 5_000 + 30_000);
    }
    assert_eq!((cluster.asked, cluster.reads), (asked, reads));
    assert_eq!(cluster.unchanged_checks, 5);

    // A user's change reported by job_modify: a full round.
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    let out = round.run(
        &enforce(),
        &mut cluster,
        T0 + 50_000,
        vec![(2, Fields::NICE)],
    );
    assert!(!out.skipped);
    assert_eq!(cluster.asked, asked + 1);

    // The cluster changed: a full round.
    cluster.changed = true;
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    assert!(!run(&mut round, &enforce(), &mut cluster, T0 + 55_000).skipped);

    // A minute without change: asked anyway (answers can depend on time).
    assert!(run(&mut round, &enforce(), &mut cluster, T0 + 100_000).skipped);
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    assert!(!run(&mut round, &enforce(), &mut cluster, T0 + 115_000).skipped);

    // An optimizer whose policy changed (or that no longer answers): a full round.
    cluster.policy_version = Some(2);
    cluster.answers(answer(Mode::Enforce, vec![pin_job_1()]));
    assert!(!run(&mut round, &enforce(), &mut cluster, T0 + 120_000).skipped);
}

#[test]
fn no_round_is_skipped_past_the_end_of_a_delay_cinch_set() {
    let mut cluster = Double::new(vec![pending(1)]);
    let mut round = Round::default();
    let delay = Decision {
        delay_until: Some(T0 / 1000 + 30),
        ..Decision::explain(1, "waits for a better placement", 300)
    };
    cluster.answers(answer(Mode::Enforce, vec![delay]));
    run(&mut round, &enforce(), &mut cluster, T0);
    cluster.apply_changes();
    cluster.quiet = true;
    assert!(run(&mut round, &enforce(), &mut cluster, T0 + 10_000).skipped);
    // The next round would come after the delay ends: this one asks.
    cluster.answers(answer(Mode::Enforce, vec![]));
    assert!(!run(&mut round, &enforce(), &mut cluster, T0 + 21_000).skipped);
}

#[test]
fn no_round_is_skipped_past_the_expiry_of_what_cinch_applied() {
    let mut cluster = Double::new(vec![pending(1)]);
    let mut round = Round::default();
    let short = Decision {
        ttl_s: 20,
        ..pin_job_1()
    };
    cluster.answers(answer(Mode::Enforce, vec![short]));
    run(&mut round, &enforce(), &mut cluster, T0);
    cluster.apply_changes();
    cluster.quiet = true;
    assert!(run(&mut round, &enforce(), &mut cluster, T0 + 5_000).skipped);
    // The next round would come after the pin's 20 s: this one asks (and keeps the pin, not
    // yet expired, though the answer no longer mentions it).
    cluster.answers(answer(Mode::Enforce, vec![]));
    assert!(!run(&mut round, &enforce(), &mut cluster, T0 + 11_000).skipped);
    assert!(cluster.changes.is_empty(), "{:?}", cluster.changes);
    // Past the pin's 20 s: the round runs, and with no answer mentioning it, undoes it.
    cluster.answers(answer(Mode::Enforce, vec![]));
    let out = run(&mut round, &enforce(), &mut cluster, T0 + 21_000);
    assert!(!out.skipped);
    assert_eq!(cluster.changes.len(), 1, "{:?}", cluster.changes);
    assert_eq!(cluster.changes[0].req_nodes, Some(Vec::new()));
}

#[test]
fn the_in_process_optimizer_takes_the_services_step() {
    // Learn, then decide with the rng seeded by the seed and the snapshot's time: the same
    // snapshot decided twice from the same history decides alike, whoever runs it.
    let snapshot = Snapshot {
        idle: Default::default(),
        agent: None,
        schema_version: SCHEMA_VERSION,
        time: 5_000,
        requeue_delay_s: crate::slurm::scontrol::DEFAULT_REQUEUE_DELAY_S,
        nodes: Vec::new(),
        running: Vec::new(),
        pending: vec![crate::wire::snapshot::PendingJob::new(1, "u", 8, 4_000)],
    };
    let mut a = InProcess::new(PolicyConfig::default(), 3);
    let answer = a.ask(&snapshot).unwrap();
    let mut history = History::default();
    let step = decide_step(
        &PolicyConfig::default(),
        Mode::Enforce,
        3,
        &mut history,
        &snapshot,
    );
    assert_eq!(answer.decisions, step);
    assert_eq!(answer.time, 5_000);
    assert_eq!(answer.policy, PolicyConfig::default().name());
    let off = decide_step(
        &PolicyConfig::default(),
        Mode::Off,
        3,
        &mut history,
        &snapshot,
    );
    assert!(off.is_empty(), "off decides nothing, but learns");
}
