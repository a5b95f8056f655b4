//! The simulator: golden small-cluster scenarios worked out by hand, determinism for a seed,
//! and properties that hold for every policy on random workloads.

use cinch_sim::engine::{Phase, SimConfig};
use cinch_sim::perf::{App, Network};
use cinch_sim::{all_kinds, compare, workload, ClusterSpec, JobSpec, SchedulerKind};
use proptest::prelude::*;

fn job(id: u32, submit: i64, gpus: u32, app: App, run_time: f64) -> JobSpec {
    JobSpec {
        idle_from: None,
        id,
        name: format!("j{id}"),
        job_name: Some(format!("j{id}")),
        user: "u".into(),
        submit,
        gpus,
        gpus_per_node: None,
        app,
        local_bsz: f64::from(app.model().typical_local_bsz),
        run_time,
        time_limit: run_time * 2.0,
        // The golden scenarios' users tell cinch their application and checkpoint.
        hinted: true,
        preemptible: true,
        due: None,
        elastic: None,
        share: None,
        progress: None,
    }
}

fn config(shape: &str, racks: u32) -> SimConfig {
    SimConfig {
        cluster: ClusterSpec::parse(shape, racks).unwrap(),
        network: Network {
            congestion: 1.0,
            cross_rack: 2.0,
        },
        ..SimConfig::default()
    }
}

/// One sharing node of `units` a GPU under `mode`, where cinch assumes and the jobs suffer the
/// constant interference `alpha`, and no busy fraction is known.
fn one_sharing_node(
    mode: cinch_core::models::corun::ShareMode,
    units: u32,
    alpha: f64,
    fenced: bool,
) -> cinch_sim::engine::SimSharing {
    cinch_sim::engine::SimSharing {
        nodes: 1,
        shards_per_gpu: units,
        params: cinch_core::models::sharing::ShareParams {
            interference: cinch_core::models::sharing::Interference::Constant(alpha),
            mode,
            ..cinch_core::models::sharing::ShareParams::default()
        },
        truth: cinch_sim::engine::SharingTruth::Interference(alpha),
        busy_table: false,
        fenced,
    }
}

/// Each job's end state under Slurm's policy on `shape` (one rack) with `sharing`.
fn run_sharing(
    jobs: &[JobSpec],
    shape: &str,
    sharing: cinch_sim::engine::SimSharing,
) -> Vec<cinch_sim::engine::JobState> {
    let runs = compare(
        jobs,
        &[SchedulerKind::Slurm],
        SimConfig {
            sharing: Some(sharing),
            ..config(shape, 1)
        },
        &mut |_, _, _| {},
    )
    .unwrap();
    runs.into_iter().next().unwrap().outcome.jobs
}

/// JCT of job `name` under each policy, in `all_kinds()` order.
fn jcts(jobs: &[JobSpec], config: SimConfig, name: &str) -> Vec<(String, f64)> {
    compare(jobs, &all_kinds(), config, &mut |_, _, _| {})
        .unwrap()
        .into_iter()
        .map(|run| {
            let j = job_named(&run, name);
            (
                run.kind.to_string(),
                j.finish.unwrap() - j.spec.submit as f64,
            )
        })
        .collect()
}

/// bert, 8 GPUs, 1000 s when consolidated, spread over 4 nodes in 2 racks: by the model
/// (local batch 8), compute = 0.175818 + 0.0581286 * 8 = 0.640847 s; the consolidated
/// 2-node sync is (0.929827 + 0.00723347 * 6) * (1 + congestion 1) = 1.946456 s, so the ideal
/// step is 2.587303 s; across racks the sync doubles again: step 4.533759 s. Speed 0.570679,
/// so 1000 s of work takes 1752.3 s.
fn assert_jcts(got: &[(String, f64)], expected: &[(&str, f64)]) {
    assert_eq!(got.len(), expected.len());
    for ((policy, jct), (want_policy, want)) in got.iter().zip(expected) {
        assert_eq!(policy, want_policy);
        // The hand computations round the coefficients to 7 digits.
        assert!(
            (jct - want).abs() < 1e-3,
            "{policy}: JCT {jct}, expected {want}"
        );
    }
}

const BERT_SPREAD_S: f64 = 1000.0 * 4.533759 / 2.587303;

/// bert, 4 GPUs, 1000 s on one node, spread over nodes in 2 racks: compute 0.6408468 s (as
/// above); on one node the sync is 0.0554995 + 0.0220088 * 2 = 0.0995171 s (step 0.7403639 s);
/// over the network (0.929827 + 0.00723347 * 2) * 2 (congestion) * 2 (racks) = 3.7771758 s
/// (step 4.4180226 s). Speed 0.167578: 1000 s of work takes 5967.4 s.
const BERT4_SPREAD_S: f64 = 1000.0 * 4.4180226 / 0.7403639;

#[test]
fn golden_consolidating_policies_avoid_a_spread_placement_that_slurm_takes() {
    // 4 nodes x 4 GPUs, racks {n1,n2} and {n3,n4}. Three 3-GPU jobs land on n1, n2, n3 and a
    // 2-GPU job that ends at t=500 on n4 (Slurm's single-node best fit: the tightest node, then
    // the lowest), leaving n1:1 n2:1 n3:1 n4:2. At t=10 a 4-GPU bert job arrives: no node and no
    // rack can hold it, so Slurm (as measured on 22.05 and 24.11) takes the nodes with the most free
    // GPUs first: n4:2, then n3:1 (n4's rack), then n1:1: 3 nodes in 2 racks at 17% speed. The consolidating policies wait for n4.
    let mut jobs = vec![
        job(1, 0, 3, App::Ncf, 5000.0),
        job(2, 0, 3, App::Ncf, 5000.0),
        job(3, 0, 3, App::Ncf, 5000.0),
        job(4, 0, 2, App::Ncf, 500.0),
        job(5, 10, 4, App::Bert, 1000.0),
    ];
    // Room for bert's spread run (5967 s), so no one is killed at the limit here.
    jobs[4].time_limit = 8000.0;
    let got = jcts(&jobs, config("4x4", 2), "j5");
    let expected = [
        ("slurm", BERT4_SPREAD_S),
        // Delayed (BeginTime) for its 300 s switch wait, to t=310, then started spread by
        // backfill's next pass (t=330: a begin time that passes wakes no scheduler).
        ("slurm-switches", 320.0 + BERT4_SPREAD_S),
        ("strict", 1490.0), // waits for n4, free at t=500
        // Tiresias starts jobs where they fit now (its consolidation never waits).
        ("tiresias", BERT4_SPREAD_S),
        ("qssf", BERT4_SPREAD_S), // QSSF orders jobs; its placement is Slurm's
        // Pins the fewest nodes that hold the job now: here all four.
        ("cinch-consolidate", BERT4_SPREAD_S),
        // Both expect n4 to free up (j4's limit: 1000 s) well within what the spread placement
        // would cost (5x slower), so the job waits and is pinned to n4 at t=500.
        ("cinch-dally", 1490.0),
        ("cinch", 1490.0),
    ];
    assert_jcts(&got, &expected);
}

