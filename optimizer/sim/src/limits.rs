//! Time limits for jobs whose trace gives none (Philly, Alibaba, the Pollux workloads, the
//! built-in workload), as real users set them: the default draws each job's limit from the
//! run/limit distribution of a real Slurm GPU cluster (Compute Canada's Cedar, 2021: 14,149 GPU
//! jobs of 127 users, `../shared/traces/computecanada_cedar_gpu_2021.csv`), snapped to the limit
//! values its users really choose; about one job in twelve gets a limit below its run time and is
//! killed at it, as on that cluster. `--limits oracle` (every limit exactly twice the run time,
//! a perfect predictor) and `--limits noise:X` remain as labelled ablations.
//!
//! The rule, for a job that runs `r` seconds on its best placement (docs/simulator.md):
//! - with probability [`LimitTable::timeout_share`] its user under-asked: the limit is `r x u`,
//!   `u` uniform in [0.5, 1) (the trace cannot say how much more a killed job needed; this
//!   assumes up to twice its limit), snapped down to the largest round value not below `r / 2`,
//!   else whole minutes (at least one);
//! - otherwise a run/limit ratio `q` is drawn from the table of the job's run-time bucket (runs
//!   under 10 min, 10 min to 1 h, 1 to 6 h, 6 to 24 h, longer: short jobs use a far smaller share
//!   of their limits than long ones), the limit `r / q` is snapped to the nearest round value (in
//!   log scale; past the largest, the largest) and never below `r` (then the next round value
//!   up, or whole days for a run longer than any).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use cinch_core::util::rng::SeededRng;

use crate::trace::TraceJob;

/// Quantiles at which a bucket's run/limit ratios are tabled: 0, 0.05, ..., 1.
pub const RATIO_QUANTILES: usize = 21;

/// Upper bounds of the run-time buckets (seconds); the last bucket is unbounded.
pub const BUCKET_BOUNDS_S: [f64; 4] = [600.0, 3600.0, 21_600.0, 86_400.0];

/// Names of the buckets, for reports.
pub const BUCKET_NAMES: [&str; 5] = ["< 10 min", "10 min - 1 h", "1 - 6 h", "6 - 24 h", "> 24 h"];

/// A limit value is one of the site's round values when at least this share of its jobs asked
/// for exactly it.
pub const ROUND_VALUE_SHARE: f64 = 0.01;

/// Buckets with fewer jobs than this use the whole file's ratios.
const MIN_BUCKET_JOBS: usize = 20;

/// The smallest ratio drawn: a 2-second job under a 6-hour limit.
const MIN_RATIO: f64 = 1e-4;

/// How a site's users set time limits, as a table read off its accounting.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitTable {
    /// Where the table comes from, for reports.
    pub source: String,
    /// Per run-time bucket, run/limit of the jobs that ended within their limit at each of
    /// [`RATIO_QUANTILES`] evenly spaced quantiles (nearest rank).
    pub ratio: [[f64; RATIO_QUANTILES]; 5],
    /// The share of jobs killed at their limit (Slurm's TIMEOUT).
    pub timeout_share: f64,
    /// The limits the site's users choose ([`ROUND_VALUE_SHARE`]), seconds, ascending.
    pub round_values_s: Vec<f64>,
}

/// The built-in table: Compute Canada's Cedar GPU jobs (Apr-Jul 2021, via Mila's
/// `slurm-queue-time-pred`; `../shared/traces/README.md`, section 5), re-derived from the file by
/// a test when it is present.
pub mod cedar {
    /// Run/limit by run-time bucket, at quantiles 0, 0.05, ..., 1.
    pub const RATIO: [[f64; super::RATIO_QUANTILES]; 5] = [
        [
            0.000007, 0.000093, 0.000162, 0.000208, 0.000301, 0.000464, 0.00088, 0.001535,
            0.001956, 0.002639, 0.003056, 0.003268, 0.004167, 0.006684, 0.015309, 0.018819,
            0.025463, 0.035417, 0.065556, 0.088889, 0.176667,
        ],
        [
            0.000828, 0.016903, 0.016917, 0.016944, 0.016958, 0.016986, 0.017, 0.017042, 0.017069,
            0.017111, 0.017167, 0.017222, 0.017361, 0.017556, 0.017833, 0.018931, 0.030509,
            0.049653, 0.092716, 0.202222, 0.706497,
        ],
        [
            0.006486, 0.071167, 0.10152, 0.117028, 0.13679, 0.146319, 0.168241, 0.195016, 0.219657,
            0.241777, 0.262703, 0.278257, 0.301503, 0.342857, 0.386481, 0.419938, 0.495357,
            0.584204, 0.775625, 0.840417, 1.0,
        ],
        [
            0.031247, 0.20675, 0.274945, 0.350292, 0.390708, 0.425375, 0.464564, 0.571986,
            0.673842, 0.726227, 0.796361, 0.808251, 0.838014, 0.922616, 0.97941, 0.979639,
            0.981403, 0.990579, 0.99081, 0.991343, 0.999792,
        ],
        [
            0.082549, 0.338044, 0.431002, 0.551604, 0.617532, 0.674876, 0.721343, 0.748361,
            0.76449, 0.776796, 0.785767, 0.800995, 0.821241, 0.837391, 0.857097, 0.870208,
            0.889795, 0.909347, 0.95316, 0.986061, 1.0,
        ],
    ];
    /// 1,193 of 14,149 jobs ended as TIMEOUT.
    pub const TIMEOUT_SHARE: f64 = 0.084317;
    /// Limits at least 1% of the jobs asked for (seconds): 88.6% of all jobs.
    pub const ROUND_VALUES_S: [f64; 20] = [
        3600.0, 7200.0, 10800.0, 14400.0, 16200.0, 19800.0, 21600.0, 24120.0, 28800.0, 32040.0,
        43140.0, 43200.0, 61320.0, 72000.0, 86340.0, 86400.0, 129600.0, 158400.0, 216000.0,
        259200.0,
    ];
}

