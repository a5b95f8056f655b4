//! `cinch sim suite`: every baseline and `cinch` on the benchmark cases of docs/benchmarks.md,
//! in one run, with each case's physical limit (the ideal average JCT) and the targets of
//! docs/policies/cinch.md checked against the best baseline of the same run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{Context, Result};

use cinch_sim::engine::SimConfig;
use cinch_sim::perf::Network;
use cinch_sim::trace::{self, PolluxApps};
use cinch_sim::workload::{self, WorkloadOptions};
use cinch_sim::{compare, ClusterSpec, JobSpec, SchedulerKind, Summary};

#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// Directory with the Philly sample (`philly_vc6c71a0.csv`); its cases are skipped, with
    /// the reason, when it is missing.
    #[arg(long, default_value = "../shared/traces")]
    pub traces: PathBuf,
    /// The Pollux data directory (workloads/, traces/); its cases are skipped when missing.
    #[arg(long, default_value = "../shared/pollux")]
    pub pollux: PathBuf,
    /// Policies to compare [default: the baselines and cinch]; same syntax as `cinch sim
    /// --policies`.
    #[arg(long, value_delimiter = ',')]
    pub policies: Vec<String>,
    /// Also write the tables (Markdown) to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only the cases whose name contains this text (case-insensitive), e.g. `pollux`.
    #[arg(long)]
    pub only: Option<String>,
    /// Spread of the made-up time limits (`cinch sim --limit-noise`): 0 in the recorded suite;
    /// 1 shows how the results hold when limits predict run times as poorly as on real sites.
    #[arg(long, default_value_t = 0.0)]
    pub limit_noise: f64,
    /// Simulations run side by side (at most 8).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

/// The share of jobs whose users give hints and opt in to requeue, in every case.
const HINTED: f64 = workload::DEFAULT_HINTED;

/// The share of jobs with a QoS target in the QoS cases (docs/policies/qos.md).
const QOS_SHARE: f64 = 0.3;

/// The policies of the QoS cases: Slurm, Slurm honouring `--deadline`, EDF, and `cinch` without
/// and with its QoS part.
const QOS_POLICIES: [&str; 5] = ["slurm", "slurm-deadline", "edf", "cinch:qos=false", "cinch"];

/// The policies of the elastic cases: Tiresias, `cinch` without and with elasticity, and the
/// simple elastic baseline.
const ELASTIC_POLICIES: [&str; 4] = ["tiresias", "cinch:elastic=false", "equal-share", "cinch"];

/// The sharing case's name, as `--only` matches it.
const SHARING_CASE: &str = "sharing on the alibaba trace";

/// The Philly sharing study's name, as `--only` matches it.
const SHARING_JCT_CASE: &str = "sharing small jobs on the philly sample";

/// Seeds of the sharing comparison in the suite (about 9 s each).
const PACK_RUNS: u64 = 3;

/// Pollux's own published average JCT on its 8 workloads at 64 GPUs, hours
/// (`../shared/pollux/README.md`): the elastic target.
const POLLUX_PUBLISHED_AVG_JCT_H: f64 = 0.76;

/// One benchmark case: a name, its workloads (one, or the 8 Pollux ones averaged), the
/// simulated cluster and whether it is congested (targets differ).
struct Case {
    name: String,
    workloads: Vec<Vec<JobSpec>>,
    config: SimConfig,
    congested: bool,
    /// A QoS case: a share of jobs has targets; judged by the QoS targets.
    qos: bool,
    /// The share of elastic jobs in an elastic case (0: not one).
    elastic: f64,
    kinds: Vec<SchedulerKind>,
}

/// What one policy did in one case (means over the case's workloads).
#[derive(Debug, Clone, Default)]
struct Row {
    policy: String,
    baseline: bool,
    avg: f64,
    median: f64,
    p99: f64,
    makespan: f64,
    queue: f64,
    comm: f64,
    preemptions: f64,
    ideal: f64,
    /// Share of targeted jobs that missed their target, and of all jobs cancelled.
    missed: f64,
    cancelled: f64,
}

