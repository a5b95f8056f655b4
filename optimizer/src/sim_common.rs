//! What the simulator's commands share (`cinch sim`, `cinch sim suite`, its studies, `cinch
//! replay`): argument parsers, reading a trace or a site's cluster, the suite's simulator
//! settings and a parallel runner. It imports none of those commands, so they do not import
//! each other through it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{Context, Result};

use cinch_sim::engine::SimConfig;
use cinch_sim::limits::Limits;
use cinch_sim::perf::Network;
use cinch_sim::trace::{self, PolluxApps, Trace, TraceFormat};
use cinch_sim::workload;
use cinch_sim::{ClusterSpec, SchedulerKind};

/// Where a run's jobs come from: a trace file, or the built-in workload when none is given
/// (`cinch sim` and `cinch replay`).
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// A trace (Philly, Alibaba pods, a Pollux workload, sacct -P or --json); without one, the
    /// built-in Philly-shaped synthetic workload.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// The trace's format [default: detected from the file's first line].
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// For --format pollux: the Pollux data directory [default: two levels above the trace].
    #[arg(long)]
    pub pollux_dir: Option<PathBuf>,
}

impl TraceArgs {
    /// The trace, its format and its path, when one is given.
    pub fn read(&self, cluster: ClusterSpec) -> Result<Option<(Trace, TraceFormat, &Path)>> {
        let Some(path) = &self.trace else {
            return Ok(None);
        };
        let format = match self.format {
            Some(f) => f.into(),
            None => TraceFormat::detect(path)?,
        };
        let trace = read_trace(path, format, self.pollux_dir.as_deref(), cluster)?;
        Ok(Some((trace, format, path)))
    }
}

/// The workloads `cinch sim` generates (`--workload`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generated {
    /// Drawn from the Philly sample's distributions (the default).
    Philly,
    /// Of the published shape of a Philly virtual cluster this project does not have: 95% of
    /// the GPU-time in multi-GPU jobs of up to 24 GPUs, the largest 1% of jobs holding 85% of
    /// it, a median run of 0.4 h (its size: --jobs 7423 --cluster 64x8; with Poisson arrivals
    /// it queues from about --load 1, and the suite runs it at the load that congests it).
    HeavyTailed,
    /// The shape of a Philly virtual cluster this project does not have, where cinch lost 3x to
    /// Tiresias (issue 60): 97.5% of jobs of one GPU (median run 0.4 h) around a few of 8 and 16
    /// GPUs running 10-475 h that hold 75% of the GPU-time (its size: --jobs 7423 --cluster 64x8).
    Flood,
}

impl Generated {
    /// The jobs, and how the report names them.
    pub fn generate(self, jobs: usize, total_gpus: u32, load: f64, seed: u64) -> (Trace, String) {
        match self {
            Generated::Philly => (
                workload::synthetic(jobs, total_gpus, load, seed),
                format!(
                    "built-in: {jobs} jobs drawn from the Philly sample's distributions (seed \
                     {seed}), offered load {load}"
                ),
            ),
            Generated::Flood => (
                workload::stress(jobs, total_gpus, load, seed, &workload::StressShape::FLOOD),
                format!(
                    "built-in, flood: {jobs} jobs, 97.5% of one GPU, 75% of GPU-time in jobs of 8 \
                     and 16 GPUs running 10-475 h (seed {seed}), offered load {load}"
                ),
            ),
            Generated::HeavyTailed => (
                workload::heavy_tailed(jobs, total_gpus, load, seed),
                format!(
                    "built-in, heavy-tailed: {jobs} jobs, 95% of GPU-time in multi-GPU jobs, \
                     the largest 1% holding 85% (seed {seed}), offered load {load}"
                ),
            ),
        }
    }
}

/// `--limits`: a limit model ([`Limits::parse`]), said plainly when it is not one.
pub fn limits_arg(text: &str) -> Result<Limits, String> {
    Limits::parse(text)
}

/// A count or seed from the command line: a whole number of 0 or more, said plainly otherwise
/// (clap's own message for `-1` is about an "invalid digit").
pub fn whole<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse::<T>()
        .map_err(|_| format!("'{text}' is not a whole number of 0 or more"))
}

/// A number of seconds (or another amount) of 0 or more, said plainly otherwise.
pub fn non_negative(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("'{text}' is not a number of 0 or more")),
    }
}