#[test]
fn golden_when_no_rack_can_hold_the_job_waiting_pays_only_when_the_wait_is_short() {
    // As above, plus a 2-GPU job on n3 (tightest single node: n3 and n4 tie, n3 is lower)
    // that ends at t=500: free is n1:1 n2:1 n3:2 n4:4, no rack holds 8.
    // - slurm, qssf, tiresias, cinch-consolidate start the bert job at t=10 spread over all
    //   four nodes (consolidate pins the fewest nodes, which here are all four): JCT 1752.3 s.
    // - strict waits for n3+n4 to be free at t=500: JCT 490 + 1000 = 1490 s.
    // - slurm-switches is delayed (BeginTime) until its 300 s wait ends at t=310; backfill's
    //   next pass (t=330) starts it spread: JCT 320 + 1752.3 s.
    // - dally (auto timers): bert's slowdown 0.487 (app table); expected run = limit 2040 s
    //   x 0.5 (no history yet) = 1020 s; break-even 1020 x 0.487 / 0.513 = 968 s, x (1 + 8
    //   pending GPUs / 16) = 1452 s. j3 is expected to end at 17 min x 60 x 0.5 = 510 s,
    //   freeing n3+n4 (level 0) within the break-even, so bert waits (delayed to t=1462) and
    //   is pinned to n3+n4 when j3 really ends at t=500: JCT 1490 s, like strict.
    // - cinch places the three jobs itself at t=0, shortest first: j3 on n1 (the first rack's
    //   tightest fit), j1 on n2, j2 on n3, so the only 8 GPUs of one rack free up when j2 ends
    //   (5000 s). bert is network-sensitive (slowdown 0.487, app table), and cinch waits for
    //   its best shape as strict does, with a reservation: JCT 4990 + 1000 s. Its own order
    //   fragmented the racks here; spreading would have cost bert 752 s, waiting costs 4500 s
    //   (docs/policies/cinch.md: why it waits anyway).
    let jobs = vec![
        job(1, 0, 3, App::Ncf, 5000.0),
        job(2, 0, 3, App::Ncf, 5000.0),
        job(3, 0, 2, App::Ncf, 500.0),
        job(4, 10, 8, App::Bert, 1000.0),
    ];
    let got = jcts(&jobs, config("4x4", 2), "j4");
    let expected = [
        ("slurm", BERT_SPREAD_S),
        ("slurm-switches", 320.0 + BERT_SPREAD_S),
        ("strict", 1490.0),
        ("tiresias", BERT_SPREAD_S),
        ("qssf", BERT_SPREAD_S),
        ("cinch-consolidate", BERT_SPREAD_S),
        ("cinch-dally", 1490.0),
        ("cinch", 5990.0),
    ];
    assert_jcts(&got, &expected);
}

#[test]
fn golden_dally_does_not_wait_for_a_placement_not_expected_in_time() {
    // As above, but the 2-GPU job on n3 runs 5000 s (limit 10000 s): strict waits for n3+n4
    // until t=5000 (JCT 4990 + 1000 = 5990 s). dally expects n3+n4 (and any 8 GPUs in one
    // rack) only at 10020 x 0.5 = 5010 s, beyond bert's 1452 s break-even: both its timers
    // are 0, so it starts spread at once like Slurm (JCT 1752.3 s).
    let jobs = vec![
        job(1, 0, 3, App::Ncf, 5000.0),
        job(2, 0, 3, App::Ncf, 5000.0),
        job(3, 0, 2, App::Ncf, 5000.0),
        job(4, 10, 8, App::Bert, 1000.0),
    ];
    let kinds = [
        SchedulerKind::Slurm,
        "strict".parse().unwrap(),
        "dally".parse().unwrap(),
    ];
    let runs = compare(&jobs, &kinds, config("4x4", 2), &mut |_, _, _| {}).unwrap();
    let got: Vec<(String, f64)> = runs
        .iter()
        .map(|run| {
            let j = &run.outcome.jobs[3];
            (
                run.kind.to_string(),
                j.finish.unwrap() - j.spec.submit as f64,
            )
        })
        .collect();
    assert_jcts(
        &got,
        &[
            ("slurm", BERT_SPREAD_S),
            ("strict", 5990.0),
            ("cinch-dally", BERT_SPREAD_S),
        ],
    );
}

