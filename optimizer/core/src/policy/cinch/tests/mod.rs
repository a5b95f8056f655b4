use super::*;

mod elastic;
mod nice;
mod preempt;

/// The parameters these tests order by: priorities set outright (`order_weight=0`), whose
/// numbers show cinch's order directly; the default expresses the same order as bounded
/// `nice` values ([`nice_for`], tested below).
fn absolute() -> CinchParams {
    CinchParams {
        order_weight: 0,
        ..CinchParams::default()
    }
}
use crate::policy::param_table::ParamError;
use crate::testing::{node, pending, snapshot};
use crate::wire::reason::{QosStance, QosTarget};
use crate::wire::snapshot::{NodeState, RunningJob};

fn running(id: u32, node_name: &str, gpus: u32, start: i64, limit_min: u32) -> RunningJob {
    RunningJob {
        job_id: id,
        user: "ann".into(),
        name: Some(format!("r{id}")),
        nodes: vec![node_name.into()],
        gpus,
        start_time: start,
        time_limit_min: Some(limit_min),
        ..RunningJob::default()
    }
}

fn decide(params: CinchParams, snap: &Snapshot) -> Vec<Decision> {
    Cinch(params).decide(snap, snap.time, &mut SeededRng::new(1), &History::default())
}

fn find(d: &[Decision], id: u32) -> &Decision {
    d.iter().find(|d| d.job_id == id).expect("decided")
}

/// When the reservation in `d`'s reason expects its nodes free.
fn reserved_at(d: &Decision) -> Option<i64> {
    d.reason.find(|c| match c {
        Clause::Reserved { at, .. } => Some(*at),
        _ => None,
    })
}

/// When `d`'s reason says its consolidated placement is expected free, if it waits for one.
fn waits_until(d: &Decision) -> Option<i64> {
    d.reason.find(|c| match c {
        Clause::Shape(Shape::Waits { at, .. }) => Some(*at),
        _ => None,
    })
}

/// What `d`'s reason says of its QoS target.
fn qos_target(d: &Decision) -> Option<&QosTarget> {
    d.reason.find(|c| match c {
        Clause::QosTarget(q) => Some(q),
        _ => None,
    })
}

/// The problems with its QoS targets that `d`'s reason names (in the QoS model's words).
fn qos_problems(d: &Decision) -> Vec<&str> {
    d.reason
        .clauses()
        .iter()
        .filter_map(|c| match c {
            Clause::QosProblem(p) => Some(p.as_str()),
            _ => None,
        })
        .collect()
}

/// The restart a requeue's reason counts, and at most how many.
fn restart_of(d: &Decision) -> Option<(u32, u32)> {
    d.reason.find(|c| match c {
        Clause::Requeued(
            Requeued::ForShorter {
                restart,
                max_restarts,
                ..
            }
            | Requeued::ToConsolidate {
                restart,
                max_restarts,
                ..
            },
        ) => Some((*restart, *max_restarts)),
        _ => None,
    })
}

/// 4 nodes x 4 GPUs in racks {n1,n2}, {n3,n4}; 3 GPUs busy on n1 and n2 until ~5000 s,
/// 2 busy on n3 until ~`n3_end`; a bert job asks for 8 GPUs at t=10.
fn no_rack_holds_it(n3_limit_min: u32) -> Snapshot {
    let mut nodes = vec![
        node("n1", 4, 3, "r1"),
        node("n2", 4, 3, "r1"),
        node("n3", 4, 2, "r2"),
        node("n4", 4, 0, "r2"),
    ];
    nodes[0].state = NodeState::Mixed;
    let mut bert = pending(4, 8);
    bert.hints.insert("app".into(), "bert".into());
    bert.time_limit_min = Some(34);
    bert.submit_time = 10;
    let mut snap = snapshot(nodes, vec![bert]);
    snap.time = 10;
    snap.running = vec![
        running(1, "n1", 3, 0, 167),
        running(2, "n2", 3, 0, 167),
        running(3, "n3", 2, 0, n3_limit_min),
    ];
    snap
}