/// The trace formats `--format` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// The Philly sample's CSV (job_id, submit_time, duration_s, num_gpus, ...).
    Philly,
    /// Alibaba GPU v2023 pods CSV.
    Alibaba,
    /// A Pollux-artifact workload CSV (needs the Pollux data directory).
    Pollux,
    /// `sacct -P` output with the documented --format fields.
    Sacct,
    /// `sacct --json` output.
    SacctJson,
    /// Compute Canada's Cedar GPU jobs CSV (job_unique_id, account_id, time_limit_sec, ...).
    Cedar,
    /// The optimizer's record of the recent past (STATE_DIR/record.jsonl).
    CinchRecord,
}

impl From<FormatArg> for TraceFormat {
    fn from(f: FormatArg) -> TraceFormat {
        match f {
            FormatArg::Philly => TraceFormat::Philly,
            FormatArg::Alibaba => TraceFormat::Alibaba,
            FormatArg::Pollux => TraceFormat::Pollux,
            FormatArg::Sacct => TraceFormat::Sacct,
            FormatArg::SacctJson => TraceFormat::SacctJson,
            FormatArg::Cedar => TraceFormat::Cedar,
            FormatArg::CinchRecord => TraceFormat::CinchRecord,
        }
    }
}

/// `--policies` values: every policy the simulator knows, listed in `--help` and in errors.
#[derive(Clone)]
pub struct PolicyParser;

impl clap::builder::TypedValueParser for PolicyParser {
    type Value = SchedulerKind;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<SchedulerKind, clap::Error> {
        let text = value.to_string_lossy();
        text.parse::<SchedulerKind>().map_err(|why| {
            let flag = arg.map_or("--policies".to_string(), |a| a.to_string());
            clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!("invalid value '{text}' for '{flag}': {why}\n"),
            )
            .with_cmd(cmd)
        })
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let names: Vec<String> = cinch_sim::all_kinds()
            .iter()
            .map(|k| k.to_string())
            .chain([
                "slurm-switches@SECONDS".into(),
                "dally@SECONDS".into(),
                "NAME:key=value+...".into(),
            ])
            .collect();
        Some(Box::new(
            names.into_iter().map(clap::builder::PossibleValue::new),
        ))
    }
}

/// A site's cluster shape from its slurm.conf and the topology.conf beside it (if any), with
/// notes on what the simulator leaves out.
pub fn cluster_of_site(slurm_conf: &Path) -> Result<(ClusterSpec, Vec<String>)> {
    let text = std::fs::read_to_string(slurm_conf)
        .with_context(|| format!("--slurm-conf {}", slurm_conf.display()))?;
    let topology = std::fs::read_to_string(slurm_conf.with_file_name("topology.conf")).ok();
    ClusterSpec::from_slurm_conf(&text, topology.as_deref())
        .map_err(|e| anyhow::anyhow!("--slurm-conf {}: {e}", slurm_conf.display()))
}

pub fn read_trace(
    path: &Path,
    format: TraceFormat,
    pollux_dir: Option<&Path>,
    cluster: ClusterSpec,
) -> Result<Trace> {
    Ok(match format {
        TraceFormat::Philly => trace::read_philly(path)?,
        TraceFormat::Alibaba => trace::read_alibaba_pods(path)?,
        TraceFormat::Sacct => trace::read_sacct_parsable(path)?,
        TraceFormat::SacctJson => trace::read_sacct_json(path)?,
        TraceFormat::Cedar => trace::read_cedar(path)?,
        TraceFormat::CinchRecord => trace::read_record(path)?,
        TraceFormat::Pollux => {
            let dir = match pollux_dir {
                Some(d) => d.to_path_buf(),
                None => path
                    .parent()
                    .and_then(Path::parent)
                    .map(Path::to_path_buf)
                    .context("--pollux-dir is needed to find the measurement data")?,
            };
            let apps = PolluxApps::read(&dir)
                .with_context(|| format!("reading the Pollux data in {}", dir.display()))?;
            trace::read_pollux_workload(path, &apps, cluster.gpus_per_node)?
        }
    })
}

/// The simulated agent's rounds: at most one per this many seconds of simulated time (a live
/// agent rounds every `IntervalSeconds`, 5 by default, and at most once a second on
/// submissions); multi-GPU jobs submitted between rounds wait for the next one (the submit
/// hold). Coarser than live, so the simulated cinch knows less than a live one, never more.
pub const ROUND_INTERVAL_S: f64 = 30.0;

/// `--round-interval` as `cinch sim` and `cinch sim evaluate` take it: seconds between the
/// simulated agent's rounds, 0 (every event) to an hour.
pub fn check_round_interval(seconds: f64) -> Result<()> {
    if !(0.0..=3600.0).contains(&seconds) {
        anyhow::bail!("--round-interval must be from 0 to 3600 seconds, not {seconds}");
    }
    Ok(())
}

