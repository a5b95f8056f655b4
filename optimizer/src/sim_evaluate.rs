//! `cinch sim evaluate`: self-simulation on a cinch record (cinch_sim::selfsim).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use cinch_core::learn::record::{Record, RecordLimits};
use cinch_sim::engine::SimConfig;
use cinch_sim::perf::Network;
use cinch_sim::selfsim::{self, MemberResult};
use cinch_sim::SchedulerKind;

use crate::sim_common::{whole, PolicyParser, ROUND_INTERVAL_S};

#[derive(clap::Args, Debug)]
pub struct EvaluateArgs {
    /// The record: the optimizer's STATE_DIR/record.jsonl, or `cinch sim --record-out`'s.
    #[arg(long)]
    pub record: PathBuf,
    /// Hours the window spans, ending at --end.
    #[arg(long, default_value_t = 24.0)]
    pub window_hours: f64,
    /// The window's end, in the record's clock (Unix seconds live; simulated seconds for a
    /// simulated run's record) [default: the record's latest snapshot].
    #[arg(long, allow_hyphen_values = true)]
    pub end: Option<i64>,
    /// Evaluate every window of --window-hours ending every this many hours across the record
    /// (from the first that fits), and count which member wins each: what a portfolio
    /// evaluating that often would have chosen.
    #[arg(long)]
    pub every_hours: Option<f64>,
    /// The portfolio, comma-separated, as `cinch sim --policies` names policies.
    #[arg(long, value_delimiter = ',', value_parser = PolicyParser,
          default_value = "slurm,tiresias,qssf,strict,cinch")]
    pub members: Vec<SchedulerKind>,
    /// Replays per member, each with its own draw of the runs not yet ended.
    #[arg(long, value_parser = whole::<u32>, default_value_t = 3)]
    pub draws: u32,
    /// Seed of the draws.
    #[arg(long, value_parser = whole::<u64>, default_value_t = 1)]
    pub seed: u64,
    /// Network congestion of the replays (as `cinch sim --congestion`).
    #[arg(long, default_value_t = 1.0)]
    pub congestion: f64,
}