#[test]
fn golden_tiresias_preempts_a_long_job_for_a_new_one_and_qssf_runs_short_jobs_first() {
    // One node of 4 GPUs. Tiresias (threshold 16 GPU-hours): a 4-GPU job that has run for
    // more than 4 hours (16 GPU-hours) drops to the low queue; a new 4-GPU job arriving at
    // t=20000 s is in the high queue, so the round its arrival triggers requeues the old job
    // (both users opted in).
    let jobs = vec![
        job(1, 0, 4, App::ImageNet, 30_000.0),
        job(2, 20_000, 4, App::ImageNet, 1000.0),
    ];
    let cfg = config("1x4", 1);
    let runs = compare(
        &jobs,
        &["tiresias".parse().unwrap(), SchedulerKind::Slurm],
        cfg,
        &mut |_, _, _| {},
    )
    .unwrap();
    let tiresias = &runs[0].outcome.jobs;
    // The new job starts at once and ends 1000 s later; the old one, 20000 s of work done,
    // resumes at 21000, pays 30 s and needs 10000 s more: it ends 1030 s later than alone.
    assert_eq!(tiresias[1].first_start, Some(20_000.0));
    assert_eq!(tiresias[1].finish, Some(21_000.0));
    assert_eq!(tiresias[0].restarts, 1);
    assert_eq!(tiresias[0].finish, Some(30_000.0 + 1000.0 + 30.0));
    // Slurm never preempts: the new job waits for the old one.
    let slurm = &runs[1].outcome.jobs;
    assert_eq!(slurm[1].first_start, Some(30_000.0));

    // QSSF: two jobs wait behind a running one; the one whose kind ran shorter before goes
    // first even though it was submitted later.
    let mut jobs = vec![
        job(1, 0, 4, App::Ncf, 100.0), // teaches: 4-GPU jobs of user u take 100 s
        job(2, 200, 4, App::Ncf, 1000.0), // occupies the node from t=200
        job(3, 300, 4, App::Ncf, 1000.0),
        job(4, 400, 2, App::Ncf, 50.0),
    ];
    jobs[3].user = "v".into(); // no history for (v, 2 GPUs) or 2 GPUs: its limit, 100 s x 2
    let runs = compare(
        &jobs,
        &["qssf".parse().unwrap(), SchedulerKind::Slurm],
        cfg,
        &mut |_, _, _| {},
    )
    .unwrap();
    let start = |run: usize, job: usize| runs[run].outcome.jobs[job].first_start.unwrap();
    // QSSF: predicted service j3 = 4 x 550 (mean of 100 and 1000 once j2 ended) vs
    // j4 = 2 x 100 (its limit): j4 first at t=1200, j3 after it.
    assert_eq!(start(0, 3), 1200.0);
    assert_eq!(start(0, 2), 1250.0);
    // Slurm: FIFO, but backfill lets j4 (2 GPUs) in only if it fits: the node is full, so
    // j3 starts at 1200 and j4 after it.
    assert_eq!(start(1, 2), 1200.0);
    assert_eq!(start(1, 3), 2200.0);
}

#[test]
fn golden_a_run_that_reaches_its_time_limit_is_killed_there() {
    // One node of 4 GPUs. j1 needs 1000 s but its user asked for 600: Slurm kills it at 600 s
    // (TIMEOUT); it counts in the JCT figures (600 s) and its work is lost.
    let mut short = job(1, 0, 4, App::Ncf, 1000.0);
    short.time_limit = 600.0;
    let runs = compare(
        &[short],
        &[SchedulerKind::Slurm],
        config("1x4", 1),
        &mut |_, _, _| {},
    )
    .unwrap();
    let j = &runs[0].outcome.jobs[0];
    assert!(j.killed);
    assert_eq!(j.finish, Some(600.0));
    assert!(j.work_done < 601.0, "{}", j.work_done);
    let s = &runs[0].summary;
    assert_eq!((s.jobs, s.killed), (1, 1));
    assert_eq!(s.avg_jct, 600.0);
    // The ideal is what the job would get on its best placement at once: killed at 600 s too.
    assert_eq!(s.ideal_avg_jct, 600.0);

    // The first golden scenario again, with the bert job's limit at 3000 s: spread by Slurm it
    // needs 5967 s and is killed at its limit; strict waits for one node and runs its 1000 s.
    let mut jobs = vec![
        job(1, 0, 3, App::Ncf, 5000.0),
        job(2, 0, 3, App::Ncf, 5000.0),
        job(3, 0, 3, App::Ncf, 5000.0),
        job(4, 0, 2, App::Ncf, 500.0),
        job(5, 10, 4, App::Bert, 1000.0),
    ];
    jobs[4].time_limit = 3000.0;
    let runs = compare(
        &jobs,
        &[SchedulerKind::Slurm, "strict".parse().unwrap()],
        config("4x4", 2),
        &mut |_, _, _| {},
    )
    .unwrap();
    let bert = |run: usize| &runs[run].outcome.jobs[4];
    assert!(bert(0).killed);
    assert_eq!(bert(0).finish, Some(3010.0));
    assert!(!bert(1).killed);
    assert_eq!(bert(1).finish, Some(1500.0));
    assert_eq!((runs[0].summary.killed, runs[1].summary.killed), (1, 0));
}

/// The job named `name` in one policy's run.
fn job_named<'r>(run: &'r cinch_sim::PolicyRun, name: &str) -> &'r cinch_sim::engine::JobState {
    run.outcome
        .jobs
        .iter()
        .find(|j| j.spec.name == name)
        .unwrap()
}

/// When the job named `name` first started and when it finished, in one policy's run.
fn first_start_and_finish(run: &cinch_sim::PolicyRun, name: &str) -> (f64, f64) {
    let j = job_named(run, name);
    (j.first_start.unwrap(), j.finish.unwrap())
}

#[test]
fn golden_slurms_main_scheduler_stops_at_the_first_blocked_job_and_backfill_reserves_for_each() {
    // 2 nodes of 4 GPUs in one rack, Slurm alone, backfill every 30 s. A (4 GPUs) and B (2)
    // run 0-1000 with limits of 2000: by the limits, all 8 GPUs are free at 2000. C and D (4
    // GPUs each, limits 200) arrive at 10 and 11, E (1 GPU, limit 3000) at 12, F (1 GPU, 50 s,
    // limit 100) at 40.
    // - The main scheduler, at each arrival, stops at C: E and F are not tried there.
    // - Backfill at 30 reserves C and D at 2000 (all 8 GPUs until 2200); E would still run
    //   then, so it waits: with one reservation (C's, 4 GPUs spare) it would have started at
    //   30. At 60, F ends (by its limit) before 2000 and backfills on a GPU B leaves free.
    // - At 1000 A and B end: C and D start; E starts when they end, at 1100.
    let mut jobs = vec![
        job(1, 0, 4, App::Ncf, 1000.0),
        job(2, 0, 2, App::Ncf, 1000.0),
        job(3, 10, 4, App::Ncf, 100.0),
        job(4, 11, 4, App::Ncf, 100.0),
        job(5, 12, 1, App::Ncf, 100.0),
        job(6, 40, 1, App::Ncf, 50.0),
    ];
    for (j, limit) in jobs
        .iter_mut()
        .zip([2000.0, 2000.0, 200.0, 200.0, 3000.0, 100.0])
    {
        j.time_limit = limit;
    }
    let runs = compare(
        &jobs,
        &[SchedulerKind::Slurm],
        config("2x4", 1),
        &mut |_, _, _| {},
    )
    .unwrap();
    let of = |name: &str| first_start_and_finish(&runs[0], name);
    assert_eq!(of("j6"), (60.0, 110.0), "F backfills at the next interval");
    assert_eq!(of("j3"), (1000.0, 1100.0));
    assert_eq!(of("j4"), (1000.0, 1100.0));
    assert_eq!(
        of("j5"),
        (1100.0, 1200.0),
        "E may not delay C's and D's reservations"
    );
}