#[test]
fn a_sensitive_job_waits_for_its_shape_with_a_reservation() {
    // By default a network-sensitive job waits for its best shape, and the first such job
    // is pinned where that shape frees first (job 3 is expected to end at 17 min x 60 x 0.5
    // = 510 s, freeing n3+n4), first in Slurm's order: Slurm's backfill reserves them.
    let d = decide(absolute(), &no_rack_holds_it(17));
    let bert = find(&d, 4);
    assert_eq!(
        bert.pin_nodes,
        Some(vec!["n3".to_string(), "n4".to_string()]),
        "{bert:?}"
    );
    assert_eq!(bert.priority, Some(RESERVED_PRIORITY));
    assert_eq!(bert.delay_until, None);
    let reserved = Clause::Reserved {
        nodes: vec!["n3".into(), "n4".into()],
        at: 510,
    };
    assert!(bert.reason.has(|c| *c == reserved), "{}", bert.reason);
    // Even when its shape is expected only at 5010 s.
    let d = decide(absolute(), &no_rack_holds_it(167));
    let bert = find(&d, 4);
    assert_eq!(bert.pin_nodes.as_ref().map(Vec::len), Some(2), "{bert:?}");
    assert_eq!(bert.priority, Some(RESERVED_PRIORITY));
}

#[test]
fn a_running_jobs_progress_sets_when_its_gpus_free_where_the_admin_lets_it() {
    // Every running job's limit says it ends at 167 min x 60 x 0.5 = 5,010 s; job 3's output
    // says 600 of its 1,000 steps are done at 0 s, 100 of them in the 100 s before: 400 s
    // left. Bert is pinned where its shape frees first: n1,n2 (the first of the ties) by the
    // limits; n3,n4 at 400 s by the progress.
    let mut snap = no_rack_holds_it(167);
    snap.running[2].progress = Some(crate::wire::snapshot::JobProgress {
        total: 1_000,
        done: 600,
        at: 0,
        since_done: 500,
        since: -100,
    });
    for (progress, nodes, free_at) in [(false, ["n1", "n2"], 5_010), (true, ["n3", "n4"], 400)] {
        let d = decide(
            CinchParams {
                progress,
                ..absolute()
            },
            &snap,
        );
        let bert = find(&d, 4);
        assert_eq!(
            bert.pin_nodes,
            Some(nodes.map(str::to_string).to_vec()),
            "{bert:?}"
        );
        assert_eq!(
            reserved_at(bert),
            Some(free_at),
            "progress {progress}: {}",
            bert.reason
        );
    }
}

#[test]
fn a_job_waiting_for_its_shape_starts_at_its_release_or_after_the_next_round() {
    // Job 3 is expected to end at 1 min x 60 x 0.5 = 30 s, 20 s from now. By default bert's
    // begin time is then: Slurm starts it on whatever is free at 30 s, spread if job 3 ends
    // late. With `start_at_release` off it is held a TTL long (renewed while it waits) and
    // every round looks at it again: the one that finds its shape free pins it there.
    let no_reservation = CinchParams {
        reserve: false,
        ..absolute()
    };
    let ttl = i64::from(no_reservation.ttl_s);
    for (start_at_release, begin) in [(true, 30), (false, 10 + ttl)] {
        let params = CinchParams {
            start_at_release,
            ..no_reservation.clone()
        };
        let d = decide(params, &no_rack_holds_it(1));
        let bert = find(&d, 4);
        assert!(bert.pin_nodes.is_none(), "{bert:?}");
        assert_eq!(bert.delay_until, Some(begin), "{bert:?}");
        assert_eq!(waits_until(bert), Some(30), "{}", bert.reason);
        let held = Clause::Shape(Shape::HeldToRecheck { hold_s: ttl });
        assert_eq!(
            bert.reason.has(|c| *c == held),
            !start_at_release,
            "{}",
            bert.reason
        );
    }
}

