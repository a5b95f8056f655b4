//! Live replay's pure parts (`cinch replay`, docs/simulator.md "Fidelity"): the compressed
//! workload that both a real local Slurm cluster and the simulator run, the `sbatch` request of
//! each job, the speed a replayed job runs at on the nodes Slurm gave it, and the metrics and
//! fidelity table both sides are judged by, computed by the same code from (submit, first start,
//! end) times.
//!
//! Time is compressed, not Slurm: a replay runs the trace's jobs `speedup` times shorter and
//! denser, in real seconds, and the simulator is given exactly that compressed workload with
//! Slurm's real timing settings (its backfill interval). So both sides run the same numbers and
//! every policy sees the same times; results are reported in replayed seconds and, multiplied
//! by the speedup, in trace hours.

use crate::cluster::ClusterSpec;
use crate::engine::{Outcome, Phase};
use crate::perf::{relative_speed, Network, Shape};
use crate::workload::JobSpec;

/// The shortest run a replayed job has, seconds: below it Slurm's own start and end overheads
/// (about half a second each) would be the job.
pub const MIN_RUN_S: f64 = 2.0;

/// How a trace slice becomes the workload a replay runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compression {
    /// Trace seconds per replayed second.
    pub speedup: f64,
    /// Runs longer than this many trace seconds are cut to it (their limits in proportion), so
    /// that one job of the heavy tail does not make the replay last hours; the simulator gets
    /// the same cut.
    pub max_run_s: f64,
}

impl Compression {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.speedup.is_finite() && (1.0..=100_000.0).contains(&self.speedup)) {
            return Err(format!(
                "the speedup must be from 1 to 100000, not {}",
                self.speedup
            ));
        }
        if !(self.max_run_s.is_finite() && self.max_run_s >= self.speedup * MIN_RUN_S) {
            return Err(format!(
                "the longest run ({} s) must be at least {MIN_RUN_S} s once compressed",
                self.max_run_s
            ));
        }
        Ok(())
    }
}

/// The jobs a replay submits, in replayed seconds: submissions from 0 (whole seconds), runs
/// compressed (at least [`MIN_RUN_S`]), and time limits compressed and rounded up to whole
/// minutes (Slurm keeps limits in minutes), at least one. QoS targets, elasticity and sharing are
/// not replayed (the live cluster runs whole-GPU jobs only).
pub fn compress(jobs: &[JobSpec], c: Compression) -> Vec<JobSpec> {
    let mut sorted: Vec<&JobSpec> = jobs.iter().collect();
    sorted.sort_by_key(|j| (j.submit, j.id));
    let first = sorted.first().map_or(0, |j| j.submit);
    sorted
        .into_iter()
        .map(|job| {
            let cut = job.run_time.min(c.max_run_s);
            let limit = job.time_limit * cut / job.run_time;
            JobSpec {
                submit: ((job.submit - first) as f64 / c.speedup).round() as i64,
                run_time: (cut / c.speedup).max(MIN_RUN_S),
                time_limit: ((limit / c.speedup / 60.0).ceil().max(1.0)) * 60.0,
                due: None,
                elastic: None,
                share: None,
                progress: None,
                ..job.clone()
            }
        })
        .collect()
}

/// Gives the jobs Poisson arrivals (in their order, from the first job's submission) at the
/// rate that makes their GPU demand, with runs cut at `max_run_s`, `load` times the cluster's
/// GPUs: the built-in workload's offered load, measured on what a replay really runs. (The
/// Philly gaps' heavy tail would make a slice of tens of jobs either one burst or idle.)
pub fn poisson_arrivals(
    jobs: &mut [JobSpec],
    total_gpus: u32,
    load: f64,
    max_run_s: f64,
    seed: u64,
) {
    let Some(first) = jobs.first().map(|j| j.submit) else {
        return;
    };
    let demand: f64 = jobs
        .iter()
        .map(|j| f64::from(j.gpus) * j.run_time.min(max_run_s))
        .sum::<f64>()
        / jobs.len() as f64;
    if load <= 0.0 || total_gpus == 0 {
        return;
    }
    let mean_gap = demand / (f64::from(total_gpus) * load);
    let mut rng = cinch_core::util::rng::SeededRng::new(seed ^ 0x0A77_1BA1);
    let mut t = first as f64;
    for (i, job) in jobs.iter_mut().enumerate() {
        if i > 0 {
            t += -mean_gap * (1.0 - rng.unit()).ln();
        }
        job.submit = t.round() as i64;
    }
}