impl LimitTable {
    /// The built-in table ([`cedar`]).
    pub fn builtin() -> LimitTable {
        LimitTable {
            source: "Cedar GPU jobs 2021, built-in".into(),
            ratio: cedar::RATIO,
            timeout_share: cedar::TIMEOUT_SHARE,
            round_values_s: cedar::ROUND_VALUES_S.to_vec(),
        }
    }

    /// The table of a trace's jobs that have both a run time and a limit (a site's accounting:
    /// the Cedar CSV, `sacct`); at least 100 such jobs.
    pub fn from_jobs(source: String, jobs: &[TraceJob]) -> Result<LimitTable, String> {
        let with_limit: Vec<(&TraceJob, f64)> = jobs
            .iter()
            .filter_map(|j| Some((j, j.time_limit.filter(|&l| l > 0.0)?)))
            .collect();
        if with_limit.len() < 100 {
            return Err(format!(
                "{source}: {} jobs have a time limit; a limit table needs at least 100",
                with_limit.len()
            ));
        }
        let timeouts = with_limit.iter().filter(|(j, _)| j.timed_out).count();
        let mut buckets: [Vec<f64>; 5] = Default::default();
        let mut all = Vec::new();
        for (job, limit) in &with_limit {
            if job.timed_out {
                continue;
            }
            let ratio = (job.run_time / limit).min(1.0);
            buckets[bucket_of(job.run_time)].push(ratio);
            all.push(ratio);
        }
        let table = |values: &mut Vec<f64>| -> [f64; RATIO_QUANTILES] {
            values.sort_by(f64::total_cmp);
            std::array::from_fn(|i| {
                let q = i as f64 / (RATIO_QUANTILES - 1) as f64;
                round6(cinch_core::util::stats::percentile(values, q))
            })
        };
        let overall = table(&mut all);
        let ratio = std::array::from_fn(|b| {
            if buckets[b].len() < MIN_BUCKET_JOBS {
                overall
            } else {
                table(&mut buckets[b])
            }
        });
        let mut counts: std::collections::BTreeMap<u64, usize> = Default::default();
        for (_, limit) in &with_limit {
            *counts.entry(limit.round() as u64).or_default() += 1;
        }
        let needed = (ROUND_VALUE_SHARE * with_limit.len() as f64).ceil() as usize;
        let round_values_s: Vec<f64> = counts
            .into_iter()
            .filter(|&(_, n)| n >= needed)
            .map(|(v, _)| v as f64)
            .collect();
        Ok(LimitTable {
            source,
            ratio,
            timeout_share: round6(timeouts as f64 / with_limit.len() as f64),
            round_values_s,
        })
    }

