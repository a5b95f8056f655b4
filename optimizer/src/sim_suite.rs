//! `cinch sim suite`: the validation suite. Every baseline and `cinch` on the built-in workload,
//! every Philly virtual cluster in `../shared/traces` at a load that congests a 64x8 cluster, the
//! 8 Pollux workloads and the Cedar GPU jobs on a cluster sized to congest, at congestion 0, 1
//! and 4, under real time limits, for both preemptible sets, three seeds each; the targets of
//! docs/policies/cinch.md checked against the best baseline of the same run, and `--check`
//! failing when one is missed.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};

use cinch_sim::engine::SimConfig;
use cinch_sim::fairshare::Multifactor;
use cinch_sim::limits::Limits;
use cinch_sim::perf::Network;
use cinch_sim::trace::{self, PolluxApps, Trace};
use cinch_sim::workload::{self, Preemptible, WorkloadOptions};
use cinch_sim::{compare, report, simulate, summarize, JobSpec, SchedulerKind, Summary};

use crate::sim_common::{config, run_parallel, Generated, ROUND_INTERVAL_S};
use crate::sim_stress::{self, StressCase, StressResult};

#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// Directory with the traces (the Philly VCs, the Cedar GPU jobs); cases whose file is
    /// missing are skipped, with the reason.
    #[arg(long, default_value = "../shared/traces")]
    pub traces: PathBuf,
    /// The Pollux data directory (workloads/, traces/); its cases are skipped when missing.
    #[arg(long, default_value = "../shared/pollux")]
    pub pollux: PathBuf,
    /// Policies to compare [default: slurm, strict, tiresias, qssf, cinch]; same syntax as
    /// `cinch sim --policies`. The baselines among them set the bar.
    #[arg(long, value_delimiter = ',', value_parser = crate::sim_common::PolicyParser)]
    pub policies: Vec<SchedulerKind>,
    /// Also write the tables (Markdown) to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only the cases whose name contains this text (case-insensitive), e.g. `pollux`, `6214e9`.
    #[arg(long)]
    pub only: Option<String>,
    /// Only one half of the Philly VCs: `tune` (6c71a0, 11cb48, 0e4a51, 2869ce), on which
    /// parameters may be chosen, or `report` (6214e9, 103959, ed69ec, e13805), on which they are
    /// then reported.
    #[arg(long)]
    pub half: Option<Half>,
    /// Seeds per case, 1 to N (hints, limits, targets, the built-in workload's draw).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=20))]
    pub seeds: u64,
    /// Who may be requeued, for every policy alike; each setting is a run of every case.
    #[arg(long, value_delimiter = ',', default_value = "opted-in,all")]
    pub preemptible: Vec<Preemptible>,
    /// Time limits for traces without their own (`cinch sim --limits`); `oracle` reproduces the
    /// earlier, unrealistic yardstick, labelled so.
    #[arg(long, default_value = "empirical", value_parser = crate::sim_common::limits_arg)]
    pub limits: Limits,
    /// Share of jobs whose output shows their progress to cinch's watcher, in every case
    /// (`cinch sim --progress-share`); 0: none, as before the watcher.
    #[arg(long, default_value_t = 0.0)]
    pub progress_share: f64,
    /// Exit non-zero when a target of docs/policies/cinch.md is missed, saying which.
    #[arg(long)]
    pub check: bool,
    /// Also run the studies of the other policy pages (QoS, elastic jobs, GPU sharing).
    #[arg(long)]
    pub studies: bool,
    /// Also run the stress grid: 24 generated shapes the traces lack (floods of small jobs
    /// around big ones, bursty arrivals, 25-100% preemptible), congested, one seed each, in a
    /// table of their own; with `--check`, cinch at most 1.05x the best baseline in every shape.
    /// `--stress --only stress` runs the grid alone.
    #[arg(long)]
    pub stress: bool,
    /// Simulations run side by side (at most 8).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Also say where the suite's time went: each policy's and each family's simulation
    /// seconds (summed over the runs, whatever thread ran them), after the targets.
    #[arg(long)]
    pub timings: bool,
}

/// Halves of the Philly VCs: parameters chosen on one are reported on the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Half {
    Tune,
    Report,
}

/// The Philly VCs in `../shared/traces`, in its README's order, with the half each is in.
const PHILLY_VCS: [(&str, Half); 8] = [
    ("6c71a0", Half::Tune),
    ("6214e9", Half::Report),
    ("11cb48", Half::Tune),
    ("103959", Half::Report),
    ("0e4a51", Half::Tune),
    ("ed69ec", Half::Report),
    ("2869ce", Half::Tune),
    ("e13805", Half::Report),
];

/// The share of jobs whose users give hints (the opted-in preemptible set), in every case.
const HINTED: f64 = workload::DEFAULT_HINTED;

/// Traces longer than this are cut to their first this many jobs (by submission), so the whole
/// suite stays within 10 minutes on a 2-core machine: a contiguous slice keeps the trace's
/// arrival pattern, shapes and mix (docs/simulator.md says which cases are cut).
const MAX_TRACE_JOBS: usize = 10_000;

/// A trace cut to its first [`MAX_TRACE_JOBS`] jobs.
fn first_jobs(mut trace: Trace) -> Trace {
    trace.jobs.truncate(MAX_TRACE_JOBS);
    trace
}

/// How a case names a trace's jobs: all of them, or the first of them.
fn jobs_of(total: usize) -> String {
    if total > MAX_TRACE_JOBS {
        format!("first {MAX_TRACE_JOBS} of {total} jobs")
    } else {
        format!("{total} jobs")
    }
}

/// Network congestion levels every case runs at.
const CONGESTION: [f64; 3] = [0.0, 1.0, 4.0];

/// The default policies: Slurm's own, the research baselines as their papers define them, cinch,
/// and the perfect-knowledge reference (cinch told the true run times: how much of the gap
/// between the best baseline and what knowledge would give cinch closes; never judged).
const POLICIES: [&str; 6] = ["slurm", "strict", "tiresias", "qssf", "cinch", "perfect"];

