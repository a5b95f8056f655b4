//! Every reason the policies give reads as a sentence and agrees with the decision it explains:
//! over busy clusters of several shapes, with and without the site's priorities, hints and
//! history, each registered policy's reasons are typed clauses whose words pass
//! `reason_problems`, and where a reason names cinch's nice it is the nice the decision carries.

use cinch_core::policy::{PolicyConfig, POLICY_NAMES};
use cinch_core::testing::{busy_snapshot, hints};
use cinch_core::util::words::reason_problems;
use cinch_core::wire::reason::{Clause, DallyStep, Placed, Shape};
use cinch_core::{History, SeededRng, Snapshot};

/// Busy clusters: some with the site's priorities reported (cinch then speaks in nice), some
/// with application hints and a target, and a history of ended runs.
fn snapshots() -> Vec<Snapshot> {
    let mut out = Vec::new();
    for seed in 0..24u64 {
        let (nodes, gpus, racks) =
            [(4, 8, 2), (16, 8, 2), (12, 4, 3), (2, 8, 1)][seed as usize % 4];
        let mut snap = busy_snapshot(nodes, gpus, racks, 40, seed);
        for (k, job) in snap.pending.iter_mut().enumerate() {
            if seed % 2 == 0 {
                job.site_priority = Some(1_000 + 37 * k as u32);
            }
            if k % 3 == 0 {
                job.hints = hints(&[("app", "bert"), ("ckpt", "yes")]);
            }
            if k % 7 == 0 {
                job.hints.insert("turnaround".into(), "6:00:00".into());
            }
        }
        out.push(snap);
    }
    out
}

/// Whether a clause is of one kind.
type IsKind = fn(&Clause) -> bool;

#[test]
fn every_policys_reasons_read_as_sentences_and_agree_with_their_decisions() {
    let mut checked = 0;
    let mut bad = Vec::new();
    // What the reasons covered: a reservation, cinch's nice, a wait, a consolidated start.
    let kinds: [(&str, IsKind); 4] = [
        ("a reservation", |c| {
            matches!(c, Clause::Reserved { .. } | Clause::StrictReserved { .. })
        }),
        ("cinch's nice", |c| matches!(c, Clause::Nice { .. })),
        ("a wait", |c| {
            matches!(
                c,
                Clause::Shape(Shape::Waits { .. } | Shape::NoRoomNotSpread { .. })
                    | Clause::Dally(DallyStep::Waits { .. })
                    | Clause::Unplaced(_)
            )
        }),
        ("a consolidated start", |c| {
            matches!(c, Clause::Placed(Placed::Consolidated { .. }))
        }),
    ];
    let mut seen = [0; 4];
    for name in POLICY_NAMES {
        let config = PolicyConfig::defaults_for(name).unwrap();
        let mut history = History::default();
        for snapshot in snapshots() {
            history.observe(&snapshot);
            let mut rng = SeededRng::new(snapshot.time as u64);
            for d in config.decide(&snapshot, snapshot.time, &mut rng, &history) {
                checked += 1;
                for (count, (_, is)) in seen.iter_mut().zip(&kinds) {
                    *count += usize::from(d.reason.has(is));
                }
                // Every reason is typed: no clause is bare words.
                if d.reason.has(|c| matches!(c, Clause::Said(_))) {
                    bad.push(format!(
                        "{name}, job {}: untyped clause: {}",
                        d.job_id, d.reason
                    ));
                }
                let text = d.reason.to_string();
                for problem in reason_problems(&text) {
                    bad.push(format!("{name}, job {}: {problem}: {text}", d.job_id));
                }
                let said = d.reason.find(|c| match c {
                    Clause::Nice { nice, .. } => Some(*nice),
                    _ => None,
                });
                if let Some(said) = said.filter(|&n| d.nice != Some(n)) {
                    bad.push(format!(
                        "{name}, job {}: the reason says nice {said}, the decision {:?}: {text}",
                        d.job_id, d.nice
                    ));
                }
            }
        }
    }
    assert!(checked > 2_000, "only {checked} reasons checked");
    for (count, (kind, _)) in seen.iter().zip(&kinds) {
        assert!(
            *count > 0,
            "no reason gave {kind}: the cases do not cover it"
        );
    }
    assert!(
        bad.is_empty(),
        "{} bad reasons:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
