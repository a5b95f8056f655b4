//! Requeuing opted-in running jobs: for waiting ones with less service, for a consolidated
//! restart, within the caps.

use super::*;

/// One 8-GPU node, all of it held by job 1 (`--requeue`, `ckpt=yes`), started `ran_s` ago
/// with a limit of `limit_min`; job 2, of `waiting_gpus` GPUs and a limit of
/// `waiting_limit_min`, waits.
fn one_node_held_by_an_opted_in_job(
    ran_s: i64,
    limit_min: u32,
    waiting_gpus: u32,
    waiting_limit_min: u32,
) -> Snapshot {
    let mut nodes = crate::testing::cluster(1, 8, 1);
    nodes[0].gpus_alloc = 8;
    nodes[0].state = NodeState::Allocated;
    let mut waiting = pending(2, waiting_gpus);
    waiting.time_limit_min = Some(waiting_limit_min);
    let mut snap = snapshot(nodes, vec![waiting]);
    let mut held = running(1, "n1", 8, snap.time - ran_s, limit_min);
    held.requeue = true;
    held.hints.insert("ckpt".into(), "yes".into());
    snap.running.push(held);
    snap
}

#[test]
fn an_opted_in_long_job_is_requeued_for_short_waiting_ones_and_an_opted_out_one_never() {
    // One 8-GPU node, all busy with an 8-GPU job 10 h from its end; a 4-GPU 10-min job
    // waits. With preemption, the long job is requeued and the short one pinned onto the
    // GPUs it frees. (Only multi-GPU jobs displace a multi-GPU one.)
    let mut snap = one_node_held_by_an_opted_in_job(3600, 22 * 60, 4, 20);
    let d = decide(absolute(), &snap);
    let requeued: Vec<u32> = d
        .iter()
        .filter(|d| d.requeue == Some(true))
        .map(|d| d.job_id)
        .collect();
    assert_eq!(requeued, vec![1], "{d:?}");
    assert_eq!(restart_of(find(&d, 1)), Some((1, 3)), "{d:?}");
    assert_eq!(find(&d, 2).pin_nodes, Some(vec!["n1".to_string()]), "{d:?}");
    // Without the opt-in, or with preemption off, nobody is requeued.
    snap.running[0].hints.clear();
    assert!(decide(absolute(), &snap)
        .iter()
        .all(|d| d.requeue.is_none()));
    snap.running[0].hints.insert("ckpt".into(), "yes".into());
    let params = CinchParams {
        preempt: false,
        ..absolute()
    };
    assert!(decide(params, &snap).iter().all(|d| d.requeue.is_none()));
    // Past its preemption cap it keeps its GPUs.
    snap.running[0].restarts = 3;
    assert!(decide(absolute(), &snap)
        .iter()
        .all(|d| d.requeue.is_none()));
}

#[test]
fn a_job_on_part_of_a_node_may_be_requeued_more_often_than_a_whole_node_job() {
    // One 8-GPU node: an opted-in 4-GPU job 21 h from its end and another job on the other
    // 4 GPUs that may not be requeued; a short 4-GPU job waits. The 4-GPU job runs again on
    // any node with 4 GPUs free, so `max_preemptions_small` (5), not `max_preemptions` (3),
    // bounds its requeues.
    let mut snap = one_node_held_by_an_opted_in_job(3600, 22 * 60, 4, 20);
    snap.running[0].gpus = 4;
    snap.running
        .push(running(3, "n1", 4, snap.time - 3600, 22 * 60));
    let requeued = |snap: &Snapshot| -> Vec<(u32, Option<(u32, u32)>)> {
        decide(absolute(), snap)
            .into_iter()
            .filter(|d| d.requeue == Some(true))
            .map(|d| (d.job_id, restart_of(&d)))
            .collect()
    };
    snap.running[0].restarts = 3;
    let d = requeued(&snap);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, 1);
    assert_eq!(d[0].1, Some((4, 5)));
    snap.running[0].restarts = 5;
    assert_eq!(requeued(&snap), Vec::new());
    // With the same cap for both, it keeps its GPUs after 3.
    snap.running[0].restarts = 3;
    let params = CinchParams {
        max_preemptions_small: 3,
        ..absolute()
    };
    assert!(decide(params, &snap).iter().all(|d| d.requeue.is_none()));
    // Past the range, the setting is refused and says why.
    let bad = CinchParams {
        max_preemptions_small: 101,
        ..absolute()
    };
    assert_eq!(
        bad.validate(),
        Err(ParamError::OutOfRange {
            name: "max_preemptions_small",
            min: 0.0,
            max: 100.0,
            note: "",
            value: 101.0
        })
    );
}