/// A case is congested when Slurm's own scheduler keeps jobs waiting on average at least this
/// share of their ideal completion time: the rule that picks each trace's load (below).
const CONGESTED_QUEUE_SHARE: f64 = 0.5;

/// Where the search for a congesting load starts: offered load 0.25 (GPU-time over span x
/// GPUs), light for every trace; then arrivals (or the cluster) shrink by this factor per step
/// until Slurm congests, so each case is congested by as little as the step allows.
const START_LOAD: f64 = 0.25;
const LOAD_STEP: f64 = 0.85;
const MAX_LOAD_STEPS: u32 = 40;

/// What kind of case, for the targets that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Group {
    Builtin,
    Philly,
    Pollux,
    Cedar,
    /// The stress grid (crate::sim_stress): its own table and bar.
    Stress,
}

/// Where a case's jobs come from.
enum Source {
    /// A built-in workload: drawn anew for each seed.
    Generated {
        workload: Generated,
        jobs: usize,
        load: f64,
    },
    /// One trace (arrivals already scaled).
    Trace(Trace),
    /// Several workloads whose results are averaged (the 8 Pollux ones).
    Workloads(Vec<Trace>),
    /// A shape of the stress grid: drawn once (seed 1), its arrivals compressed until it
    /// congests the cluster as every trace's are.
    Stress(StressCase, Trace),
}

struct Case {
    name: String,
    group: Group,
    source: Source,
    config: SimConfig,
}

impl Case {
    /// Who may be requeued and the share of jobs that give hints: the suite's set and share,
    /// or the stress shape's own.
    fn opt_in(&self, preemptible: Preemptible) -> (Preemptible, f64) {
        match &self.source {
            Source::Stress(stress, _) => stress.preemptible(),
            _ => (preemptible, HINTED),
        }
    }

    /// Seeds and preemptible sets the case runs under: a stress shape once, under its own.
    fn runs_under(&self, seeds: u64, sets: usize) -> (u64, usize) {
        match self.source {
            Source::Stress(..) => (1, 1),
            _ => (seeds, sets),
        }
    }

    /// The case's workloads for one seed and preemptible set.
    fn workloads(
        &self,
        seed: u64,
        preemptible: Preemptible,
        limits: &Limits,
        progress: f64,
    ) -> Vec<Vec<JobSpec>> {
        let (preemptible, hinted) = self.opt_in(preemptible);
        let options = WorkloadOptions {
            seed,
            limits: limits.clone(),
            hinted,
            preemptible,
            progress,
            ..WorkloadOptions::default()
        };
        match &self.source {
            Source::Generated {
                workload,
                jobs,
                load,
            } => {
                let (trace, _) =
                    workload.generate(*jobs, self.config.cluster.total_gpus(), *load, seed);
                vec![workload::from_trace(&trace, &options)]
            }
            Source::Trace(trace) => vec![workload::from_trace(trace, &options)],
            Source::Workloads(traces) => traces
                .iter()
                .map(|t| workload::from_trace(t, &options))
                .collect(),
            Source::Stress(_, trace) => vec![workload::from_trace(trace, &options)],
        }
    }

    /// Jobs times workloads: what one run of the case costs, roughly.
    fn size(&self) -> usize {
        match &self.source {
            Source::Generated { jobs, .. } => *jobs,
            Source::Trace(t) => t.jobs.len(),
            Source::Workloads(ts) => ts.iter().map(|t| t.jobs.len()).sum(),
            Source::Stress(_, t) => t.jobs.len(),
        }
    }
}

/// A trace's offered load on `gpus` GPUs: its GPU-time over its span of submissions.
fn offered_load(trace: &Trace, gpus: u32) -> f64 {
    let demand: f64 = trace
        .jobs
        .iter()
        .map(|j| f64::from(j.gpus) * j.run_time)
        .sum();
    let span = trace.jobs.iter().map(|j| j.submit).max().unwrap_or(0) as f64;
    demand / (span.max(1.0) * f64::from(gpus.max(1)))
}

/// Slurm's mean queueing over the ideal mean JCT of `jobs` on `config` (seed 1, opted-in).
fn slurm_queue_share(trace: &Trace, config: SimConfig, limits: &Limits) -> Result<f64> {
    let jobs = workload::from_trace(
        trace,
        &WorkloadOptions {
            limits: limits.clone(),
            hinted: HINTED,
            ..WorkloadOptions::default()
        },
    );
    let outcome = simulate(
        &jobs,
        SchedulerKind::Slurm.build().as_mut(),
        config,
        &mut |_, _| {},
    )?;
    let s = summarize("slurm", &outcome, &config.cluster);
    Ok(s.avg_queue / s.ideal_avg_jct.max(1.0))
}

/// The trace with its arrivals compressed until it congests `config`'s cluster: from offered
/// load [`START_LOAD`] (or as given, if lighter), by [`LOAD_STEP`] until Slurm's mean queueing reaches
/// [`CONGESTED_QUEUE_SHARE`] of the ideal mean JCT. The rule is the same for every trace and
/// looks only at Slurm's own scheduler. Returns the trace and its arrival scale.
fn congesting_arrivals(trace: &Trace, config: SimConfig, limits: &Limits) -> Result<(Trace, f64)> {
    let base = offered_load(trace, config.cluster.total_gpus());
    let mut scale = (base / START_LOAD).min(1.0);
    let scaled = |scale: f64| {
        let mut t = trace.clone();
        for job in &mut t.jobs {
            job.submit = (job.submit as f64 * scale).round() as i64;
        }
        t
    };
    for _ in 0..MAX_LOAD_STEPS {
        if slurm_queue_share(&scaled(scale), config, limits)? >= CONGESTED_QUEUE_SHARE {
            break;
        }
        scale *= LOAD_STEP;
    }
    Ok((scaled(scale), scale))
}