pub fn run(args: EvaluateArgs) -> Result<()> {
    if !(args.window_hours.is_finite() && args.window_hours > 0.0 && args.window_hours <= 744.0) {
        bail!(
            "--window-hours must be above 0 and at most 744, not {}",
            args.window_hours
        );
    }
    if !(1..=20).contains(&args.draws) {
        bail!("--draws must be from 1 to 20, not {}", args.draws);
    }
    if args.members.is_empty() {
        bail!("--members names no policy");
    }
    let members = args
        .members
        .iter()
        .map(|m| {
            m.member().with_context(|| {
                format!("--members: {m} is not a policy a window is replayed under")
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let file = std::fs::File::open(&args.record)
        .with_context(|| format!("--record {}", args.record.display()))?;
    let whole_record = RecordLimits::UNBOUNDED;
    let record = Record::read(std::io::BufReader::new(file), whole_record)
        .with_context(|| format!("--record {}", args.record.display()))?;
    let Some((from, to)) = record.span() else {
        bail!("--record {}: it saw no snapshot", args.record.display());
    };
    let network = Network {
        congestion: args.congestion,
        cross_rack: 2.0,
    };
    network.validate().map_err(anyhow::Error::msg)?;
    let config = SimConfig {
        network,
        round_interval_s: ROUND_INTERVAL_S,
        max_requeues_per_job: 100,
        max_requeues_per_hour: 10_000,
        ..SimConfig::default()
    };
    let span_s = (args.window_hours * 3600.0).round() as i64;
    println!(
        "record: {}: {} jobs, {} nodes, {from} .. {to} ({:.1} h)",
        args.record.display(),
        record.len(),
        record.nodes().len(),
        (to - from) as f64 / 3600.0
    );
    let ends = window_ends(&args, from, to, span_s)?;
    let mut wins = vec![0usize; args.members.len()];
    let mut totals = vec![0.0f64; args.members.len()];
    for &end in &ends {
        let start = end - span_s;
        let replays = (0..u64::from(args.draws))
            .map(|draw| selfsim::replay(&record, start, end, config, args.seed + draw))
            .collect::<Result<Vec<_>, _>>()?;
        let first = &replays[0];
        println!(
            "\nwindow {start} .. {end} ({} h): {} jobs, {} runs drawn x{} draws, {} left out; cluster {}",
            args.window_hours,
            first.jobs.len(),
            first.drawn,
            args.draws,
            first.left_out.len(),
            first.config.cluster
        );
        let results = selfsim::evaluate(&replays, &members)?;
        print!("{}", table(&results));
        println!(
            "{:<28} {:>8.3} {:>8.3}   (what ran then, as the record shows it)",
            "recorded", first.observed_h.0, first.observed_h.1
        );
        let best = best(&results);
        println!(
            "best: {} (the least mean time in the system over the window)",
            results[best].member
        );
        wins[best] += 1;
        for (total, r) in totals.iter_mut().zip(&results) {
            *total += r.mean_h;
        }
    }
    if ends.len() > 1 {
        println!("\nover {} windows:", ends.len());
        println!("{:<28} {:>6} {:>14}", "member", "wins", "mean of means h");
        for (k, member) in args.members.iter().enumerate() {
            println!(
                "{:<28} {:>6} {:>14.3}",
                member.to_string(),
                wins[k],
                totals[k] / ends.len() as f64
            );
        }
    }
    Ok(())
}

/// The ends of the windows to evaluate: `--end` (else the record's latest), or with
/// `--every-hours` every window that fits the record, in order.
fn window_ends(args: &EvaluateArgs, from: i64, to: i64, span_s: i64) -> Result<Vec<i64>> {
    Ok(match args.every_hours {
        None => {
            let end = args.end.unwrap_or(to);
            if end > to || end - span_s < from {
                bail!(
                    "the window {} .. {end} is not within the record ({from} .. {to})",
                    end - span_s
                );
            }
            vec![end]
        }
        Some(every) => {
            if !(every.is_finite() && every >= 1.0) {
                bail!("--every-hours must be at least 1, not {every}");
            }
            let step = (every * 3600.0).round() as i64;
            let last = args.end.unwrap_or(to).min(to);
            let ends: Vec<i64> = (0..)
                .map(|k| from + span_s + k * step)
                .take_while(|&e| e <= last)
                .collect();
            if ends.is_empty() {
                bail!(
                    "the record spans less than one window of {} h",
                    args.window_hours
                );
            }
            ends
        }
    })
}

/// The member with the least mean (the first listed among equals).
fn best(results: &[MemberResult]) -> usize {
    results
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.mean_h.total_cmp(&b.1.mean_h).then(a.0.cmp(&b.0)))
        .map_or(0, |(k, _)| k)
}

fn table(results: &[MemberResult]) -> String {
    let least = results
        .iter()
        .map(|r| r.mean_h)
        .fold(f64::INFINITY, f64::min);
    // Finish targets missed, when the window judged any.
    let targeted = results.iter().map(|r| r.qos_targeted).max().unwrap_or(0);
    let mut out = format!(
        "{:<28} {:>8} {:>8} {:>8} {:>8} {:>8}{}\n",
        "member",
        "mean h",
        "p99 h",
        "vs best",
        "fairness",
        "wall s",
        if targeted > 0 { "  targets missed" } else { "" }
    );
    for r in results {
        let missed = if targeted > 0 {
            format!("  {:>5.1}% of {targeted}", r.qos_missed * 100.0)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "{:<28} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.1}{missed}\n",
            r.member,
            r.mean_h,
            r.p99_h,
            if least > 0.0 { r.mean_h / least } else { 1.0 },
            r.fairness,
            r.wall_s
        ));
    }
    out
}
