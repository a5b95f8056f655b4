//! Every reason the policies give reads as a sentence and agrees with the decision it explains:
//! over busy clusters of several shapes, with and without the site's priorities, hints and
//! history, each registered policy's reasons pass `reason_problems`, and where a reason names
//! cinch's nice it is the nice the decision carries.

use cinch_core::policy::{PolicyConfig, POLICY_NAMES};
use cinch_core::testing::{busy_snapshot, hints};
use cinch_core::util::words::reason_problems;
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

#[test]
fn every_policys_reasons_read_as_sentences_and_agree_with_their_decisions() {
    let mut checked = 0;
    let mut bad = Vec::new();
    // What the reasons covered: a reservation, cinch's nice, a wait, a consolidated start.
    let mut seen = [
        ("reserved: ", 0),
        ("cinch's nice ", 0),
        ("waits", 0),
        ("consolidated: ", 0),
    ];
    for name in POLICY_NAMES {
        let config = PolicyConfig::defaults_for(name).unwrap();
        let mut history = History::default();
        for snapshot in snapshots() {
            history.observe(&snapshot);
            let mut rng = SeededRng::new(snapshot.time as u64);
            for d in config.decide(&snapshot, snapshot.time, &mut rng, &history) {
                checked += 1;
                for (phrase, count) in &mut seen {
                    *count += usize::from(d.reason.contains(*phrase));
                }
                for problem in reason_problems(&d.reason) {
                    bad.push(format!("{name}, job {}: {problem}: {}", d.job_id, d.reason));
                }
                if let Some(said) = d
                    .reason
                    .split("cinch's nice ")
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                {
                    let said: i32 = said.parse().unwrap();
                    if d.nice != Some(said) {
                        bad.push(format!(
                            "{name}, job {}: the reason says nice {said}, the decision {:?}: {}",
                            d.job_id, d.nice, d.reason
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 2_000, "only {checked} reasons checked");
    for (phrase, count) in seen {
        assert!(
            count > 0,
            "no reason said {phrase:?}: the cases do not cover it"
        );
    }
    assert!(
        bad.is_empty(),
        "{} bad reasons:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