/// The smallest cluster of `gpus_per_node`-GPU nodes (in 2 racks) the trace congests, by the
/// same rule, shrinking the nodes instead of the arrivals (a real site's own submissions).
fn congesting_cluster(
    trace: &Trace,
    gpus_per_node: u32,
    congestion: f64,
    limits: &Limits,
) -> Result<SimConfig> {
    let load = offered_load(trace, gpus_per_node);
    let largest = trace.jobs.iter().map(|j| j.gpus).max().unwrap_or(1);
    let fewest = largest.div_ceil(gpus_per_node).max(2);
    let mut nodes = ((load / START_LOAD).ceil() as u32).max(fewest);
    for _ in 0..MAX_LOAD_STEPS {
        let shape = format!("{}x{gpus_per_node}", nodes + nodes % 2);
        let c = config(&shape, 2, congestion)?;
        let share = slurm_queue_share(trace, c, limits)?;
        let next = ((f64::from(nodes) * LOAD_STEP) as u32).max(fewest);
        if share >= CONGESTED_QUEUE_SHARE || next == nodes {
            return Ok(c);
        }
        nodes = next;
    }
    config(
        &format!("{}x{gpus_per_node}", nodes + nodes % 2),
        2,
        congestion,
    )
}

/// Jobs in the generated heavy-tailed case: the size of the VC whose shape it has.
const HEAVY_TAILED_JOBS: usize = 7423;

/// The heavy-tailed case's name (with its load once known; `--only` matches it without).
fn heavy_tailed_name(load: Option<f64>, congestion: f64) -> String {
    let load = load.map_or(String::new(), |l| format!(", load {l:.2}"));
    format!(
        "built-in, heavy-tailed: {HEAVY_TAILED_JOBS} jobs{load}, 64x8 GPUs, 2 racks, congestion \
         {congestion}"
    )
}

/// The cases whose data is here, and the reasons the others are skipped.
fn cases(args: &SuiteArgs) -> Result<(Vec<Case>, Vec<String>)> {
    let mut cases = Vec::new();
    let mut skipped = Vec::new();
    let wanted = |name: &str, half: Option<Half>| {
        args.only
            .as_ref()
            .is_none_or(|o| name.to_lowercase().contains(&o.to_lowercase()))
            && (args.half.is_none() || args.half == half)
    };
    for congestion in CONGESTION {
        let name =
            format!("built-in: 2000 jobs, load 0.9, 16x8 GPUs, 2 racks, congestion {congestion}");
        if wanted(&name, None) {
            cases.push(Case {
                name,
                group: Group::Builtin,
                source: Source::Generated {
                    workload: Generated::Philly,
                    jobs: 2000,
                    load: 0.9,
                },
                config: config("16x8", 2, congestion)?,
            });
        }
    }
    // The published shape of a Philly VC this project does not have (issue 31), generated: a
    // check on a shape cinch was not built on, never in the tune half. Its load is the one that
    // congests, found on seed 1's draw by the rule every trace follows.
    if CONGESTION
        .iter()
        .any(|c| wanted(&heavy_tailed_name(None, *c), None))
    {
        let base = config("64x8", 2, 1.0)?;
        let (drawn, _) = Generated::HeavyTailed.generate(
            HEAVY_TAILED_JOBS,
            base.cluster.total_gpus(),
            START_LOAD,
            1,
        );
        let (_, scale) = congesting_arrivals(&drawn, base, &args.limits)?;
        let load = START_LOAD / scale;
        for congestion in CONGESTION {
            let name = heavy_tailed_name(Some(load), congestion);
            if wanted(&heavy_tailed_name(None, congestion), None) {
                cases.push(Case {
                    name,
                    group: Group::Builtin,
                    source: Source::Generated {
                        workload: Generated::HeavyTailed,
                        jobs: HEAVY_TAILED_JOBS,
                        load,
                    },
                    config: config("64x8", 2, congestion)?,
                });
            }
        }
    }
    for (vc, half) in PHILLY_VCS {
        let path = args.traces.join(format!("philly_vc{vc}.csv"));
        if !path.is_file() {
            skipped.push(format!(
                "Philly VC {vc}: {} not found (--traces)",
                path.display()
            ));
            continue;
        }
        let probe = format!("Philly VC {vc}");
        if !wanted(&format!("{probe}, congestion"), Some(half)) && args.only.is_some() {
            continue;
        }
        if args.half.is_some_and(|h| h != half) {
            continue;
        }
        let full = trace::read_philly(&path)?;
        let total = full.jobs.len();
        let trace = first_jobs(full);
        let base = config("64x8", 2, 1.0)?;
        let (scaled, scale) = congesting_arrivals(&trace, base, &args.limits)?;
        for congestion in CONGESTION {
            let name = format!(
                "Philly VC {vc} ({}), arrivals x{scale:.4}, 64x8 GPUs, 2 racks, congestion \
                 {congestion}",
                jobs_of(total)
            );
            if wanted(&name, Some(half)) {
                cases.push(Case {
                    name,
                    group: Group::Philly,
                    source: Source::Trace(scaled.clone()),
                    config: config("64x8", 2, congestion)?,
                });
            }
        }
    }
    if args.pollux.join("workloads").is_dir() {
        let apps = PolluxApps::read(&args.pollux)
            .with_context(|| format!("reading the Pollux data in {}", args.pollux.display()))?;
        let traces = trace::read_pollux_workloads(&args.pollux, &apps, 4)?;
        for congestion in CONGESTION {
            let name = format!(
                "Pollux workloads 1-8 (means), 16x4 GPUs, 2 racks, congestion {congestion}"
            );
            if wanted(&name, None) {
                cases.push(Case {
                    name,
                    group: Group::Pollux,
                    source: Source::Workloads(traces.clone()),
                    config: config("16x4", 2, congestion)?,
                });
            }
        }
    } else {
        skipped.push(format!(
            "Pollux cases: {} not found (--pollux)",
            args.pollux.join("workloads").display()
        ));
    }
    let cedar = args.traces.join("computecanada_cedar_gpu_2021.csv");
    if cedar.is_file() {
        let full = trace::read_cedar(&cedar)?;
        let total = full.jobs.len();
        let trace = first_jobs(full);
        // One cluster for every congestion level, sized at congestion 1.
        let sized = congesting_cluster(&trace, 4, 1.0, &args.limits)?;
        for congestion in CONGESTION {
            let probe = format!("Cedar GPU jobs, congestion {congestion}");
            if !wanted(&probe, None) {
                continue;
            }
            // A real Slurm site's jobs with their users: its priorities are multifactor with
            // fair share, which Slurm's order (and cinch's nice on top of it) follows.
            let config = SimConfig {
                network: Network {
                    congestion,
                    ..sized.network
                },
                multifactor: Some(Multifactor::default()),
                ..sized
            };
            cases.push(Case {
                name: format!(
                    "Cedar GPU jobs ({}, their own limits), {}, congestion {congestion}",
                    jobs_of(total),
                    config.cluster
                ),
                group: Group::Cedar,
                source: Source::Trace(trace.clone()),
                config,
            });
        }
    } else {
        skipped.push(format!(
            "Cedar cases: {} not found (--traces)",
            cedar.display()
        ));
    }
    if args.stress {
        let config = config(sim_stress::CLUSTER, 2, 1.0)?;
        for (i, stress) in sim_stress::grid().into_iter().enumerate() {
            if !wanted(&stress.name(i, None), None) {
                continue;
            }
            let gpus = config.cluster.total_gpus();
            let drawn = workload::stress(sim_stress::JOBS, gpus, START_LOAD, 1, &stress.shape);
            let (trace, scale) = congesting_arrivals(&drawn, config, &args.limits)?;
            cases.push(Case {
                name: stress.name(i, Some(START_LOAD / scale)),
                group: Group::Stress,
                source: Source::Stress(stress, trace),
                config,
            });
        }
    }
    Ok((cases, skipped))
}