#[test]
fn golden_slurms_backfill_reserves_whole_nodes_not_gpus_counted_over_the_cluster() {
    // 2 nodes of 4 GPUs. A and B (3 GPUs each, 0-1000, limits 2000) leave one GPU free on each
    // node. C (2 GPUs on one node, `--gpus-per-node=2`, limit 200) arrives at 10: two GPUs are
    // free in count, but on no one node until A's limit, 2000, so backfill reserves n1 for it
    // there. D (1 GPU, 50 s, limit 100) arrives at 12: the main scheduler stops at C; backfill
    // at 30 starts D on n2, which no reservation holds (so n1's spare GPU would do as well: D
    // ends before 2000). Counted over the cluster, C's 2 GPUs were "free" at every pass and held
    // back D until A and B ended at 1000, as slurmctld does not.
    let mut jobs = vec![
        job(1, 0, 3, App::Ncf, 1000.0),
        job(2, 0, 3, App::Ncf, 1000.0),
        job(3, 10, 2, App::Ncf, 100.0),
        job(4, 12, 1, App::Ncf, 50.0),
    ];
    jobs[2].gpus_per_node = Some(2);
    for (j, limit) in jobs.iter_mut().zip([2000.0, 2000.0, 200.0, 100.0]) {
        j.time_limit = limit;
    }
    let runs = compare(
        &jobs,
        &[SchedulerKind::Slurm],
        config("2x4", 1),
        &mut |_, _, _| {},
    )
    .unwrap();
    let of = |name: &str| first_start_and_finish(&runs[0], name);
    assert_eq!(of("j4"), (30.0, 80.0), "D backfills at the first interval");
    assert_eq!(of("j3"), (1000.0, 1100.0), "C when A and B end");
}

#[test]
fn golden_strict_reserves_the_nodes_its_held_job_waits_for() {
    // 2 nodes of 4 GPUs in one rack. M (4 GPUs, 0-3000) takes n1; L1 (2 GPUs, 1-501, limit
    // 1000) and L2 (2 GPUs, 2-1002, limit 2000) take n2. W (bert, 4 GPUs) arrives at 10: its best
    // shape, one node, is expected free on n2 at 2002 by the limits, so strict pins it there,
    // first in Slurm's order. S (1 GPU, 5000 s) arrives at 20 and S2 (1 GPU, 100 s, limit 200)
    // at 30. At 501 L1 ends and frees 2 GPUs on n2: S would still run at 2002, so backfill keeps
    // it off n2; S2 ends before 2002 and takes one of them at backfill's next pass (510; the
    // main scheduler, at 501, stops at S). At 1002 L2 ends and W starts on n2; S starts when W
    // ends. (Held without a reservation, W would have lost n2 to S at 510 and waited for n1
    // until 3000.)
    let mut jobs = vec![
        job(1, 0, 4, App::Ncf, 3000.0),
        job(2, 1, 2, App::Ncf, 500.0),
        job(3, 2, 2, App::Ncf, 1000.0),
        job(4, 10, 4, App::Bert, 1000.0),
        job(5, 20, 1, App::Ncf, 5000.0),
        job(6, 30, 1, App::Ncf, 100.0),
    ];
    jobs[5].time_limit = 200.0;
    let runs = compare(
        &jobs,
        &["strict".parse().unwrap()],
        config("2x4", 1),
        &mut |_, _, _| {},
    )
    .unwrap();
    let of = |name: &str| first_start_and_finish(&runs[0], name);
    assert_eq!(of("j1"), (0.0, 3000.0), "M on n1");
    assert_eq!(of("j4"), (1002.0, 2002.0), "W on n2 once L2 ends");
    assert_eq!(
        of("j6"),
        (510.0, 610.0),
        "S2 backfills before the reservation"
    );
    assert_eq!(of("j5").0, 2002.0, "S kept off the reserved GPUs");
}

#[test]
fn a_policy_that_rounds_every_so_often_holds_new_multi_gpu_jobs_until_its_round() {
    // Rounds at most every 60 s. j1 arrives at 0 (a round), j2 (2 GPUs) at 10: held until the
    // round at 60, then started; j3 (1 GPU) at 20 is Slurm's and starts at once.
    let jobs = vec![
        job(1, 0, 2, App::Ncf, 1000.0),
        job(2, 10, 2, App::Ncf, 1000.0),
        job(3, 20, 1, App::Ncf, 1000.0),
    ];
    let cfg = SimConfig {
        round_interval_s: 60.0,
        ..config("2x8", 1)
    };
    let runs = compare(
        &jobs,
        &["strict".parse().unwrap(), SchedulerKind::Slurm],
        cfg,
        &mut |_, _, _| {},
    )
    .unwrap();
    let starts = |run: usize| -> Vec<Option<f64>> {
        runs[run]
            .outcome
            .jobs
            .iter()
            .map(|j| j.first_start)
            .collect()
    };
    assert_eq!(starts(0), [Some(0.0), Some(60.0), Some(20.0)]);
    // Slurm alone has no agent to wait for.
    assert_eq!(starts(1), [Some(0.0), Some(10.0), Some(20.0)]);
}