/// Slurm's time limit for a compressed job, whole minutes.
pub fn limit_minutes(job: &JobSpec) -> u64 {
    (job.time_limit / 60.0).round().max(1.0) as u64
}

/// The `sbatch` options that ask Slurm for what the simulator gives the job: its GPUs (per node
/// when the trace says so, else in total, placed by Slurm), its limit, the application hint of
/// hinted jobs, `ckpt=yes` and `--requeue` for preemptible ones (docs/users.md); never a node
/// list (placement is Slurm's or cinch's).
pub fn sbatch_options(job: &JobSpec) -> Vec<String> {
    let mut options = vec![
        format!("--job-name={}", job.name),
        format!("--time={}", limit_minutes(job)),
    ];
    match job.gpus_per_node {
        Some(per) if per > 0 => {
            options.push(format!("--nodes={}", job.gpus / per));
            options.push(format!("--gres=gpu:{per}"));
        }
        _ => options.push(format!("--gpus={}", job.gpus)),
    }
    let mut hints = Vec::new();
    if job.hinted {
        hints.push(format!("app={}", job.app));
    }
    if job.preemptible {
        hints.push("ckpt=yes".to_string());
    }
    if !hints.is_empty() {
        options.push(format!("--comment=cinch:{}", hints.join(",")));
    }
    options.push(
        if job.preemptible {
            "--requeue"
        } else {
            "--no-requeue"
        }
        .into(),
    );
    options
}

/// How fast a replayed job runs on the nodes Slurm gave it, relative to its best placement: the
/// simulator's performance model on the placement's shape (node indices from 0, racks as the
/// cluster splits them).
pub fn placement_speed(
    job: &JobSpec,
    nodes: &[u32],
    cluster: &ClusterSpec,
    network: &Network,
) -> f64 {
    let mut racks: Vec<u32> = nodes.iter().map(|&n| cluster.rack_of(n)).collect();
    racks.sort_unstable();
    racks.dedup();
    let shape = Shape {
        gpus: job.gpus,
        nodes: nodes.len().max(1) as u32,
        racks: racks.len().max(1) as u32,
    };
    relative_speed(
        job.app,
        shape,
        cluster.ideal_shape(job.gpus),
        job.local_bsz,
        network,
    )
}

/// A node's index from its name in the local cluster (`n1` is 0).
pub fn node_index(name: &str) -> Option<u32> {
    name.strip_prefix('n')?.parse::<u32>().ok()?.checked_sub(1)
}

/// One job's life as measured: seconds since the replay (or simulation) began.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Times {
    pub submit: f64,
    pub first_start: f64,
    pub end: f64,
}

/// What fidelity is judged by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metrics {
    pub jobs: usize,
    pub avg_jct: f64,
    pub p99_jct: f64,
    pub avg_queue: f64,
    pub makespan: f64,
}

impl Metrics {
    pub fn of(times: &[Times]) -> Metrics {
        let n = times.len().max(1) as f64;
        let mut jct: Vec<f64> = times.iter().map(|t| t.end - t.submit).collect();
        jct.sort_by(f64::total_cmp);
        let first = times.iter().map(|t| t.submit).fold(f64::INFINITY, f64::min);
        let last = times
            .iter()
            .map(|t| t.end)
            .fold(f64::NEG_INFINITY, f64::max);
        Metrics {
            jobs: times.len(),
            avg_jct: jct.iter().sum::<f64>() / n,
            p99_jct: cinch_core::util::stats::percentile(&jct, 0.99),
            avg_queue: times.iter().map(|t| t.first_start - t.submit).sum::<f64>() / n,
            makespan: if times.is_empty() { 0.0 } else { last - first },
        }
    }
}

/// The simulated jobs' times (every job that ended: ran to the end or was killed at its limit);
/// a job starts, as a live job records it, once its `start_latency_s` after Slurm placed it has
/// passed.
pub fn simulated_times(outcome: &Outcome, start_latency_s: f64) -> Vec<Times> {
    outcome
        .jobs
        .iter()
        .filter(|j| j.phase == Phase::Done)
        .filter_map(|j| {
            Some(Times {
                submit: j.spec.submit as f64,
                first_start: j.first_start? + start_latency_s,
                end: j.finish?,
            })
        })
        .collect()
}

