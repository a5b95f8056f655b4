//! The outputs of `cinch sim`: the comparison table, CSV files, SVG plots (JCT CDF, GPU
//! utilisation and queue length over time) and one self-contained HTML report.

use std::fmt::Write as _;
use std::path::Path;

use super::engine::{Phase, Sample};
use super::{PolicyRun, SimError, Summary};

/// A share as `12.3%`, or `-` when undefined (no job ever waited).
fn percent(share: f64) -> String {
    if share.is_finite() {
        format!("{:.1}%", 100.0 * share)
    } else {
        "-".to_string()
    }
}

/// What each column of [`table`] means.
pub const LEGEND: [(&str, &str); 15] = [
    (
        "jobs",
        "jobs that ended (ran to completion, or were killed at their time limit)",
    ),
    (
        "killed",
        "jobs Slurm killed at their time limit (TIMEOUT) before their work was done; they count \
         in every JCT figure",
    ),
    (
        "avg JCT h",
        "mean job completion time, submission to end, hours",
    ),
    (
        "vs first",
        "avg JCT as a multiple of the first policy's (below 1: faster)",
    ),
    ("median h", "median JCT, hours"),
    ("p95 h", "95th percentile of JCT, hours"),
    ("p99 h", "99th percentile of JCT, hours"),
    ("queue h", "mean time from submission to first start, hours"),
    (
        "util*",
        "GPU utilisation while jobs wait: busy GPUs over all GPUs, averaged over the time some \
         job was pending (the idle start and tail of a trace left out; - if none ever waited)",
    ),
    (
        "comm GPU-h",
        "GPU-hours lost to placements slower than the most consolidated one",
    ),
    (
        "max slow",
        "the largest JCT over the job's run time on its best placement",
    ),
    ("preempt", "requeues (preemptions) of running jobs"),
    ("QoS met", "share of jobs with a QoS target that met it"),
    ("makespan h", "first submission to last end, hours"),
    ("cancelled", "jobs Slurm cancelled at their deadline"),
];

/// The legend entries of the columns a table shows: the QoS columns only where some job had a
/// target, and the makespan always in the HTML table, with the QoS columns in the text one.
fn legend_for(
    qos: bool,
    html: bool,
) -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    LEGEND.iter().filter(move |(column, _)| match *column {
        "QoS met" | "cancelled" => qos,
        "makespan h" => qos || html,
        _ => true,
    })
}

/// The legend as text lines, for the columns a table of `runs` shows.
pub fn legend(runs: &[PolicyRun]) -> String {
    let qos = runs.iter().any(|r| r.summary.targeted > 0);
    let mut out = String::from("columns:\n");
    for (column, meaning) in legend_for(qos, false) {
        let _ = writeln!(out, "  {column:<22} {meaning}");
    }
    out
}

/// Who won and by how much, and what the difference is made of: queueing (waiting for GPUs) or
/// running slower (spread placements, sharing, smaller counts).
pub fn verdict(runs: &[PolicyRun]) -> String {
    // The perfect-knowledge reference is no policy a site can run: said apart, never ranked.
    let reference = reference_line(runs);
    let mut ranked: Vec<&PolicyRun> = runs
        .iter()
        .filter(|r| r.summary.jobs > 0 && !r.kind.is_reference())
        .collect();
    ranked.sort_by(|a, b| a.summary.avg_jct.total_cmp(&b.summary.avg_jct));
    let (Some(best), Some(next)) = (ranked.first(), ranked.get(1)) else {
        return String::new();
    };
    let (b, n) = (&best.summary, &next.summary);
    let tied: Vec<&str> = ranked
        .iter()
        .filter(|r| r.summary.avg_jct <= b.avg_jct * (1.0 + 1e-9))
        .map(|r| r.summary.policy.as_str())
        .collect();
    if tied.len() > 1 {
        return format!(
            "{} tie on average JCT, {:.2} h{}.\n{reference}",
            tied.join(", "),
            b.avg_jct / 3600.0,
            if tied.len() == ranked.len() {
                " (nothing waited long enough for the policies to differ)"
            } else {
                ""
            }
        );
    }
    let gain = n.avg_jct - b.avg_jct;
    let queue = n.avg_queue - b.avg_queue;
    let running = gain - queue;
    let why = if queue.abs() >= running.abs() {
        format!(
            "mostly less waiting: queueing {:.2} h against {:.2} h",
            b.avg_queue / 3600.0,
            n.avg_queue / 3600.0
        )
    } else {
        format!(
            "mostly faster running once started ({:.2} h of the gap; placements lost {:.0} \
             against {:.0} GPU-hours to spreading)",
            running / 3600.0,
            b.comm_overhead_gpu_h,
            n.comm_overhead_gpu_h
        )
    };
    format!(
        "{} has the lowest average JCT, {:.2} h: {:.1}% below the next best, {} ({:.2} h); {why}.\n{}{reference}",
        b.policy,
        b.avg_jct / 3600.0,
        100.0 * gain / n.avg_jct,
        n.policy,
        n.avg_jct / 3600.0,
        trade_offs(best, &ranked),
    )
}