#[test]
fn a_seed_replays_a_run_exactly_and_another_seed_does_not() {
    let cluster = ClusterSpec::parse("8x8", 2).unwrap();
    let run = |seed: u64| {
        let trace = workload::synthetic(400, cluster.total_gpus(), 0.9, seed);
        let jobs = workload::from_trace(
            &trace,
            &workload::WorkloadOptions {
                seed,
                ..workload::WorkloadOptions::default()
            },
        );
        let config = SimConfig {
            cluster,
            ..SimConfig::default()
        };
        compare(&jobs, &all_kinds(), config, &mut |_, _, _| {})
            .unwrap()
            .into_iter()
            .map(|r| {
                (
                    r.summary,
                    r.outcome.jobs.iter().map(|j| j.finish).collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>()
    };
    let a = run(5);
    assert_eq!(a, run(5));
    assert_ne!(a, run(6));
}

#[test]
fn jobs_the_cluster_cannot_hold_are_reported_not_simulated() {
    let jobs = vec![job(1, 0, 4, App::Ncf, 10.0), job(2, 0, 32, App::Bert, 10.0)];
    let runs = compare(
        &jobs,
        &[SchedulerKind::Slurm],
        config("2x8", 1),
        &mut |_, _, _| {},
    )
    .unwrap();
    let outcome = &runs[0].outcome;
    assert_eq!(outcome.jobs.len(), 1);
    assert_eq!(outcome.unschedulable.len(), 1);
    assert!(outcome.unschedulable[0]
        .1
        .contains("needs 32 GPUs, the cluster has 16"));
}

/// Sharing (docs/policies/sharing.md), by hand: 3 nodes of 1 GPU, the last one a sharing node
/// of 8 shards (80G less 10%: 9G a shard). Two long jobs hold the whole GPUs (limits 8000 s).
/// A (20G stated: 3 shards) arrives at 10 and starts at once on the idle shared GPU; B (30G: 4
/// shards) arrives at 110 and joins it, since sharing adds 1950 s against a 7890 s wait. Both
/// then run at 1/(1 + 0.5) = 2/3: A has 900 s of work left, done at 110 + 1350 = 1460; B has
/// done 900 s by then and ends alone at 1560. C (not opted in) and D (80G: does not fit) wait
/// for the whole GPUs, free at 4000.
#[test]
fn golden_opted_in_jobs_share_a_gpu_at_two_thirds_speed_and_the_others_wait() {
    use cinch_sim::workload::Share;
    let share = |gib: f64| {
        Some(Share {
            stated_gib: gib,
            peak_gib: gib,
        })
    };
    let jobs = vec![
        job(1, 0, 1, App::Ncf, 4000.0),
        job(2, 0, 1, App::Ncf, 4000.0),
        JobSpec {
            name: "A".into(),
            share: share(20.0),
            ..job(3, 10, 1, App::Ncf, 1000.0)
        },
        JobSpec {
            name: "B".into(),
            share: share(30.0),
            ..job(4, 110, 1, App::Ncf, 1000.0)
        },
        JobSpec {
            name: "C".into(),
            ..job(5, 20, 1, App::Ncf, 100.0)
        },
        JobSpec {
            name: "D".into(),
            share: share(80.0),
            ..job(6, 30, 1, App::Ncf, 100.0)
        },
    ];
    // The constant model, as the hand-worked times below assume.
    let sharing = one_sharing_node(
        cinch_core::models::corun::ShareMode::TimeSlice,
        8,
        0.5,
        false,
    );
    let ended = run_sharing(&jobs, "3x1", sharing);
    let of = |name: &str| ended.iter().find(|j| j.spec.name == name).unwrap();
    let got: Vec<(f64, Option<(u32, u32)>)> = ["A", "B", "C", "D"]
        .iter()
        .map(|n| {
            let j = of(n);
            (
                j.finish.unwrap() - j.spec.submit as f64,
                j.shard.map(|(node, shards, _)| (node, shards)),
            )
        })
        .collect();
    let expected = [
        (1450.0, Some((2, 3))),
        (1450.0, Some((2, 4))),
        (4080.0, None),
        (4070.0, None),
    ];
    for ((jct, shard), (want_jct, want_shard)) in got.iter().zip(expected) {
        assert!((jct - want_jct).abs() < 1e-6, "{got:?}");
        assert_eq!(*shard, want_shard, "{got:?}");
    }
    // The same jobs on the same 3 GPUs all given whole: the third GPU serves everyone in
    // turn (A 10-1010, C 1010-1110, D 1110-1210, B 1210-2210), which is what setting a node
    // aside for sharing costs the jobs that do not share.
    let plain = compare(
        &jobs,
        &[SchedulerKind::Slurm],
        config("3x1", 1),
        &mut |_, _, _| {},
    )
    .unwrap();
    let jct = |name: &str| {
        let j = plain[0]
            .outcome
            .jobs
            .iter()
            .find(|j| j.spec.name == name)
            .unwrap();
        assert!(j.shard.is_none());
        j.finish.unwrap() - j.spec.submit as f64
    };
    let got: Vec<f64> = ["A", "B", "C", "D"].iter().map(|n| jct(n)).collect();
    assert_eq!(got, vec![1000.0, 2100.0, 1090.0, 1180.0]);
}

fn arb_jobs() -> impl Strategy<Value = Vec<JobSpec>> {
    let one = (
        0i64..5000,
        prop::sample::select(vec![1u32, 1, 1, 2, 4, 8, 16]),
        0usize..6,
        1.0f64..20_000.0,
    );
    prop::collection::vec(one, 1..40).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (submit, gpus, app, run))| {
                job(i as u32 + 1, submit, gpus, App::ALL[app], run.round())
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every policy: every job finishes, none faster than its ideal run time, never more GPUs
    /// busy than the cluster has (the engine also asserts per node at every start).
    #[test]
    fn every_policy_finishes_every_job_without_over_allocating(
        jobs in arb_jobs(),
        nodes in 2u32..6,
        racks in 1u32..3,
        congestion in 0.0f64..3.0,
    ) {
        let mut cfg = config(&format!("{nodes}x8"), racks.min(nodes));
        cfg.network.congestion = congestion;
        let total = cfg.cluster.total_gpus();
        for run in compare(&jobs, &all_kinds(), cfg, &mut |_, _, _| {}).unwrap() {
            let name = run.kind.to_string();
            let fits = jobs.iter().filter(|j| j.gpus <= total).count();
            prop_assert_eq!(run.outcome.jobs.len(), fits, "{}", name);
            for j in &run.outcome.jobs {
                prop_assert_eq!(j.phase, Phase::Done, "{} {}", name, j.spec.name);
                let jct = j.finish.unwrap() - j.spec.submit as f64;
                prop_assert!(jct + 1e-6 >= j.spec.run_time, "{}: {} JCT {} < {}", name, j.spec.name, jct, j.spec.run_time);
            }
            prop_assert!(run.outcome.timeline.iter().all(|s| s.busy_gpus <= total));
        }
    }
}

#[test]
fn dally_app_table_is_the_fitted_models_spread_slowdown() {
    use cinch_core::policy::APP_SLOWDOWN;
    use cinch_sim::perf::Shape;
    let quiet = Network {
        congestion: 0.0,
        cross_rack: 1.0,
    };
    assert_eq!(APP_SLOWDOWN.len(), App::ALL.len());
    for app in App::ALL {
        let model = app.model();
        let bsz = f64::from(model.typical_local_bsz);
        let step = |nodes| {
            model.step_time(
                Shape {
                    gpus: 8,
                    nodes,
                    racks: 1,
                },
                bsz,
                &quiet,
            )
        };
        let derived = ((1.0 - step(1) / step(2)).max(0.0) * 1000.0).round() / 1000.0;
        let table = APP_SLOWDOWN
            .iter()
            .find(|(name, _)| *name == app.name())
            .map(|&(_, s)| s);
        assert_eq!(table, Some(derived), "{}", app.name());
    }
}

/// The site's fair share orders Slurm's queue, and cinch's nice only adds to it: ann's long
/// job holds the whole cluster, then ann's and bob's short jobs wait. Under priority/basic ann's
/// (earlier) job runs next; under multifactor with fair share, bob's does, by the usage ann's
/// first job gave her (recalculated at 300 s), under Slurm and under cinch alike.
#[test]
fn golden_fair_share_puts_the_user_with_less_usage_first_under_slurm_and_cinch() {
    let mut jobs = vec![
        job(1, 0, 8, App::ImageNet, 1000.0),
        job(2, 10, 8, App::ImageNet, 100.0),
        job(3, 20, 8, App::ImageNet, 100.0),
    ];
    for (j, user) in jobs.iter_mut().zip(["ann", "ann", "bob"]) {
        j.user = user.into();
        j.job_name = Some("train".into());
        // Order alone: nobody may be requeued (cinch would requeue ann's long job for her own
        // short one).
        j.preemptible = false;
    }
    let kinds: Vec<SchedulerKind> = all_kinds()
        .into_iter()
        .filter(|k| matches!(k.to_string().as_str(), "slurm" | "cinch"))
        .collect();
    assert_eq!(kinds.len(), 2);
    let starts = |config: SimConfig| -> Vec<(String, f64, f64, f64)> {
        compare(&jobs, &kinds, config, &mut |_, _, _| {})
            .unwrap()
            .into_iter()
            .map(|run| {
                let start = |name: &str| {
                    run.outcome
                        .jobs
                        .iter()
                        .find(|j| j.spec.name == name)
                        .unwrap()
                        .first_start
                        .unwrap()
                };
                let fairness = run.outcome.fairness.expect("two users competed");
                (
                    run.kind.to_string(),
                    start("j2"),
                    start("j3"),
                    fairness.worst,
                )
            })
            .collect()
    };
    let basic = starts(config("1x8", 1));
    let fair = starts(SimConfig {
        multifactor: Some(cinch_sim::fairshare::Multifactor::default()),
        ..config("1x8", 1)
    });
    for ((policy, ann, bob, worst_basic), (_, ann_fs, bob_fs, worst_fs)) in basic.iter().zip(&fair)
    {
        assert!(ann < bob, "{policy}, priority/basic: ann {ann}, bob {bob}");
        assert!(
            bob_fs < ann_fs,
            "{policy}, fair share: ann {ann_fs}, bob {bob_fs}"
        );
        // bob waited through ann's whole first job either way; going first under fair share,
        // he gets more of his share.
        assert!(
            worst_fs >= worst_basic,
            "{policy}: {worst_fs} < {worst_basic}"
        );
    }
}

/// Wrong peaks, by hand (docs/policies/sharing.md): 2 nodes of 1 GPU, the second a sharing node.
/// W holds the whole GPU until 4000. A states 20G but peaks at 40G; B states its 45G truly. Both
/// arrive while W runs and go to the idle shared GPU.
/// - Shards (8 of 9G): A takes 3 at 10, B 5 at 20 (sharing beats a 7980 s wait). Their true
///   peaks, 85G, pass the GPU's 80G: both runs fail. A, which understated, comes back whole and
///   waits for W (4000-5000: JCT 4990); B asks to share again and runs alone from the next
///   scheduling pass, at 30 (JCT 1010).
/// - MPS (100 units of 0.72G usable): A's 28 units cap it at 22.4G, under its 40G: it fails
///   alone at its start and comes back whole (JCT 4990); B's 63 units cap it at 50.4G: it runs
///   (JCT 1000).
#[test]
fn golden_a_job_over_its_peak_fails_alone_under_mps_and_with_its_neighbours_under_shards() {
    use cinch_core::models::corun::ShareMode;
    use cinch_sim::workload::Share;
    let share = |stated_gib: f64, peak_gib: f64| {
        Some(Share {
            stated_gib,
            peak_gib,
        })
    };
    let jobs = vec![
        job(1, 0, 1, App::Ncf, 4000.0),
        JobSpec {
            name: "A".into(),
            share: share(20.0, 40.0),
            ..job(2, 10, 1, App::Ncf, 1000.0)
        },
        JobSpec {
            name: "B".into(),
            share: share(45.0, 45.0),
            ..job(3, 20, 1, App::Ncf, 1000.0)
        },
    ];
    for (mode, units, b_jct, failures) in [
        (ShareMode::TimeSlice, 8, 1010.0, [1, 1]),
        (ShareMode::Mps, 100, 1000.0, [1, 0]),
    ] {
        let ended = run_sharing(&jobs, "2x1", one_sharing_node(mode, units, 0.5, false));
        let of = |name: &str| ended.iter().find(|j| j.spec.name == name).unwrap().clone();
        let (a, b) = (of("A"), of("B"));
        let jct = |j: &cinch_sim::engine::JobState| j.finish.unwrap() - j.spec.submit as f64;
        assert_eq!((jct(&a), jct(&b)), (4990.0, b_jct), "{mode:?}");
        assert_eq!([a.share_failures, b.share_failures], failures, "{mode:?}");
        // A came back whole; B ended on the shared GPU.
        assert!(a.shard.is_none() && a.spec.share.is_none(), "{mode:?}");
        assert!(b.shard.is_some(), "{mode:?}");
    }
}

/// A fenced shared GPU (MPS), by hand: 1 node of 2 GPUs, the first shared under MPS (100 units)
/// and taken from the whole ones while shared jobs run on it. cinch assumes sharing costs
/// nothing and so it does. A (20G) arrives at 0: sharing that slows no one is always taken, so
/// it claims the MPS GPU, though both GPUs are free. W, a 2-GPU job, arrives at 10 and waits:
/// one GPU is claimed. B (20G) joins A at 20 for free. A ends at 1000, B at 1020; only then is
/// the GPU whole again, and W runs 1020-1520 (JCT 1510): what a claim that shared jobs keep
/// alive costs a multi-GPU job.
#[test]
fn golden_a_fenced_mps_gpu_is_taken_from_the_whole_ones_while_shared_jobs_hold_it() {
    use cinch_core::models::corun::ShareMode;
    use cinch_sim::workload::Share;
    let share = Some(Share {
        stated_gib: 20.0,
        peak_gib: 20.0,
    });
    let jobs = vec![
        JobSpec {
            name: "A".into(),
            share,
            ..job(1, 0, 1, App::Ncf, 1000.0)
        },
        JobSpec {
            name: "W".into(),
            ..job(2, 10, 2, App::Ncf, 500.0)
        },
        JobSpec {
            name: "B".into(),
            share,
            ..job(3, 20, 1, App::Ncf, 1000.0)
        },
    ];
    let ended = run_sharing(
        &jobs,
        "1x2",
        one_sharing_node(ShareMode::Mps, 100, 0.0, true),
    );
    let of = |name: &str| {
        let j = ended.iter().find(|j| j.spec.name == name).unwrap();
        (
            j.finish.unwrap() - j.spec.submit as f64,
            j.shard.map(|(n, u, _)| (n, u)),
        )
    };
    assert_eq!(of("A"), (1000.0, Some((0, 28))));
    assert_eq!(of("B"), (1000.0, Some((0, 28))));
    assert_eq!(of("W"), (1510.0, None));
}

/// A window of the past starts with its running jobs on their nodes: a job that began 600 s
/// before the window's first instant on node 0 ends 600 s earlier than a fresh start would, holds
/// its node from the first instant (a new 8-GPU job takes node 1), and the run stops at `until`
/// with the jobs then unfinished left so. Inconsistent windows are refused.
#[test]
fn a_window_starts_with_its_running_jobs_on_their_nodes_and_stops_at_its_end() {
    use cinch_sim::engine::{simulate_window, RunningAtStart, Window};
    let jobs = vec![
        job(1, 0, 8, App::Cifar10, 1000.0),
        job(2, 0, 8, App::Cifar10, 1000.0),
        job(3, 100, 8, App::Cifar10, 5000.0),
    ];
    let window = Window {
        running: vec![RunningAtStart {
            job: 1,
            placement: vec![(0, 8)],
            started: -600.0,
        }],
        until: Some(2000.0),
        requeued: vec![],
        usage: vec![],
    };
    let cfg = config("2x8", 1);
    let mut slurm = SchedulerKind::Slurm.build();
    let outcome = simulate_window(&jobs, &window, slurm.as_mut(), cfg, &mut |_, _| {}).unwrap();
    let by_id = |id: u32| outcome.job(id).unwrap();
    assert_eq!(by_id(1).finish, Some(400.0), "its run began 600 s before");
    assert_eq!(by_id(2).first_start, Some(0.0));
    assert_eq!(by_id(2).placement.first().map(|p| p.0), None, "ended");
    assert_eq!(by_id(2).finish, Some(1000.0));
    // Job 3 starts when job 1 frees node 0 and is still running when the window ends.
    assert_eq!(by_id(3).first_start, Some(400.0));
    assert_eq!(by_id(3).finish, None);
    assert_eq!(by_id(3).phase, Phase::Running);
    let refused = |window: Window| {
        let mut slurm = SchedulerKind::Slurm.build();
        simulate_window(&jobs, &window, slurm.as_mut(), cfg, &mut |_, _| {})
            .expect_err("refused")
            .to_string()
    };
    let running = |job: u32, node: u32, started: f64| RunningAtStart {
        job,
        placement: vec![(node, 8)],
        started,
    };
    let err = refused(Window {
        running: vec![running(1, 0, 10.0)],
        until: None,
        requeued: vec![],
        usage: vec![],
    });
    assert!(err.contains("after the window's first instant"), "{err}");
    let err = refused(Window {
        running: vec![running(1, 0, 0.0), running(2, 0, 0.0)],
        until: None,
        requeued: vec![],
        usage: vec![],
    });
    assert!(err.contains("does not have 8 GPUs free"), "{err}");
    let err = refused(Window {
        running: vec![running(9, 0, 0.0)],
        until: None,
        requeued: vec![],
        usage: vec![],
    });
    assert!(err.contains("not among the jobs"), "{err}");
    // Requeues before the window: of a job among them, submitted by its first instant.
    let err = refused(Window {
        requeued: vec![(9, 1)],
        ..Window::default()
    });
    assert!(
        err.contains("job 9: requeued before it, not among"),
        "{err}"
    );
    let err = refused(Window {
        requeued: vec![(3, 1)],
        ..Window::default()
    });
    assert!(err.contains("submitted after its first instant"), "{err}");
    // A job requeued twice before the window counts on from two; the others from none.
    let window = Window {
        requeued: vec![(2, 2)],
        ..window
    };
    let mut slurm = SchedulerKind::Slurm.build();
    let outcome = simulate_window(&jobs, &window, slurm.as_mut(), cfg, &mut |_, _| {}).unwrap();
    let restarts = |id: u32| outcome.job(id).unwrap().restarts;
    assert_eq!((restarts(1), restarts(2), restarts(3)), (0, 2, 0));
}

/// A window under multifactor starts from the users' usage before it: ann's job holds the one
/// node until 100 s, then ann's and bob's jobs wait for it, ann's submitted first. Every user
/// even (no usage given, and ann's run counted only at the first recalculation, at 300 s), ann's
/// older job goes first; with ann's usage from before the window bob's does; with bob's, ann's.
/// Usage for a user with no job in the window changes nothing; usage without multifactor, or not
/// a number of GPU-seconds, is refused.
#[test]
fn a_window_under_fair_share_starts_from_the_users_usage_before_it() {
    use cinch_sim::engine::{simulate_window, RunningAtStart, Window};
    let mut jobs = vec![
        job(1, 0, 8, App::Cifar10, 1000.0),
        job(2, 0, 8, App::Cifar10, 100.0),
        job(3, 10, 8, App::Cifar10, 100.0),
    ];
    for (j, user) in jobs.iter_mut().zip(["ann", "ann", "bob"]) {
        j.user = user.into();
        j.preemptible = false;
    }
    let fair = SimConfig {
        multifactor: Some(cinch_sim::fairshare::Multifactor::default()),
        ..config("1x8", 1)
    };
    let run = |config: SimConfig, usage: &[(&str, f64)]| {
        let window = Window {
            running: vec![RunningAtStart {
                job: 1,
                placement: vec![(0, 8)],
                started: -900.0,
            }],
            usage: usage.iter().map(|(u, s)| (u.to_string(), *s)).collect(),
            ..Window::default()
        };
        let mut slurm = SchedulerKind::Slurm.build();
        simulate_window(&jobs, &window, slurm.as_mut(), config, &mut |_, _| {})
    };
    let first = |usage: &[(&str, f64)]| {
        let outcome = run(fair, usage).unwrap();
        let start = |id: u32| outcome.job(id).unwrap().first_start.unwrap();
        assert_eq!(outcome.job(1).unwrap().finish, Some(100.0));
        if start(2) < start(3) {
            "ann"
        } else {
            "bob"
        }
    };
    assert_eq!(first(&[]), "ann");
    assert_eq!(first(&[("ann", 1e6)]), "bob");
    assert_eq!(first(&[("bob", 1e6), ("ann", 10.0)]), "ann");
    assert_eq!(first(&[("zed", 1e6), ("ann", 1e6)]), "bob");
    let err = run(config("1x8", 1), &[("ann", 1.0)])
        .expect_err("no multifactor")
        .to_string();
    assert!(err.contains("without multifactor"), "{err}");
    for bad in [f64::NAN, -1.0, f64::INFINITY] {
        let err = run(fair, &[("ann", bad)])
            .expect_err("bad usage")
            .to_string();
        assert!(err.contains("not a number of GPU-seconds"), "{bad}: {err}");
    }
}

/// Jobs that show their progress change what cinch does only where its `progress` parameter
/// lets them: with none shown, `cinch:progress=true` runs exactly as `cinch`; with every job
/// showing it, differently (and the snapshot the agent would build, progress included, is the
/// cached one: checked in debug builds).
#[test]
fn progress_changes_cinch_only_where_shown_and_let_count() {
    let cluster = ClusterSpec::parse("8x8", 2).unwrap();
    let kinds: Vec<SchedulerKind> = ["cinch", "cinch:progress=true"]
        .iter()
        .map(|k| k.parse().unwrap())
        .collect();
    let run = |progress: f64| {
        let trace = workload::synthetic(300, cluster.total_gpus(), 1.2, 3);
        let jobs = workload::from_trace(
            &trace,
            &workload::WorkloadOptions {
                seed: 3,
                progress,
                ..workload::WorkloadOptions::default()
            },
        );
        let config = SimConfig {
            cluster,
            ..SimConfig::default()
        };
        compare(&jobs, &kinds, config, &mut |_, _, _| {})
            .unwrap()
            .into_iter()
            .map(|r| r.outcome.jobs.iter().map(|j| j.finish).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let none = run(0.0);
    assert_eq!(none[0], none[1], "nothing shown: the same run");
    let all = run(1.0);
    assert_eq!(
        all[0], none[0],
        "cinch without the parameter ignores progress"
    );
    assert_ne!(all[1], all[0], "every job shows progress and it counts");
}

/// Idle GPUs (docs/policies/idle.md): on one node of 4 GPUs, j1 (1 GPU) works its first 2000
/// s of 10,000 then holds its GPU idle; j2 (1 GPU) works throughout. With a 10-minute grace and
/// a 5-minute warning, `cancel` ends j1 15 minutes into its idle tail (its work done, not
/// killed), `requeue` requeues it then and it ends at its restart, `report` lets it hold its GPU
/// to the end; j2, busy, is never touched; cinch's watchers read the GPUs at its rounds.
#[test]
fn golden_an_idle_job_is_cancelled_or_requeued_after_its_grace_and_a_busy_one_never() {
    use cinch_core::wire::idle::{IdleAction, IdleRules};
    let mut idle = job(1, 0, 1, App::Ncf, 10_000.0);
    idle.idle_from = Some(0.2);
    let busy = job(2, 0, 1, App::Ncf, 10_000.0);
    let run = |action| {
        let config = SimConfig {
            idle: Some(cinch_sim::engine::SimIdle {
                rules: IdleRules {
                    gpu_percent: 5,
                    grace_s: 600,
                    warn_s: 300,
                },
                action,
            }),
            round_interval_s: 60.0,
            tick_s: 60.0,
            ..config("1x4", 1)
        };
        let runs = compare(
            &[idle.clone(), busy.clone()],
            &["cinch".parse().unwrap()],
            config,
            &mut |_, _, _| {},
        )
        .unwrap();
        runs.into_iter().next().unwrap().outcome
    };
    let report = run(IdleAction::Report);
    let held = report.jobs[0].idle_held;
    assert!((held - 8_000.0).abs() < 1.0, "held idle {held} s");
    assert_eq!(report.jobs[0].finish, Some(10_000.0));

    let cancel = run(IdleAction::Cancel);
    let j1 = &cancel.jobs[0];
    assert!(j1.cancelled && !j1.killed && !j1.busy_touched, "{j1:?}");
    let end = j1.finish.unwrap();
    // The idle run starts at the reading before 2000 s (rounds every minute); action after 900 s.
    assert!((2_900.0..=3_100.0).contains(&end), "cancelled at {end}");
    assert!(j1.idle_held < 1_100.0, "{}", j1.idle_held);
    let j2 = &cancel.jobs[1];
    assert!(
        !j2.cancelled && !j2.busy_touched && j2.finish == Some(10_000.0),
        "{j2:?}"
    );

    let requeue = run(IdleAction::Requeue);
    let j1 = &requeue.jobs[0];
    assert_eq!(j1.idle_requeues, 1, "{j1:?}");
    assert!(!j1.busy_touched && !j1.cancelled);
    // Requeued in its idle tail: no work left; it ends once it restarts (after Slurm's requeue
    // delay and its restart penalty).
    assert!(j1.finish.unwrap() < 3_400.0, "{j1:?}");
    assert_eq!(requeue.jobs[1].idle_requeues, 0);
}