/// Whether a policy's results depend on who may be requeued: those that requeue.
fn requeues(kind: &SchedulerKind) -> bool {
    match kind {
        SchedulerKind::Slurm | SchedulerKind::SlurmDeadline => false,
        SchedulerKind::Policy(p) | SchedulerKind::Perfect(p) => p.info().requeues,
        SchedulerKind::Portfolio(s) => s.members().iter().any(|m| m.info().requeues),
    }
}

/// One policy's figures in one case and setting: the mean over seeds of each seed's figures
/// (each seed's a mean over the case's workloads), and the spread of the average JCT.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Row {
    pub policy: String,
    pub baseline: bool,
    /// The perfect-knowledge reference ([`SchedulerKind::Perfect`]): shown, never judged.
    pub reference: bool,
    pub avg: f64,
    pub avg_min: f64,
    pub avg_max: f64,
    pub median: f64,
    pub p99: f64,
    pub killed: f64,
    pub queue: f64,
    pub comm: f64,
    pub preemptions: f64,
    pub ideal: f64,
    /// Per-user fairness (Jain's index; the worst user's share of their fair share), NaN for
    /// traces without competing users.
    pub jain: f64,
    pub worst_share: f64,
}

impl Row {
    /// From each seed's summaries (one per workload of the case), hours.
    fn of(policy: String, baseline: bool, seeds: &[Vec<Summary>]) -> Row {
        let per_seed: Vec<[f64; 10]> = seeds
            .iter()
            .map(|summaries| {
                let n = summaries.len().max(1) as f64;
                let mean = |f: &dyn Fn(&Summary) -> f64| summaries.iter().map(f).sum::<f64>() / n;
                [
                    mean(&|s| s.avg_jct / 3600.0),
                    mean(&|s| s.median_jct / 3600.0),
                    mean(&|s| s.p99_jct / 3600.0),
                    mean(&|s| s.killed as f64),
                    mean(&|s| s.avg_queue / 3600.0),
                    mean(&|s| s.comm_overhead_gpu_h),
                    mean(&|s| f64::from(s.preemptions)),
                    mean(&|s| s.ideal_avg_jct / 3600.0),
                    mean(&|s| s.fairness_jain),
                    mean(&|s| s.worst_user_share),
                ]
            })
            .collect();
        let k = per_seed.len().max(1) as f64;
        let m = |i: usize| per_seed.iter().map(|v| v[i]).sum::<f64>() / k;
        Row {
            policy,
            baseline,
            reference: false,
            avg: m(0),
            avg_min: per_seed.iter().map(|v| v[0]).fold(f64::INFINITY, f64::min),
            avg_max: per_seed.iter().map(|v| v[0]).fold(0.0, f64::max),
            median: m(1),
            p99: m(2),
            killed: m(3),
            queue: m(4),
            comm: m(5),
            preemptions: m(6),
            ideal: m(7),
            jain: m(8),
            worst_share: m(9),
        }
    }
}

/// One case under one preemptible set, as the targets see it.
#[derive(Debug, Clone)]
pub(crate) struct CaseResult {
    pub name: String,
    pub preemptible: Preemptible,
    pub rows: Vec<Row>,
}

impl CaseResult {
    fn ideal(&self) -> f64 {
        self.rows.first().map_or(0.0, |r| r.ideal)
    }

    fn best_baseline(&self) -> Option<&Row> {
        self.rows
            .iter()
            .filter(|r| r.baseline)
            .min_by(|a, b| a.avg.total_cmp(&b.avg))
    }

    /// The lowest p99 of any baseline.
    fn best_baseline_p99(&self) -> f64 {
        self.rows
            .iter()
            .filter(|x| x.baseline)
            .map(|x| x.p99)
            .fold(f64::INFINITY, f64::min)
    }

