//! `cinch sim suite --studies`: the studies of the other policy pages, beside the validation
//! suite: QoS targets (docs/policies/qos.md), elastic jobs (docs/policies/elastic.md) and GPU
//! sharing (docs/policies/sharing.md), each on seed 1 with the suite's time limits.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};

use cinch_sim::engine::SimConfig;
use cinch_sim::limits::Limits;
use cinch_sim::trace::{self, PolluxApps};
use cinch_sim::workload::{self, WorkloadOptions};
use cinch_sim::{compare, JobSpec, SchedulerKind, Summary};

use crate::sim_common::{config, mark, run_parallel};

/// The share of jobs whose users give hints and opt in to requeue.
const HINTED: f64 = workload::DEFAULT_HINTED;

/// The share of jobs with a QoS target in the QoS cases (docs/policies/qos.md).
const QOS_SHARE: f64 = 0.3;

/// The policies of the QoS cases: Slurm, Slurm honouring `--deadline`, EDF, and `cinch` without
/// its QoS part and with it at a site that counts every user's stated targets (cinch's default
/// counts none: an admin allows them, docs/policies/qos.md).
const QOS_POLICIES: [&str; 5] = [
    "slurm",
    "slurm-deadline",
    "edf",
    "cinch:qos=false",
    QOS_CINCH,
];
const QOS_CINCH: &str = "cinch:user_targets=true";

/// The policies of the elastic cases: Tiresias, `cinch` without and with elasticity, and the
/// simple elastic baseline.
const ELASTIC_POLICIES: [&str; 4] = ["tiresias", "cinch:elastic=false", "equal-share", "cinch"];

/// Seeds of the sharing comparison (about 9 s each).
const PACK_RUNS: u64 = 3;

/// Pollux's own published average JCT on its 8 workloads at 64 GPUs, hours
/// (`../shared/pollux/README.md`): the elastic target.
const POLLUX_PUBLISHED_AVG_JCT_H: f64 = 0.76;

/// One study case: its workloads (one, or the 8 Pollux ones averaged) and cluster.
struct Case {
    name: String,
    workloads: Vec<Vec<JobSpec>>,
    config: SimConfig,
    qos: bool,
    elastic: f64,
    kinds: Vec<SchedulerKind>,
}

/// What one policy did in one case (means over the case's workloads).
#[derive(Debug, Clone, Default)]
struct Row {
    policy: String,
    avg: f64,
    median: f64,
    p99: f64,
    makespan: f64,
    queue: f64,
    preemptions: f64,
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
        self.preemptions += f64::from(s.preemptions) / n;
        self.missed += s.missed_share().unwrap_or(0.0) / n;
        self.cancelled += s.cancelled as f64 / n;
    }
}

fn parse_all(names: &[&str]) -> Vec<SchedulerKind> {
    names
        .iter()
        .map(|n| n.parse().expect("known policy"))
        .collect()
}

fn options(limits: &Limits) -> WorkloadOptions {
    WorkloadOptions {
        hinted: HINTED,
        limits: limits.clone(),
        ..WorkloadOptions::default()
    }
}