/// The share of the gap from the best baseline (`best`) down to the perfect-knowledge
/// reference (`perfect`) that a policy's `avg` closes: 1 where it matches the reference, 0
/// where it only matches the best baseline, negative where it is worse; `None` when the
/// reference is no better than the best baseline (no gap to close).
pub fn gap_closed(best: f64, policy: f64, perfect: f64) -> Option<f64> {
    (best - perfect > 1e-9 * best.abs().max(1.0)).then(|| (best - policy) / (best - perfect))
}

/// What perfect knowledge gives in this run, and how much of its lead over the best baseline
/// cinch closes (empty without the reference run).
fn reference_line(runs: &[PolicyRun]) -> String {
    let Some(perfect) = runs.iter().find(|r| r.kind.is_reference()) else {
        return String::new();
    };
    let p = &perfect.summary;
    let mut line = format!(
        "Perfect knowledge ({}, {}): {:.2} h",
        p.policy,
        perfect.kind.about(true),
        p.avg_jct / 3600.0
    );
    let best = runs
        .iter()
        .filter(|r| r.summary.jobs > 0 && r.kind.is_baseline())
        .min_by(|a, b| a.summary.avg_jct.total_cmp(&b.summary.avg_jct));
    let cinch = runs.iter().find(|r| r.summary.policy == "cinch");
    if let (Some(best), Some(cinch)) = (best, cinch) {
        let (b, c) = (best.summary.avg_jct, cinch.summary.avg_jct);
        match gap_closed(b, c, p.avg_jct) {
            Some(closed) => line.push_str(&format!(
                "; cinch ({:.2} h) closes {:.0}% of the gap from the best baseline, {} ({:.2} h), \
                 to it",
                c / 3600.0,
                100.0 * closed,
                best.summary.policy,
                b / 3600.0
            )),
            None => line.push_str(&format!(
                "; no better than the best baseline, {} ({:.2} h): run times are not what cinch \
                 lacks here",
                best.summary.policy,
                b / 3600.0
            )),
        }
    }
    line.push_str(".\n");
    line
}