#[test]
fn a_requeue_that_pays_under_slurms_default_delay_does_not_where_the_site_waits_longer() {
    // One 8-GPU node busy with an opted-in 8-GPU job predicted to run 20 more minutes (half
    // its 60-minute limit, 10 minutes done); an 8-GPU job predicted at 5 minutes waits.
    // Requeued, the long job loses 300 s of restart plus Slurm's requeue delay, so its
    // remaining 1,200 s must outlast the short one's 300 s by more than that: it does with
    // Slurm's default delay (121 s), not on a site whose credential lifetime is 1,200 s.
    let mut snap = one_node_held_by_an_opted_in_job(600, 60, 8, 10);
    let requeued = |snap: &Snapshot| -> Vec<u32> {
        decide(absolute(), snap)
            .iter()
            .filter(|d| d.requeue == Some(true))
            .map(|d| d.job_id)
            .collect()
    };
    assert_eq!(snap.requeue_delay_s, 121);
    assert_eq!(requeued(&snap), vec![1]);
    snap.requeue_delay_s = 1_201;
    assert_eq!(requeued(&snap), Vec::<u32>::new());
}

#[test]
fn where_predictions_tell_nothing_a_running_job_is_demoted_by_attained_service_then_requeued() {
    let h = history_where_predictions_tell_nothing();
    let model = h.run_model().expect("60 ended jobs");
    assert!(model.rho < 0.0, "{model:?}");
    assert_eq!(model.informativeness, 0.0, "{model:?}");
    // One 8-GPU node busy with an opted-in job of that kind; another like it waits.
    let mut nodes = crate::testing::cluster(1, 8, 1);
    nodes[0].gpus_alloc = 8;
    nodes[0].state = NodeState::Allocated;
    let mut waiting = pending(2, 8);
    waiting.time_limit_min = Some(600);
    let mut snap = snapshot(nodes, vec![waiting]);
    let mut first = running(1, "n1", 8, snap.time, 600);
    first.requeue = true;
    first.hints.insert("ckpt".into(), "yes".into());
    snap.running.push(first);
    let requeued_after = |ran_s: i64| {
        let mut snap = snap.clone();
        snap.running[0].start_time = snap.time - ran_s;
        let d = Cinch(absolute()).decide(&snap, snap.time, &mut SeededRng::new(1), &h);
        let waiting = find(&d, 2).reason.clone();
        (
            d.iter().any(|d| d.job_id == 1 && d.requeue == Some(true)),
            waiting,
        )
    };
    // Both are alike while the running one might still be one of the minute-long jobs:
    // nothing is gained by swapping them.
    for ran_s in [5, 30, 55] {
        let (requeued, reason) = requeued_after(ran_s);
        assert!(!requeued, "after {ran_s} s: {reason}");
        let window = reason.find(|c| match c {
            Clause::Order(Order::Gittins { window, .. }) => Some(*window),
            _ => None,
        });
        assert_eq!(window, Some(60), "{reason}");
    }
    // Once it has outrun every minute-long job it is one of the long ones: the waiting
    // job, a new one, ranks far ahead and is expected to be done hours sooner.
    for ran_s in [75, 120, 600] {
        let (requeued, reason) = requeued_after(ran_s);
        assert!(requeued, "after {ran_s} s: {reason}");
    }
}

/// Nodes of 8 GPUs in `racks` racks, every GPU allocated.
fn busy_nodes(count: u32, racks: u32) -> Vec<crate::wire::snapshot::Node> {
    let mut nodes = crate::testing::cluster(count, 8, racks);
    for n in &mut nodes {
        n.gpus_alloc = 8;
        n.state = NodeState::Allocated;
    }
    nodes
}