    /// A job's time limit, seconds, drawn for a run of `run_s` seconds. Three draws from `rng`
    /// whatever the outcome, so one job's draw does not shift the next one's.
    pub fn draw(&self, run_s: f64, rng: &mut SeededRng) -> f64 {
        let (timeout, u, pick) = (rng.unit(), rng.unit(), rng.unit());
        if timeout < self.timeout_share {
            let under = run_s * (0.5 + 0.5 * u);
            let snapped = self
                .round_values_s
                .iter()
                .rev()
                .find(|&&v| v <= under && v >= run_s / 2.0)
                .copied()
                .unwrap_or_else(|| (under / 60.0).floor() * 60.0);
            return snapped.max(60.0);
        }
        let ratio = interpolate(&self.ratio[bucket_of(run_s)], pick).max(MIN_RATIO);
        let wanted = run_s / ratio;
        // The nearest round value; past the largest, the largest (users choose from what the
        // site offers, and a site caps its limits).
        let nearest = self.round_values_s.iter().copied().min_by(|a, b| {
            (a.ln() - wanted.ln())
                .abs()
                .total_cmp(&(b.ln() - wanted.ln()).abs())
        });
        let limit = nearest.unwrap_or_else(|| (wanted / 86_400.0).ceil() * 86_400.0);
        if limit >= run_s {
            return limit.max(60.0);
        }
        // Never below the run time for a job that is not killed.
        self.round_values_s
            .iter()
            .copied()
            .find(|&v| v >= run_s)
            .unwrap_or_else(|| (run_s / 86_400.0).ceil() * 86_400.0)
            .max(60.0)
    }
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// The run-time bucket of a run of `run_s` seconds.
pub fn bucket_of(run_s: f64) -> usize {
    BUCKET_BOUNDS_S.partition_point(|&b| b <= run_s)
}

/// The value at `u` (0 to 1) of a quantile table, interpolated in log scale between its points.
fn interpolate(table: &[f64; RATIO_QUANTILES], u: f64) -> f64 {
    let x = u.clamp(0.0, 1.0) * (RATIO_QUANTILES - 1) as f64;
    let i = (x.floor() as usize).min(RATIO_QUANTILES - 2);
    let (a, b) = (
        table[i].max(MIN_RATIO).ln(),
        table[i + 1].max(MIN_RATIO).ln(),
    );
    (a + (b - a) * (x - i as f64)).exp()
}

/// How jobs whose trace has no limits get one (`--limits`).
#[derive(Debug, Clone, PartialEq)]
pub enum Limits {
    /// Drawn from a site's run/limit distribution ([`LimitTable::draw`]): the default, real
    /// users' limits.
    Empirical(Arc<LimitTable>),
    /// Every limit exactly twice the run time: a perfect run-time predictor no site has. An
    /// ablation, labelled as such wherever it is printed.
    Oracle,
    /// Twice the run time times exp(N(0, sigma)), never below the run time: an ablation between
    /// the oracle and real limits.
    Noise(f64),
}

impl Default for Limits {
    fn default() -> Self {
        Limits::Empirical(Arc::new(LimitTable::builtin()))
    }
}

impl Limits {
    /// `empirical` (the built-in table), `empirical:FILE` (a table from a trace with run times
    /// and limits: the Cedar CSV or a `sacct` export), `oracle`, `noise:SIGMA` (0 to 3).
    pub fn parse(text: &str) -> Result<Limits, String> {
        let text = text.trim();
        match text.split_once(':') {
            None if text == "empirical" => Ok(Limits::default()),
            None if text == "oracle" => Ok(Limits::Oracle),
            Some(("empirical", file)) => {
                let path = Path::new(file);
                let trace = crate::trace::read_any(path).map_err(|e| e.to_string())?;
                LimitTable::from_jobs(path.display().to_string(), &trace.jobs)
                    .map(|t| Limits::Empirical(Arc::new(t)))
            }
            Some(("noise", sigma)) => match sigma.trim().parse::<f64>() {
                Ok(s) if (0.0..=3.0).contains(&s) => Ok(Limits::Noise(s)),
                _ => Err(format!(
                    "'{text}': the noise is a number from 0 to 3 (noise:1)"
                )),
            },
            _ => Err(format!(
                "unknown limit model '{text}' (known: empirical, empirical:FILE, oracle, \
                 noise:SIGMA)"
            )),
        }
    }

    /// A job's limit, seconds, for a run of `run_s` seconds; two or three draws from `rng`.
    pub fn draw(&self, run_s: f64, rng: &mut SeededRng) -> f64 {
        match self {
            Limits::Empirical(table) => table.draw(run_s, rng),
            Limits::Oracle => 2.0 * run_s,
            Limits::Noise(sigma) => {
                // Box-Muller: one standard normal from two uniforms.
                let (u1, u2) = (rng.unit().max(1e-12), rng.unit());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (2.0 * run_s * (sigma * z).exp()).max(run_s)
            }
        }
    }