#[test]
fn a_sensitive_job_waits_for_its_shape_only_when_the_wait_is_shorter_than_spreading_costs() {
    // With `wait_always` off (and no reservation): expected run 34 min x 0.5 (no history) =
    // 1020 s; spread across racks bert loses 0.487 (app table): 1020 x 0.487 / 0.513 = 968
    // s. Job 3 is expected to end at 17 min x 60 x 0.5 = 510 s, freeing n3+n4: 500 s of
    // waiting beats spreading.
    let pays = CinchParams {
        wait_always: false,
        reserve: false,
        ..absolute()
    };
    let d = decide(pays.clone(), &no_rack_holds_it(17));
    let bert = find(&d, 4);
    assert_eq!(bert.delay_until, Some(510), "{bert:?}");
    assert!(bert.pin_nodes.is_none());
    assert_eq!(waits_until(bert), Some(510), "{}", bert.reason);
    // Times in its words read as dates.
    assert!(
        bert.reason
            .to_string()
            .contains("expected free at 1970-01-01T00:08:30Z"),
        "{}",
        bert.reason
    );
    // Job 3 expected at 5010 s: waiting 5000 s loses to the 968 s spreading costs.
    let d = decide(pays, &no_rack_holds_it(167));
    let bert = find(&d, 4);
    assert_eq!(bert.delay_until, None, "{bert:?}");
    assert_eq!(bert.pin_nodes.as_ref().map(Vec::len), Some(4), "{bert:?}");
    assert!(
        bert.reason
            .has(|c| matches!(c, Clause::Shape(Shape::TooLong { wait_s: 5_000, .. }))),
        "{}",
        bert.reason
    );
    // Without the consolidation part it never waits.
    let params = CinchParams {
        consolidate: false,
        ..absolute()
    };
    let d = decide(params, &no_rack_holds_it(17));
    assert_eq!(find(&d, 4).delay_until, None);
}

/// A history whose 60 ended jobs ran `run(i)` seconds under limits of `limit(i)` minutes.
fn learned(run: impl Fn(u32) -> f64, limit: impl Fn(u32) -> u32) -> History {
    let mut h = History::default();
    for i in 0..60u32 {
        let name = format!("once-{i}");
        h.import_run(
            "ann",
            Some(&name),
            4,
            Some(f64::from(limit(i)) * 60.0),
            run(i),
        );
    }
    h
}

#[test]
fn the_queue_order_follows_predictions_when_they_tell_and_attained_service_when_not() {
    // Three 4-GPU jobs wait on a full node: job 1 asks for 600 min, job 2 for 10 and
    // job 3 for 10 but has already run 2 h before a requeue.
    let job = |id, limit| {
        let mut j = pending(id, 4);
        j.user = "ann".into();
        j.time_limit_min = Some(limit);
        j.submit_time = 1_000_000;
        j
    };
    let mut snap = snapshot(
        crate::testing::cluster(1, 8, 1),
        vec![job(1, 600), job(2, 10), job(3, 10)],
    );
    for n in &mut snap.nodes {
        n.gpus_alloc = 8;
        n.state = NodeState::Allocated;
    }
    let ranks = |h: &History| {
        let d = Cinch(absolute()).decide(&snap, snap.time, &mut SeededRng::new(1), h);
        (1..=3)
            .map(|id| find(&d, id).priority.unwrap())
            .collect::<Vec<u32>>()
    };
    // Limits that tell: every job ran a tenth of its limit. Shorter predicted first.
    let telling = learned(|i| f64::from(10 + i * 50) * 6.0, |i| 10 + i * 50);
    let model = telling.run_model().expect("60 ended jobs");
    assert!(model.informativeness > 0.9, "{model:?}");
    let p = ranks(&telling);
    assert!(p[1] > p[0], "{p:?}");
    // Limits that tell nothing: runs unrelated to limits. Every new job ranks alike (first
    // come, first served among them, as Tiresias's first queue).
    let mute = learned(|i| f64::from((i * 37) % 60 + 1) * 600.0, |i| 10 + i * 50);
    let model = mute.run_model().expect("60 ended jobs");
    assert_eq!(model.informativeness, 0.0, "{model:?}");
    let p = ranks(&mute);
    assert_eq!(p[0], p[1], "{p:?}");
}