/// What the winner's average hides, only where it does worse than another policy: a worse p99,
/// GPUs left idle while jobs wait, more requeues, more jobs killed at their limit.
fn trade_offs(best: &PolicyRun, ranked: &[&PolicyRun]) -> String {
    let b = &best.summary;
    let mut said = Vec::new();
    if let Some(p) = ranked
        .iter()
        .map(|r| &r.summary)
        .filter(|s| s.p99_jct < b.p99_jct * 0.999)
        .min_by(|x, y| x.p99_jct.total_cmp(&y.p99_jct))
    {
        said.push(format!(
            "its p99 JCT is {:.1} h against {:.1} h under {}",
            b.p99_jct / 3600.0,
            p.p99_jct / 3600.0,
            p.policy
        ));
    }
    if let Some(u) = ranked
        .iter()
        .map(|r| &r.summary)
        .filter(|s| s.gpu_util.is_finite() && b.gpu_util.is_finite())
        .filter(|s| s.gpu_util > b.gpu_util + 0.01)
        .max_by(|x, y| x.gpu_util.total_cmp(&y.gpu_util))
    {
        said.push(format!(
            "it keeps more GPUs idle while jobs wait (util* {} against {} under {})",
            percent(b.gpu_util),
            percent(u.gpu_util),
            u.policy
        ));
    }
    // Counts where fewer is better: said only against the policy with the fewest.
    type Count = fn(&Summary) -> u64;
    type Say = fn(u64, u64, &str) -> String;
    let counts: [(Count, Say); 2] = [
        (
            |s| s.preemptions as u64,
            |b, f, p| format!("it requeued jobs {b} times against {f} under {p}"),
        ),
        (
            |s| s.killed as u64,
            |b, f, p| format!("{b} jobs were killed at their time limit against {f} under {p}"),
        ),
    ];
    for (count, say) in counts {
        if let Some(fewest) = ranked
            .iter()
            .map(|r| &r.summary)
            .filter(|s| count(s) < count(b))
            .min_by_key(|s| count(s))
        {
            said.push(say(count(b), count(fewest), &fewest.policy));
        }
    }
    if said.is_empty() {
        String::new()
    } else {
        format!("Trade-offs: {}.\n", said.join("; "))
    }
}

/// The comparison table as text, one row per policy, with each policy's ratio to the first.
pub fn table(runs: &[PolicyRun]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>6} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>10} {:>8} {:>7}",
        "policy",
        "jobs",
        "killed",
        "avg JCT h",
        "vs first",
        "median h",
        "p95 h",
        "p99 h",
        "queue h",
        "util*",
        "comm GPU-h",
        "max slow",
        "preempt"
    );
    let base = runs.first().map(|r| r.summary.avg_jct).unwrap_or(1.0);
    let qos = runs.iter().any(|r| r.summary.targeted > 0);
    if qos {
        out.pop();
        let _ = writeln!(
            out,
            " {:>8} {:>10} {:>9}",
            "QoS met", "makespan h", "cancelled"
        );
    }
    for run in runs {
        let s = &run.summary;
        let _ = writeln!(
            out,
            "{:<22} {:>6} {:>6} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>7} {:>10.1} {:>8.1} {:>7}",
            s.policy,
            s.jobs,
            s.killed,
            s.avg_jct / 3600.0,
            if base > 0.0 { s.avg_jct / base } else { 1.0 },
            s.median_jct / 3600.0,
            s.p95_jct / 3600.0,
            s.p99_jct / 3600.0,
            s.avg_queue / 3600.0,
            percent(s.gpu_util),
            s.comm_overhead_gpu_h,
            s.max_slowdown,
            s.preemptions
        );
        if qos {
            out.pop();
            let met = 100.0 * (1.0 - s.missed_share().unwrap_or(0.0));
            let _ = writeln!(
                out,
                " {:>7.1}% {:>10.2} {:>9}",
                met,
                s.makespan / 3600.0,
                s.cancelled
            );
        }
    }
    out
}

/// CSV text from a header and rows of already formatted fields; the `csv` crate quotes what
/// needs quoting (job names with commas or quotes).
fn csv_text<const N: usize>(header: [&str; N], rows: impl Iterator<Item = [String; N]>) -> String {
    let mut writer = csv::Writer::from_writer(Vec::new());
    // Writing into memory cannot fail, and every field is valid UTF-8.
    writer.write_record(header).expect("CSV into memory");
    for row in rows {
        writer.write_record(&row).expect("CSV into memory");
    }
    String::from_utf8(writer.into_inner().expect("CSV into memory")).expect("UTF-8 fields")
}