    fn find(&self, policy: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.policy == policy)
    }

    /// The perfect-knowledge reference's row, if it ran.
    fn reference(&self) -> Option<&Row> {
        self.rows.iter().find(|r| r.reference)
    }

    /// The share of the gap from the best baseline to the perfect-knowledge reference that
    /// cinch closes ([`report::gap_closed`]).
    fn gap_closed(&self) -> Option<f64> {
        let (c, best, perfect) = (
            self.find("cinch")?,
            self.best_baseline()?,
            self.reference()?,
        );
        report::gap_closed(best.avg, c.avg, perfect.avg)
    }

    /// A stress shape's line: cinch against the best baseline (none without both).
    fn stress(&self) -> Option<StressResult> {
        let (c, best) = (self.find("cinch")?, self.best_baseline()?);
        Some(StressResult {
            name: self.name.clone(),
            best: best.policy.clone(),
            best_avg: best.avg,
            cinch_avg: c.avg,
            best_p99: self.best_baseline_p99(),
            cinch_p99: c.p99,
            slurm_avg: self.find("slurm").map(|s| s.avg),
            others: self
                .rows
                .iter()
                .filter(|r| !r.baseline && r.policy != "cinch")
                .map(|r| (r.policy.clone(), r.avg))
                .collect(),
        })
    }

    /// cinch's excess over the ideal as a share of the best baseline's.
    fn excess_ratio(&self) -> Option<f64> {
        let (c, b) = (self.find("cinch")?, self.best_baseline()?);
        let ideal = self.ideal();
        Some((c.avg - ideal) / (b.avg - ideal).max(1e-9))
    }
}

/// How `cinch` did against one target.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    pub target: &'static str,
    pub case: String,
    pub met: bool,
    pub detail: String,
}

/// The targets of docs/policies/cinch.md on the suite's results (every case is congested by
/// construction, issue 60): in every case cinch's average JCT at most 1.02x the best baseline's
/// and its p99 at most 1.1x the lowest baseline p99 and not above Slurm's; the mean over the
/// cases of cinch's ratio to the best baseline at most 0.97. The excess over the ideal is shown
/// in every table but judged no longer: the ideal starts every job at its submission, a bar no
/// scheduler of a congested cluster can be held to.
pub(crate) fn targets(results: &[CaseResult]) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    let mut ratios = Vec::new();
    for r in results {
        let (Some(c), Some(best)) = (r.find("cinch"), r.best_baseline()) else {
            continue;
        };
        let case = format!("{} [preemptible: {}]", r.name, r.preemptible);
        let mut add = |target: &'static str, met: bool, detail: String| {
            verdicts.push(Verdict {
                target,
                case: case.clone(),
                met,
                detail,
            })
        };
        let ratio = c.avg / best.avg;
        ratios.push(ratio);
        add(
            "avg JCT <= 1.02x the best baseline's",
            ratio <= 1.02,
            format!(
                "{:.3} h vs {} {:.3} h = {ratio:.3}x",
                c.avg, best.policy, best.avg
            ),
        );
        let best_p99 = r.best_baseline_p99();
        add(
            "p99 JCT <= 1.1x the best baseline p99",
            c.p99 <= 1.1 * best_p99,
            format!(
                "{:.1} h vs {best_p99:.1} h = {:.2}x",
                c.p99,
                c.p99 / best_p99
            ),
        );
        if let Some(s) = r.find("slurm") {
            add(
                "p99 JCT not above Slurm's",
                c.p99 <= s.p99 * (1.0 + 1e-9),
                format!("{:.1} h vs {:.1} h", c.p99, s.p99),
            );
        }
    }
    if !ratios.is_empty() {
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        verdicts.push(Verdict {
            target: "mean avg JCT over the cases <= 0.97x the best baseline's",
            case: format!("{} cases", ratios.len()),
            met: mean <= 0.97,
            detail: format!("{mean:.3}x"),
        });
    }
    verdicts
}

/// Where the suite's time went ([`SuiteArgs::timings`]): simulation seconds per policy and per
/// family of cases, from (policy, family, seconds) per run, largest first (ties by name). Seconds are summed
/// over the runs, so with several threads they add up to more than the wall time.
fn timings_table(spent: &[(String, Group, f64)]) -> String {
    // A fold from +0: an empty sum of floats is -0, printed "-0".
    let total = spent.iter().fold(0.0, |total, s| total + s.2);
    let share = |x: f64| if total > 0.0 { 100.0 * x / total } else { 0.0 };
    let mut text = format!(
        "\n### Where the time went ({total:.0} s of simulation over {} runs)\n\n\
         | policy or family | runs | seconds | share |\n|---|---|---|---|\n",
        spent.len()
    );
    let mut rows: Vec<(String, usize, f64)> = Vec::new();
    let add = |rows: &mut Vec<(String, usize, f64)>, name: String, s: f64| match rows
        .iter_mut()
        .find(|r| r.0 == name)
    {
        Some(r) => {
            r.1 += 1;
            r.2 += s;
        }
        None => rows.push((name, 1, s)),
    };
    let mut families = Vec::new();
    for (policy, group, s) in spent {
        add(&mut rows, policy.clone(), *s);
        add(&mut families, format!("{group:?} cases"), *s);
    }
    for mut part in [rows, families] {
        part.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        for (name, runs, s) in part {
            let _ = writeln!(text, "| {name} | {runs} | {s:.1} | {:.1}% |", share(s));
        }
    }
    text
}