/// The QoS and elastic cases whose data is here, and the reasons others are skipped.
fn cases(traces: &Path, pollux: &Path, limits: &Limits) -> Result<(Vec<Case>, Vec<String>)> {
    let mut cases = Vec::new();
    let mut skipped = Vec::new();
    let qos_kinds = parse_all(&QOS_POLICIES);
    let with_targets = |jobs: &[JobSpec]| {
        let mut jobs = jobs.to_vec();
        workload::assign_targets(&mut jobs, QOS_SHARE, 1);
        jobs
    };
    let builtin = config("16x8", 2, 1.0)?;
    let trace = workload::synthetic(2000, builtin.cluster.total_gpus(), 0.9, 1);
    cases.push(Case {
        name: format!(
            "QoS: built-in, 2000 jobs, load 0.9, 16x8 GPUs, 2 racks, congestion 1, {:.0}% of jobs with targets",
            QOS_SHARE * 100.0
        ),
        workloads: vec![with_targets(&workload::from_trace(&trace, &options(limits)))],
        config: builtin,
        qos: true,
        elastic: 0.0,
        kinds: qos_kinds.clone(),
    });
    let philly = traces.join("philly_vc6c71a0.csv");
    if philly.is_file() {
        let mut trace = trace::read_philly(&philly)?;
        for job in &mut trace.jobs {
            job.submit = (job.submit as f64 * 0.1).round() as i64;
        }
        cases.push(Case {
            name: format!(
                "QoS: Philly sample, arrivals x10, 64x8 GPUs, 2 racks, congestion 1, {:.0}% of jobs with targets",
                QOS_SHARE * 100.0
            ),
            workloads: vec![with_targets(&workload::from_trace(&trace, &options(limits)))],
            config: config("64x8", 2, 1.0)?,
            qos: true,
            elastic: 0.0,
            kinds: qos_kinds.clone(),
        });
    } else {
        skipped.push(format!("Philly QoS case: {} not found", philly.display()));
    }
    if pollux.join("workloads").is_dir() {
        let apps = PolluxApps::read(pollux)
            .with_context(|| format!("reading the Pollux data in {}", pollux.display()))?;
        let traces = trace::read_pollux_workloads(pollux, &apps, 4)?;
        cases.push(Case {
            name: format!(
                "QoS: Pollux workloads 1-8 (means), 16x4 GPUs, 2 racks, congestion 1, {:.0}% of jobs with targets",
                QOS_SHARE * 100.0
            ),
            workloads: traces
                .iter()
                .map(|t| with_targets(&workload::from_trace(t, &options(limits))))
                .collect(),
            config: config("16x4", 2, 1.0)?,
            qos: true,
            elastic: 0.0,
            kinds: qos_kinds,
        });
        for share in [1.0, 0.5] {
            cases.push(Case {
                name: format!(
                    "Elastic: Pollux workloads 1-8 (means), 16x4 GPUs, 2 racks, congestion 1, {:.0}% of jobs elastic",
                    share * 100.0
                ),
                workloads: traces
                    .iter()
                    .map(|t| {
                        workload::from_trace(
                            t,
                            &WorkloadOptions {
                                elastic: share,
                                ..options(limits)
                            },
                        )
                    })
                    .collect(),
                config: config("16x4", 2, 1.0)?,
                qos: false,
                elastic: share,
                kinds: parse_all(&ELASTIC_POLICIES),
            });
        }
    } else {
        skipped.push(format!(
            "Pollux QoS and elastic cases: {} not found",
            pollux.join("workloads").display()
        ));
    }
    Ok((cases, skipped))
}

/// The studies' tables and verdicts, as Markdown.
pub fn run(traces: &Path, pollux: &Path, limits: &Limits, threads: usize) -> Result<String> {
    let (cases, skipped) = cases(traces, pollux, limits)?;
    let mut text = String::from("\n## Studies of the other policy pages (seed 1)\n\n");
    for why in &skipped {
        let _ = writeln!(text, "skipped: {why}");
    }
    let work: Vec<(usize, usize)> = cases
        .iter()
        .enumerate()
        .flat_map(|(c, case)| (0..case.workloads.len()).map(move |w| (c, w)))
        .collect();
    let results = run_parallel(&work, threads, |&(c, w)| {
        let case = &cases[c];
        Ok(compare(
            &case.workloads[w],
            &case.kinds,
            case.config,
            &mut |_, _, _| {},
        )?
        .into_iter()
        .map(|r| r.summary)
        .collect::<Vec<Summary>>())
    })?;
    let mut verdicts = Vec::new();
    for (c, case) in cases.iter().enumerate() {
        let n = case.workloads.len() as f64;
        let mut rows: Vec<Row> = case
            .kinds
            .iter()
            .map(|k| Row {
                policy: k.to_string(),
                ..Row::default()
            })
            .collect();
        for (summaries, _) in results.iter().zip(&work).filter(|(_, w)| w.0 == c) {
            for (row, s) in rows.iter_mut().zip(summaries) {
                row.add(s, n);
            }
        }
        let (table, verdict) = if case.qos {
            qos_table(case, &rows)
        } else {
            (plain_table(case, &rows), elastic_verdict(case, &rows))
        };
        text.push_str(&table);
        verdicts.extend(verdict);
    }
    if !verdicts.is_empty() {
        text.push_str("\nTargets (docs/policies/qos.md, docs/policies/elastic.md):\n\n");
        for v in &verdicts {
            let _ = writeln!(text, "- {v}");
        }
    }
    text.push_str(&idle_table(traces, limits)?);
    if traces.join("alibaba_gpu_v2023_pods.csv").is_file() {
        let _ = writeln!(
            text,
            "\n### Sharing: GPUs left unallocated at saturation (`cinch sim pack --runs {PACK_RUNS}`)\n"
        );
        text.push_str(&pack_table(traces, PACK_RUNS)?);
        // The rule that sharing slowing no one is always taken was chosen on the tune half's
        // 6c71a0 (docs/policies/sharing.md); 6214e9, of the report half, checks it.
        for (vc, scale, what) in [
            ("6c71a0", 0.1, "the Philly sample, arrivals x10"),
            (
                "6214e9",
                0.0775,
                "Philly VC 6214e9 (first 10000 jobs, a report-half VC), arrivals x0.0775 (the \
                 suite's congesting scale)",
            ),
        ] {
            if traces.join(format!("philly_vc{vc}.csv")).is_file() {
                text.push_str(&sharing_jct_table(traces, limits, vc, scale, what)?);
            }
        }
    } else {
        let _ = writeln!(
            text,
            "\nskipped: the sharing studies need alibaba_gpu_v2023_pods.csv in {}",
            traces.display()
        );
    }
    Ok(text)
}