pub fn summary_csv(runs: &[PolicyRun]) -> String {
    csv_text(
        [
            "policy",
            "jobs",
            "killed",
            "avg_jct_s",
            "median_jct_s",
            "p95_jct_s",
            "p99_jct_s",
            "avg_queue_s",
            "makespan_s",
            "gpu_util",
            "comm_overhead_gpu_h",
            "max_slowdown",
            "preemptions",
            "qos_targeted",
            "qos_met",
            "cancelled",
            "wall_s",
        ],
        runs.iter().map(|run| {
            let s = &run.summary;
            [
                s.policy.clone(),
                s.jobs.to_string(),
                s.killed.to_string(),
                format!("{:.1}", s.avg_jct),
                format!("{:.1}", s.median_jct),
                format!("{:.1}", s.p95_jct),
                format!("{:.1}", s.p99_jct),
                format!("{:.1}", s.avg_queue),
                format!("{:.1}", s.makespan),
                format!("{:.4}", s.gpu_util),
                format!("{:.2}", s.comm_overhead_gpu_h),
                format!("{:.3}", s.max_slowdown),
                s.preemptions.to_string(),
                s.targeted.to_string(),
                s.met.to_string(),
                s.cancelled.to_string(),
                format!("{:.3}", run.wall_s),
            ]
        }),
    )
}

pub fn jobs_csv(runs: &[PolicyRun]) -> String {
    csv_text(
        [
            "policy",
            "job",
            "app",
            "gpus",
            "submit_s",
            "first_start_s",
            "finish_s",
            "ideal_run_s",
            "time_limit_s",
            "killed",
            "jct_s",
            "nodes",
            "racks",
            "speed",
            "restarts",
            "comm_lost_gpu_s",
        ],
        runs.iter().flat_map(|run| {
            run.outcome
                .jobs
                .iter()
                .filter(|j| j.phase == Phase::Done)
                .map(|j| {
                    let finish = j.finish.unwrap_or(0.0);
                    [
                        run.summary.policy.clone(),
                        j.spec.name.clone(),
                        j.spec.app.to_string(),
                        j.spec.gpus.to_string(),
                        j.spec.submit.to_string(),
                        format!("{:.1}", j.first_start.unwrap_or(0.0)),
                        format!("{finish:.1}"),
                        format!("{:.1}", j.spec.run_time),
                        format!("{:.0}", j.spec.time_limit),
                        j.killed.to_string(),
                        format!("{:.1}", finish - j.spec.submit as f64),
                        j.shape.nodes.to_string(),
                        j.shape.racks.to_string(),
                        format!("{:.4}", j.rate),
                        j.restarts.to_string(),
                        format!("{:.1}", j.comm_lost),
                    ]
                })
        }),
    )
}

/// The timeline of every policy at up to `points` evenly spaced instants (step function).
pub fn timeline_csv(runs: &[PolicyRun], points: usize) -> String {
    csv_text(
        ["policy", "time_s", "busy_gpus", "pending_jobs"],
        runs.iter().flat_map(|run| {
            resample(&run.outcome.timeline, points)
                .into_iter()
                .map(|s| {
                    [
                        run.summary.policy.clone(),
                        format!("{:.0}", s.time),
                        s.busy_gpus.to_string(),
                        s.pending.to_string(),
                    ]
                })
        }),
    )
}

fn resample(timeline: &[Sample], points: usize) -> Vec<Sample> {
    let (Some(first), Some(last)) = (timeline.first(), timeline.last()) else {
        return Vec::new();
    };
    if timeline.len() <= points {
        return timeline.to_vec();
    }
    let step = (last.time - first.time) / (points - 1) as f64;
    let mut out = Vec::with_capacity(points);
    let mut i = 0;
    for k in 0..points {
        let t = first.time + step * k as f64;
        while i + 1 < timeline.len() && timeline[i + 1].time <= t {
            i += 1;
        }
        out.push(Sample {
            time: t,
            ..timeline[i]
        });
    }
    out
}

const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Muted series: a pale colour and a dash pattern each (a colour-blind reader still has the
/// dashes).
const MUTED_STYLES: [(&str, &str); 6] = [
    ("#9ecae1", "6 3"),
    ("#fdae6b", "2 3"),
    ("#a1d99b", "8 3 2 3"),
    ("#bcbddc", "4 2"),
    ("#f7b6d2", "1 2"),
    ("#c7c7c7", "10 4"),
];

/// One data series of a chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn thin, pale and dashed, behind the others (many policies: only cinch, Slurm and the
    /// best baseline stand out).
    pub muted: bool,
}