pub fn run(args: SuiteArgs) -> Result<()> {
    let started = std::time::Instant::now();
    if args.preemptible.is_empty() {
        anyhow::bail!("--preemptible needs at least one set (opted-in, all)");
    }
    if !(0.0..=1.0).contains(&args.progress_share) {
        anyhow::bail!(
            "--progress-share must be from 0 to 1, not {}",
            args.progress_share
        );
    }
    let kinds: Vec<SchedulerKind> = if args.policies.is_empty() {
        POLICIES
            .iter()
            .map(|n| n.parse().expect("known policy"))
            .collect()
    } else {
        args.policies.clone()
    };
    let (cases, skipped) = cases(&args)?;
    if cases.is_empty() && !args.studies {
        anyhow::bail!(
            "no case to run (--only {:?}, --half {:?})",
            args.only,
            args.half
        );
    }
    let mut text = String::new();
    for why in &skipped {
        let _ = writeln!(text, "skipped: {why}");
        println!("skipped: {why}");
    }
    // One work item per case, seed, preemptible set and policy; a policy that never requeues
    // runs once, its results shared by every set.
    let mut work: Vec<(usize, u64, usize, usize)> = Vec::new();
    for (c, case) in cases.iter().enumerate() {
        let (seeds, sets) = case.runs_under(args.seeds, args.preemptible.len());
        for seed in 1..=seeds {
            for s in 0..sets {
                for (k, kind) in kinds.iter().enumerate() {
                    if s == 0 || requeues(kind) {
                        work.push((c, seed, s, k));
                    }
                }
            }
        }
    }
    // The largest cases first, so the threads end together.
    work.sort_by_key(|&(c, ..)| std::cmp::Reverse(cases[c].size()));
    // Each item's summaries and its simulations' seconds.
    let summaries = run_parallel(&work, args.threads, |&(c, seed, s, k)| {
        let case = &cases[c];
        let mut out = Vec::new();
        let mut wall_s = 0.0;
        for jobs in case.workloads(seed, args.preemptible[s], &args.limits, args.progress_share) {
            let runs = compare(&jobs, &kinds[k..=k], case.config, &mut |_, _, _| {})?;
            wall_s += runs.iter().map(|r| r.wall_s).sum::<f64>();
            out.extend(runs.into_iter().map(|r| r.summary));
        }
        Ok((out, wall_s))
    })?;
    let find = |c: usize, seed: u64, s: usize, k: usize| -> &Vec<Summary> {
        let s = if requeues(&kinds[k]) { s } else { 0 };
        let i = work
            .iter()
            .position(|&w| w == (c, seed, s, k))
            .expect("every item ran");
        &summaries[i].0
    };
    let mut results = Vec::new();
    let mut stress = Vec::new();
    for (c, case) in cases.iter().enumerate() {
        let (seeds, sets) = case.runs_under(args.seeds, args.preemptible.len());
        for (s, &preemptible) in args.preemptible.iter().enumerate().take(sets) {
            let rows = kinds
                .iter()
                .enumerate()
                .map(|(k, kind)| {
                    let seeds: Vec<Vec<Summary>> = (1..=seeds)
                        .map(|seed| find(c, seed, s, k).clone())
                        .collect();
                    Row {
                        reference: kind.is_reference(),
                        ..Row::of(kind.to_string(), kind.is_baseline(), &seeds)
                    }
                })
                .collect();
            let result = CaseResult {
                name: case.name.clone(),
                preemptible: case.opt_in(preemptible).0,
                rows,
            };
            if case.group == Group::Stress {
                stress.extend(result.stress());
            } else {
                results.push(result);
            }
        }
    }
    let _ = writeln!(
        text,
        "{}; hints from {:.0}% of jobs{}; cross-rack x2; requeues unbounded by cinch.conf (Tiresias \
         as published; cinch keeps its own per-job cap); the same parameters everywhere; {} \
         seeds per case (avg JCT: mean, with the seeds' range); agent rounds every {} s.\n",
        args.limits,
        HINTED * 100.0,
        if args.progress_share > 0.0 {
            format!(
                "; progress shown by {:.0}% of jobs",
                args.progress_share * 100.0
            )
        } else {
            String::new()
        },
        args.seeds,
        ROUND_INTERVAL_S
    );
    for r in &results {
        text.push_str(&case_table(r));
    }
    let mut verdicts = targets(&results);
    if !results.is_empty() {
        text.push_str(&closing_table(&results));
    }
    if !stress.is_empty() {
        text.push_str(&sim_stress::table(&stress));
        verdicts.extend(
            sim_stress::verdicts(&stress)
                .into_iter()
                .map(|(case, met, detail)| Verdict {
                    target: "stress grid: avg JCT <= 1.05x the best baseline's",
                    case,
                    met,
                    detail,
                }),
        );
    }
    let missed: Vec<&Verdict> = verdicts.iter().filter(|v| !v.met).collect();
    if !verdicts.is_empty() {
        let _ = writeln!(
            text,
            "\nTargets (docs/policies/cinch.md): {} checked, {} missed\n",
            verdicts.len(),
            missed.len()
        );
        for v in &missed {
            let _ = writeln!(text, "- MISSED {}: {}: {}", v.target, v.case, v.detail);
        }
    }
    let _ = writeln!(
        text,
        "\nsimulated in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if args.timings {
        let spent: Vec<(String, Group, f64)> = work
            .iter()
            .zip(&summaries)
            .map(|(&(c, _, _, k), (_, wall_s))| (kinds[k].to_string(), cases[c].group, *wall_s))
            .collect();
        text.push_str(&timings_table(&spent));
    }
    if args.studies {
        text.push_str(&crate::sim_studies::run(
            &args.traces,
            &args.pollux,
            &args.limits,
            args.threads,
        )?);
    }
    print!("{text}");
    if let Some(out) = &args.out {
        std::fs::write(out, &text).with_context(|| format!("writing {}", out.display()))?;
    }
    if args.check && !missed.is_empty() {
        anyhow::bail!(
            "{} of {} targets missed: {}",
            missed.len(),
            verdicts.len(),
            missed
                .iter()
                .map(|v| format!("{} ({})", v.target, v.case))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    Ok(())
}

/// One case's table under one preemptible set.
fn case_table(r: &CaseResult) -> String {
    let mut t = String::new();
    let ideal = r.ideal();
    let best = r.best_baseline();
    let _ = writeln!(
        t,
        "### {} [preemptible: {}]\n\nideal avg JCT {ideal:.2} h{}\n",
        r.name,
        r.preemptible,
        best.map_or(String::new(), |b| format!(
            "; best baseline {} {:.2} h",
            b.policy, b.avg
        ))
    );
    let _ = writeln!(
        t,
        "| policy | avg JCT h (seeds) | vs best baseline | median h | p99 h | killed | queueing h | comm GPU-h | preemptions | fairness (Jain) | worst user's share |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|---|---|");
    let or_dash = |v: f64, digits: usize| {
        if v.is_nan() {
            "-".to_string()
        } else {
            format!("{v:.digits$}")
        }
    };
    for row in &r.rows {
        let _ = writeln!(
            t,
            "| {} | {:.2} ({:.2}-{:.2}) | {} | {:.2} | {:.1} | {:.0} | {:.2} | {:.0} | {:.0} | {} | {} |",
            if row.reference {
                format!("{} (reference)", row.policy)
            } else {
                row.policy.clone()
            },
            row.avg,
            row.avg_min,
            row.avg_max,
            best.map_or("-".into(), |b| format!("{:.3}", row.avg / b.avg)),
            row.median,
            row.p99,
            row.killed,
            row.queue,
            row.comm,
            row.preemptions,
            or_dash(row.jain, 3),
            or_dash(row.worst_share, 2),
        );
    }
    if let Some(perfect) = r.reference() {
        let _ = writeln!(
            t,
            "\n{} (reference): cinch told every job's true run time, which no site can do; {}",
            perfect.policy,
            match r.gap_closed() {
                Some(closed) => format!(
                    "cinch closes {:.0}% of the gap from the best baseline to it.",
                    100.0 * closed
                ),
                None => "no better than the best baseline here.".to_string(),
            }
        );
    }
    t.push('\n');
    t
}

/// Every case in one table: the ideal, Slurm, the best baseline and cinch, with cinch's ratios.
fn closing_table(results: &[CaseResult]) -> String {
    let mut t = String::from(
        "\n### Every case\n\n| case | preemptible | ideal h | Slurm h | best baseline h | cinch h | \
         cinch / best | excess ratio | perfect h | gap closed | p99 cinch / best p99 | killed (cinch) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let (Some(c), Some(best)) = (r.find("cinch"), r.best_baseline()) else {
            continue;
        };
        let best_p99 = r.best_baseline_p99();
        let _ = writeln!(
            t,
            "| {} | {} | {:.2} | {} | {} {:.2} | {:.2} | {:.3} | {} | {} | {} | {:.2} | {:.0} |",
            r.name,
            r.preemptible,
            r.ideal(),
            r.find("slurm")
                .map_or("-".into(), |s| format!("{:.2}", s.avg)),
            best.policy,
            best.avg,
            c.avg,
            c.avg / best.avg,
            r.excess_ratio().map_or("-".into(), |e| format!("{e:.2}")),
            r.reference()
                .map_or("-".into(), |p| format!("{:.2}", p.avg)),
            match (r.reference(), r.gap_closed()) {
                (None, _) => "-".to_string(),
                (Some(_), None) => "no gap".to_string(),
                (Some(_), Some(closed)) => format!("{:.0}%", 100.0 * closed),
            },
            c.p99 / best_p99,
            c.killed
        );
    }
    // Every policy that is not a baseline (cinch, and any variant asked for by --policies, such
    // as an ablation's `cinch:progress=true`): its mean ratio to the best baseline.
    let mut means: Vec<(String, f64, usize)> = Vec::new();
    for r in results {
        let Some(best) = r.best_baseline() else {
            continue;
        };
        for row in r.rows.iter().filter(|x| !x.baseline && !x.reference) {
            let ratio = row.avg / best.avg;
            match means.iter_mut().find(|(p, ..)| *p == row.policy) {
                Some((_, sum, n)) => {
                    *sum += ratio;
                    *n += 1;
                }
                None => means.push((row.policy.clone(), ratio, 1)),
            }
        }
    }
    if !means.is_empty() {
        let _ = writeln!(
            t,
            "\nMean avg JCT over the best baseline's, over the cases above: {}",
            means
                .iter()
                .map(|(p, sum, n)| format!("{p} {:.3}x ({n} cases)", sum / *n as f64))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    // How much of what perfect knowledge would add cinch has, over the cases where it adds
    // anything: the median, as one case with a tiny gap gives any ratio.
    let mut closed: Vec<f64> = results.iter().filter_map(CaseResult::gap_closed).collect();
    if !closed.is_empty() {
        closed.sort_by(f64::total_cmp);
        let with_reference = results.iter().filter(|r| r.reference().is_some()).count();
        let _ = writeln!(
            t,
            "\nPerfect knowledge (`perfect`: cinch told every job's true run time, a reference no \
             site can run) beats the best baseline in {} of {with_reference} cases; there cinch \
             closes a median {:.0}% of the gap (from {:.0}% to {:.0}%).",
            closed.len(),
            100.0 * closed[closed.len() / 2],
            100.0 * closed[0],
            100.0 * closed[closed.len() - 1],
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_table_sums_each_policy_and_family_largest_first() {
        let spent = [
            ("cinch".to_string(), Group::Philly, 3.0),
            ("slurm".to_string(), Group::Philly, 1.0),
            ("cinch".to_string(), Group::Cedar, 4.0),
            ("slurm".to_string(), Group::Stress, 2.0),
        ];
        let table = timings_table(&spent);
        assert!(
            table.contains("(10 s of simulation over 4 runs)"),
            "{table}"
        );
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(
            rows[1..],
            [
                "| cinch | 2 | 7.0 | 70.0% |",
                "| slurm | 2 | 3.0 | 30.0% |",
                "| Cedar cases | 1 | 4.0 | 40.0% |",
                "| Philly cases | 2 | 4.0 | 40.0% |",
                "| Stress cases | 1 | 2.0 | 20.0% |",
            ],
            "{table}"
        );
        assert!(timings_table(&[]).contains("(0 s of simulation over 0 runs)"));
    }

    fn row(policy: &str, baseline: bool, avg: f64, p99: f64, ideal: f64) -> Row {
        Row {
            policy: policy.into(),
            baseline,
            avg,
            avg_min: avg,
            avg_max: avg,
            p99,
            ideal,
            ..Row::default()
        }
    }

    fn case(rows: Vec<Row>) -> CaseResult {
        CaseResult {
            name: "c".into(),
            preemptible: Preemptible::OptedIn,
            rows,
        }
    }

    #[test]
    fn targets_compare_cinch_with_the_best_baseline_of_each_case() {
        // Best baseline tiresias 3 h; cinch 2 h (0.667x).
        let good = case(vec![
            row("slurm", true, 5.0, 50.0, 1.0),
            row("tiresias", true, 3.0, 40.0, 1.0),
            row("cinch", false, 2.0, 42.0, 1.0),
        ]);
        assert_eq!(good.excess_ratio(), Some(0.5));
        let v = targets(std::slice::from_ref(&good));
        assert!(v.iter().all(|v| v.met), "{v:?}");
        // cinch 3.1 h: 1.033x the best (missed), p99 45 > 44 (missed); its excess over the
        // ideal (1.05x the best's) is shown, not judged.
        let bad = case(vec![
            row("slurm", true, 5.0, 50.0, 1.0),
            row("tiresias", true, 3.0, 40.0, 1.0),
            row("cinch", false, 3.1, 45.0, 1.0),
        ]);
        let v = targets(&[good.clone(), bad.clone()]);
        let missed: Vec<&str> = v.iter().filter(|v| !v.met).map(|v| v.target).collect();
        assert_eq!(
            missed,
            [
                "avg JCT <= 1.02x the best baseline's",
                "p99 JCT <= 1.1x the best baseline p99",
            ]
        );
        // The mean of the ratios (0.667, 1.033) is 0.85: met; a third case at 1.233x lifts it
        // to 0.978, past 0.97.
        let mean = v.last().unwrap();
        assert_eq!(
            (mean.target, mean.met, mean.detail.as_str()),
            (
                "mean avg JCT over the cases <= 0.97x the best baseline's",
                true,
                "0.850x"
            )
        );
        let worse = case(vec![
            row("tiresias", true, 3.0, 40.0, 1.0),
            row("cinch", false, 3.7, 40.0, 1.0),
        ]);
        let v = targets(&[good, bad, worse]);
        let mean = v.last().unwrap();
        assert_eq!((mean.met, mean.detail.as_str()), (false, "0.978x"));
    }

    #[test]
    fn the_perfect_reference_is_shown_with_the_gap_cinch_closes_and_never_judged() {
        let reference = |avg: f64| Row {
            reference: true,
            ..row("perfect", false, avg, 1.0, 1.0)
        };
        // Best baseline 3 h, perfect 2 h, cinch 2.5 h: half the gap closed.
        let half = case(vec![
            row("tiresias", true, 3.0, 40.0, 1.0),
            row("cinch", false, 2.5, 40.0, 1.0),
            reference(2.0),
        ]);
        assert_eq!(half.gap_closed(), Some(0.5));
        // Perfect no better than the best baseline: no gap to close.
        let none = case(vec![
            row("tiresias", true, 3.0, 40.0, 1.0),
            row("cinch", false, 2.9, 40.0, 1.0),
            reference(3.2),
        ]);
        assert_eq!(none.gap_closed(), None);
        // The reference is no baseline and no policy judged: the targets are those of the
        // cases without it, and the means over non-baselines leave it out.
        let without = |r: &CaseResult| CaseResult {
            rows: r.rows.iter().filter(|x| !x.reference).cloned().collect(),
            ..r.clone()
        };
        assert_eq!(
            targets(&[half.clone(), none.clone()]),
            targets(&[without(&half), without(&none)])
        );
        assert_eq!(half.best_baseline().unwrap().policy, "tiresias");
        let table = case_table(&half);
        assert!(table.contains("| perfect (reference) | 2.00"), "{table}");
        assert!(table.contains("cinch closes 50% of the gap"), "{table}");
        assert!(case_table(&none).contains("no better than the best baseline here"));
        let closing = closing_table(&[half, none]);
        assert!(closing.contains("| 2.00 | 50% |"), "{closing}");
        assert!(closing.contains("| 3.20 | no gap |"), "{closing}");
        assert!(
            closing.contains(
                "beats the best baseline in 1 of 2 cases; there cinch closes a median 50%"
            ),
            "{closing}"
        );
        assert!(
            closing.contains("cinch 0.900x (2 cases)") && !closing.contains("perfect 0."),
            "{closing}"
        );
    }

    #[test]
    fn slurms_p99_is_a_floor_its_average_is_not() {
        let r = case(vec![
            row("slurm", true, 2.0, 10.0, 1.0),
            row("strict", true, 2.1, 12.0, 1.0),
            row("cinch", false, 2.02, 11.0, 1.0),
        ]);
        // Avg 1.01x Slurm's (within 1.02x, met); p99 11 h above Slurm's 10 h (missed); the
        // mean over this one case, 1.01x, is over 0.97.
        let v = targets(&[r]);
        let missed: Vec<&str> = v.iter().filter(|v| !v.met).map(|v| v.target).collect();
        assert_eq!(
            missed,
            [
                "p99 JCT not above Slurm's",
                "mean avg JCT over the cases <= 0.97x the best baseline's"
            ]
        );
    }

    #[test]
    fn rows_average_seeds_and_keep_their_range() {
        let s = |avg_h: f64, killed: usize| Summary {
            avg_jct: avg_h * 3600.0,
            killed,
            ..Summary::default()
        };
        let r = Row::of("x".into(), true, &[vec![s(1.0, 2)], vec![s(3.0, 4)]]);
        assert_eq!(
            (r.avg, r.avg_min, r.avg_max, r.killed),
            (2.0, 1.0, 3.0, 3.0)
        );
        // Two workloads of one seed are averaged first.
        let r = Row::of("x".into(), true, &[vec![s(1.0, 0), s(2.0, 0)]]);
        assert_eq!(r.avg, 1.5);
    }

    #[test]
    fn offered_load_is_gpu_time_over_the_span() {
        let mut t = Trace::default();
        t.jobs.push(trace::TraceJob::new("a", 0, 2, 100.0));
        t.jobs.push(trace::TraceJob::new("b", 1000, 8, 50.0));
        assert!((offered_load(&t, 4) - 600.0 / 4000.0).abs() < 1e-12);
    }

    #[test]
    fn only_requeueing_policies_run_under_each_preemptible_set() {
        let k = |s: &str| s.parse::<SchedulerKind>().unwrap();
        assert!(!requeues(&k("slurm")));
        assert!(!requeues(&k("strict")));
        assert!(!requeues(&k("qssf")));
        assert!(requeues(&k("tiresias")));
        assert!(requeues(&k("cinch")));
    }
}