#[test]
fn one_decimal_reads_as_the_float_formatter_writes() {
    for x in [0.0, 0.04, 0.26, 1.0, 12.34, 99.96, 1234.5678, -3.21, 7.0e9] {
        assert_eq!(
            crate::util::words::OneDecimal(x).to_string(),
            format!("{x:.1}"),
            "{x}"
        );
    }
    assert_eq!(
        crate::util::words::OneDecimal(f64::INFINITY).to_string(),
        "inf"
    );
}

/// A pending job of `gpus` GPUs with a time limit of `limit_min`, submitted at 1,000,000.
fn timed(id: u32, gpus: u32, limit_min: u32) -> PendingJob {
    let mut j = pending(id, gpus);
    j.time_limit_min = Some(limit_min);
    j.submit_time = 1_000_000;
    j
}

#[test]
fn shorter_predicted_service_gets_the_higher_priority_and_waiting_long_overrides_it() {
    let jobs = vec![timed(1, 4, 600), timed(2, 4, 10), timed(3, 8, 10)];
    let mut snap = snapshot(crate::testing::cluster(1, 8, 1), jobs);
    for n in &mut snap.nodes {
        n.gpus_alloc = 8;
        n.state = NodeState::Allocated;
    }
    let d = decide(absolute(), &snap);
    let p = |id| find(&d, id).priority.unwrap();
    // 4 GPUs x 5 min < 8 GPUs x 5 min < 4 GPUs x 300 min.
    assert!(p(2) > p(3) && p(3) > p(1), "{d:?}");
    // The long job has waited more than max_stretch (3) times its predicted run (300 min)
    // when the short ones arrive: it goes first.
    snap.time = snap.pending[0].submit_time + 901 * 60;
    snap.pending[1].submit_time = snap.time;
    snap.pending[2].submit_time = snap.time;
    let d = decide(absolute(), &snap);
    let p = |id| find(&d, id).priority.unwrap();
    assert!(p(1) > p(2) && p(1) > p(3), "{d:?}");
    // queue_order off: Slurm's order, no priorities.
    let params = CinchParams {
        queue_order: false,
        ..absolute()
    };
    assert!(decide(params, &snap).iter().all(|d| d.priority.is_none()));
}

/// By default cinch's order is a bounded `nice` on top of the site's own priorities: the same
/// order as the priorities it would set outright, within `order_weight` points either way,
/// and no priority set at all.
#[test]
fn by_default_the_order_is_a_bounded_nice_that_keeps_it() {
    let mut snap = snapshot(
        crate::testing::cluster(1, 8, 1),
        vec![
            timed(1, 4, 600),
            timed(2, 4, 10),
            timed(3, 8, 10),
            timed(4, 1, 60),
        ],
    );
    for n in &mut snap.nodes {
        n.gpus_alloc = 8;
        n.state = NodeState::Allocated;
    }
    let outright = decide(absolute(), &snap);
    let default = decide(CinchParams::default(), &snap);
    assert!(default.iter().all(|d| d.priority.is_none()), "{default:?}");
    let w = DEFAULT_ORDER_WEIGHT as i32;
    let nice = |id| find(&default, id).nice.unwrap();
    let prio = |id| find(&outright, id).priority.unwrap();
    for a in 1..=4 {
        assert!((-w..=0).contains(&nice(a)), "{}", nice(a));
        for b in 1..=4 {
            if prio(a) > prio(b) {
                assert!(nice(a) < nice(b), "jobs {a}, {b}: {default:?}");
            }
        }
    }
    // The weight is the admin's: a smaller one moves jobs less.
    let light = CinchParams {
        order_weight: 100,
        ..CinchParams::default()
    };
    let d = decide(light, &snap);
    assert!(
        d.iter().all(|d| d.nice.is_some_and(|n| n.abs() <= 100)),
        "{d:?}"
    );
}

