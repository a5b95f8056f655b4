//! `cinch sim evaluate`: self-simulation on a cinch record (cinch_sim::selfsim).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use cinch_core::learn::record::{Record, RecordLimits};
use cinch_core::policy::PortfolioParams;
use cinch_sim::engine::SimConfig;
use cinch_sim::perf::Network;
use cinch_sim::selfsim::{self, MemberResult};
use cinch_sim::SchedulerKind;

use crate::sim_common::{check_round_interval, whole, PolicyParser, Priority, ROUND_INTERVAL_S};

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
    /// Hours each replay runs on past the window's end, no job arriving then, so that work a
    /// member put off counts (the portfolio's `drain_h`). What the record shows ran stays
    /// counted within the window: with a drain, judge leads with --in-force.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub drain_hours: f64,
    /// Hours at each window's end whose arrivals are load, not score: only the jobs there
    /// before them are scored, followed to their finish or the window's end (the portfolio's
    /// `follow_h`). What the record shows ran counts every job: with it, judge leads with
    /// --in-force.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub follow_hours: f64,
    /// Seconds between the replayed agent's rounds (as `cinch sim --round-interval`; a site's
    /// cinch.conf `IntervalSeconds`, which the live portfolio replays with).
    #[arg(long, default_value_t = ROUND_INTERVAL_S, allow_hyphen_values = true)]
    pub round_interval: f64,
    /// Seed of the draws.
    #[arg(long, value_parser = whole::<u64>, default_value_t = 1)]
    pub seed: u64,
    /// Network congestion of the replays (as `cinch sim --congestion`).
    #[arg(long, default_value_t = 1.0)]
    pub congestion: f64,
    /// How the replays' simulated Slurm orders jobs (as `cinch sim --priority`): a run's record
    /// replays as it ran only with the priorities it ran under. `auto`: multifactor with fair
    /// share where the record's jobs have users.
    #[arg(long, value_enum, default_value_t = Priority::Auto)]
    pub priority: Priority,
    /// With --every-hours: the least lead that counts as one in the check of whether leads held
    /// on the next window (a share of what ran; the portfolio's `margin` unless told).
    #[arg(long)]
    pub margin: Option<f64>,
    /// With --every-hours: the member that ran the record, one of --members. The check of
    /// whether leads held then judges each lead over its replay, as a portfolio with it in force
    /// would; without it, over what the record shows ran (which also counts the replays' own
    /// error as a lead).
    // A name, parsed as --members are once read: a policy kept here would make every `cinch
    // sim` command's arguments as large.
    #[arg(long)]
    pub in_force: Option<String>,
}

