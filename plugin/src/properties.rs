//! Property-based fuzzing of what the plugin parses from outside: Slurm's hostlists and TRES
//! strings, AdminComment records (which anyone with admin rights can edit), comment hints, and
//! the optimizer's answers through the apply path. Each property runs a fixed number of cases
//! (bounded time in the test suite); proptest shrinks any failure to a minimal input.

use std::collections::HashSet;

use proptest::prelude::*;

use cinch_core::enact::apply::{self, Applied, PendingState, RunningState};
use cinch_core::{Decisions, Mode};

use crate::agent::owned::{format_applied, parse_applied, DECISION_PREFIX};
use crate::agent::snapshot::snapshot;
use crate::agent::view::tests::{job, node};
use crate::agent::view::{hints, JobState, JobView, TopologyView};
use crate::hostlist::{self, MAX_NAMES};
use crate::record::{replace_segment, segment};
use cinch_core::slurm::gres::parse_gpu_spec;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 2_000,
        ..ProptestConfig::default()
    }
}

/// Strings made of the characters these formats care about, plus anything.
fn tricky() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9\\[\\],:;=/| -]{0,40}",
        any::<String>(),
        "n\\[[0-9]{1,12}-[0-9]{1,12}(,[0-9]{1,6}-[0-9]{1,9}){0,4}\\]",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn hostlists_never_panic_and_stay_bounded(expr in tricky()) {
        if let Ok(names) = hostlist::expand(&expr) {
            prop_assert!(names.len() <= MAX_NAMES);
        }
    }

    #[test]
    fn generated_hostlists_expand_to_their_nodes(
        prefix in "[a-z]{1,4}",
        ranges in proptest::collection::vec((0u32..500, 0u32..20), 1..4),
    ) {
        let body: Vec<String> = ranges.iter().map(|(lo, len)| format!("{lo}-{}", lo + len)).collect();
        let names = hostlist::expand(&format!("{prefix}[{}]", body.join(","))).unwrap();
        let expected: usize = ranges.iter().map(|(_, len)| *len as usize + 1).sum();
        prop_assert_eq!(names.len(), expected);
        prop_assert!(names.iter().all(|n| n.starts_with(&prefix)));
    }

    #[test]
    fn tres_strings_never_panic(tres in tricky()) {
        let _ = parse_gpu_spec(&tres);
    }

    #[test]
    fn generated_gpu_requests_parse_to_their_count(
        entries in proptest::collection::vec((proptest::option::of("[a-z][a-z0-9]{0,6}"), 1u64..10_000), 1..4),
        other in "(cpu=[0-9]{1,3},|mem=[0-9]{1,5}M,|gres:shard:[0-9],)?",
    ) {
        let text: Vec<String> = entries
            .iter()
            .map(|(t, n)| match t {
                Some(t) => format!("gres:gpu:{t}:{n}"),
                None => format!("gres:gpu:{n}"),
            })
            .collect();
        let spec = parse_gpu_spec(&format!("{other}{}", text.join(","))).unwrap().unwrap();
        prop_assert_eq!(spec.count, entries.iter().map(|(_, n)| n).sum::<u64>());
    }

    #[test]
    fn decision_records_survive_a_round_trip(
        pin in proptest::option::of(proptest::collection::vec("[a-z]{1,3}[0-9]{1,3}", 1..5)),
        nodes_was in proptest::option::of(1u32..64),
        max_nodes_was in proptest::option::of(0u32..64),
        begin in proptest::option::of(0i64..4_000_000_000),
        hold in any::<bool>(),
        prio in proptest::option::of(1u32..u32::MAX),
        nice in proptest::option::of((-10_000i64..10_000, -10_000i64..10_000)),
        gpus in proptest::option::of((1u32..4096, 1u32..4096)),
        until in 0i64..4_000_000_000,
        why in "[ -~]{0,60}",
    ) {
        let applied = Applied { pin: pin.map(Into::into), nodes_was, max_nodes_was, begin, hold, prio, nice, gpus, until, why: why.into() };
        let text = format_applied(&applied);
        let back = parse_applied(&text).unwrap();
        // The reason is kept as written, minus what would break the AdminComment ('|') and
        // surrounding spaces.
        let why = applied.why.replace('|', "/").trim().to_string();
        prop_assert_eq!(back, Applied { why: why.into(), ..applied });
    }

    #[test]
    fn any_admin_comment_keeps_the_admins_text_and_one_cinch_segment(
        admin in "[ -~]{0,60}",
        edits in proptest::collection::vec("[ -~]{0,30}", 0..4),
    ) {
        let mut comment = Some(admin.clone());
        let mut last = None;
        for edit in &edits {
            let record = format!("{DECISION_PREFIX} until=1 why={}", edit.replace('|', "/"));
            comment = Some(replace_segment(comment.as_deref(), DECISION_PREFIX, Some(&record)));
            last = Some(record.trim().to_string());
        }
        let comment = comment.unwrap();
        let _ = parse_applied(&comment);
        let segments = comment.split(" | ").filter(|s| s.trim().starts_with(DECISION_PREFIX)).count();
        let admins = admin.split(" | ").filter(|s| s.trim().starts_with(DECISION_PREFIX)).count();
        // cinch's segment replaces itself in place: never more than one of its own.
        prop_assert!(segments <= admins.max(1));
        if let Some(last) = last {
            prop_assert_eq!(segment(Some(&comment), DECISION_PREFIX).map(str::trim), Some(last.as_str()));
        }
        // Every segment of the admin's that is not cinch's is still there.
        for s in admin.split(" | ").map(str::trim).filter(|s| !s.is_empty() && !s.starts_with(DECISION_PREFIX)) {
            prop_assert!(comment.contains(s), "{:?} lost from {:?}", s, comment);
        }
    }

    #[test]
    fn comment_hints_never_panic(comment in tricky()) {
        let _ = hints(Some(&comment));
    }

    /// Whatever Slurm's strings hold (TRES, hostlists, GRES, comments, records), the snapshot
    /// the agent builds from them is made without a panic and keeps every job it was shown.
    #[test]
    fn the_snapshot_view_takes_any_strings(
        fields in proptest::collection::vec((tricky(), tricky(), tricky(), tricky(), 0u8..3), 1..8),
        gres in tricky(),
        gres_used in tricky(),
    ) {
        let jobs: Vec<JobView> = fields
            .iter()
            .enumerate()
            .map(|(i, (tres, nodes, comment, admin, state))| {
                let state = [JobState::Pending, JobState::Running, JobState::Other][*state as usize];
                let mut j = job(i as u32 + 1, state);
                j.tres_per_node = Some(tres.clone());
                j.tres_per_job = Some(tres.chars().rev().collect());
                j.nodes = Some(nodes.clone());
                j.req_nodes = Some(nodes.clone());
                j.comment = Some(comment.clone());
                j.admin_comment = Some(admin.clone());
                j
            })
            .collect();
        let mut n = node("n1", &gres_used);
        n.gres = Some(gres);
        let snapshot = snapshot(
            1_000,
            &jobs,
            &[n, node("n2", "gpu:0")],
            &TopologyView::default(),
        );
        let shown = jobs.iter().filter(|j| j.state != JobState::Other).count();
        prop_assert!(snapshot.pending.len() + snapshot.running.len() <= shown);
    }

    #[test]
    fn answers_parse_or_fail_cleanly(body in any::<Vec<u8>>()) {
        let _ = serde_json::from_slice::<Decisions>(&body);
    }

    /// Whatever decisions an optimizer sends, the apply path changes only pending jobs of the
    /// snapshot, delays within bounds, requeues only opted-in running jobs, within the limits.
    #[test]
    fn the_apply_path_keeps_its_bounds_on_any_answer(
        decisions in proptest::collection::vec(arb_decision(), 0..30),
        budget in 0u32..4,
    ) {
        let pending: Vec<PendingState> = (1..=5)
            .map(|id| PendingState { job_id: id, eligible_time: 1_000, ..PendingState::default() })
            .collect();
        let running: Vec<RunningState> = (6..=9)
            .map(|id| RunningState { job_id: id, requeue: id % 2 == 0, checkpoints: id != 8, requeues: id - 6, elastic: None, hands_off: None, ..RunningState::default() })
            .collect();
        let nodes: HashSet<String> = ["n1", "n2", "n3"].iter().map(|s| s.to_string()).collect();
        let plan = apply::plan(&pending, &running, &apply::Input { idle: Default::default(),
            now: 1_000,
            mode: Mode::Enforce,
            decisions: Some(&decisions),
            nodes: &nodes,
            requeue_limits: apply::RequeueLimits { max_per_job: 2, budget },
            renew_within_s: apply::renewal_margin_s(5),
            words: true,
        });
        for change in &plan.changes {
            prop_assert!((1..=5).contains(&change.job_id));
            if let Some(begin) = change.begin_time {
                prop_assert!(begin <= 1_000 + apply::MAX_DELAY_S);
            }
            if let Some(nodes_set) = &change.req_nodes {
                prop_assert!(nodes_set.iter().all(|n| nodes.contains(n)));
            }
            prop_assert_ne!(change.priority, Some(0).filter(|_| !change.record.hold));
        }
        prop_assert!(plan.requeues.len() as u32 <= budget);
        for (job, _) in &plan.requeues {
            // Only job 6 opted in, checkpoints and is under the cap (8 does not checkpoint).
            prop_assert_eq!(*job, 6);
        }
    }
}

fn arb_decision() -> impl Strategy<Value = cinch_core::Decision> {
    (
        0u32..12,
        proptest::option::of(proptest::collection::vec(
            prop_oneof![
                Just("n1".to_string()),
                Just("n9".to_string()),
                "[a-z0-9]{0,3}"
            ],
            0..3,
        )),
        proptest::option::of(any::<i64>()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<i32>()),
        proptest::option::of(any::<bool>()),
        any::<u32>(),
    )
        .prop_map(
            |(job_id, pin_nodes, delay_until, hold, priority, nice, requeue, ttl_s)| {
                cinch_core::Decision {
                    pin_nodes,
                    delay_until,
                    hold,
                    priority,
                    nice,
                    requeue,
                    ..cinch_core::Decision::explain(job_id, "fuzz", ttl_s)
                }
            },
        )
}