impl Row {
    fn add(&mut self, s: &Summary, n: f64) {
        self.avg += s.avg_jct / 3600.0 / n;
        self.median += s.median_jct / 3600.0 / n;
        self.p99 += s.p99_jct / 3600.0 / n;
        self.makespan += s.makespan / 3600.0 / n;
        self.queue += s.avg_queue / 3600.0 / n;
        self.comm += s.comm_overhead_gpu_h / n;
        self.preemptions += f64::from(s.preemptions) / n;
        self.ideal += s.ideal_avg_jct / 3600.0 / n;
        self.missed += s.missed_share().unwrap_or(0.0) / n;
        self.cancelled += s.cancelled as f64 / n;
    }
}

fn kinds(args: &SuiteArgs, qos: bool) -> Result<Vec<SchedulerKind>> {
    if args.policies.is_empty() {
        let names: &[&str] = if qos {
            &QOS_POLICIES
        } else {
            &[
                "slurm",
                "slurm-switches",
                "strict",
                "tiresias",
                "qssf",
                "cinch",
            ]
        };
        return Ok(names
            .iter()
            .map(|n| n.parse().expect("known policy"))
            .collect());
    }
    args.policies
        .iter()
        .map(|p| p.parse::<SchedulerKind>().map_err(anyhow::Error::msg))
        .collect()
}

fn is_baseline(kind: &SchedulerKind) -> bool {
    match kind {
        SchedulerKind::Slurm | SchedulerKind::SlurmDeadline => true,
        SchedulerKind::Policy(p) => p.is_baseline(),
    }
}

fn config(shape: &str, racks: u32, congestion: f64) -> Result<SimConfig> {
    Ok(SimConfig {
        cluster: ClusterSpec::parse(shape, racks).map_err(anyhow::Error::msg)?,
        network: Network {
            congestion,
            cross_rack: 2.0,
        },
        // The baselines as published: Tiresias requeues as often as its queues say. cinch.conf's
        // requeue bounds (10 per job, 60 an hour) would hold Tiresias back (8.23 h instead of
        // 6.64 h on the built-in workload) and make the targets easier; cinch keeps its own
        // per-job cap (`max_preemptions`, 2) either way.
        max_requeues_per_job: 100,
        max_requeues_per_hour: 10_000,
        ..SimConfig::default()
    })
}

fn options(args: &SuiteArgs) -> WorkloadOptions {
    WorkloadOptions {
        hinted: HINTED,
        limit_noise: args.limit_noise,
        ..WorkloadOptions::default()
    }
}