/// An elastic case's table.
fn plain_table(case: &Case, rows: &[Row]) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "### {}\n", case.name);
    let _ = writeln!(
        t,
        "| policy | avg JCT h | median h | p99 h | makespan h | queueing h | preemptions |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            t,
            "| {} | {:.2} | {:.2} | {:.1} | {:.1} | {:.2} | {:.0} |",
            r.policy, r.avg, r.median, r.p99, r.makespan, r.queue, r.preemptions
        );
    }
    t.push('\n');
    t
}

/// Sharing small jobs on Philly VC `vc` (docs/policies/sharing.md; its first 10,000 jobs, as
/// the suite cuts traces), arrivals compressed by `scale`, on 64x8 at congestion 1, under Slurm
/// and cinch: every GPU whole, 8 nodes set aside as sharing nodes with no job sharing, and every
/// job of one GPU opted in under each interference truth, model and mode.
fn sharing_jct_table(
    traces: &Path,
    limits: &Limits,
    vc: &str,
    scale: f64,
    what: &str,
) -> Result<String> {
    let trace = trace::read_philly(&traces.join(format!("philly_vc{vc}.csv")))?;
    let mut scaled = trace;
    scaled.jobs.truncate(10_000);
    for job in &mut scaled.jobs {
        job.submit = (job.submit as f64 * scale).round() as i64;
    }
    let plain = workload::from_trace(&scaled, &options(limits));
    let pods = cinch_sim::packing::read_pod_shapes(&traces.join("alibaba_gpu_v2023_pods.csv"))?;
    let fractions = cinch_sim::packing::one_gpu_fractions(&pods);
    let base = config("64x8", 2, 1.0)?;
    use cinch_core::models::corun::ShareMode;
    use cinch_sim::engine::SharingTruth::{Interference, Measured};
    let constant = cinch_core::models::sharing::Interference::Constant(0.5);
    let model = cinch_core::models::sharing::ShareParams::default().interference;
    let measured = Measured(ShareMode::TimeSlice);
    let under_mps = Measured(ShareMode::Mps);
    let (slice, mps) = (ShareMode::TimeSlice, ShareMode::Mps);
    // Users' stated peaks: exact (measured on an earlier run), or off by a log-normal factor of
    // spread 0.2 (an assumption: no trace records what users state).
    let exact = 0.0;
    let off = 0.2;
    let setups: Vec<(&str, f64, f64, Option<cinch_sim::engine::SimSharing>)> = vec![
        ("every GPU whole", 0.0, exact, None),
        (
            "8 sharing nodes, no job shares",
            0.0,
            exact,
            sim_sharing(8, measured, model, true, slice),
        ),
        (
            "all one-GPU jobs may share; true interference 0.5, cinch assumes 0.5",
            1.0,
            exact,
            sim_sharing(8, Interference(0.5), constant, false, slice),
        ),
        (
            "... true interference 1.0, cinch assumes 0.5",
            1.0,
            exact,
            sim_sharing(8, Interference(1.0), constant, false, slice),
        ),
        (
            "... speeds as measured on an H100, cinch assumes 0.5",
            1.0,
            exact,
            sim_sharing(8, measured, constant, false, slice),
        ),
        (
            "... speeds as measured, cinch's measured model, no busy table",
            1.0,
            exact,
            sim_sharing(8, measured, model, false, slice),
        ),
        (
            "... speeds as measured, cinch's measured model and the site's busy table",
            1.0,
            exact,
            sim_sharing(8, measured, model, true, slice),
        ),
        (
            "MPS on one GPU of every node (fenced, no node set aside; 100 units, one user per \
             GPU), speeds as measured, no busy table",
            1.0,
            exact,
            sim_sharing(64, under_mps, model, false, mps),
        ),
        (
            "... MPS, speeds as measured, the site's busy table",
            1.0,
            exact,
            sim_sharing(64, under_mps, model, true, mps),
        ),
        (
            "... shards, speeds as measured, busy table, users' peaks off (spread 0.2)",
            1.0,
            off,
            sim_sharing(8, measured, model, true, slice),
        ),
        (
            "... MPS, speeds as measured, busy table, users' peaks off (spread 0.2)",
            1.0,
            off,
            sim_sharing(64, under_mps, model, true, mps),
        ),
    ];
    let kinds: Vec<SchedulerKind> = ["slurm", "cinch"]
        .iter()
        .map(|n| n.parse().expect("known policy"))
        .collect();
    let runs: Vec<Result<Vec<(String, Summary, SharingStats)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = setups
            .iter()
            .map(|(_, share, stated_error, sharing)| {
                let (plain, fractions, kinds) = (&plain, &fractions, &kinds);
                scope.spawn(move || -> Result<Vec<(String, Summary, SharingStats)>> {
                    let mut jobs = plain.clone();
                    if let Some(s) = sharing {
                        workload::assign_sharing(
                            &mut jobs,
                            *share,
                            fractions,
                            s.params.gpu_mem_gib,
                            *stated_error,
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
                            let stats = SharingStats::of(&r.outcome.jobs);
                            (r.kind.to_string(), r.summary, stats)
                        })
                        .collect())
                })
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
        "\n### Sharing small jobs on {what}, 64x8 GPUs, 2 racks, congestion 1\n\nPeaks of one-GPU jobs drawn from the Alibaba trace's GPU shares (x 80G); \
         sharing nodes: 16 shards per GPU (MPS: 100 units), 10% margin. Speeds as measured: \
         each job's application's busy fraction on an H100 (cinch_core::models::corun); the busy table \
         lists them for the jobs that name their application (hinted, half). Users state their \
         peak exactly unless said (off: times a log-normal error of spread 0.2, an assumption); \
         a run fails for memory over its MPS cap, or for every job on a shard GPU whose true \
         peaks pass its memory.\n"
    );
    let _ = writeln!(
        t,
        "| setup | policy | avg JCT h | p99 h | queueing h | jobs on shards (beside others) | \
         their avg JCT h | runs failed for memory |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|");
    for ((name, _, _, sharing), result) in setups.iter().zip(runs) {
        for (policy, s, stats) in result? {
            let (on_shards, their_jct) = if sharing.is_some() && stats.on_shards > 0 {
                (
                    format!("{} ({})", stats.on_shards, stats.beside),
                    format!("{:.2}", stats.avg_jct_s / 3600.0),
                )
            } else if sharing.is_some() {
                ("0 (0)".into(), "-".into())
            } else {
                ("-".into(), "-".into())
            };
            let _ = writeln!(
                t,
                "| {name} | {policy} | {:.2} | {:.1} | {:.2} | {on_shards} | {their_jct} | {} |",
                s.avg_jct / 3600.0,
                s.p99_jct / 3600.0,
                s.avg_queue / 3600.0,
                stats.memory_failures
            );
        }
    }
    Ok(t)
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
        find(QOS_CINCH),
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

/// What sharing did in one run.
pub struct SharingStats {
    /// Jobs whose users let them share.
    pub opted: usize,
    /// Jobs turned into shards, and those of them that ran beside other jobs.
    pub on_shards: usize,
    pub beside: usize,
    /// The shard jobs' average JCT, seconds.
    pub avg_jct_s: f64,
    /// Runs on shared GPUs that failed for memory.
    pub memory_failures: u32,
}

impl SharingStats {
    pub fn of(jobs: &[cinch_sim::engine::JobState]) -> SharingStats {
        let shards: Vec<&cinch_sim::engine::JobState> =
            jobs.iter().filter(|j| j.shard.is_some()).collect();
        SharingStats {
            opted: jobs.iter().filter(|j| j.spec.share.is_some()).count(),
            on_shards: shards.len(),
            beside: shards.iter().filter(|j| j.co_runners_max > 0).count(),
            avg_jct_s: shards
                .iter()
                .filter_map(|j| j.finish.map(|f| f - j.spec.submit as f64))
                .sum::<f64>()
                / shards.len().max(1) as f64,
            memory_failures: jobs.iter().map(|j| j.share_failures).sum(),
        }
    }
}

impl std::fmt::Display for SharingStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} jobs opted in to sharing, {} ran on shards ({} of them beside other jobs), their \
             avg JCT {:.3} h",
            self.opted,
            self.on_shards,
            self.beside,
            self.avg_jct_s / 3600.0
        )
    }
}