/// Round tick values covering `lo..=hi`: steps of 1, 2, 2.5 or 5 times a power of ten, at most
/// about `most` of them.
pub fn nice_ticks(lo: f64, hi: f64, most: usize) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let rough = span / most.max(1) as f64;
    let power = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|&st| st >= rough)
        .unwrap_or(10.0 * power);
    let first = (lo / step).floor() * step;
    let mut ticks = Vec::new();
    let mut k = 0;
    loop {
        let t = first + step * k as f64;
        ticks.push(t);
        if t >= hi - 1e-9 * span || k > 1000 {
            break;
        }
        k += 1;
    }
    ticks
}

/// A line chart as a standalone SVG document.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> String {
    let (w, h, left, right, top, bottom) = (760.0, 420.0, 70.0, 190.0, 40.0, 50.0);
    let fx = |x: f64| if log_x { x.max(1e-9).log10() } else { x };
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in all {
        x0 = x0.min(fx(x));
        x1 = x1.max(fx(x));
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= 0.0 {
        y1 = 1.0;
    }
    // Round ticks: the axes run from tick to tick (decades on a log axis).
    let y_ticks = nice_ticks(0.0, y1, 5);
    y1 = *y_ticks.last().unwrap_or(&y1);
    let x_ticks: Vec<f64> = if log_x {
        x0 = x0.floor();
        x1 = x1.ceil().max(x0 + 1.0);
        (x0 as i32..=x1 as i32).map(f64::from).collect()
    } else {
        let t = nice_ticks(x0, x1, 6);
        x0 = t[0];
        x1 = *t.last().unwrap_or(&x1);
        t
    };
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let (pw, ph) = (w - left - right, h - top - bottom);
    let px = |x: f64| left + (fx(x) - x0) / (x1 - x0) * pw;
    let py = |y: f64| top + ph - y / y1 * ph;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(svg, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = write!(
        svg,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        escape(title)
    );
    // Axes and ticks.
    let _ = write!(
        svg,
        r#"<path d="M{left},{top} V{} H{}" stroke="black" fill="none"/>"#,
        top + ph,
        left + pw
    );
    for &y in &y_ticks {
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            py(y) + 4.0,
            tick(y),
            py = py(y)
        );
    }
    for &xv in &x_ticks {
        let label = if log_x { 10f64.powf(xv) } else { xv };
        let x = left + (xv - x0) / (x1 - x0) * pw;
        let _ = write!(
            svg,
            r#"<text x="{x}" y="{}" text-anchor="middle">{}</text>"#,
            top + ph + 18.0,
            tick(label)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        h - 10.0,
        escape(x_label)
    );
    let _ = write!(
        svg,
        r#"<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + ph / 2.0,
        escape(y_label)
    );
    // Muted series first, so the highlighted ones are drawn on top.
    let mut order: Vec<usize> = (0..series.len()).collect();
    order.sort_by_key(|&i| !series[i].muted);
    // Highlighted series in strong colours; muted ones thin, pale and each dashed its own way,
    // so that every policy can still be told apart.
    let mut colours = COLOURS.iter().cycle();
    let mut pale = MUTED_STYLES.iter().cycle();
    let style_of: Vec<(&str, &str)> = series
        .iter()
        .map(|s| {
            if s.muted {
                pale.next().copied().unwrap_or(("#bbbbbb", "4 3"))
            } else {
                (colours.next().copied().unwrap_or("#000"), "")
            }
        })
        .collect();
    for i in order {
        let s = &series[i];
        let (colour, dash) = style_of[i];
        let width = if s.muted { 1.2 } else { 2.2 };
        let dash_attr = if dash.is_empty() {
            String::new()
        } else {
            format!(r#" stroke-dasharray="{dash}""#)
        };
        let mut d = String::new();
        for (k, &(x, y)) in s.points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if k == 0 { "M" } else { " L" },
                px(x),
                py(y)
            );
        }
        let _ = write!(
            svg,
            r#"<path d="{d}" stroke="{colour}" stroke-width="{width}"{dash_attr} fill="none"/>"#
        );
        let ly = top + 14.0 + 18.0 * i as f64;
        let _ = write!(
            svg,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="3"{dash_attr}/><text x="{}" y="{}">{}</text>"#,
            left + pw + 12.0,
            left + pw + 32.0,
            left + pw + 38.0,
            ly + 4.0,
            escape(&s.name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// A tick label: plain digits, no exponent, no trailing zeros (`0.01`, `2.5`, `1000`).
fn tick(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "0" || text == "-0" {
        format!("{v:.1e}")
    } else {
        text.to_string()
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The plots: JCT CDF (log hours), busy GPUs over time, pending jobs over time, and, when the
/// runs include `dally@SECONDS`, average JCT against the timer length.
pub fn plots(runs: &[PolicyRun]) -> Vec<(&'static str, String)> {
    // With more than four policies, only cinch, Slurm and the best other baseline stand out.
    let best_other = runs
        .iter()
        .filter(|r| r.kind.is_baseline() && r.summary.policy != "slurm")
        .min_by(|a, b| a.summary.avg_jct.total_cmp(&b.summary.avg_jct))
        .map(|r| r.summary.policy.clone());
    let many = runs.len() > 4;
    let muted = |run: &PolicyRun| {
        let name = &run.summary.policy;
        many && name != "slurm" && name != "cinch" && Some(name) != best_other.as_ref()
    };
    let cdf: Vec<Series> = runs
        .iter()
        .map(|run| {
            let mut jct: Vec<f64> = run
                .outcome
                .jobs
                .iter()
                .filter_map(|j| j.finish.map(|f| (f - j.spec.submit as f64) / 3600.0))
                .collect();
            jct.sort_by(f64::total_cmp);
            let n = jct.len();
            let stride = (n / 400).max(1);
            let mut points: Vec<(f64, f64)> = jct
                .iter()
                .enumerate()
                .filter(|(i, _)| i % stride == 0 || i + 1 == n)
                .map(|(i, &x)| (x.max(1e-3), (i + 1) as f64 / n as f64))
                .collect();
            points.dedup();
            Series {
                name: run.summary.policy.clone(),
                points,
                muted: muted(run),
            }
        })
        .collect();
    // Time axes end when 99% of every policy's jobs are done: a long tail of one or two jobs
    // would leave most of the plot empty.
    let until_h = runs
        .iter()
        .filter_map(|run| {
            let mut ends: Vec<f64> = run.outcome.jobs.iter().filter_map(|j| j.finish).collect();
            ends.sort_by(f64::total_cmp);
            ends.get((ends.len() as f64 * 0.99).ceil() as usize - 1)
                .copied()
        })
        .fold(0.0, f64::max)
        / 3600.0;
    let over_time = |value: fn(&Sample) -> f64| -> Vec<Series> {
        runs.iter()
            .map(|run| Series {
                name: run.summary.policy.clone(),
                points: resample(&run.outcome.timeline, 600)
                    .iter()
                    .map(|s| (s.time / 3600.0, value(s)))
                    .filter(|&(t, _)| until_h <= 0.0 || t <= until_h)
                    .collect(),
                muted: muted(run),
            })
            .collect()
    };
    let mut out = vec![
        (
            "jct_cdf.svg",
            line_chart(
                "JCT CDF",
                "job completion time (hours, log scale)",
                "fraction of jobs",
                &cdf,
                true,
            ),
        ),
        (
            "gpu_utilization.svg",
            line_chart(
                "Busy GPUs over time",
                "time (hours, until 99% of jobs are done)",
                "GPUs allocated",
                &over_time(|s| f64::from(s.busy_gpus)),
                false,
            ),
        ),
        (
            "queue_length.svg",
            line_chart(
                "Pending jobs over time",
                "time (hours, until 99% of jobs are done)",
                "jobs waiting",
                &over_time(|s| f64::from(s.pending)),
                false,
            ),
        ),
    ];
    if let Some(chart) = timer_chart(runs) {
        out.push(("jct_vs_timer.svg", chart));
    }
    out
}

/// Average JCT of `dally` with fixed timers against the timer length (hours), with the
/// auto-tuned run drawn at the median timer it applied and other policies as flat lines.
fn timer_chart(runs: &[PolicyRun]) -> Option<String> {
    let fixed: Vec<(f64, f64)> = runs
        .iter()
        .filter_map(|run| {
            let timer = run.summary.policy.strip_prefix("cinch-dally@")?;
            Some((
                timer.parse::<f64>().ok()? / 3600.0,
                run.summary.avg_jct / 3600.0,
            ))
        })
        .collect();
    if fixed.len() < 2 {
        return None;
    }
    let x_max = fixed.iter().map(|p| p.0).fold(0.0, f64::max);
    let mut series = vec![Series {
        name: "dally, fixed timer".into(),
        points: fixed,
        muted: false,
    }];
    for run in runs {
        let name = &run.summary.policy;
        if name == "cinch-dally" {
            let at = run.median_delay_s.unwrap_or(0.0) / 3600.0;
            series.push(Series {
                name: format!("dally auto (median timer {:.1} h)", at),
                points: vec![(at, run.summary.avg_jct / 3600.0), (at, 0.0)],
                muted: false,
            });
        } else if !name.starts_with("cinch-dally@") {
            series.push(Series {
                name: name.clone(),
                points: vec![
                    (0.0, run.summary.avg_jct / 3600.0),
                    (x_max, run.summary.avg_jct / 3600.0),
                ],
                muted: false,
            });
        }
    }
    Some(line_chart(
        "Average JCT against the delay timer",
        "timer (hours)",
        "average JCT (hours)",
        &series,
        false,
    ))
}

/// A single-file HTML report: what was run, the table, the plots inline.
/// What a report says besides its runs: how the run's Slurm orders jobs (for each policy's
/// line), and lines under the verdict (its assumptions, the result without hints).
#[derive(Debug, Clone, Default)]
pub struct Notes {
    /// Slurm's priority/multifactor with fair share, rather than submit order.
    pub multifactor: bool,
    /// Said right under the verdict.
    pub verdict: Vec<String>,
}

pub fn html(title: &str, about: &[(String, String)], runs: &[PolicyRun], notes: &Notes) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title><style>\
         body{{font-family:sans-serif;margin:2em;max-width:1100px}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}</style></head><body><h1>{t}</h1><dl>",
        t = escape(title)
    );
    for (k, v) in about {
        let _ = write!(out, "<dt><b>{}</b></dt><dd>{}</dd>", escape(k), escape(v));
    }
    // Headed by the legend's own names, so the glossary below explains exactly these columns.
    let qos = runs.iter().any(|r| r.summary.targeted > 0);
    out.push_str("</dl><table><tr><th>policy</th>");
    for (column, _) in legend_for(qos, true) {
        let _ = write!(out, "<th>{}</th>", escape(column));
    }
    out.push_str("<th>sim time (s)</th></tr>");
    let base = runs.first().map(|r| r.summary.avg_jct).unwrap_or(1.0);
    for run in runs {
        let s = &run.summary;
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td>",
            escape(&s.policy),
            s.jobs,
            s.killed,
            s.avg_jct / 3600.0,
            if base > 0.0 { s.avg_jct / base } else { 1.0 },
            s.median_jct / 3600.0,
            s.p95_jct / 3600.0,
            s.p99_jct / 3600.0,
            s.avg_queue / 3600.0,
            percent(s.gpu_util),
            s.comm_overhead_gpu_h,
            s.max_slowdown,
            s.preemptions,
        );
        if qos {
            let met = 100.0 * (1.0 - s.missed_share().unwrap_or(0.0));
            let _ = write!(out, "<td>{met:.1}%</td>");
        }
        let _ = write!(out, "<td>{:.1}</td>", s.makespan / 3600.0);
        if qos {
            let _ = write!(out, "<td>{}</td>", s.cancelled);
        }
        let _ = write!(out, "<td>{:.2}</td></tr>", run.wall_s);
    }
    out.push_str("</table>");
    let _ = write!(
        out,
        "<p id=\"verdict\"><b>{}</b></p>",
        escape(verdict(runs).trim())
    );
    for line in &notes.verdict {
        let _ = write!(out, "<p class=\"note\">{}</p>", escape(line));
    }
    if let Some(first) = runs.first() {
        let _ = write!(
            out,
            "<p id=\"ideal\">ideal avg JCT (every job started at its submission on its best \
             placement): {:.3} h</p>",
            first.summary.ideal_avg_jct / 3600.0
        );
    }
    out.push_str("<h2>The policies</h2><dl id=\"policies\">");
    for run in runs {
        let _ = write!(
            out,
            "<dt>{}</dt><dd>{}</dd>",
            escape(&run.summary.policy),
            escape(&run.kind.about(notes.multifactor))
        );
    }
    out.push_str("</dl><h2>The columns</h2><dl>");
    for (column, meaning) in legend_for(qos, true) {
        let _ = write!(
            out,
            "<dt>{}</dt><dd>{}</dd>",
            escape(column),
            escape(meaning)
        );
    }
    out.push_str("</dl>");
    for (_, svg) in plots(runs) {
        let _ = write!(out, "<p>{svg}</p>");
    }
    out.push_str("</body></html>\n");
    out
}

/// Writes summary.csv, jobs.csv, timeline.csv, the SVG plots and report.html into `dir`.
pub fn write_all(
    dir: &Path,
    title: &str,
    about: &[(String, String)],
    runs: &[PolicyRun],
    notes: &Notes,
) -> Result<Vec<String>, SimError> {
    std::fs::create_dir_all(dir).map_err(|e| SimError::io(dir, e))?;
    let mut files = vec![
        ("summary.csv".to_string(), summary_csv(runs)),
        ("jobs.csv".to_string(), jobs_csv(runs)),
        ("timeline.csv".to_string(), timeline_csv(runs, 2000)),
    ];
    for (name, svg) in plots(runs) {
        files.push((name.to_string(), svg));
    }
    files.push(("report.html".to_string(), html(title, about, runs, notes)));
    let mut written = Vec::new();
    for (name, contents) in files {
        let path = dir.join(&name);
        std::fs::write(&path, contents).map_err(|e| SimError::io(&path, e))?;
        written.push(name);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_labels_plain() {
        assert_eq!(nice_ticks(0.0, 51.2, 5), vec![0.0, 20.0, 40.0, 60.0]);
        assert_eq!(nice_ticks(0.0, 9.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            nice_ticks(0.0, 1.0, 5),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        for (v, label) in [
            (0.01, "0.01"),
            (0.1, "0.1"),
            (2.5, "2.5"),
            (1000.0, "1000"),
            (0.6000000000000001, "0.6"),
        ] {
            assert_eq!(tick(v), label);
        }
    }

    #[test]
    fn a_log_axis_runs_decade_to_decade_and_every_muted_line_is_its_own() {
        let muted = |name: &str| Series {
            name: name.into(),
            points: vec![(0.01, 0.5)],
            muted: true,
        };
        let series = [
            Series {
                name: "cinch".into(),
                points: vec![(0.002, 0.1), (3.0, 1.0)],
                muted: false,
            },
            muted("a"),
            muted("b"),
            muted("c"),
            muted("d"),
            muted("e"),
        ];
        let svg = line_chart("t", "x", "y", &series, true);
        for label in [">0.001<", ">0.01<", ">0.1<", ">1<", ">10<"] {
            assert!(svg.contains(label), "{label} in {svg}");
        }
        assert!(!svg.contains(".0e"), "no exponent labels: {svg}");
        // Five muted policies: five different pale colours and dash patterns, thin.
        let styles: std::collections::BTreeSet<(String, String)> = svg
            .split("<path ")
            .skip(1)
            .filter(|p| p.contains(r#"stroke-width="1.2""#))
            .map(|p| {
                let attr = |name: &str| {
                    p.split(&format!("{name}=\""))
                        .nth(1)
                        .and_then(|r| r.split('"').next())
                        .unwrap_or("")
                        .to_string()
                };
                (attr("stroke"), attr("stroke-dasharray"))
            })
            .collect();
        assert_eq!(styles.len(), 5, "{styles:?}");
        assert!(styles.iter().all(|(c, d)| c != "#1f77b4" && !d.is_empty()));
    }
}