/// The cases whose data is here, and the reasons others are skipped.
fn cases(args: &SuiteArgs) -> Result<(Vec<Case>, Vec<String>)> {
    let mut cases = Vec::new();
    let mut skipped = Vec::new();
    if !(0.0..=3.0).contains(&args.limit_noise) {
        anyhow::bail!(
            "--limit-noise must be from 0 to 3, not {}",
            args.limit_noise
        );
    }
    let plain = kinds(args, false)?;
    let builtin = config("16x8", 2, 1.0)?;
    let trace = workload::synthetic(2000, builtin.cluster.total_gpus(), 0.9, 1);
    cases.push(Case {
        name: "built-in: 2000 jobs, load 0.9, 16x8 GPUs, 2 racks, congestion 1".into(),
        workloads: vec![workload::from_trace(&trace, options(args))],
        config: builtin,
        congested: true,
        qos: false,
        elastic: 0.0,
        kinds: plain.clone(),
    });

    let philly = args.traces.join("philly_vc6c71a0.csv");
    if philly.is_file() {
        let trace = trace::read_philly(&philly)?;
        for (scale, congested) in [(0.1, true), (1.0, false)] {
            let mut scaled = trace.clone();
            for job in &mut scaled.jobs {
                job.submit = (job.submit as f64 * scale).round() as i64;
            }
            let jobs = workload::from_trace(&scaled, options(args));
            for congestion in [0.0, 1.0, 4.0] {
                let load = if congested {
                    "arrivals x10"
                } else {
                    "arrivals as given"
                };
                cases.push(Case {
                    name: format!(
                        "Philly sample, {load}, 64x8 GPUs, 2 racks, congestion {congestion}"
                    ),
                    workloads: vec![jobs.clone()],
                    config: config("64x8", 2, congestion)?,
                    congested,
                    qos: false,
                    elastic: 0.0,
                    kinds: plain.clone(),
                });
            }
        }
    } else {
        skipped.push(format!(
            "Philly cases: {} not found (--traces)",
            philly.display()
        ));
    }

    if args.pollux.join("workloads").is_dir() {
        let apps = PolluxApps::read(&args.pollux)
            .with_context(|| format!("reading the Pollux data in {}", args.pollux.display()))?;
        let traces = trace::read_pollux_workloads(&args.pollux, &apps, 4)?;
        let workloads: Vec<Vec<JobSpec>> = traces
            .iter()
            .map(|t| workload::from_trace(t, options(args)))
            .collect();
        for congestion in [0.0, 1.0, 4.0] {
            cases.push(Case {
                name: format!(
                    "Pollux workloads 1-8 (means), 16x4 GPUs, 2 racks, congestion {congestion}"
                ),
                workloads: workloads.clone(),
                config: config("16x4", 2, congestion)?,
                congested: true,
                qos: false,
                elastic: 0.0,
                kinds: plain.clone(),
            });
        }
        let elastic_kinds: Vec<SchedulerKind> = ELASTIC_POLICIES
            .iter()
            .map(|n| n.parse().expect("known policy"))
            .collect();
        for share in [1.0, 0.5] {
            let jobs: Vec<Vec<JobSpec>> = traces
                .iter()
                .map(|t| {
                    workload::from_trace(
                        t,
                        WorkloadOptions {
                            elastic: share,
                            ..options(args)
                        },
                    )
                })
                .collect();
            cases.push(Case {
                name: format!(
                    "Elastic: Pollux workloads 1-8 (means), 16x4 GPUs, 2 racks, congestion 1, {:.0}% of jobs elastic",
                    share * 100.0
                ),
                workloads: jobs,
                config: config("16x4", 2, 1.0)?,
                congested: true,
                qos: false,
                elastic: share,
                kinds: if args.policies.is_empty() {
                    elastic_kinds.clone()
                } else {
                    plain.clone()
                },
            });
        }
    } else {
        skipped.push(format!(
            "Pollux cases: {} not found (--pollux)",
            args.pollux.join("workloads").display()
        ));
    }

    // The QoS cases: the congested cases at congestion 1 again, a share of jobs with targets.
    let qos_kinds = kinds(args, true)?;
    let qos_cases: Vec<Case> = cases
        .iter()
        .filter(|c| c.congested && c.elastic == 0.0 && c.name.contains("congestion 1"))
        .map(|c| Case {
            name: format!(
                "QoS: {}, {:.0}% of jobs with targets",
                c.name,
                QOS_SHARE * 100.0
            ),
            workloads: c
                .workloads
                .iter()
                .map(|jobs| {
                    let mut jobs = jobs.clone();
                    workload::assign_targets(&mut jobs, QOS_SHARE, WorkloadOptions::default().seed);
                    jobs
                })
                .collect(),
            config: c.config,
            congested: true,
            qos: true,
            elastic: 0.0,
            kinds: qos_kinds.clone(),
        })
        .collect();
    cases.extend(qos_cases);
    Ok((cases, skipped))
}

