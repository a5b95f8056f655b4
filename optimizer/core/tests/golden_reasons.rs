//! Golden reasons: the words of every kind of clause, and every registered policy's reasons on
//! four hand-sized busy clusters, against the files committed in `tests/golden/`. A change of
//! wording shows in review as a diff of those files; to take one that is intended, run
//! `CINCH_UPDATE_SNAPSHOTS=1 cargo test -p cinch-core --test golden_reasons` and commit them.

use std::path::PathBuf;

use cinch_core::policy::{PolicyConfig, POLICY_NAMES};
use cinch_core::testing::{busy_snapshot, hints};
use cinch_core::wire::idle::IdleAction;
use cinch_core::wire::reason::*;
use cinch_core::{History, SeededRng};

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// `text` against the committed file `name` (rewritten first when asked to).
fn check(name: &str, text: &str) {
    let path = golden(name);
    if std::env::var_os("CINCH_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let committed =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if committed != text {
        let line = committed
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(text.lines().count()));
        panic!(
            "{} differs from the reasons the code gives, first at line {}:\n  committed: {:?}\n  \
             now:       {:?}\nif the change is intended, run CINCH_UPDATE_SNAPSHOTS=1 cargo \
             test -p cinch-core --test golden_reasons and commit it",
            path.display(),
            line + 1,
            committed.lines().nth(line),
            text.lines().nth(line)
        );
    }
}

fn sens() -> Sensitivity {
    Sensitivity {
        slowdown: 0.487,
        source: "app=bert".into(),
    }
}