/// With the site's priorities reported, the round is planned in the order Slurm will run:
/// the site's priority less cinch's nice. A job the site's fair share puts far ahead gets the
/// free GPUs although cinch prefers the other (shorter) one; when the site cannot tell them
/// apart, cinch's order decides.
#[test]
fn the_free_gpus_go_first_to_the_job_the_site_priority_puts_first() {
    let job = |id, limit, site| {
        let mut j = pending(id, 8);
        j.time_limit_min = Some(limit);
        j.submit_time = 1_000_000 + i64::from(id);
        j.site_priority = Some(site);
        j
    };
    let mut snap = snapshot(
        crate::testing::cluster(2, 8, 2),
        vec![job(1, 10, 10_000), job(2, 600, 60_000)],
    );
    snap.nodes[0].gpus_alloc = 8;
    snap.nodes[0].state = NodeState::Allocated;
    snap.time = 1_000_100;
    let d = decide(CinchParams::default(), &snap);
    let (short, long) = (find(&d, 1), find(&d, 2));
    assert!(short.nice.unwrap() < long.nice.unwrap(), "{d:?}");
    // long starts now on the free node; short waits (reserved for after it).
    let starts = |d: &Decision| {
        d.reason
            .has(|c| matches!(c, Clause::Placed(Placed::Consolidated { .. })))
            && d.delay_until.is_none()
    };
    assert!(starts(long) && !starts(short), "{d:?}");
    let nice = long.nice.unwrap();
    let said = Clause::Nice {
        site_priority: 60_000,
        nice,
    };
    assert!(long.reason.has(|c| *c == said), "{}", long.reason);
    // Equal site priorities: the shorter job, cinch's choice, gets them.
    snap.pending[1].site_priority = Some(10_000);
    let d = decide(CinchParams::default(), &snap);
    assert!(starts(find(&d, 1)) && !starts(find(&d, 2)), "{d:?}");
    // An agent that does not report site priorities: cinch's own order, as before.
    snap.pending[1].site_priority = None;
    snap.pending[1].priority = 60_000;
    let d = decide(CinchParams::default(), &snap);
    assert!(starts(find(&d, 1)) && !starts(find(&d, 2)), "{d:?}");
}

#[test]
fn nice_for_keeps_the_bands_in_order_within_the_weight() {
    let w = 10_000;
    let order = [
        RESERVED_PRIORITY,
        urgent_priority(60.0),
        urgent_priority(86_400.0),
        priority_for(1e6, true),
        priority_for(0.0, false),
        priority_for(3_600.0, false),
        priority_for(3_700.0, false),
        priority_for(1e7, false),
        priority_for(1e12, false),
    ];
    let nices: Vec<i32> = order.iter().map(|&p| nice_for(p, w)).collect();
    assert_eq!(nices[0], -10_000, "{nices:?}");
    assert!(nices.windows(2).all(|n| n[0] < n[1]), "{nices:?}");
    assert!(nices.iter().all(|n| (-10_000..=0).contains(n)), "{nices:?}");
    assert_eq!(nice_for(RESERVED_PRIORITY, 1), -1);
    assert!((-1..=0).contains(&nice_for(priority_for(5.0, false), 1)));
    // Beyond what priority/basic can take, the weight is capped.
    assert_eq!(nice_for(RESERVED_PRIORITY, 1_000_000), -60_000);
}

/// A full 8-GPU node; three 4-GPU jobs submitted at t=0 wait: a short one (10 min limit),
/// and two long ones (600 min), the second with a QoS target given as `hint`.
fn swaf_case(hint: (&str, &str), now: i64) -> Snapshot {
    let job = |id, limit| {
        let mut j = pending(id, 4);
        j.time_limit_min = Some(limit);
        j.submit_time = 0;
        j
    };
    let mut targeted = job(3, 600);
    targeted.hints.insert(hint.0.into(), hint.1.into());
    let mut snap = snapshot(
        crate::testing::cluster(1, 8, 1),
        vec![job(1, 10), job(2, 600), targeted],
    );
    for n in &mut snap.nodes {
        n.gpus_alloc = 8;
        n.state = NodeState::Allocated;
    }
    snap.time = now;
    snap
}