pub fn run(args: EvaluateArgs) -> Result<()> {
    if !(args.window_hours.is_finite() && args.window_hours > 0.0 && args.window_hours <= 744.0) {
        bail!(
            "--window-hours must be above 0 and at most 744, not {}",
            args.window_hours
        );
    }
    // The portfolio's own ranges for `drain_h` and `follow_h`, from its parameter table.
    PortfolioParams {
        drain_h: args.drain_hours,
        ..PortfolioParams::default()
    }
    .check_ranges()
    .map_err(|why| anyhow::anyhow!("--drain-hours: {why}"))?;
    PortfolioParams {
        follow_h: args.follow_hours,
        ..PortfolioParams::default()
    }
    .check_ranges()
    .map_err(|why| anyhow::anyhow!("--follow-hours: {why}"))?;
    if args.follow_hours > 0.0 && args.follow_hours >= args.window_hours {
        bail!(
            "--follow-hours must be less than --window-hours ({}): the window's first hours are \
             the ones scored",
            args.window_hours
        );
    }
    check_round_interval(args.round_interval)?;
    if !(1..=20).contains(&args.draws) {
        bail!("--draws must be from 1 to 20, not {}", args.draws);
    }
    if args.members.is_empty() {
        bail!("--members names no policy");
    }
    let margin = args.margin.unwrap_or(PortfolioParams::default().margin);
    if !(0.0..1.0).contains(&margin) {
        bail!("--margin must be from 0 to below 1, not {margin}");
    }
    let in_force = match &args.in_force {
        None => None,
        Some(name) => {
            let kind: SchedulerKind = name
                .parse()
                .map_err(|why| anyhow::anyhow!("--in-force {name}: {why}"))?;
            Some(
                args.members
                    .iter()
                    .position(|m| m.to_string() == kind.to_string())
                    .with_context(|| format!("--in-force {name} is not one of --members"))?,
            )
        }
    };
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
    let users = (record.jobs().iter())
        .map(|j| j.user.as_str())
        .filter(|u| !u.is_empty())
        .collect::<std::collections::HashSet<_>>()
        .len();
    let multifactor = match args.priority {
        Priority::Multifactor if users < 2 => bail!(
            "--priority multifactor needs jobs with users (fair share is among users); the record has {users}"
        ),
        Priority::Multifactor => true,
        Priority::Basic => false,
        Priority::Auto => users >= 2,
    };
    let config = SimConfig {
        network,
        multifactor: multifactor.then(cinch_sim::fairshare::Multifactor::default),
        round_interval_s: args.round_interval,
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
    println!(
        "replays: Slurm's priorities {}",
        if multifactor {
            format!("multifactor with fair share over the record's {users} users")
        } else {
            "basic (first in, first out)".to_string()
        }
    );
    let ends = window_ends(&args, from, to, span_s)?;
    let mut evaluated = Vec::with_capacity(ends.len());
    let mut wins = vec![0usize; args.members.len()];
    let mut totals = vec![0.0f64; args.members.len()];
    for &end in &ends {
        let start = end - span_s;
        let replays = (0..u64::from(args.draws))
            .map(|draw| {
                selfsim::replay(&record, start, end, config, args.seed + draw).map(|r| {
                    r.following(args.follow_hours * 3600.0)
                        .drained(args.drain_hours * 3600.0)
                })
            })
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
        // Why jobs were left out, most common first: a replay missing them is easier on every
        // member than the window was.
        let mut counts = std::collections::BTreeMap::<&str, usize>::new();
        for &(_, reason) in &first.left_out {
            *counts.entry(reason).or_default() += 1;
        }
        let mut why: Vec<(&str, usize)> = counts.into_iter().collect();
        // Stable: equal counts stay in the reasons' order.
        why.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
        for (reason, count) in why {
            println!("  left out: {count} {reason}");
        }
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
        evaluated.push(Evaluated {
            start,
            end,
            means: results.iter().map(|r| r.mean_h).collect(),
            observed_h: first.observed_h.0,
        });
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
        let held = leads_held(&evaluated, margin, in_force);
        print!("{}", held.table(&args.members, margin, in_force));
    }
    Ok(())
}

/// One evaluated window: each member's mean time in the system and what the record shows ran.
struct Evaluated {
    start: i64,
    end: i64,
    means: Vec<f64>,
    observed_h: f64,
}

/// Whether the leads the replays showed on one window held on the next one, the window that
/// starts where it ends: the bet a portfolio makes when it switches. Each member's lead is
/// over what the record shows ran (the member in force), on both windows; the next window is
/// replayed from the state recorded at its start, so it says what switching then would have
/// given over it.
#[derive(Debug, PartialEq)]
struct LeadsHeld {
    /// Pairs of a window and the next.
    pairs: usize,
    /// Per member: windows it led by more than the margin, and of those how many it also led
    /// on the next window (by any amount).
    led: Vec<(usize, usize)>,
    /// Per member: on the windows after those it led, its mean over what ran (geometric).
    next_ratio: Vec<Option<f64>>,
    /// Mean hours over the next windows: staying with what ran, switching as a portfolio would
    /// (to the best member on the window if it leads by more than the margin), and each next
    /// window's own best (known only afterwards).
    stay_h: f64,
    switch_h: f64,
    best_h: f64,
}

/// `in_force`: the member whose replay each lead is over, else what the record shows ran.
fn leads_held(windows: &[Evaluated], margin: f64, in_force: Option<usize>) -> LeadsHeld {
    let members = windows.first().map_or(0, |w| w.means.len());
    let mut held = LeadsHeld {
        pairs: 0,
        led: vec![(0, 0); members],
        next_ratio: vec![None; members],
        stay_h: 0.0,
        switch_h: 0.0,
        best_h: 0.0,
    };
    let mut log_ratios = vec![Vec::new(); members];
    let base = |w: &Evaluated| in_force.map_or(w.observed_h, |k| w.means[k]);
    let leads = |w: &Evaluated, k: usize, by: f64| w.means[k] < base(w) * (1.0 - by);
    for window in windows {
        let Some(next) = windows.iter().find(|n| n.start == window.end) else {
            continue;
        };
        held.pairs += 1;
        for (k, (led, logs)) in held.led.iter_mut().zip(&mut log_ratios).enumerate() {
            if leads(window, k, margin) {
                led.0 += 1;
                led.1 += usize::from(leads(next, k, 0.0));
                if base(next) > 0.0 && next.means[k] > 0.0 {
                    logs.push((next.means[k] / base(next)).ln());
                }
            }
        }
        let best = (0..members).min_by(|&a, &b| window.means[a].total_cmp(&window.means[b]));
        held.stay_h += base(next);
        held.switch_h += match best.filter(|&k| leads(window, k, margin)) {
            Some(k) => next.means[k],
            None => base(next),
        };
        held.best_h += next.means.iter().copied().fold(base(next), f64::min);
    }
    for (ratio, logs) in held.next_ratio.iter_mut().zip(&log_ratios) {
        if !logs.is_empty() {
            *ratio = Some((logs.iter().sum::<f64>() / logs.len() as f64).exp());
        }
    }
    if held.pairs > 0 {
        let n = held.pairs as f64;
        held.stay_h /= n;
        held.switch_h /= n;
        held.best_h /= n;
    }
    held
}

impl LeadsHeld {
    fn table(&self, members: &[SchedulerKind], margin: f64, in_force: Option<usize>) -> String {
        if self.pairs == 0 {
            return "\ndid a lead hold on the next window? no window starts where another ends \
                    (--window-hours a multiple of --every-hours pairs them)\n"
                .to_string();
        }
        let mut out = format!(
            "\ndid a lead hold on the next window? {} pairs of a window and the one starting at its \
             end; a lead: a mean more than {:.0}% below {}\n",
            self.pairs,
            margin * 100.0,
            match in_force {
                Some(k) => format!("{}'s replay (in force)", members[k]),
                None => "what ran (the record)".to_string(),
            }
        );
        out.push_str(&format!(
            "{:<28} {:>6} {:>18} {:>24}\n",
            "member", "led", "led the next too", "next window vs it"
        ));
        for (k, member) in members.iter().enumerate() {
            let (led, held) = self.led[k];
            let ratio = self.next_ratio[k].map_or("-".to_string(), |r| format!("{r:.3}"));
            out.push_str(&format!(
                "{:<28} {:>6} {:>18} {:>24}\n",
                member.to_string(),
                led,
                held,
                ratio
            ));
        }
        out.push_str(&format!(
            "next windows' mean h: staying {:.3}, switching on a lead {:.3}, each one's best {:.3} \
             (known only afterwards)\n",
            self.stay_h, self.switch_h, self.best_h
        ));
        out
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start: i64, end: i64, means: [f64; 2], observed_h: f64) -> Evaluated {
        Evaluated {
            start,
            end,
            means: means.to_vec(),
            observed_h,
        }
    }

    /// Worked by hand: the first member leads by 20% on the first window and holds it on the
    /// second; leads by 10% on the second and loses 20% on the third. Switching on each lead
    /// would have given 9 h then 12 h against staying's 10 h twice.
    #[test]
    fn a_lead_is_judged_on_the_window_that_starts_where_it_ends() {
        let windows = [
            window(0, 10, [8.0, 10.0], 10.0),
            window(5, 15, [1.0, 1.0], 10.0),
            window(10, 20, [9.0, 10.0], 10.0),
            window(20, 30, [12.0, 10.0], 10.0),
        ];
        let held = leads_held(&windows, 0.05, None);
        assert_eq!(held.pairs, 2, "the window ending at 15 has no next");
        assert_eq!(held.led, vec![(2, 1), (0, 0)]);
        let ratio = held.next_ratio[0].unwrap();
        assert!((ratio - (0.9f64 * 1.2).sqrt()).abs() < 1e-12, "{ratio}");
        assert_eq!(held.next_ratio[1], None);
        assert_eq!((held.stay_h, held.switch_h, held.best_h), (10.0, 10.5, 9.5));
        // A lead within the margin is no lead: nothing switches, nothing is counted.
        let held = leads_held(&windows, 0.25, None);
        assert_eq!(held.led, vec![(0, 0), (0, 0)]);
        assert_eq!(held.switch_h, held.stay_h);
    }

    #[test]
    fn windows_that_do_not_pair_say_how_to_pair_them() {
        let held = leads_held(&[window(0, 10, [8.0, 9.0], 10.0)], 0.05, None);
        assert_eq!(held.pairs, 0);
        let members = [SchedulerKind::Slurm, SchedulerKind::SlurmDeadline];
        assert!(held
            .table(&members, 0.05, None)
            .contains("a multiple of --every-hours"));
    }

    /// With a member in force, leads are over its replay, not over the record: the second
    /// member, in force, replays at 10 h where the record shows 11 h (the replays' own error),
    /// so the first member's 10.4 h is no lead over it though it is one over the record.
    #[test]
    fn with_a_member_in_force_a_lead_is_over_its_replay() {
        let windows = [
            window(0, 10, [10.4, 10.0], 11.0),
            window(10, 20, [10.4, 10.0], 11.0),
        ];
        let over_record = leads_held(&windows, 0.05, None);
        assert_eq!(over_record.led, vec![(1, 1), (1, 1)]);
        let over_replay = leads_held(&windows, 0.05, Some(1));
        assert_eq!(over_replay.led, vec![(0, 0), (0, 0)]);
        assert_eq!((over_replay.stay_h, over_replay.switch_h), (10.0, 10.0));
        let members = [SchedulerKind::Slurm, SchedulerKind::SlurmDeadline];
        assert!(over_replay
            .table(&members, 0.05, Some(1))
            .contains("slurm-deadline's replay (in force)"));
    }
}