pub fn run(args: SuiteArgs) -> Result<()> {
    let (mut cases, skipped) = cases(&args)?;
    if let Some(only) = &args.only {
        let only = only.to_lowercase();
        cases.retain(|c| c.name.to_lowercase().contains(&only));
        if cases.is_empty() && !SHARING_CASE.contains(&only) && !SHARING_JCT_CASE.contains(&only) {
            anyhow::bail!("no case matches --only {only:?}");
        }
    }
    for why in &skipped {
        println!("skipped: {why}");
    }
    // Every (case, workload) pair is one job for the worker threads.
    let work: Vec<(usize, usize)> = cases
        .iter()
        .enumerate()
        .flat_map(|(c, case)| (0..case.workloads.len()).map(move |w| (c, w)))
        .collect();
    let results: Mutex<Vec<Option<Vec<Summary>>>> = Mutex::new(vec![None; work.len()]);
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..args.threads.clamp(1, 8) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(c, w)) = work.get(i) else { break };
                let case = &cases[c];
                match compare(
                    &case.workloads[w],
                    &case.kinds,
                    case.config,
                    &mut |_, _, _| {},
                ) {
                    Ok(runs) => {
                        results.lock().expect("no panic holds it")[i] =
                            Some(runs.into_iter().map(|r| r.summary).collect());
                    }
                    Err(e) => {
                        *failure.lock().expect("no panic holds it") = Some(e.into());
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().expect("no panic holds it") {
        return Err(e);
    }
    let results = results.into_inner().expect("no panic holds it");

    let mut text = String::new();
    let _ = writeln!(
        text,
        "Hints and --requeue from {:.0}% of jobs in every case; cross-rack x2; requeues unbounded \
         by cinch.conf (Tiresias as published; cinch's own cap is 2 per job); the same default \
         parameters everywhere.\n",
        HINTED * 100.0
    );
    let mut verdicts = Vec::new();
    for (c, case) in cases.iter().enumerate() {
        let n = case.workloads.len() as f64;
        let mut rows: Vec<Row> = case
            .kinds
            .iter()
            .map(|k| Row {
                policy: k.to_string(),
                baseline: is_baseline(k),
                ..Row::default()
            })
            .collect();
        for (i, &(wc, _)) in work.iter().enumerate() {
            if wc != c {
                continue;
            }
            let summaries = results[i].as_ref().expect("every job ran");
            for (row, s) in rows.iter_mut().zip(summaries) {
                row.add(s, n);
            }
        }
        let (table, verdict) = case_table(case, &rows);
        text.push_str(&table);
        if let Some(v) = verdict {
            verdicts.push(v);
        }
    }
    if !verdicts.is_empty() {
        text.push_str(
            "\nTargets (docs/policies/cinch.md, docs/policies/qos.md, docs/policies/elastic.md):\n\n",
        );
        for v in &verdicts {
            let _ = writeln!(text, "- {v}");
        }
    }
    let _ = writeln!(
        text,
        "\nsimulated in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    // GPU sharing by the FGD methodology (docs/policies/sharing.md), when the Alibaba trace is
    // here and no case filter excludes it.
    let packing = args.traces.join("alibaba_gpu_v2023_pods.csv").is_file()
        && args
            .only
            .as_ref()
            .is_none_or(|o| SHARING_CASE.contains(&o.to_lowercase()));
    if packing {
        let _ = writeln!(
            text,
            "\n### Sharing: GPUs left unallocated at saturation (`cinch sim pack --runs {PACK_RUNS}`)\n"
        );
        text.push_str(&crate::sim_cli::pack_table(&args.traces, PACK_RUNS)?);
    }
    let philly = args.traces.join("philly_vc6c71a0.csv");
    let sharing_jct = philly.is_file()
        && args.traces.join("alibaba_gpu_v2023_pods.csv").is_file()
        && args
            .only
            .as_ref()
            .is_none_or(|o| SHARING_JCT_CASE.contains(&o.to_lowercase()));
    if sharing_jct {
        text.push_str(&sharing_jct_table(&args.traces)?);
    } else if args.only.is_none() {
        let _ = writeln!(
            text,
            "
skipped: the Philly sharing study needs philly_vc6c71a0.csv and \
             alibaba_gpu_v2023_pods.csv in {}",
            args.traces.display()
        );
    }
    print!("{text}");
    if let Some(out) = &args.out {
        write_out(out, &text)?;
    }
    Ok(())
}

/// Sharing small jobs on the Philly sample (docs/policies/sharing.md): the congested Philly case
/// (arrivals x10, 64x8, congestion 1) under Slurm and cinch, with every GPU whole, with 8 nodes
/// set aside as sharing nodes and no job sharing, and with every job of one GPU opted in (true
/// interference as cinch assumes, and twice that).
fn sharing_jct_table(traces: &Path) -> Result<String> {
    let trace = trace::read_philly(&traces.join("philly_vc6c71a0.csv"))?;
    let mut scaled = trace;
    for job in &mut scaled.jobs {
        job.submit = (job.submit as f64 * 0.1).round() as i64;
    }
    let plain = workload::from_trace(
        &scaled,
        WorkloadOptions {
            hinted: HINTED,
            ..WorkloadOptions::default()
        },
    );
    let pods = cinch_sim::packing::read_pod_shapes(&traces.join("alibaba_gpu_v2023_pods.csv"))?;
    let fractions = cinch_sim::packing::one_gpu_fractions(&pods);
    let base = config("64x8", 2, 1.0)?;
    let setups: Vec<(&str, f64, Option<cinch_sim::engine::SimSharing>)> = vec![
        ("every GPU whole", 0.0, None),
        (
            "8 sharing nodes, no job shares",
            0.0,
            crate::sim_cli::sim_sharing(8, 0.5),
        ),
        (
            "8 sharing nodes, all one-GPU jobs may share",
            1.0,
            crate::sim_cli::sim_sharing(8, 0.5),
        ),
        (
            "... with twice the interference cinch assumes",
            1.0,
            crate::sim_cli::sim_sharing(8, 1.0),
        ),
    ];
    let kinds: Vec<SchedulerKind> = ["slurm", "cinch"]
        .iter()
        .map(|n| n.parse().expect("known policy"))
        .collect();
    let runs: Vec<Result<Vec<(String, Summary, crate::sim_cli::SharingStats)>>> =
        std::thread::scope(|scope| {
            let handles: Vec<_> = setups
                .iter()
                .map(|(_, share, sharing)| {
                    let (plain, fractions, kinds) = (&plain, &fractions, &kinds);
                    scope.spawn(
                        move || -> Result<Vec<(String, Summary, crate::sim_cli::SharingStats)>> {
                            let mut jobs = plain.clone();
                            if let Some(s) = sharing {
                                workload::assign_sharing(
                                    &mut jobs,
                                    *share,
                                    fractions,
                                    s.params.gpu_mem_gib,
                                    1,
                                );
                            }
                            let config = SimConfig {
                                sharing: *sharing,
                                ..base
                            };
                            Ok(compare(&jobs, kinds, config, &mut |_, _, _| {})?
                                .into_iter()
                                .map(|r| {
                                    let stats = crate::sim_cli::SharingStats::of(&r.outcome.jobs);
                                    (r.kind.to_string(), r.summary, stats)
                                })
                                .collect())
                        },
                    )
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a sharing run panicked"))
                .collect()
        });
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n### Sharing small jobs on the Philly sample, arrivals x10, 64x8 GPUs, 2 racks, \
         congestion 1\n\nPeaks of one-GPU jobs drawn from the Alibaba trace's GPU shares (x 80G); \
         sharing nodes: 16 shards per GPU, 10% margin, cinch assumes interference 0.5.\n"
    );
    let _ = writeln!(
        t,
        "| setup | policy | avg JCT h | p99 h | queueing h | jobs on shards (beside others) |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|");
    for ((name, _, sharing), result) in setups.iter().zip(runs) {
        for (policy, s, stats) in result? {
            let on_shards = if sharing.is_some() {
                format!("{} ({})", stats.on_shards, stats.beside)
            } else {
                "-".into()
            };
            let _ = writeln!(
                t,
                "| {name} | {policy} | {:.2} | {:.1} | {:.2} | {on_shards} |",
                s.avg_jct / 3600.0,
                s.p99_jct / 3600.0,
                s.avg_queue / 3600.0
            );
        }
    }
    Ok(t)
}

fn write_out(out: &Path, text: &str) -> Result<()> {
    std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))
}

/// A QoS case's table, and how `cinch` did against the QoS targets: missing at most half as many
/// targets as Slurm and at most 0.75x as many as EDF, at an average JCT within 5% of `cinch`
/// without its QoS part.
fn qos_table(case: &Case, rows: &[Row]) -> (String, Option<String>) {
    let mut t = String::new();
    let _ = writeln!(t, "### {}\n", case.name);
    let _ = writeln!(
        t,
        "| policy | targets missed | avg JCT h | median h | p99 h | makespan h | queueing h | cancelled | preemptions |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            t,
            "| {} | {:.1}% | {:.2} | {:.2} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} |",
            r.policy,
            100.0 * r.missed,
            r.avg,
            r.median,
            r.p99,
            r.makespan,
            r.queue,
            r.cancelled,
            r.preemptions
        );
    }
    t.push('\n');
    let find = |name: &str| rows.iter().find(|r| r.policy == name);
    let verdict = match (
        find("cinch"),
        find("slurm"),
        find("edf"),
        find("cinch:qos=false"),
    ) {
        (Some(c), Some(s), Some(e), Some(plain)) => {
            let jct = c.avg / plain.avg;
            Some(format!(
                "{}: targets missed {:.1}% vs Slurm's {:.1}% (target <= half) {}; vs EDF's {:.1}% \
                 (target <= 0.75x) {}; avg JCT {:.2} h = {jct:.3}x cinch without QoS (target <= \
                 1.05) {}",
                case.name,
                100.0 * c.missed,
                100.0 * s.missed,
                mark(c.missed <= 0.5 * s.missed),
                100.0 * e.missed,
                mark(c.missed <= 0.75 * e.missed),
                c.avg,
                mark(jct <= 1.05)
            ))
        }
        _ => None,
    };
    (t, verdict)
}