#[test]
fn a_job_whose_slack_runs_short_goes_ahead_of_jobs_without_a_target_smallest_slack_first() {
    // Predicted run of the long jobs: 600 min x 0.5 = 5 h. Due at 11 h: 6 h of slack at
    // t=0, more than its 5 h run (qos_urgency 1): usual order, behind the short job.
    let d = decide(targets_counted(), &swaf_case(("turnaround", "11:00:00"), 0));
    let p = |d: &[Decision], id| find(d, id).priority.unwrap();
    assert!(p(&d, 1) > p(&d, 3), "{d:?}");
    let q = qos_target(find(&d, 3)).expect("a target");
    assert_eq!(
        q.targets,
        "finish by 1970-01-01T11:00:00Z (hint turnaround)"
    );
    assert_eq!(
        (q.allowance_s, q.stance),
        (6.0 * 3600.0, QosStance::Slack),
        "{q:?}"
    );
    // Two hours later its slack (4 h) is below its run: it goes ahead of everyone.
    let d = decide(
        targets_counted(),
        &swaf_case(("turnaround", "11:00:00"), 7200),
    );
    assert!(p(&d, 3) > p(&d, 1) && p(&d, 3) > p(&d, 2), "{d:?}");
    let q = qos_target(find(&d, 3)).expect("a target");
    assert_eq!(
        (q.allowance_s, q.stance),
        (4.0 * 3600.0, QosStance::Urgent),
        "{q:?}"
    );
    // Two urgent jobs: the smaller slack first.
    let mut snap = swaf_case(("turnaround", "11:00:00"), 7200);
    snap.pending[1].hints.insert("due".into(), "36000".into());
    let d = decide(targets_counted(), &snap);
    assert!(p(&d, 2) > p(&d, 3), "{d:?}");
    // A target that can no longer be met is said and not chased.
    let d = decide(targets_counted(), &swaf_case(("due", "3600"), 0));
    assert!(p(&d, 1) > p(&d, 3), "{d:?}");
    let q = qos_target(find(&d, 3)).expect("a target");
    assert_eq!(
        (q.allowance_s, q.stance),
        (-4.0 * 3600.0, QosStance::Missed),
        "{q:?}"
    );
    // qos off: the target is not looked at.
    let params = CinchParams {
        qos: false,
        ..targets_counted()
    };
    let d = decide(params, &swaf_case(("turnaround", "11:00:00"), 7200));
    assert!(p(&d, 1) > p(&d, 3), "{d:?}");
    let qos = |c: &Clause| matches!(c, Clause::QosTarget(_) | Clause::QosProblem(_));
    assert!(!find(&d, 3).reason.has(qos), "{}", find(&d, 3).reason);
    // Users' targets not counted (the default): not chased, and the job's reason says why.
    let d = decide(absolute(), &swaf_case(("turnaround", "11:00:00"), 7200));
    assert!(p(&d, 1) > p(&d, 3), "{d:?}");
    assert_eq!(
        qos_problems(find(&d, 3)),
        [
            "hint turnaround not counted: this site does not count targets users state (admin: \
          user_targets)"
        ]
    );
    assert_eq!(qos_target(find(&d, 3)), None);
}

/// The settings under which users' stated targets count, as a site that allows them has.
fn targets_counted() -> CinchParams {
    CinchParams {
        user_targets: true,
        ..absolute()
    }
}

