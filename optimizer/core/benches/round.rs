//! What the core's part of one round costs inside slurmctld with 10,000 jobs queued and nothing
//! changed since the last round: the apply path's `plan` over an answer that repeats last
//! round's priorities (every decision renews what cinch applied), and the whole `Round::run`
//! around it (the bookkeeping before and after the plan) with ports that only hand back a
//! prepared reading and answer. Reading Slurm, the snapshot and the exchange are the ports' and
//! are timed elsewhere (benches `exchange`, `slurm-conf/bench-rounds`).
//!
//! And a round with nothing changed, which is skipped.
//!
//! Run: `cargo bench -p cinch-core --bench round`

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

use cinch_core::enact::apply::{self, Applied, JobChange, PendingState, SharedText};
use cinch_core::enact::round::{
    AskError, Cluster, ClusterError, Level, Optimizer, Reading, Round, Settings,
};
use cinch_core::{Decision, Decisions, Mode, Snapshot};

const NOW: i64 = 1_800_000_000;
const JOBS: u32 = 10_000;

/// 10,000 pending jobs to which cinch applied a priority last round, and an answer repeating it.
fn queue() -> (Reading, Decisions) {
    let why: SharedText = "predicted 0.5 GPU-hours left (0.5 h on 1 GPUs, from time limit x what \
                         jobs really ran of theirs here): shorter first; Slurm places it"
        .into();
    let pending = (1..=JOBS)
        .map(|id| PendingState {
            job_id: id,
            min_nodes: 1,
            eligible_time: NOW + 7_200,
            priority: 1_000 + id,
            applied: Applied {
                prio: Some(1_000 + id),
                until: NOW + 250,
                why: why.clone(),
                ..Applied::default()
            },
            ..PendingState::default()
        })
        .collect();
    let nodes = (0..16).map(|n| format!("node{n}")).collect::<HashSet<_>>();
    let decisions = (1..=JOBS)
        .map(|id| Decision {
            priority: Some(1_000 + id),
            ..Decision::explain(id, why.to_string(), 300)
        })
        .collect();
    let reading = Reading {
        pending,
        running: Vec::new(),
        nodes: Arc::new(nodes),
        unregistered: 0,
    };
    let answer = Decisions {
        observed: Default::default(),
        schema_version: 1,
        policy: "cinch".into(),
        mode: Mode::Enforce,
        time: NOW,
        stated_targets: None,
        decisions,
    };
    (reading, answer)
}

/// Ports that hand back the prepared reading and answer (the answer lent and given back, as the
/// plugin's link does).
struct Prepared {
    reading: Reading,
    /// Lent to the round and given back, as the plugin's memo does.
    snapshot: Option<Snapshot>,
    answer: Option<Decisions>,
    changes: usize,
    /// What Slurm's "no change since" read says.
    unchanged: bool,
}

impl Cluster for Prepared {
    fn unchanged(&mut self) -> bool {
        self.unchanged
    }
    fn read(&mut self) -> Result<Reading, ClusterError> {
        Ok(self.reading.clone())
    }
    fn snapshot(&mut self, now: i64) -> Snapshot {
        let mut snapshot = self.snapshot.take().expect("the snapshot was given back");
        snapshot.time = now;
        snapshot
    }
    fn snapshot_done(&mut self, snapshot: Snapshot) {
        self.snapshot = Some(snapshot);
    }
    fn change(&mut self, _change: &JobChange) -> Result<(), ClusterError> {
        self.changes += 1;
        Ok(())
    }
    fn requeue(&mut self, _job_id: u32) -> Result<(), ClusterError> {
        Ok(())
    }
    fn cancel(&mut self, _job_id: u32) -> Result<(), ClusterError> {
        Ok(())
    }
    fn log(&mut self, _level: Level, _message: &str) {}
}

impl Optimizer for Prepared {
    fn ask(&mut self, _snapshot: &Snapshot) -> Result<Decisions, AskError> {
        self.answer
            .take()
            .ok_or_else(|| AskError::Invalid("not given back".to_string()))
    }
    fn policy_version(&mut self) -> Result<u64, AskError> {
        Ok(1)
    }
    fn answer_done(&mut self, answer: Decisions) {
        self.answer = Some(answer);
    }
}

fn bench_round(c: &mut Criterion) {
    let mut group = c.benchmark_group("round");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    let (reading, answer) = queue();

    group.bench_function("plan_10000_pending_renewed", |b| {
        b.iter(|| {
            let plan = apply::plan(
                &reading.pending,
                &reading.running,
                &apply::Input {
                    idle: Default::default(),
                    now: NOW,
                    mode: Mode::Enforce,
                    decisions: Some(&answer.decisions),
                    nodes: &reading.nodes,
                    requeue_limits: apply::RequeueLimits {
                        max_per_job: 3,
                        budget: 10,
                    },
                    renew_within_s: 0,
                    words: true,
                },
            );
            assert!(plan.changes.is_empty() && plan.renewed.len() == JOBS as usize);
            plan
        })
    });

    // The reading's copy is the port's (the plugin builds it from its memo): timed alone, to
    // take from the round's figure.
    group.bench_function("reading_clone_10000_pending", |b| {
        b.iter(|| reading.clone())
    });

    let settings = Settings {
        idle: Default::default(),
        mode: Mode::Enforce,
        interval_s: 5,
        max_requeues_per_hour: 10,
        max_requeues_per_job: 3,
        max_decisions: 10_000,
    };
    let mut ports = Prepared {
        reading,
        snapshot: Some(cinch_core::testing::busy_snapshot(16, 8, 2, JOBS, 42)),
        answer: Some(answer),
        changes: 0,
        unchanged: false,
    };
    let mut round = Round::default();
    let mut now_ms = NOW * 1000;
    group.bench_function("run_10000_pending_renewed", |b| {
        b.iter(|| {
            // Past the idle refresh, so that no round is skipped.
            now_ms += 61_000;
            round.run(&settings, &mut ports, now_ms, Vec::new())
        })
    });
    assert_eq!(ports.changes, 0, "a renewal changes nothing in Slurm");

    // A round with nothing changed since the last good one (Slurm's read says so, the
    // optimizer's policy version is the same, nothing cinch applied is near its end): skipped,
    // at the cost of that read and a health check; no snapshot, no decision, no plan.
    now_ms += 61_000;
    let full = round.run(&settings, &mut ports, now_ms, Vec::new());
    assert!(!full.skipped);
    ports.unchanged = true;
    let quiet_ms = now_ms + 5_000;
    group.bench_function("run_10000_pending_nothing_changed", |b| {
        b.iter(|| {
            let outcome = round.run(&settings, &mut ports, quiet_ms, Vec::new());
            assert!(outcome.skipped);
            outcome
        })
    });

    // What the service adds to each round for the record of the recent past: a look at a busy
    // snapshot in which nothing changed since the last.
    let busy = cinch_core::testing::busy_snapshot(1250, 8, 8, JOBS, 42);
    let mut record =
        cinch_core::learn::record::Record::new(cinch_core::learn::record::RecordLimits::default());
    record.observe(&busy);
    let mut later = busy.clone();
    group.bench_function("record_observe_10000_pending", |b| {
        b.iter(|| {
            later.time += 5;
            record.observe(&later);
        })
    });
    assert_eq!(record.len(), busy.pending.len() + busy.running.len());
    group.finish();
}

criterion_group!(benches, bench_round);
criterion_main!(benches);