/// The sharing setup of `cinch sim --share-nodes` and the suite: 16 shards per GPU, cinch.conf's
/// defaults for memory and margin, the interference cinch assumes (`assumed`), and whether the
/// site's table lists applications' busy fractions; `None` without sharing nodes.
pub fn sim_sharing(
    nodes: u32,
    truth: cinch_sim::engine::SharingTruth,
    assumed: cinch_core::models::sharing::Interference,
    busy_table: bool,
    mode: cinch_core::models::corun::ShareMode,
) -> Option<cinch_sim::engine::SimSharing> {
    (nodes > 0).then(|| cinch_sim::engine::SimSharing {
        nodes,
        // Shards as local-cluster's tests use them; MPS units as Slurm's docs count them.
        shards_per_gpu: match mode {
            cinch_core::models::corun::ShareMode::TimeSlice => 16,
            cinch_core::models::corun::ShareMode::Mps => 100,
        },
        params: cinch_core::models::sharing::ShareParams {
            interference: assumed,
            mode,
            ..cinch_core::models::sharing::ShareParams::default()
        },
        truth,
        busy_table,
        // Slurm fences MPS GPUs from whole-GPU jobs (not shards, in 22.05).
        fenced: mode == cinch_core::models::corun::ShareMode::Mps,
    })
}