#[test]
fn stated_targets_count_only_where_the_admin_allows_within_the_floor_and_the_cap() {
    let urgent = |params: CinchParams, snap: &Snapshot| {
        let d = decide(params, snap);
        let (p3, p1) = (find(&d, 3).priority, find(&d, 1).priority);
        let problems: Vec<String> = qos_problems(find(&d, 3))
            .into_iter()
            .map(str::to_string)
            .collect();
        (p3 > p1, problems, qos_target(find(&d, 3)).cloned())
    };
    let mut snap = swaf_case(("turnaround", "11:00:00"), 7200);
    snap.pending[2].account = Some("physics".into());
    snap.pending[2].qos = Some("normal".into());
    // Listed by account, or by QOS: counted; another account: not.
    let by_account = CinchParams {
        user_target_accounts: vec!["physics".into()],
        ..absolute()
    };
    assert!(urgent(by_account, &snap).0);
    let by_qos = CinchParams {
        user_target_qos: vec!["normal".into()],
        ..absolute()
    };
    assert!(urgent(by_qos, &snap).0);
    let other = CinchParams {
        user_target_accounts: vec!["chemistry".into()],
        ..absolute()
    };
    let (ahead, problems, _) = urgent(other, &snap);
    assert!(
        !ahead && problems[0].contains("only in some accounts and QOS"),
        "{problems:?}"
    );
    // A one-minute turnaround counted as the site's floor of 20 h: not urgent at t=2 h.
    let tight = swaf_case(("turnaround", "1:00"), 7200);
    let floor = CinchParams {
        user_target_min_s: 20 * 3600,
        ..targets_counted()
    };
    let (ahead, _, target) = urgent(floor.clone(), &tight);
    let target = target.expect("a target");
    assert!(
        !ahead && target.targets.contains("no sooner than 20:00:00"),
        "{target:?}"
    );
    // As written, it was missed long ago.
    let (_, _, target) = urgent(targets_counted(), &tight);
    let target = target.expect("a target");
    assert!(target.allowance_s < 0.0, "{target:?}");
    assert_eq!(target.stance, QosStance::Missed);
    // The cap: one counted target per user at once; the user's earlier targeted job (2)
    // holds it, so job 3's does not count.
    let mut capped = swaf_case(("turnaround", "11:00:00"), 7200);
    capped.pending[1]
        .hints
        .insert("turnaround".into(), "100:00:00".into());
    capped.pending[1].user = capped.pending[2].user.clone();
    let cap = CinchParams {
        user_target_max_pending: 1,
        ..targets_counted()
    };
    let (ahead, problems, _) = urgent(cap.clone(), &capped);
    assert!(
        !ahead && problems[0].contains("user_target_max_pending"),
        "{problems:?}"
    );
    // Another user's earlier target does not use this user's cap.
    capped.pending[1].user = "someone-else".into();
    assert!(urgent(cap, &capped).0);
    // Bad settings are refused.
    for bad in [
        CinchParams {
            user_target_min_s: 40 * 86_400,
            ..absolute()
        },
        CinchParams {
            user_target_accounts: vec!["a b".into()],
            ..absolute()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}

#[test]
fn a_users_next_target_does_not_count_once_their_targets_stopped_fitting_their_runs() {
    let snap = swaf_case(("turnaround", "11:00:00"), 7200);
    // A user whose last targets were all shorter than their jobs' own runs: the next one
    // does not count, and the reason says why.
    let mut history = History::default();
    let mut snap_h = swaf_case(("app", "bert"), 0);
    let user = snap.pending[2].user.clone();
    for (k, j) in snap_h.pending.iter_mut().enumerate() {
        j.job_id = 100 + k as u32;
        j.user = user.clone();
        j.hints.insert("turnaround".into(), "1:00".into());
    }
    snap_h.nodes.iter_mut().for_each(|n| {
        n.gpus_alloc = 0;
        n.state = NodeState::Idle;
    });
    history.observe(&snap_h);
    let mut ran = snap_h.clone();
    ran.pending.clear();
    ran.running = snap_h
        .pending
        .iter()
        .map(|j| RunningJob {
            job_id: j.job_id,
            user: user.clone(),
            nodes: vec!["n1".into()],
            gpus: 1,
            start_time: 0,
            ..RunningJob::default()
        })
        .collect();
    ran.time = 10;
    history.observe(&ran);
    ran.running.clear();
    ran.time = 3600;
    history.observe(&ran);
    assert_eq!(history.target_fit(&user).map(|f| f.count), Some(3));
    let d = Cinch(targets_counted()).decide(&snap, 7200, &mut SeededRng::new(1), &history);
    let problems = qos_problems(find(&d, 3));
    assert!(
        find(&d, 3).priority <= find(&d, 1).priority
            && problems[0].contains("recent targets were mostly shorter than their jobs' own runs"),
        "{problems:?}"
    );
}

#[test]
fn a_target_is_not_chased_on_predictions_that_have_been_off_by_more_than_2x() {
    // Jobs here ran 90% or 5% of their limits, alternately: the limit source is off by
    // far more than 2x on average.
    let mut history = History::default();
    for i in 0..40 {
        let ratio = if i % 2 == 0 { 0.9 } else { 0.05 };
        let name = format!("once-{i}");
        history.import_run("other", Some(&name), 4, Some(36_000.0), 36_000.0 * ratio);
    }
    let snap = swaf_case(("turnaround", "11:00:00"), 7200);
    let d = Cinch(targets_counted()).decide(&snap, 7200, &mut SeededRng::new(1), &history);
    let job = find(&d, 3);
    // Not ahead of job 1: these predictions tell nothing here, so the three jobs rank alike
    // and keep Slurm's order.
    assert!(job.priority <= find(&d, 1).priority, "{d:?}");
    assert_eq!(
        qos_target(job).map(|q| q.stance),
        Some(QosStance::Untrusted),
        "{}",
        job.reason
    );
}

#[test]
fn admin_classes_and_slurm_deadlines_are_targets_and_malformed_hints_are_said() {
    let class = QosClass {
        name: "interactive".into(),
        qos: vec!["debug".into()],
        partitions: Vec::new(),
        start_within: Some("15:00".into()),
        turnaround: None,
        finish_by: None,
    };
    let params = CinchParams {
        qos_classes: vec![class],
        ..targets_counted()
    };
    assert_eq!(params.validate(), Ok(()));
    let mut snap = swaf_case(("app", "bert"), 600);
    snap.pending[2].qos = Some("debug".into());
    let d = decide(params.clone(), &snap);
    let q = qos_target(find(&d, 3)).expect("a target");
    assert_eq!(
        q.targets,
        "start by 1970-01-01T00:15:00Z (class interactive)"
    );
    assert_eq!(q.stance, QosStance::Urgent);
    let mut snap = swaf_case(("app", "bert"), 7200);
    snap.pending[2].deadline = Some(36_000);
    let d = decide(params, &snap);
    let q = qos_target(find(&d, 3)).expect("a target");
    assert!(q.targets.contains("(--deadline)"), "{q:?}");
    assert_eq!(q.stance, QosStance::Urgent);
    let d = decide(targets_counted(), &swaf_case(("due", "friday"), 0));
    let problems = qos_problems(find(&d, 3));
    assert!(
        problems[0].starts_with("hint due ignored: 'friday' is not a time"),
        "{problems:?}"
    );
    // A class that does not parse is refused when set.
    let bad = CinchParams {
        qos_classes: vec![QosClass {
            name: "x".into(),
            qos: vec!["q".into()],
            partitions: Vec::new(),
            start_within: None,
            turnaround: Some("soon".into()),
            finish_by: None,
        }],
        ..absolute()
    };
    assert!(
        matches!(
            bad.validate(),
            Err(ParamError::Invalid { name: "qos_classes", ref why })
                if why.contains("QoS class 'x' turnaround")
        ),
        "{:?}",
        bad.validate()
    );
}

#[test]
fn a_jobs_own_profile_predicts_its_run() {
    let mut snap = swaf_case(("iters", "1000"), 0);
    snap.pending[2]
        .hints
        .insert("iter_rate".into(), "10".into());
    let d = decide(absolute(), &snap);
    // 100 s of run: the shortest of the three.
    assert!(find(&d, 3).priority > find(&d, 1).priority, "{d:?}");
    let source = find(&d, 3).reason.find(|c| match c {
        Clause::Order(Order::Shortest { source, .. } | Order::Gittins { source, .. }) => {
            Some(*source)
        }
        _ => None,
    });
    assert_eq!(source, Some(RunSource::Profile.describe()));
}