/// One clause of every kind (and the variants of each kind), with plain numbers.
fn every_clause() -> Vec<Clause> {
    let idle = |action, due, opted_in| {
        Clause::Idle(IdleNote {
            since: 3_600,
            busy: 2,
            threshold: 5,
            action,
            due,
            opted_in,
            act_at: 12_600,
        })
    };
    vec![
        Clause::Said("words read back from the wire".into()),
        Clause::Order(Order::Slurm),
        Clause::Order(Order::Shortest {
            service: 7_200.0,
            remaining_s: 3_600.0,
            gpus: 2,
            source: "similar earlier jobs",
        }),
        Clause::Order(Order::Gittins {
            run_s: 5_400.0,
            source: "similar earlier jobs",
            rho: 0.61,
            window: 60,
            service: 14_400.0,
            score: 9_000.0,
        }),
        Clause::QosProblem("hint due ignored: 'friday' is not a time".into()),
        // A stated target the site does not count, for each reason it may not (the words of
        // `Cinch::user_targets`).
        Clause::QosProblem(
            "hint turnaround not counted: this site does not count targets users state (admin: \
             user_targets)"
                .into(),
        ),
        Clause::QosProblem(
            "hint due not counted: this site counts stated targets only in some accounts and \
             QOS, not this job's (admin: user_targets)"
                .into(),
        ),
        Clause::QosProblem(
            "hint due not counted: alice has 2 earlier pending jobs with targets, and only that \
             many count at once (admin: user_target_max_pending)"
                .into(),
        ),
        Clause::QosProblem(
            "hint due not counted: alice's recent targets were mostly shorter than their jobs' \
             own runs (about 20% could be met even starting at submission), so cinch counts \
             them again once they fit"
                .into(),
        ),
        Clause::QosTarget(QosTarget {
            targets: "finish by 1970-01-01T11:00:00Z (hint turnaround)".into(),
            finish: 18_000,
            run_s: 18_000,
            source: "time limit x what jobs really ran of theirs here",
            allowance_s: 21_600.0,
            stance: QosStance::Slack,
        }),
        Clause::QosTarget(QosTarget {
            targets: "start by 1970-01-01T00:15:00Z (class interactive)".into(),
            finish: 4_000,
            run_s: 3_400,
            source: "default",
            allowance_s: 300.0,
            stance: QosStance::Urgent,
        }),
        Clause::QosTarget(QosTarget {
            targets: "finish by 1970-01-01T01:00:00Z (hint due)".into(),
            finish: 18_000,
            run_s: 18_000,
            source: "default",
            allowance_s: -14_400.0,
            stance: QosStance::Missed,
        }),
        Clause::QosTarget(QosTarget {
            targets: "finish by 1970-01-01T11:00:00Z (hint turnaround)".into(),
            finish: 25_200,
            run_s: 18_000,
            source: "time limit x what jobs really ran of theirs here",
            allowance_s: 14_400.0,
            stance: QosStance::Untrusted,
        }),
        Clause::Submitted(Submitted::Begin(86_400)),
        Clause::Submitted(Submitted::RequiredNodes),
        Clause::Submitted(Submitted::Constraint),
        Clause::SlurmPlaces,
        Clause::Placed(Placed::Consolidated {
            gpus: 12,
            nodes: 2,
            rack: Some("rack1".into()),
        }),
        Clause::Placed(Placed::Consolidated {
            gpus: 1,
            nodes: 1,
            rack: None,
        }),
        Clause::Placed(Placed::AcrossRacks {
            gpus: 24,
            nodes: 3,
            racks: 2,
        }),
        Clause::Unplaced(Unplaced::Submitted(Submitted::Constraint)),
        Clause::Unplaced(Unplaced::NoRoom { gpus: 32, free: 16 }),
        Clause::Unplaced(Unplaced::PerNodeTooLarge { per_node: 16 }),
        Clause::Unplaced(Unplaced::CrossRackOff { gpus: 24 }),
        Clause::Unplaced(Unplaced::PerNodeShort {
            nodes: 2,
            per_node: 4,
            fitting: 1,
        }),
        Clause::Unplaced(Unplaced::TooSpread {
            gpus: 8,
            max_nodes: 1,
        }),
        Clause::Unplaced(Unplaced::TooFewUsable { gpus: 8, usable: 6 }),
        Clause::Shape(Shape::Waits {
            at: 510,
            cost_s: 968.4,
            sens: sens(),
        }),
        Clause::Shape(Shape::Waits {
            at: 510,
            cost_s: f64::INFINITY,
            sens: sens(),
        }),
        Clause::Shape(Shape::HeldToRecheck { hold_s: 300 }),
        Clause::Shape(Shape::NoRoomNotSpread {
            sens: sens(),
            hold_s: 300,
        }),
        Clause::Shape(Shape::FirstToWait),
        Clause::Shape(Shape::ComputeBound(Sensitivity {
            slowdown: 0.02,
            source: "app=resnet".into(),
        })),
        Clause::Shape(Shape::WouldMissTarget { wait_s: 900 }),
        Clause::Shape(Shape::TooLong {
            wait_s: 5_000,
            cost_s: 968.4,
            max_wait_s: 86_400,
        }),
        Clause::Shape(Shape::TooLong {
            wait_s: 90_000,
            cost_s: f64::INFINITY,
            max_wait_s: 86_400,
        }),
        Clause::Shape(Shape::NoneExpected),
        Clause::Reserved {
            nodes: vec!["n3".into(), "n4".into()],
            at: 510,
        },
        Clause::Nice {
            site_priority: 60_000,
            nice: -4_612,
        },
        Clause::Requeued(Requeued::ForShorter {
            service: 36_000.0,
            remaining_s: 32_400.0,
            ahead: 600.0,
            restart: 1,
            max_restarts: 3,
        }),
        Clause::Requeued(Requeued::ToConsolidate {
            nodes: 2,
            sens: sens(),
            remaining_s: 42_600.0,
            gain_s: 20_746.0,
            restart_cost_s: 300,
            restart: 4,
            max_restarts: 5,
        }),
        Clause::Requeued(Requeued::Las { queue: 1 }),
        Clause::Elastic(Elastic::Sized {
            min: 2,
            max: 16,
            to: 4,
            jobs: 3,
            free: 12,
            left_s: 7_200.0,
        }),
        Clause::Elastic(Elastic::ResizedFrom(8)),
        Clause::Elastic(Elastic::Keeps {
            min: 1,
            max: 8,
            asks: 4,
            waits: true,
        }),
        Clause::Elastic(Elastic::Keeps {
            min: 2,
            max: 16,
            asks: 16,
            waits: false,
        }),
        Clause::Dally(DallyStep::Waits {
            allowed: 0,
            sens: sens(),
            only: Some(1),
            timer_s: 60,
            how: "fixed",
            relax_at: 1_060,
        }),
        Clause::Dally(DallyStep::Waits {
            allowed: 1,
            sens: sens(),
            only: None,
            timer_s: 120,
            how: "fixed",
            relax_at: 1_120,
        }),
        Clause::Dally(DallyStep::ComputeBound {
            sens: sens(),
            nodes: 2,
        }),
        Clause::Dally(DallyStep::Placed {
            level: 1,
            nodes: 3,
            waited_s: 60,
            sens: sens(),
        }),
        Clause::Dally(DallyStep::Placed {
            level: 0,
            nodes: 1,
            waited_s: 0,
            sens: sens(),
        }),
        Clause::LasQueue(2),
        Clause::StrictHeld {
            gpus: 8,
            nodes: 1,
            one_rack: true,
        },
        Clause::StrictReserved {
            gpus: 16,
            on: vec!["n1".into(), "n2".into()],
            at: 36_000,
        },
        Clause::EarliestDeadline {
            at: 36_000,
            source: "--deadline".into(),
        },
        Clause::PredictedService {
            service: 7_200.0,
            source: "similar earlier jobs",
        },
        Clause::EqualShare(EqualSize {
            size: 4,
            total: 16,
            jobs: 4,
            min: 2,
            max: 8,
            free: 8,
        }),
        Clause::SwitchWait(600),
        Clause::SwitchWaited,
        idle(IdleAction::Report, false, true),
        idle(IdleAction::Requeue, false, false),
        idle(IdleAction::Requeue, false, true),
        idle(IdleAction::Cancel, false, false),
        idle(IdleAction::Requeue, true, true),
        idle(IdleAction::Cancel, true, false),
    ]
}