/// The case's table, and how `cinch` did against its targets (when both it and a baseline ran).
fn case_table(case: &Case, rows: &[Row]) -> (String, Option<String>) {
    if case.qos {
        return qos_table(case, rows);
    }
    let mut t = String::new();
    let ideal = rows.first().map_or(0.0, |r| r.ideal);
    let best = rows
        .iter()
        .filter(|r| r.baseline)
        .min_by(|a, b| a.avg.total_cmp(&b.avg));
    let _ = writeln!(
        t,
        "### {}\n\nideal avg JCT {ideal:.2} h{}\n",
        case.name,
        best.map_or(String::new(), |b| format!(
            "; best baseline {} {:.2} h",
            b.policy, b.avg
        ))
    );
    let _ = writeln!(
        t,
        "| policy | avg JCT h | vs best baseline | median h | p99 h | makespan h | queueing h | comm GPU-h | preemptions |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            t,
            "| {} | {:.2} | {} | {:.2} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} |",
            r.policy,
            r.avg,
            best.map_or("-".into(), |b| format!("{:.3}", r.avg / b.avg)),
            r.median,
            r.p99,
            r.makespan,
            r.queue,
            r.comm,
            r.preemptions
        );
    }
    t.push('\n');
    let cinch = rows.iter().find(|r| r.policy == "cinch");
    if case.elastic > 0.0 {
        return (t, elastic_verdict(case, rows));
    }
    let verdict = match (cinch, best) {
        (Some(c), Some(b)) => {
            let best_p99 = rows
                .iter()
                .filter(|r| r.baseline)
                .map(|r| r.p99)
                .fold(f64::INFINITY, f64::min);
            let slurm = rows.iter().find(|r| r.policy == "slurm");
            let mut parts = Vec::new();
            if case.congested {
                let excess = (c.avg - ideal) / (b.avg - ideal).max(1e-9);
                parts.push(format!(
                    "excess over ideal {:.2} h vs best baseline's {:.2} h: ratio {excess:.2} (target <= 0.5) {}",
                    c.avg - ideal,
                    b.avg - ideal,
                    mark(excess <= 0.5)
                ));
            }
            let p99 = c.p99 / best_p99;
            parts.push(format!(
                "p99 {:.1} h = {p99:.2}x the best baseline p99 (target <= 1.1) {}",
                c.p99,
                mark(p99 <= 1.1)
            ));
            if !case.congested {
                if let Some(s) = slurm {
                    parts.push(format!(
                        "avg {:.2} h vs Slurm {:.2} h (target: not worse) {}",
                        c.avg,
                        s.avg,
                        mark(c.avg <= s.avg)
                    ));
                }
            }
            Some(format!("{}: {}", case.name, parts.join("; ")))
        }
        _ => None,
    };
    (t, verdict)
}