/// The simulated jobs' last placements as shapes (`2 nodes, 1 rack`), in the outcome's job
/// order, for comparing with where Slurm put them.
pub fn simulated_nodes(outcome: &Outcome) -> Vec<(String, String)> {
    outcome
        .jobs
        .iter()
        .map(|j| {
            (
                j.spec.name.clone(),
                format!("{} nodes {} racks", j.shape.nodes, j.shape.racks),
            )
        })
        .collect()
}

/// One policy's result, live and simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct FidelityRow {
    pub policy: String,
    /// Every job that ended, live and simulated: the same jobs on both sides, those killed at
    /// their limit (TIMEOUT) included.
    pub live: Metrics,
    pub sim: Metrics,
    /// Of them, the jobs killed at their limit.
    pub live_killed: usize,
    pub sim_killed: usize,
}

impl FidelityRow {
    /// Simulated average JCT relative to live, minus one (0.05: the simulator says 5% longer).
    pub fn jct_error(&self) -> f64 {
        self.sim.avg_jct / self.live.avg_jct - 1.0
    }
}

/// Each row's average JCT over the first row's (the baseline, normally Slurm): (live, sim).
pub fn ratios(rows: &[FidelityRow]) -> Vec<(f64, f64)> {
    let Some(base) = rows.first() else {
        return Vec::new();
    };
    rows.iter()
        .map(|r| {
            (
                r.live.avg_jct / base.live.avg_jct,
                r.sim.avg_jct / base.sim.avg_jct,
            )
        })
        .collect()
}

/// The fidelity table (Markdown): per policy, live and simulated average and p99 JCT, queueing
/// and makespan in replayed seconds, the simulator's error on the average JCT, and each policy's
/// ratio to the first row, live and simulated.
pub fn table(rows: &[FidelityRow]) -> String {
    let mut out = String::from(
        "| policy | jobs | killed live / sim | avg JCT s live / sim | error | p99 JCT s live / sim | \
         queue s live / sim | makespan s live / sim | vs first live / sim |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (row, (live_ratio, sim_ratio)) in rows.iter().zip(ratios(rows)) {
        out.push_str(&format!(
            "| {} | {} | {} / {} | {:.1} / {:.1} | {:+.1}% | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} / {:.1} | {:.3} / {:.3} |\n",
            row.policy,
            row.live.jobs,
            row.live_killed,
            row.sim_killed,
            row.live.avg_jct,
            row.sim.avg_jct,
            row.jct_error() * 100.0,
            row.live.p99_jct,
            row.sim.p99_jct,
            row.live.avg_queue,
            row.sim.avg_queue,
            row.live.makespan,
            row.sim.makespan,
            live_ratio,
            sim_ratio,
        ));
    }
    out
}