/// `job` in the site's preemptible set: `--requeue` and `ckpt=yes`.
fn opted_in(mut job: RunningJob) -> RunningJob {
    job.requeue = true;
    job.hints.insert("ckpt".into(), "yes".into());
    job
}

/// The jobs `decisions` requeue.
fn requeued(decisions: &[Decision]) -> Vec<u32> {
    decisions
        .iter()
        .filter(|d| d.requeue == Some(true))
        .map(|d| d.job_id)
        .collect()
}

#[test]
fn a_spread_job_requeued_to_restart_consolidated_is_not_held_to_starting_a_waiting_job() {
    // `requeue_spread`: job 9 runs its 16 GPUs spread over n1, n2 and n3 while n4 and n5
    // are free; requeued, it restarts on two whole nodes. Nothing waits, so no job starts
    // on its nodes now: the rule for jobs requeued to make way does not apply to it.
    let mut nodes = vec![
        node("n1", 8, 4, "r1"),
        node("n2", 8, 4, "r1"),
        node("n3", 8, 8, "r1"),
        node("n4", 8, 0, "r1"),
        node("n5", 8, 0, "r1"),
    ];
    nodes[2].state = NodeState::Allocated;
    let mut snap = snapshot(nodes, vec![]);
    let mut big = opted_in(running(9, "n1", 16, snap.time - 600, 24 * 60));
    big.nodes = vec!["n1".into(), "n2".into(), "n3".into()];
    big.hints.insert("app".into(), "bert".into());
    snap.running.push(big);
    let spread = CinchParams {
        requeue_spread: true,
        ..absolute()
    };
    assert_eq!(requeued(&decide(spread, &snap)), vec![9]);
    assert!(requeued(&decide(absolute(), &snap)).is_empty());
}

#[test]
fn a_spread_job_on_part_of_a_node_has_the_same_requeue_cap_whatever_it_is_requeued_for() {
    // `requeue_spread`: job 9 runs its 4 GPUs spread, 2 on n1 and 2 on n2 (each full with
    // a job that may not be requeued), while n3 is free: requeued, it restarts on one node.
    // A 4-GPU job on 8-GPU nodes may be requeued `max_preemptions_small` (5) times by the
    // walk, so the network requeue counts to the same cap, not `max_preemptions` (3).
    let mut snap = snapshot(busy_nodes(2, 1), vec![]);
    snap.nodes.push(node("n3", 8, 0, "r1"));
    snap.running
        .push(running(1, "n1", 6, snap.time - 600, 24 * 60));
    snap.running
        .push(running(2, "n2", 6, snap.time - 600, 24 * 60));
    let mut small = opted_in(running(9, "n1", 4, snap.time - 600, 24 * 60));
    small.nodes = vec!["n1".into(), "n2".into()];
    small.hints.insert("app".into(), "bert".into());
    snap.running.push(small);
    let spread = CinchParams {
        requeue_spread: true,
        ..absolute()
    };
    snap.running[2].restarts = 3;
    let d = decide(spread.clone(), &snap);
    assert_eq!(requeued(&d), vec![9], "{d:?}");
    assert_eq!(
        restart_of(find(&d, 9)),
        Some((4, 5)),
        "{}",
        find(&d, 9).reason
    );
    snap.running[2].restarts = 5;
    assert!(requeued(&decide(spread.clone(), &snap)).is_empty());
    // With the same cap for both, it keeps its GPUs after 3.
    snap.running[2].restarts = 3;
    let same_cap = CinchParams {
        max_preemptions_small: 3,
        ..spread
    };
    assert!(requeued(&decide(same_cap, &snap)).is_empty());
}

/// Every limit here says 10 h; four in five jobs ran about a minute, the fifth 6-7 h, and
/// nothing told which (the order the end-to-end test imports from sacct).
fn history_where_predictions_tell_nothing() -> History {
    let mut h = History::default();
    for i in 0..60u32 {
        let run = if i % 5 == 0 {
            21_600.0 + f64::from(i) * 60.0
        } else {
            61.0 + f64::from(i % 10)
        };
        h.import_run("ann", Some(&format!("hist-{i}")), 8, Some(36_000.0), run);
    }
    h
}