/// How `cinch` did in an elastic case: with every job elastic, an average JCT below Pollux's
/// published 0.76 h and at most half Tiresias's in the same run; otherwise reported only.
fn elastic_verdict(case: &Case, rows: &[Row]) -> Option<String> {
    let find = |name: &str| rows.iter().find(|r| r.policy == name);
    let (c, t) = (find("cinch")?, find("tiresias")?);
    let ratio = c.avg / t.avg;
    let plain = find("cinch:elastic=false").map_or(String::new(), |p| {
        format!("; {:.3}x cinch without elasticity", c.avg / p.avg)
    });
    Some(if case.elastic >= 1.0 {
        format!(
            "{}: avg JCT {:.2} h vs Pollux's published {POLLUX_PUBLISHED_AVG_JCT_H} h (target: \
             below) {}; {ratio:.3}x Tiresias's {:.2} h in the same run (target <= 0.5) {}{plain}",
            case.name,
            c.avg,
            mark(c.avg < POLLUX_PUBLISHED_AVG_JCT_H),
            t.avg,
            mark(ratio <= 0.5),
        )
    } else {
        format!(
            "{}: avg JCT {:.2} h = {ratio:.3}x Tiresias's {:.2} h{plain} (reported, no target)",
            case.name, c.avg, t.avg
        )
    })
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}
