//! What one exchange with the optimizer costs the plugin's end (inside slurmctld) with 10,000
//! jobs queued and nothing changed since the last round: the delta exchange (fingerprint the
//! snapshot's jobs, encode the delta, decode the answer's delta, rebuild the whole answer and
//! take it back; every hundredth exchange whole, as live) against the whole exchange (encode
//! the snapshot, decode the whole answer).
//! The optimizer's own end is not timed (it runs outside slurmctld).
//!
//! Run: `cargo bench -p cinch-core --bench exchange`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

use cinch_core::testing::busy_snapshot;
use cinch_core::wire::exchange::{DecisionsDelta, Receiver, Sender};
use cinch_core::{Decision, Decisions, Snapshot};

/// An answer like `cinch`'s: one decision per pending job, with a reason of its usual length.
fn answer_to(snapshot: &Snapshot) -> Decisions {
    Decisions {
        observed: Default::default(),
        schema_version: 1,
        policy: "cinch".into(),
        mode: cinch_core::Mode::Enforce,
        time: snapshot.time,
        stated_targets: None,
        decisions: snapshot
            .pending
            .iter()
            .map(|j| {
                Decision::explain(
                    j.job_id,
                    format!(
                        "predicted {:.1} GPU-hours left (0.5 h on {} GPUs, from time limit x what \
                         jobs really ran of theirs here): shorter first; Slurm places it",
                        0.5 * f64::from(j.gpus),
                        j.gpus
                    ),
                    300,
                )
            })
            .collect(),
    }
}

fn bench_exchange(c: &mut Criterion) {
    let mut group = c.benchmark_group("exchange");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    let snapshot = busy_snapshot(1_000, 8, 32, 10_000, 42);
    let answer = answer_to(&snapshot);

    // The optimizer's answers, made once: the first (whole) and one to an unchanged cluster.
    let mut sender = Sender::default();
    let mut receiver = Receiver::new(1);
    let first = sender.delta(&snapshot);
    let told = receiver.answer(None, &snapshot, &answer);
    let whole = sender_receive(&mut sender, first, told);
    sender.give_back(whole);
    let again = sender.delta(&snapshot);
    let base = again.delta.base;
    let unchanged = serde_json::to_vec(&receiver.answer(base, &snapshot, &answer)).unwrap();
    // Every hundredth exchange is whole (`exchange::WHOLE_EVERY`), as live: answered whole.
    let whole_told = serde_json::to_vec(&receiver.answer(None, &snapshot, &answer)).unwrap();

    group.bench_function("delta_10000_pending_unchanged", |b| {
        b.iter(|| {
            let outgoing = sender.delta(&snapshot);
            let body = serde_json::to_vec(&outgoing.delta).unwrap();
            let told = match outgoing.delta.base {
                Some(_) => &unchanged,
                None => &whole_told,
            };
            let told: DecisionsDelta = serde_json::from_slice(told).unwrap();
            // (The optimizer answers every delta on the same base here.)
            let whole = sender_receive(&mut sender, outgoing, told);
            assert_eq!(whole.decisions.len(), 10_000);
            sender.give_back(whole);
            body.len()
        })
    });
    let whole_answer = serde_json::to_vec(&answer).unwrap();
    group.bench_function("whole_10000_pending", |b| {
        b.iter(|| {
            let body = serde_json::to_vec(&snapshot).unwrap();
            let decisions: Decisions = serde_json::from_slice(&whole_answer).unwrap();
            assert_eq!(decisions.decisions.len(), 10_000);
            body.len()
        })
    });
    group.finish();
}

/// Receives an answer made for the sender's current base (the bench reuses one answer).
fn sender_receive(
    sender: &mut Sender,
    outgoing: cinch_core::wire::exchange::Outgoing,
    mut told: DecisionsDelta,
) -> Decisions {
    told.base = outgoing.delta.base;
    let exchange = told.exchange;
    let whole = sender.receive(outgoing, told).unwrap();
    assert!(sender.next_base().is_none() && exchange > 0);
    whole
}

criterion_group!(benches, bench_exchange);
criterion_main!(benches);