#[test]
fn a_new_job_starves_by_its_gittins_size_not_by_the_heavy_tails_mean() {
    // Two 8-GPU nodes where predictions tell nothing. n1 holds a job that cannot be
    // requeued, 55 s into its run: expected to end in about 1.3 h (the mean of every run
    // seen). n2 holds an opted-in job 10 minutes in: one of the long ones, hours left. A new
    // 8-GPU job waits. Its expected remaining run is that same mean, 1.3 h, so by it the
    // job would not starve (n1 is expected to free sooner); its Gittins size, what the
    // queue ranks it by, is under two minutes (four in five such jobs end within 70 s): a
    // wait of an hour is many times that. The long job is requeued for it, and the new job
    // starts on n2.
    let h = history_where_predictions_tell_nothing();
    let mut waiting = pending(3, 8);
    waiting.time_limit_min = Some(600);
    let mut snap = snapshot(busy_nodes(2, 1), vec![waiting]);
    snap.running.push(running(1, "n1", 8, snap.time - 55, 600));
    snap.running
        .push(opted_in(running(2, "n2", 8, snap.time - 600, 600)));
    let d = Cinch(absolute()).decide(&snap, snap.time, &mut SeededRng::new(1), &h);
    assert_eq!(requeued(&d), vec![2], "{d:?}");
    assert_eq!(find(&d, 3).pin_nodes, Some(vec!["n2".to_string()]), "{d:?}");
    assert_eq!(find(&d, 3).delay_until, None, "{d:?}");
}

#[test]
fn no_job_is_requeued_for_gpus_that_no_waiting_job_can_start_on_now() {
    // Three 8-GPU nodes, n1 and n2 in rack r1, n3 in r2. n1 holds a job that cannot be
    // requeued, 22 h from its end; n2 and n3 hold opted-in jobs as long. A 16-GPU job of
    // 20 minutes waits: requeuing n2 and n3 would give it 16 GPUs, but across two racks,
    // where it does not start (it waits for its best shape, n1 and n2): both would pay a
    // restart for GPUs left idle. Nobody is requeued; the job keeps waiting.
    let mut waiting = pending(4, 16);
    waiting.time_limit_min = Some(20);
    let mut snap = snapshot(busy_nodes(3, 2), vec![waiting]);
    snap.running
        .push(running(1, "n1", 8, snap.time - 3600, 23 * 60));
    for (id, node) in [(2, "n2"), (3, "n3")] {
        snap.running
            .push(opted_in(running(id, node, 8, snap.time - 3600, 23 * 60)));
    }
    let d = decide(absolute(), &snap);
    assert!(requeued(&d).is_empty(), "{d:?}");
    let job = find(&d, 4);
    assert!(
        job.delay_until.is_some() || job.priority == Some(RESERVED_PRIORITY),
        "{d:?}"
    );
}

#[test]
fn the_run_time_source_that_predicted_best_here_wins() {
    // Ann's jobs run 100 s whatever their limit says (60 min): after enough of them the
    // similar-job history beats the limit.
    let mut h = History::default();
    let mut t = 0;
    for id in 1..=12u32 {
        let mut snap = snapshot(crate::testing::cluster(1, 8, 1), Vec::new());
        snap.time = t;
        let mut job = running(id, "n1", 1, t, 60);
        job.name = Some("train".into());
        snap.running.push(job);
        h.observe(&snap);
        let mut after = snapshot(crate::testing::cluster(1, 8, 1), Vec::new());
        after.time = t + 100;
        h.observe(&after);
        t += 200;
    }
    let p = h.predict_run_s("ann", Some("train"), 1, Some(3600.0), 3600.0);
    assert_eq!(p.source, crate::learn::history::RunSource::Similar, "{p:?}");
    assert!((p.run_s - 100.0).abs() < 1.0, "{p:?}");
    // A job the history knows nothing of falls back to its limit (scaled by what jobs
    // really ran of theirs here: 100 s of 3600).
    let p = h.predict_run_s("bob", Some("other"), 1, Some(3600.0), 3600.0);
    assert_eq!(p.source, crate::learn::history::RunSource::Limit, "{p:?}");
    assert!((p.run_s - 100.0).abs() < 1.0, "{p:?}");
}