    /// Whether limits are the oracle: results under it are labelled so.
    pub fn is_oracle(&self) -> bool {
        matches!(self, Limits::Oracle)
    }
}

impl fmt::Display for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limits::Empirical(t) => write!(
                f,
                "real limits ({}: {:.1}% killed at their limit)",
                t.source,
                100.0 * t.timeout_share
            ),
            Limits::Oracle => f.write_str("ORACLE limits (run time x 2: a perfect predictor)"),
            Limits::Noise(s) => write!(f, "made-up limits (run time x 2 x e^N(0, {s}))"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_split_at_their_bounds() {
        assert_eq!(bucket_of(5.0), 0);
        assert_eq!(bucket_of(600.0), 1);
        assert_eq!(bucket_of(3599.0), 1);
        assert_eq!(bucket_of(7200.0), 2);
        assert_eq!(bucket_of(50_000.0), 3);
        assert_eq!(bucket_of(1e6), 4);
    }

    #[test]
    fn drawn_limits_sit_on_round_values_and_kill_about_the_timeout_share() {
        let table = LimitTable::builtin();
        let mut rng = SeededRng::new(3);
        let (mut killed, mut round, mut ratios) = (0, 0, Vec::new());
        let n = 20_000;
        for i in 0..n {
            // Run times from 1 minute to 2 days, log-uniform.
            let run = 60.0 * (2880f64).powf(i as f64 / n as f64);
            let limit = table.draw(run, &mut rng);
            assert!(limit >= 60.0, "{limit}");
            if limit < run {
                killed += 1;
                assert!(
                    limit >= (run / 2.0).min(60.0).floor() - 60.0,
                    "{run} {limit}"
                );
            } else {
                ratios.push(run / limit);
            }
            if table.round_values_s.contains(&limit) {
                round += 1;
            }
        }
        let share = f64::from(killed) / f64::from(n);
        assert!((share - table.timeout_share).abs() < 0.01, "{share}");
        assert!(f64::from(round) / f64::from(n) > 0.8, "{round}");
        ratios.sort_by(f64::total_cmp);
        let median = cinch_core::util::stats::percentile(&ratios, 0.5);
        // Cedar's median run/limit is 0.19: these runs are spread wider than Cedar's, but the
        // drawn limits are far from the run times either way.
        assert!((0.03..0.5).contains(&median), "{median}");
    }

    #[test]
    fn the_ablations_are_what_they_say() {
        let mut rng = SeededRng::new(1);
        assert_eq!(Limits::Oracle.draw(100.0, &mut rng), 200.0);
        for _ in 0..100 {
            assert!(Limits::Noise(1.0).draw(100.0, &mut rng) >= 100.0);
        }
        assert_eq!(Limits::parse("oracle").unwrap(), Limits::Oracle);
        assert_eq!(Limits::parse("noise:0.5").unwrap(), Limits::Noise(0.5));
        assert!(Limits::parse("noise:9").is_err());
        assert!(Limits::parse("guess")
            .unwrap_err()
            .contains("empirical:FILE"));
        assert!(Limits::Oracle.to_string().contains("ORACLE"));
        let err = Limits::parse("empirical:/nonexistent/cedar.csv").unwrap_err();
        assert!(err.contains("/nonexistent/cedar.csv"), "{err}");
    }

    #[test]
    fn a_table_is_read_off_jobs_with_limits() {
        let jobs: Vec<TraceJob> = (0..200)
            .map(|i| TraceJob {
                time_limit: Some(if i % 2 == 0 { 3600.0 } else { 7200.0 }),
                timed_out: i % 10 == 0,
                ..TraceJob::new(format!("j{i}"), i, 1, 900.0 + f64::from(i as u32))
            })
            .collect();
        let t = LimitTable::from_jobs("test".into(), &jobs).unwrap();
        assert_eq!(t.round_values_s, vec![3600.0, 7200.0]);
        assert!((t.timeout_share - 0.1).abs() < 1e-9);
        // Every run is in the 10 min - 1 h bucket; the others fall back to all jobs.
        assert_eq!(t.ratio[0], t.ratio[1]);
        assert!(
            t.ratio[1][0] > 0.12 && t.ratio[1][20] <= 0.31,
            "{:?}",
            t.ratio[1]
        );
        assert!(LimitTable::from_jobs("few".into(), &jobs[..50])
            .unwrap_err()
            .contains("at least 100"));
    }

    #[test]
    #[cfg_attr(
        not(shared_traces),
        ignore = "needs ../shared/traces (public data sets, not in the repository)"
    )]
    fn the_builtin_table_is_what_the_cedar_trace_says() {
        let traces =
            crate::shared_dir("traces").expect("../shared/traces was here when this was built");
        let trace =
            crate::trace::read_cedar(&traces.join("computecanada_cedar_gpu_2021.csv")).unwrap();
        let t = LimitTable::from_jobs("cedar".into(), &trace.jobs).unwrap();
        let builtin = LimitTable::builtin();
        assert_eq!(t.timeout_share, builtin.timeout_share);
        assert_eq!(t.round_values_s, builtin.round_values_s);
        for (b, (got, want)) in t.ratio.iter().zip(&builtin.ratio).enumerate() {
            assert_eq!(got, want, "bucket {}", BUCKET_NAMES[b]);
        }
    }
}