/// What misses the tolerances: a policy whose simulated average JCT is off live by more than
/// `jct_tolerance` (relative), a ratio to the first row off by more than `ratio_tolerance`, or a
/// live run where not every job ran to the end.
pub fn misses(
    rows: &[FidelityRow],
    expected_jobs: usize,
    jct_tolerance: f64,
    ratio_tolerance: f64,
) -> Vec<String> {
    let mut misses = Vec::new();
    for (row, (live, sim)) in rows.iter().zip(ratios(rows)) {
        if row.live.jobs != expected_jobs || row.sim.jobs != expected_jobs {
            misses.push(format!(
                "{}: {} of {expected_jobs} jobs ended live (completed or killed at their limit), {} simulated",
                row.policy, row.live.jobs, row.sim.jobs
            ));
        }
        if row.jct_error().abs() > jct_tolerance {
            misses.push(format!(
                "{}: simulated avg JCT {:.1} s is {:+.1}% off live {:.1} s (tolerance {:.0}%)",
                row.policy,
                row.sim.avg_jct,
                row.jct_error() * 100.0,
                row.live.avg_jct,
                jct_tolerance * 100.0
            ));
        }
        if (live - sim).abs() > ratio_tolerance {
            misses.push(format!(
                "{}: ratio to {} is {live:.3} live, {sim:.3} simulated (tolerance {ratio_tolerance})",
                row.policy, rows[0].policy
            ));
        }
    }
    misses
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u32, submit: i64, gpus: u32, run_time: f64) -> JobSpec {
        JobSpec::for_test(id, submit, gpus, run_time)
    }

    #[test]
    fn compression_shifts_shrinks_cuts_and_rounds_limits_up_to_minutes() {
        let jobs = [job(2, 7_000, 4, 36_000.0), job(1, 1_000, 1, 600.0)];
        let c = Compression {
            speedup: 100.0,
            max_run_s: 18_000.0,
        };
        let out = compress(&jobs, c);
        assert_eq!(out[0].id, 1, "sorted by submission");
        assert_eq!((out[0].submit, out[1].submit), (0, 60));
        // 600 s / 100 = 6 s; limit 1200 s / 100 = 12 s -> one minute.
        assert_eq!((out[0].run_time, out[0].time_limit), (6.0, 60.0));
        // Cut to 18000 s (limit in proportion: 36000 s) -> 180 s run, limit 360 s = 6 min.
        assert_eq!((out[1].run_time, out[1].time_limit), (180.0, 360.0));
        let tiny = compress(&[job(3, 0, 1, 10.0)], c);
        assert_eq!(tiny[0].run_time, MIN_RUN_S);
        assert!(Compression {
            speedup: 0.5,
            max_run_s: 1e6
        }
        .validate()
        .is_err());
        assert!(Compression {
            speedup: 100.0,
            max_run_s: 100.0
        }
        .validate()
        .unwrap_err()
        .contains("at least"));
    }

    #[test]
    fn poisson_arrivals_offer_the_load() {
        // 2000 jobs of 8 GPUs x 100 s (cut from 1000) on 16 GPUs at load 2: a mean gap of 25 s.
        let mut jobs: Vec<JobSpec> = (0..2000).map(|i| job(i, 7, 8, 1000.0)).collect();
        poisson_arrivals(&mut jobs, 16, 2.0, 100.0, 1);
        assert_eq!(jobs[0].submit, 7);
        assert!(jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
        let mean = (jobs[1999].submit - 7) as f64 / 1999.0;
        assert!((mean - 25.0).abs() < 2.0, "{mean}");
    }

    #[test]
    fn sbatch_asks_for_what_the_simulator_gives() {
        let mut j = job(1, 0, 12, 100.0);
        j.time_limit = 180.0;
        assert_eq!(
            sbatch_options(&j),
            ["--job-name=j1", "--time=3", "--gpus=12", "--no-requeue"]
        );
        j.gpus_per_node = Some(4);
        j.hinted = true;
        assert_eq!(
            sbatch_options(&j)[2..],
            [
                "--nodes=3",
                "--gres=gpu:4",
                "--comment=cinch:app=bert",
                "--no-requeue"
            ]
        );
        j.preemptible = true;
        assert_eq!(
            sbatch_options(&j)[2..],
            [
                "--nodes=3",
                "--gres=gpu:4",
                "--comment=cinch:app=bert,ckpt=yes",
                "--requeue"
            ]
        );
    }

    #[test]
    fn a_job_spread_over_racks_runs_slower_than_on_one_node() {
        let cluster = ClusterSpec::parse("8x8", 2).unwrap();
        let net = Network::default();
        let j = job(1, 0, 8, 100.0);
        assert_eq!(placement_speed(&j, &[0], &cluster, &net), 1.0);
        let same_rack = placement_speed(&j, &[0, 1], &cluster, &net);
        let two_racks = placement_speed(&j, &[0, 7], &cluster, &net);
        assert!(
            two_racks < same_rack && same_rack < 1.0,
            "{two_racks} {same_rack}"
        );
        assert_eq!(node_index("n1"), Some(0));
        assert_eq!(node_index("n0"), None);
        assert_eq!(node_index("x3"), None);
    }

    #[test]
    fn metrics_and_fidelity_misses() {
        let t = |submit, first_start, end| Times {
            submit,
            first_start,
            end,
        };
        let m = Metrics::of(&[t(0.0, 0.0, 10.0), t(5.0, 10.0, 25.0)]);
        assert_eq!((m.avg_jct, m.avg_queue, m.makespan), (15.0, 2.5, 25.0));
        let mut sim = m;
        sim.avg_jct = 16.0;
        let rows = vec![
            FidelityRow {
                policy: "slurm".into(),
                live: m,
                sim: m,
                live_killed: 0,
                sim_killed: 0,
            },
            FidelityRow {
                policy: "cinch".into(),
                live: m,
                sim,
                live_killed: 0,
                sim_killed: 0,
            },
        ];
        assert!(misses(&rows, 2, 0.1, 0.1).is_empty());
        let found = misses(&rows, 2, 0.05, 0.05);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("+6.7%"), "{found:?}");
        assert!(misses(&rows, 3, 0.5, 0.5)[0].contains("2 of 3 jobs"));
        assert!(table(&rows).contains("| cinch | 2 | 0 / 0 | 15.0 / 16.0 | +6.7%"));
    }
}