/// The packing comparison (`cinch sim pack`) as a Markdown table with a verdict line.
pub fn pack_table(traces: &Path, runs: u64) -> Result<String> {
    use cinch_sim::packing::{inflate, read_nodes, read_pod_shapes, PackPolicy};
    if !(1..=100).contains(&runs) {
        bail!("--runs must be from 1 to 100, not {runs}");
    }
    let nodes = read_nodes(&traces.join("alibaba_gpu_v2023_gpu_nodes.csv"))?;
    let pods = read_pod_shapes(&traces.join("alibaba_gpu_v2023_pods.csv"))?;
    let gpus: usize = nodes.iter().map(|n| n.gpu_free.len()).sum();
    let mut text = format!(
        "Alibaba GPU-sharing trace: {} nodes, {gpus} GPUs; {} pods drawn with replacement until \
         their GPU demand reaches the capacity; mean of {runs} runs (seeds 1..={runs})\n\n\
         | policy | GPUs unallocated | pods failed | GPU demand failed | vs best fit |\n|---|---|---|---|---|\n",
        nodes.len(),
        pods.len()
    );
    let work: Vec<(PackPolicy, u64)> = PackPolicy::ALL
        .iter()
        .flat_map(|&p| (1..=runs).map(move |seed| (p, seed)))
        .collect();
    let results: Vec<(PackPolicy, cinch_sim::packing::PackResult)> = std::thread::scope(|scope| {
        let chunks: Vec<_> = work
            .chunks(work.len().div_ceil(2).max(1))
            .map(|chunk| {
                let (nodes, pods) = (&nodes, &pods);
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|&(p, seed)| (p, inflate(nodes, pods, p, seed)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        chunks
            .into_iter()
            .flat_map(|h| h.join().expect("no panic in packing"))
            .collect()
    });
    let mean = |p: PackPolicy, f: fn(&cinch_sim::packing::PackResult) -> f64| {
        let v: Vec<f64> = results
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, r)| f(r))
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let best_fit = mean(PackPolicy::BestFit, |r| r.unallocated);
    for p in PackPolicy::ALL {
        let un = mean(p, |r| r.unallocated);
        text.push_str(&format!(
            "| {} | {:.1}% | {:.1}% | {:.1}% | {:.2}x |\n",
            p.name(),
            100.0 * un,
            100.0 * mean(p, |r| r.failed_pods),
            100.0 * mean(p, |r| r.failed_gpu),
            un / best_fit.max(1e-12)
        ));
    }
    for (policy, who) in [
        (PackPolicy::Cinch, "cinch's gradient"),
        (PackPolicy::Live, "the plugin's own decision (cinch-live)"),
    ] {
        let fewer = 1.0 - mean(policy, |r| r.unallocated) / best_fit.max(1e-12);
        let said = if fewer >= 0.0 {
            format!("{:.0}% fewer", 100.0 * fewer)
        } else {
            format!("{:.0}% more", -100.0 * fewer)
        };
        text.push_str(&format!(
            "\n{who} leaves {said} GPUs unallocated than best fit (target: at least 30% fewer) {}\n",
            if fewer >= 0.3 { "met" } else { "MISSED" }
        ));
    }
    Ok(text)
}

/// The share of jobs that hold their GPUs idle in the idle-reclaim study (an assumption, as
/// the idle model itself: docs/simulator.md, "Idle GPUs").
pub const IDLE_STUDY_SHARE: f64 = 0.1;

/// What the runs of one policy did with idle GPUs (the idle model's truth, not cinch's view).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IdleStats {
    /// GPU-hours jobs held in their idle tails.
    pub held_gpu_h: f64,
    /// Of those, GPU-hours past `grace + warning` of each tail's start: what an idle action could
    /// give back at best.
    pub past_warning_gpu_h: f64,
    pub requeues: u32,
    pub cancels: u32,
    /// Jobs requeued or cancelled for idle GPUs while busy.
    pub busy_touched: u32,
}

/// What `outcome`'s jobs did with idle GPUs, with `wait_s` (grace + warning) for the best an
/// idle action could give back.
pub fn idle_stats(outcome: &cinch_sim::engine::Outcome, wait_s: f64) -> IdleStats {
    let mut stats = IdleStats::default();
    for j in &outcome.jobs {
        if j.spec.idle_from.is_none() {
            continue;
        }
        let gpus = f64::from(j.spec.gpus.max(1));
        stats.held_gpu_h += j.idle_held / 3600.0;
        stats.past_warning_gpu_h += (j.idle_held / gpus - wait_s).max(0.0) * gpus / 3600.0;
        stats.requeues += j.idle_requeues;
        stats.cancels += u32::from(j.cancelled);
        stats.busy_touched += u32::from(j.busy_touched);
    }
    stats
}

/// `cinch sim --idle-share`'s line for one run.
pub fn idle_line(run: &cinch_sim::PolicyRun) -> String {
    let s = idle_stats(&run.outcome, 0.0);
    format!(
        "  {}: idle GPU-hours held {:.1}; requeued for idle GPUs {}, cancelled {}; busy jobs \
         touched {}",
        run.summary.policy, s.held_gpu_h, s.requeues, s.cancels, s.busy_touched
    )
}

/// The idle-reclaim study (docs/policies/idle.md): Philly VC 6214e9 (its first 10,000 jobs, a
/// report-half VC), arrivals x0.0775, 64x8 GPUs at congestion 1, with
/// [`IDLE_STUDY_SHARE`] of jobs holding their GPUs idle from a uniform 10-90% of their run to its
/// end, under `cinch` with each `IdleAction` and two grace/warning settings.
pub fn idle_table(traces: &Path, limits: &Limits) -> Result<String> {
    use cinch_core::wire::idle::{IdleAction, IdleRules};
    let path = traces.join("philly_vc6214e9.csv");
    if !path.is_file() {
        return Ok(format!(
            "\nskipped: the idle-reclaim study needs {}\n",
            path.display()
        ));
    }
    let mut trace = trace::read_philly(&path)?;
    trace.jobs.truncate(10_000);
    for job in &mut trace.jobs {
        job.submit = (job.submit as f64 * 0.0775).round() as i64;
    }
    let jobs = workload::from_trace(
        &trace,
        &WorkloadOptions {
            idle: IDLE_STUDY_SHARE,
            ..options(limits)
        },
    );
    let base = config("64x8", 2, 1.0)?;
    let setups: Vec<(IdleAction, u32, u32)> = vec![
        (IdleAction::Report, 120, 30),
        (IdleAction::Requeue, 120, 30),
        (IdleAction::Cancel, 120, 30),
        (IdleAction::Requeue, 30, 10),
        (IdleAction::Cancel, 30, 10),
    ];
    let kinds = parse_all(&["cinch"]);
    type IdleRun = (Summary, IdleStats, Vec<(f64, u32)>);
    let runs: Vec<Result<IdleRun>> = std::thread::scope(|scope| {
        let handles: Vec<_> = setups
            .iter()
            .map(|&(action, grace, warn)| {
                let (jobs, kinds) = (&jobs, &kinds);
                scope.spawn(move || -> Result<IdleRun> {
                    let rules = IdleRules {
                        grace_s: grace * 60,
                        warn_s: warn * 60,
                        ..IdleRules::default()
                    };
                    let config = SimConfig {
                        idle: Some(cinch_sim::engine::SimIdle { rules, action }),
                        ..base
                    };
                    let mut run = compare(jobs, kinds, config, &mut |_, _, _| {})?;
                    let run = run.remove(0);
                    let stats = idle_stats(&run.outcome, f64::from((grace + warn) * 60));
                    let tails = run
                        .outcome
                        .jobs
                        .iter()
                        .filter(|j| j.spec.idle_from.is_some())
                        .map(|j| (j.idle_held, j.spec.gpus.max(1)))
                        .collect();
                    Ok((run.summary, stats, tails))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an idle run panicked"))
            .collect()
    });
    let mut t = String::new();
    let idle_jobs = jobs.iter().filter(|j| j.idle_from.is_some()).count();
    let _ = writeln!(
        t,
        "\n### Idle GPUs given back: Philly VC 6214e9 (first 10000 jobs, a report-half VC), arrivals \
         x0.0775, 64x8 GPUs, congestion 1\n\n{idle_jobs} of {} jobs ({:.0}%, an assumption) hold \
         their GPUs idle from a uniform 10-90% of their run to its end; the watcher reads them \
         at every round; half of all jobs opted in to requeues. Given back: the idle GPU-hours \
         `report` holds that the action did not; of those past the grace and warning, the most \
         any action could.\n",
        jobs.len(),
        IDLE_STUDY_SHARE * 100.0
    );
    let _ = writeln!(
        t,
        "| IdleAction | grace + warning | avg JCT h | p99 h | idle GPU-h held | given back | of \
         those past the warning | requeued for idle | cancelled | busy jobs touched |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|---|");
    // The first setup is `report`: nothing given back.
    let mut report: Option<(f64, Vec<(f64, u32)>)> = None;
    let mut verdicts = Vec::new();
    for (&(action, grace, warn), result) in setups.iter().zip(runs) {
        let (s, stats, tails) = result?;
        let (held_by_report, report_tails) = report.get_or_insert((stats.held_gpu_h, tails));
        let held_by_report = *held_by_report;
        let back = held_by_report - stats.held_gpu_h;
        // What report holds past this row's grace and warning: the most an action could give.
        let wait_s = f64::from((grace + warn) * 60);
        let past: f64 = report_tails
            .iter()
            .map(|&(held, gpus)| {
                let g = f64::from(gpus);
                (held / g - wait_s).max(0.0) * g / 3600.0
            })
            .sum();
        let share = |x: f64, of: f64| {
            if of > 0.0 {
                format!("{:.0}%", 100.0 * x / of)
            } else {
                "-".into()
            }
        };
        let _ = writeln!(
            t,
            "| {} | {} + {} min | {:.2} | {:.1} | {:.0} | {} | {} | {} | {} | {} |",
            action.name(),
            grace,
            warn,
            s.avg_jct / 3600.0,
            s.p99_jct / 3600.0,
            stats.held_gpu_h,
            share(back, held_by_report),
            share(back, past),
            stats.requeues,
            stats.cancels,
            stats.busy_touched
        );
        if action != IdleAction::Report {
            verdicts.push((
                action,
                grace,
                warn,
                back / held_by_report.max(1e-9),
                stats.busy_touched,
            ));
        }
    }
    t.push('\n');
    for (action, grace, warn, back, touched) in verdicts {
        let _ = writeln!(
            t,
            "- `{}` with {grace} + {warn} min: {:.0}% of idle GPU-hours given back (target 80%) {}, \
             {touched} busy jobs touched (target 0) {}",
            action.name(),
            back * 100.0,
            mark(back >= 0.8),
            mark(touched == 0)
        );
    }
    Ok(t)
}