/// Each kind of clause's position in the list above: a new kind does not compile here until it
/// has a line in the golden file.
fn kind(clause: &Clause) -> usize {
    match clause {
        Clause::Said(_) => 0,
        Clause::Order(_) => 1,
        Clause::QosProblem(_) => 2,
        Clause::QosTarget(_) => 3,
        Clause::Submitted(_) => 4,
        Clause::SlurmPlaces => 5,
        Clause::Placed(_) => 6,
        Clause::Unplaced(_) => 7,
        Clause::Shape(_) => 8,
        Clause::Reserved { .. } => 9,
        Clause::Nice { .. } => 10,
        Clause::Requeued(_) => 11,
        Clause::Elastic(_) => 12,
        Clause::Dally(_) => 13,
        Clause::LasQueue(_) => 14,
        Clause::StrictHeld { .. } => 15,
        Clause::StrictReserved { .. } => 16,
        Clause::EarliestDeadline { .. } => 17,
        Clause::PredictedService { .. } => 18,
        Clause::EqualShare(_) => 19,
        Clause::SwitchWait(_) => 20,
        Clause::SwitchWaited => 21,
        Clause::Idle(_) => 22,
    }
}

#[test]
fn every_kind_of_clause_reads_as_committed() {
    let clauses = every_clause();
    let mut seen = [false; 23];
    for clause in &clauses {
        seen[kind(clause)] = true;
    }
    assert!(
        seen.iter().all(|&s| s),
        "kinds with no line: {:?}",
        (0..seen.len()).filter(|&k| !seen[k]).collect::<Vec<_>>()
    );
    let text: String = clauses.iter().map(|c| format!("{c}\n")).collect();
    check("clauses.txt", &text);
}

#[test]
fn every_policys_reasons_read_as_committed() {
    let mut text = String::new();
    for name in POLICY_NAMES {
        let config = PolicyConfig::defaults_for(name).unwrap();
        let mut history = History::default();
        for seed in 0..4u64 {
            let (nodes, gpus, racks) = [(4, 8, 2), (6, 8, 3), (12, 4, 3), (2, 8, 1)][seed as usize];
            let mut snap = busy_snapshot(nodes, gpus, racks, 8, seed);
            for (k, job) in snap.pending.iter_mut().enumerate() {
                if seed % 2 == 0 {
                    job.site_priority = Some(1_000 + 37 * k as u32);
                }
                match k % 4 {
                    0 => job.hints = hints(&[("app", "bert"), ("ckpt", "yes")]),
                    1 => job.hints = hints(&[("elastic", "1-8")]),
                    2 => job.deadline = Some(snap.time + 36_000),
                    _ => {}
                }
            }
            for (k, job) in snap.running.iter_mut().enumerate() {
                if k % 2 == 0 {
                    job.requeue = true;
                    job.hints = hints(&[("ckpt", "yes")]);
                }
            }
            history.observe(&snap);
            let mut rng = SeededRng::new(snap.time as u64);
            for d in config.decide(&snap, snap.time, &mut rng, &history) {
                text.push_str(&format!("{name} {seed} job {}: {}\n", d.job_id, d.reason));
            }
        }
    }
    assert!(text.lines().count() > 200, "{text}");
    check("policies.txt", &text);
}