/// The simulator settings every case shares but its cluster and congestion.
pub fn config(shape: &str, racks: u32, congestion: f64) -> Result<SimConfig> {
    Ok(SimConfig {
        cluster: ClusterSpec::parse(shape, racks).map_err(anyhow::Error::msg)?,
        network: Network {
            congestion,
            cross_rack: 2.0,
        },
        round_interval_s: ROUND_INTERVAL_S,
        // The baselines as published: Tiresias requeues as often as its queues say. cinch.conf's
        // requeue bounds (10 per job, 60 an hour) would hold Tiresias back and make the targets
        // easier; cinch keeps its own per-job cap either way.
        max_requeues_per_job: 100,
        max_requeues_per_hour: 10_000,
        ..SimConfig::default()
    })
}

pub fn mark(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// Runs `f` on every work item on up to `threads` threads; the results in the items' order.
pub fn run_parallel<W: Sync, T: Send>(
    work: &[W],
    threads: usize,
    f: impl Fn(&W) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..work.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, 8) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = work.get(i) else { break };
                match f(item) {
                    Ok(r) => results.lock().expect("no panic holds it")[i] = Some(r),
                    Err(e) => {
                        *failure.lock().expect("no panic holds it") = Some(e);
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().expect("no panic holds it") {
        return Err(e);
    }
    Ok(results
        .into_inner()
        .expect("no panic holds it")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::builder::TypedValueParser;

    #[test]
    fn counts_and_limit_models_are_read_or_refused_plainly() {
        assert_eq!(whole::<u32>("12"), Ok(12));
        assert_eq!(
            whole::<u32>("-1").unwrap_err(),
            "'-1' is not a whole number of 0 or more"
        );
        assert!(limits_arg("oracle").is_ok());
        assert!(limits_arg("empirical").is_ok());
        assert!(limits_arg("guess").is_err());
    }

    #[test]
    fn policies_parse_by_the_registrys_names_and_a_bad_one_names_the_flag() {
        let command = clap::Command::new("cinch");
        let parse = |text: &str| PolicyParser.parse_ref(&command, None, std::ffi::OsStr::new(text));
        assert_eq!(parse("cinch").unwrap().to_string(), "cinch");
        assert_eq!(parse("slurm").unwrap(), SchedulerKind::Slurm);
        let err = parse("fastest").unwrap_err().to_string();
        assert!(
            err.contains("invalid value 'fastest' for '--policies'")
                && err.contains("unknown policy 'fastest'"),
            "{err}"
        );
        let listed: Vec<String> = PolicyParser
            .possible_values()
            .unwrap()
            .map(|v| v.get_name().to_string())
            .collect();
        assert!(listed.contains(&"tiresias".to_string()), "{listed:?}");
        assert!(listed.contains(&"NAME:key=value+...".to_string()));
    }

    #[test]
    fn a_sites_cluster_is_read_from_its_slurm_conf_and_the_topology_beside_it() {
        let dir = std::env::temp_dir().join(format!("cinch-site-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("slurm.conf"), "NodeName=g[1-8] Gres=gpu:4\n").unwrap();
        std::fs::write(
            dir.join("topology.conf"),
            "SwitchName=s1 Nodes=g[1-4]\nSwitchName=s2 Nodes=g[5-8]\n",
        )
        .unwrap();
        let (spec, _) = cluster_of_site(&dir.join("slurm.conf")).unwrap();
        assert_eq!((spec.nodes, spec.gpus_per_node, spec.racks), (8, 4, 2));
        let err = cluster_of_site(&dir.join("missing.conf")).unwrap_err();
        assert!(format!("{err:#}").starts_with("--slurm-conf "), "{err:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_parallel_runner_keeps_the_items_order_and_stops_at_a_failure() {
        let work: Vec<u32> = (0..50).collect();
        let doubled = run_parallel(&work, 4, |&w| Ok(2 * w)).unwrap();
        assert_eq!(doubled, work.iter().map(|w| 2 * w).collect::<Vec<_>>());
        let failed = run_parallel(&work, 3, |&w| {
            if w == 17 {
                anyhow::bail!("item {w} failed")
            }
            Ok(w)
        });
        assert_eq!(failed.unwrap_err().to_string(), "item 17 failed");
        assert_eq!(mark(true), "met");
        assert_eq!(mark(false), "MISSED");
    }
}

/// The simulated Slurm's priority plugin (`--priority` of `cinch sim` and `cinch sim evaluate`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    Auto,
    Basic,
    Multifactor,
}
