//! `cinch replay`: the simulator checked against real Slurm (docs/simulator.md, "Fidelity").
//!
//! A trace slice, compressed in time ([`cinch_sim::replay::compress`]), is submitted with `sbatch`
//! at its compressed arrivals to a local cluster of the simulated shape (slurm-conf/local-cluster):
//! once with plain Slurm and once per cinch policy (the plugin, its agent and `cinch serve`). Each
//! job is `cinch replay-job`, which reads the nodes Slurm gave it, runs at the speed the
//! performance model gives that placement and checkpoints its progress every second (so a requeue
//! costs what it costs live). The same compressed jobs go through the simulator with Slurm's real
//! timing settings, and both are judged by the same metrics.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use cinch_sim::engine::SimConfig;
use cinch_sim::perf::{App, Network};
use cinch_sim::replay::{self, Compression, FidelityRow, Metrics, Times};
use cinch_sim::workload::{self, JobSpec, WorkloadOptions};
use cinch_sim::{simulate, ClusterSpec, SchedulerKind};

use crate::sim_common::{non_negative, whole, PolicyParser, TraceArgs};

/// Slurm's backfill interval in the local cluster (`bf_interval=5`, slurm-conf/local-cluster):
/// the simulated Slurm's periodic pass.
const BACKFILL_INTERVAL_S: f64 = 5.0;

/// Slurm's backfill resolution in the replay's cluster: the finest it takes. Its default, 60 s,
/// is nothing against real runs of hours, but a replay runs 240x faster, where it is 4 h of trace
/// time: backfill then sees every running job end at its next minute, and live Slurm ran up to
/// 13% slower on a slice for that alone (docs/benchmarks.md, 2026-12-01). The simulator takes
/// time as exact, as at real scale.
const BACKFILL_RESOLUTION_S: u32 = 1;

/// The agent's round interval in the local cluster (`IntervalSeconds=2` in the cinch.conf
/// local-cluster writes): the simulated agent looks as often, and holds new multi-GPU jobs until
/// its next round as the submit hold does live.
const AGENT_INTERVAL_S: f64 = 2.0;

#[derive(clap::Args, Debug)]
#[command(allow_negative_numbers = true)]
pub struct ReplayArgs {
    /// The trace to take the slice from.
    #[command(flatten)]
    pub source: TraceArgs,
    /// Jobs in the slice (by submission).
    #[arg(long, value_parser = whole::<usize>, default_value_t = 60)]
    pub jobs: usize,
    /// Trace jobs skipped before the slice starts.
    #[arg(long, value_parser = whole::<usize>, default_value_t = 0)]
    pub skip: usize,
    /// Offered load of the built-in workload (GPU demand over cluster GPUs).
    #[arg(long, default_value_t = 1.5)]
    pub load: f64,
    /// Multiply a trace's submit times by this (0.1 = arrivals 10x denser, as `cinch sim`).
    #[arg(long, default_value_t = 1.0)]
    pub arrival_scale: f64,
    /// Seed for the built-in workload, applications and hints.
    #[arg(long, value_parser = whole::<u64>, default_value_t = 1)]
    pub seed: u64,
    /// The cluster: NODESxGPUS (at most 64 nodes live).
    #[arg(long, default_value = "4x8", allow_hyphen_values = true)]
    pub cluster: String,
    /// Racks (leaf switches); the nodes must split evenly.
    #[arg(long, value_parser = whole::<u32>, default_value_t = 2)]
    pub racks: u32,
    /// Take the cluster's shape from a site's slurm.conf (and topology.conf beside it) instead
    /// of --cluster/--racks: a site's what-if.
    #[arg(long)]
    pub slurm_conf: Option<PathBuf>,
    /// Trace seconds per replayed second.
    #[arg(long, default_value_t = 120.0)]
    pub speedup: f64,
    /// Runs longer than this many trace hours are cut to it (the simulator gets the same cut).
    #[arg(long, default_value_t = 1.0)]
    pub max_run_h: f64,
    /// Policies, comma-separated; the first is the baseline of the ratios. `slurm` is plain
    /// Slurm (no plugin); any other is a cinch policy (`NAME` or `NAME:key=value+...`). cinch's
    /// preemption is off by default: Slurm's requeue delay (121 s) does not compress with time,
    /// so in a replay every requeue costs a job minutes of replayed time that the trace never
    /// had (`--policies slurm,cinch` replays it anyway).
    #[arg(long, value_delimiter = ',', value_parser = PolicyParser, default_value = "slurm,cinch:preempt=false")]
    pub policies: Vec<SchedulerKind>,
    /// Share of jobs that give hints (application, `ckpt=yes`) and `--requeue` (0 to 1).
    #[arg(long, default_value_t = workload::DEFAULT_HINTED)]
    pub hinted: f64,
    /// Time limits for jobs whose trace gives none (before compression), as `cinch sim
    /// --limits`: `empirical` (real users' limits, the default), `empirical:FILE`, or the
    /// ablations `oracle` and `noise:SIGMA`.
    #[arg(long, default_value = "empirical", value_parser = crate::sim_common::limits_arg)]
    pub limits: cinch_sim::limits::Limits,
    /// Network congestion of the performance model (as `cinch sim`).
    #[arg(long, default_value_t = 1.0)]
    pub congestion: f64,
    /// Cross-rack factor of the performance model (as `cinch sim`).
    #[arg(long, default_value_t = 2.0)]
    pub cross_rack: f64,
    /// Only simulate (no local cluster): the compressed slice's simulated results.
    #[arg(long)]
    pub sim_only: bool,
    /// With --sim-only: the start latency to simulate (seconds from Slurm placing a job to its
    /// program starting; a live run measures it and prints it), so a slice can be simulated
    /// again against a live run's `jobs.csv` without running it live.
    #[arg(long, default_value_t = 0.0, requires = "sim_only", value_parser = non_negative)]
    pub start_latency: f64,
    /// Fail (exit 1) when a policy's simulated average JCT is off live by more than
    /// --jct-tolerance or a ratio to the first policy by more than --ratio-tolerance.
    #[arg(long)]
    pub check: bool,
    #[arg(long, default_value_t = 0.10)]
    pub jct_tolerance: f64,
    #[arg(long, default_value_t = 0.05)]
    pub ratio_tolerance: f64,
    /// Where the fidelity table, per-job CSVs and the clusters' scratch directories go.
    #[arg(long, default_value = "cinch-replay")]
    pub out: PathBuf,
    /// slurm-conf/local-cluster of this source tree.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../slurm-conf/local-cluster"))]
    pub local_cluster: PathBuf,
    /// The job_submit plugin to load [default: local-cluster's].
    #[arg(long)]
    pub plugin: Option<PathBuf>,
    /// slurmctld's port (the optimizer takes the next one; nodes from --node-port-base).
    #[arg(long, value_parser = whole::<u16>, default_value_t = 16817)]
    pub ctld_port: u16,
    #[arg(long, value_parser = whole::<u16>, default_value_t = 17001)]
    pub node_port_base: u16,
}

/// What a replayed job needs to know to run like the simulated one (`cinch replay-job`).
#[derive(clap::Args, Debug)]
pub struct ReplayJobArgs {
    #[arg(long)]
    pub app: App,
    #[arg(long)]
    pub bsz: f64,
    #[arg(long)]
    pub gpus: u32,
    /// Seconds of work on the job's best placement.
    #[arg(long)]
    pub work: f64,
    #[arg(long)]
    pub cluster: String,
    #[arg(long)]
    pub racks: u32,
    #[arg(long)]
    pub congestion: f64,
    #[arg(long)]
    pub cross_rack: f64,
    /// The job's record: start, progress (its checkpoint) and end lines, appended.
    #[arg(long)]
    pub record: PathBuf,
}

/// Runs a command that must succeed; its stdout, or an error with its stderr.
fn run_text(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("cannot run {:?}", command.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}",
            command.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Set by SIGINT/SIGTERM: the replay stops, and the local cluster is taken down on the way out.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn catch_interrupts() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, handler as libc::sighandler_t) };
    }
}

fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// The job side: run for `work / speed` seconds on the nodes Slurm gave (`SLURM_JOB_NODELIST`),
/// continuing from the progress recorded by an earlier run of the same job (requeued).
pub fn run_job(args: ReplayJobArgs) -> Result<()> {
    let cluster = ClusterSpec::parse(&args.cluster, args.racks).map_err(anyhow::Error::msg)?;
    let network = Network {
        congestion: args.congestion,
        cross_rack: args.cross_rack,
    };
    let list = std::env::var("SLURM_JOB_NODELIST").context("SLURM_JOB_NODELIST is not set")?;
    let hosts = run_text(Command::new("scontrol").args(["show", "hostnames", &list]))?;
    let nodes: Vec<u32> = hosts
        .split_whitespace()
        .map(|h| replay::node_index(h).with_context(|| format!("node '{h}' is not nN")))
        .collect::<Result<_>>()?;
    let spec = JobSpec {
        gpus: args.gpus,
        app: args.app,
        local_bsz: args.bsz,
        ..replay_job_spec()
    };
    let speed = replay::placement_speed(&spec, &nodes, &cluster, &network);
    let done: f64 = fs::read_to_string(&args.record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("work ")?.parse().ok())
        .next_back()
        .unwrap_or(0.0);
    let mut record = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.record)
        .with_context(|| format!("{}", args.record.display()))?;
    writeln!(
        record,
        "start {} {speed:.4} {}",
        now_ms(),
        hosts.split_whitespace().collect::<Vec<_>>().join(",")
    )?;
    // Slurm stops a run with SIGTERM, at its time limit or to requeue it: the record says when,
    // which is the job's end when Slurm then reports it TIMEOUT.
    catch_interrupts();
    let mut done = done;
    let mut since_saved = 0.0;
    while done < args.work {
        if interrupted() {
            writeln!(record, "work {done:.3}")?;
            writeln!(record, "stopped {}", now_ms())?;
            std::process::exit(143);
        }
        // Short sleeps, so a stop is recorded within a tenth of a second; progress is saved
        // every second, as a checkpoint.
        let step = ((args.work - done) / speed).min(0.1);
        std::thread::sleep(Duration::from_secs_f64(step));
        done = (done + step * speed).min(args.work);
        since_saved += step;
        if since_saved >= 1.0 {
            writeln!(record, "work {done:.3}")?;
            since_saved = 0.0;
        }
    }
    writeln!(record, "work {done:.3}")?;
    writeln!(record, "end {}", now_ms())?;
    Ok(())
}

fn replay_job_spec() -> JobSpec {
    JobSpec {
        idle_from: None,
        id: 0,
        name: String::new(),
        job_name: None,
        user: String::new(),
        submit: 0,
        gpus: 1,
        gpus_per_node: None,
        app: App::Bert,
        local_bsz: 1.0,
        run_time: 1.0,
        time_limit: 60.0,
        hinted: false,
        preemptible: false,
        due: None,
        elastic: None,
        share: None,
        progress: None,
    }
}

/// The slice, compressed; with the cluster and a description.
fn workload(args: &ReplayArgs) -> Result<(Vec<JobSpec>, ClusterSpec, String)> {
    let (cluster, mut notes) = match &args.slurm_conf {
        Some(path) => crate::sim_common::cluster_of_site(path)?,
        None => (
            ClusterSpec::parse(&args.cluster, args.racks).map_err(anyhow::Error::msg)?,
            Vec::new(),
        ),
    };
    if cluster.nodes % cluster.racks != 0 {
        bail!(
            "the {} nodes must split evenly into {} racks (the local cluster's racks and the \
             simulator's must be the same nodes)",
            cluster.nodes,
            cluster.racks
        );
    }
    if !(0.0..=1.0).contains(&args.hinted) {
        bail!("--hinted must be from 0 to 1, not {}", args.hinted);
    }
    if args.jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    let (trace, source) = match args.source.read(cluster)? {
        None => {
            if !(args.load > 0.0 && args.load <= 10.0) {
                bail!("--load must be above 0 and at most 10, not {}", args.load);
            }
            (
                // The load is set on the slice below, once runs are cut.
                workload::synthetic(args.skip + args.jobs, cluster.total_gpus(), 1.0, args.seed),
                format!(
                    "built-in (seed {}, Poisson arrivals at offered load {})",
                    args.seed, args.load
                ),
            )
        }
        Some((trace, _, path)) => (trace, path.display().to_string()),
    };
    if !(args.arrival_scale.is_finite() && args.arrival_scale > 0.0) {
        bail!(
            "--arrival-scale must be above 0, not {}",
            args.arrival_scale
        );
    }
    let mut trace = trace;
    for job in &mut trace.jobs {
        job.submit = (job.submit as f64 * args.arrival_scale).round() as i64;
    }
    let mut jobs = workload::from_trace(
        &trace,
        &WorkloadOptions {
            seed: args.seed,
            limits: args.limits.clone(),
            hinted: args.hinted,
            ..WorkloadOptions::default()
        },
    );
    jobs.sort_by_key(|j| (j.submit, j.id));
    let fits = |j: &JobSpec| {
        j.gpus <= cluster.total_gpus()
            && j.gpus_per_node
                .is_none_or(|p| p > 0 && p <= cluster.gpus_per_node && j.gpus.is_multiple_of(p))
    };
    let too_big = jobs.iter().filter(|j| !fits(j)).count();
    if too_big > 0 {
        notes.push(format!("{too_big} jobs larger than the cluster left out"));
    }
    let mut slice: Vec<JobSpec> = jobs
        .into_iter()
        .filter(fits)
        .skip(args.skip)
        .take(args.jobs)
        .collect();
    if slice.is_empty() {
        bail!("the slice holds no job (after skipping {})", args.skip);
    }
    let compression = Compression {
        speedup: args.speedup,
        max_run_s: args.max_run_h * 3600.0,
    };
    compression.validate().map_err(anyhow::Error::msg)?;
    if args.source.trace.is_none() {
        replay::poisson_arrivals(
            &mut slice,
            cluster.total_gpus(),
            args.load,
            compression.max_run_s,
            args.seed,
        );
    }
    let compressed = replay::compress(&slice, compression);
    let mut description = format!(
        "{source}: jobs {}-{} ({} jobs), arrivals x{}, time x1/{}, runs cut at {} h; hints and --requeue from {}% of jobs",
        args.skip + 1,
        args.skip + compressed.len(),
        compressed.len(),
        args.arrival_scale,
        args.speedup,
        args.max_run_h,
        (args.hinted * 100.0).round()
    );
    for note in notes {
        description.push_str(&format!("; {note}"));
    }
    Ok((compressed, cluster, description))
}

/// One policy's simulated run of the slice.
struct SimSlice {
    metrics: Metrics,
    /// Jobs killed at their limit.
    killed: usize,
    times: Vec<Times>,
    /// (job name, its placement)
    nodes: Vec<(String, String)>,
}

/// The simulator on the compressed jobs, with the local cluster's timing.
fn simulate_slice(
    jobs: &[JobSpec],
    kind: &SchedulerKind,
    cluster: ClusterSpec,
    network: Network,
    start_latency_s: f64,
) -> Result<SimSlice> {
    let config = SimConfig {
        cluster,
        network,
        tick_s: BACKFILL_INTERVAL_S,
        round_interval_s: AGENT_INTERVAL_S,
        // A requeued replay job loses at most its last second of progress.
        restart_penalty_s: 1.0,
        start_latency_s,
        ..SimConfig::default()
    };
    let mut scheduler = kind.build();
    let outcome = simulate(jobs, scheduler.as_mut(), config, &mut |_, _| {})?;
    let times = replay::simulated_times(&outcome, start_latency_s);
    Ok(SimSlice {
        metrics: Metrics::of(&times),
        killed: outcome.jobs.iter().filter(|j| j.killed).count(),
        times,
        nodes: replay::simulated_nodes(&outcome),
    })
}

/// A policy's name as a directory name: local-cluster's directory becomes part of `env`
/// command lines, so no `=` in it.
fn dir_name(kind: &SchedulerKind) -> String {
    kind.to_string().replace([':', '+', '@', '=', ','], "_")
}

/// The simulated jobs, one line each, beside a live run's `jobs.csv`.
fn sim_csv(slice: &SimSlice) -> String {
    std::iter::once("name,submit_s,first_start_s,end_s,placement\n".to_string())
        .chain(
            slice
                .times
                .iter()
                .zip(&slice.nodes)
                .map(|(t, (name, nodes))| {
                    format!(
                        "{name},{:.3},{:.3},{:.3},{nodes}\n",
                        t.submit, t.first_start, t.end
                    )
                }),
        )
        .collect()
}

/// One job as the live replay saw it.
#[derive(Debug, Clone, Default)]
struct LiveJob {
    id: u32,
    submit_s: f64,
    state: String,
    nodes: String,
    restarts: u32,
    /// Slurm's own SubmitTime, StartTime, EndTime (whole seconds, local time) and cinch's
    /// record, for reading a difference.
    slurm_times: String,
    admin_comment: String,
    times: Option<Times>,
}

/// Stops the local cluster when dropped (a failed replay still stops every daemon).
struct ClusterGuard<'a> {
    script: &'a Path,
    dir: PathBuf,
    up: bool,
}

impl ClusterGuard<'_> {
    /// `local-cluster down`, which fails when slurmctld did not exit cleanly or left a core file.
    fn down(mut self) -> Result<()> {
        self.up = false;
        run_text(
            Command::new(self.script)
                .arg("down")
                .arg("--dir")
                .arg(&self.dir),
        )
        .map(|_| ())
    }
}

impl Drop for ClusterGuard<'_> {
    fn drop(&mut self) {
        if self.up {
            let _ = Command::new(self.script)
                .arg("down")
                .arg("--dir")
                .arg(&self.dir)
                .output();
        }
    }
}

/// The batch script of a replayed job: `cinch replay-job` with what it needs.
fn job_command(
    cinch: &Path,
    job: &JobSpec,
    cluster: ClusterSpec,
    args: &ReplayArgs,
    record: &Path,
) -> String {
    format!(
        "exec {} replay-job --app {} --bsz {} --gpus {} --work {} --cluster {}x{} --racks {} \
         --congestion {} --cross-rack {} --record {}",
        cinch.display(),
        job.app,
        job.local_bsz,
        job.gpus,
        job.run_time,
        cluster.nodes,
        cluster.gpus_per_node,
        cluster.racks,
        args.congestion,
        args.cross_rack,
        record.display()
    )
}

/// How long the local cluster takes from `sbatch` to a job's program running, measured with
/// `PROBES` one-GPU jobs one after another on the idle cluster before the replay (which also
/// wakes every daemon up): the median, seconds.
fn start_latency(
    slurm: &dyn Fn(&str) -> Command,
    cinch: &Path,
    cluster: ClusterSpec,
    args: &ReplayArgs,
    records: &Path,
) -> Result<f64> {
    const PROBES: usize = 5;
    let probe = JobSpec {
        name: "cinch-replay-probe".into(),
        gpus: 1,
        run_time: 0.01,
        ..replay_job_spec()
    };
    let mut latencies = Vec::with_capacity(PROBES);
    for i in 0..PROBES {
        let record = records.join(format!("probe-{i}"));
        let submitted = now_ms();
        run_text(
            slurm("sbatch")
                .args(["--job-name=cinch-replay-probe", "--gpus=1", "--time=1"])
                .arg("--output=/dev/null")
                .arg(format!(
                    "--wrap={}",
                    job_command(cinch, &probe, cluster, args, &record)
                )),
        )
        .context("submitting a probe job")?;
        let waited = Instant::now();
        let started = loop {
            let (start, ended) = record_progress(&fs::read_to_string(&record).unwrap_or_default());
            if ended {
                break start;
            }
            if waited.elapsed() > Duration::from_secs(60) {
                bail!("a probe job did not run within 60 s ({})", record.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let started = started.context("a probe job recorded no start")?;
        latencies.push(started.saturating_sub(submitted) as f64 / 1000.0);
        // Let Slurm free its GPU before the next one.
        std::thread::sleep(Duration::from_millis(500));
    }
    latencies.sort_by(f64::total_cmp);
    Ok(latencies[PROBES / 2])
}

/// Updates the live jobs from what `scontrol show job` says about them now (jobs Slurm has
/// forgotten keep what was last seen).
fn refresh(slurm: &dyn Fn(&str) -> Command, by_id: &BTreeMap<u32, usize>, live: &mut [LiveJob]) {
    let shown = run_text(slurm("scontrol").args(["show", "job"])).unwrap_or_default();
    apply_shown(&shown, by_id, live);
}

/// [`refresh`]'s reading of `scontrol show job` output (blocks separated by blank lines): each
/// block of a replayed job updates that job's state, nodes, restarts, Slurm's times and record.
fn apply_shown(shown: &str, by_id: &BTreeMap<u32, usize>, live: &mut [LiveJob]) {
    for block in shown.split("\n\n") {
        let fields = cinch_core::slurm::scontrol::parse_show_job(block);
        let Some(&i) = fields
            .get("JobId")
            .and_then(|id| id.parse::<u32>().ok())
            .and_then(|id| by_id.get(&id))
        else {
            continue;
        };
        let job = &mut live[i];
        job.state = fields.get("JobState").cloned().unwrap_or_default();
        job.nodes = fields.get("NodeList").cloned().unwrap_or_default();
        job.restarts = fields
            .get("Restarts")
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        let field = |k: &str| fields.get(k).map_or("", String::as_str);
        job.slurm_times = format!(
            "{} {} {}",
            field("SubmitTime"),
            field("StartTime"),
            field("EndTime")
        );
        job.admin_comment = field("AdminComment").replace('"', "'");
    }
}

/// What a replayed job's record file says so far: when its program started (Unix ms, from its
/// `start MS` line) and whether it has ended (an `end` line).
fn record_progress(text: &str) -> (Option<u128>, bool) {
    let start = text.lines().find_map(|l| {
        l.strip_prefix("start ")?
            .split_whitespace()
            .next()?
            .parse::<u128>()
            .ok()
    });
    (start, text.contains("\nend "))
}

fn live_run(
    args: &ReplayArgs,
    kind: &SchedulerKind,
    jobs: &[JobSpec],
    cluster: ClusterSpec,
    dir: &Path,
) -> Result<(Vec<LiveJob>, f64)> {
    let cinch = std::env::current_exe().context("the cinch binary's path")?;
    let _ = fs::remove_dir_all(dir);
    let records = dir.join("jobs");
    fs::create_dir_all(&records).with_context(|| format!("{}", records.display()))?;
    let cluster_dir = dir.join("cluster");
    let mut up = Command::new(&args.local_cluster);
    up.arg("up")
        .arg("--dir")
        .arg(&cluster_dir)
        .args(["--nodes", &cluster.nodes.to_string()])
        .args(["--gpus", &cluster.gpus_per_node.to_string()])
        .args(["--racks", &cluster.racks.to_string()])
        .args(["--ctld-port", &args.ctld_port.to_string()])
        .args(["--node-port-base", &args.node_port_base.to_string()])
        .args(["--bf-resolution", &BACKFILL_RESOLUTION_S.to_string()])
        .arg("--cinch")
        .arg(&cinch);
    if let Some(plugin) = &args.plugin {
        up.arg("--plugin").arg(plugin);
    }
    let policy = match kind {
        SchedulerKind::Slurm => None,
        SchedulerKind::Policy(config) => Some(config.clone()),
        SchedulerKind::SlurmDeadline => bail!("slurm-deadline is not replayed (no QoS targets)"),
        SchedulerKind::Portfolio(_) => bail!("the portfolio is not replayed live yet"),
        SchedulerKind::Perfect(_) => bail!(
            "the perfect-knowledge reference is not replayed live: no live job can tell its true \
             run time"
        ),
    };
    if policy.is_some() {
        up.arg("--optimizer");
    } else {
        up.arg("--no-plugin");
    }
    let guard = ClusterGuard {
        script: &args.local_cluster,
        dir: cluster_dir.clone(),
        up: true,
    };
    run_text(&mut up).context("starting the local cluster")?;
    let slurm_conf = cluster_dir.join("etc/slurm.conf");
    if let Some(config) = policy {
        let value = serde_json::to_value(&config)?;
        let mut settings = vec![format!("policy={}", config.name())];
        if let Some(params) = value.get("params").and_then(|p| p.as_object()) {
            settings.extend(params.iter().map(|(k, v)| format!("{k}={v}")));
        }
        run_text(
            Command::new(&cinch)
                .env("CINCH_STATE_DIR", cluster_dir.join("optimizer"))
                .arg("policy")
                .arg("--url")
                .arg(format!(
                    "unix:{}",
                    cluster_dir.join("run/optimizer.sock").display()
                ))
                .arg("set")
                .args(&settings),
        )
        .context("setting the optimizer's policy")?;
    }
    let slurm = |program: &str| {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &slurm_conf);
        c
    };
    let latency = start_latency(&slurm, &cinch, cluster, args, &records)?;
    let started = Instant::now();
    let epoch_ms = now_ms();
    let last_arrival = jobs.iter().map(|j| j.submit).max().unwrap_or(0) as f64;
    let work: f64 = jobs.iter().map(|j| j.run_time * f64::from(j.gpus)).sum();
    // Generous: every job one after the other on its own would take less than the total work.
    let give_up = last_arrival + work + 600.0;
    let mut live: Vec<LiveJob> = Vec::with_capacity(jobs.len());
    let mut by_id: BTreeMap<u32, usize> = BTreeMap::new();
    let mut last_poll = Instant::now() - Duration::from_secs(10);
    loop {
        let now = started.elapsed().as_secs_f64();
        while live.len() < jobs.len() && jobs[live.len()].submit as f64 <= now {
            let job = &jobs[live.len()];
            let record = records.join(&job.name);
            let command = job_command(&cinch, job, cluster, args, &record);
            let submit_s = started.elapsed().as_secs_f64();
            let out = run_text(
                slurm("sbatch")
                    .arg("--parsable")
                    .args(replay::sbatch_options(job))
                    .arg(format!("--output={}", dir.join("jobs/%x.out").display()))
                    .arg(format!("--wrap={command}")),
            )
            .with_context(|| format!("submitting {}", job.name))?;
            let id: u32 = out
                .trim()
                .split(';')
                .next()
                .unwrap_or("")
                .parse()
                .with_context(|| format!("sbatch said '{}'", out.trim()))?;
            by_id.insert(id, live.len());
            live.push(LiveJob {
                id,
                submit_s,
                ..LiveJob::default()
            });
        }
        if last_poll.elapsed() >= Duration::from_secs(2) {
            last_poll = Instant::now();
            refresh(&slurm, &by_id, &mut live);
            let all_in = live.len() == jobs.len();
            let queued = run_text(slurm("squeue").args(["-h", "-o", "%i"])).context("squeue")?;
            if all_in && queued.trim().is_empty() {
                break;
            }
            if now > give_up {
                bail!(
                    "{kind}: jobs still queued {:.0} s after the start (scratch: {})",
                    now,
                    dir.display()
                );
            }
        }
        if interrupted() {
            bail!("{kind}: interrupted; the local cluster is being stopped");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // What Slurm says once the queue is empty (a job may have ended between the last look at
    // the jobs and the look at the queue).
    refresh(&slurm, &by_id, &mut live);
    // Each job's own clock: Slurm reports whole seconds, the job milliseconds.
    for (job, spec) in live.iter_mut().zip(jobs) {
        let text = fs::read_to_string(records.join(&spec.name)).unwrap_or_default();
        let at = |prefix: &str, last: bool| {
            let mut values = text.lines().filter_map(|l| {
                l.strip_prefix(prefix)?
                    .split_whitespace()
                    .next()?
                    .parse::<u128>()
                    .ok()
            });
            let v = if last {
                values.next_back()
            } else {
                values.next()
            };
            v.map(|ms| (ms.saturating_sub(epoch_ms)) as f64 / 1000.0)
        };
        // A run Slurm killed at its limit ends when it was stopped.
        let end = if job.state == "TIMEOUT" {
            at("stopped ", true)
        } else {
            at("end ", true)
        };
        job.times = match (at("start ", false), end) {
            (Some(first_start), Some(end)) => Some(Times {
                submit: job.submit_s,
                first_start,
                end,
            }),
            _ => None,
        };
    }
    guard.down().context("stopping the local cluster")?;
    Ok((live, latency))
}

fn write_live_csv(path: &Path, jobs: &[JobSpec], live: &[LiveJob]) -> Result<()> {
    let mut text = String::from(
        "name,job_id,gpus,run_s,limit_s,submit_s,first_start_s,end_s,state,restarts,nodes,\
         slurm_submit_start_end,admin_comment\n",
    );
    for (spec, job) in jobs.iter().zip(live) {
        let (s, f, e) = job
            .times
            .map_or((String::new(), String::new(), String::new()), |t| {
                (
                    format!("{:.3}", t.submit),
                    format!("{:.3}", t.first_start),
                    format!("{:.3}", t.end),
                )
            });
        text.push_str(&format!(
            "{},{},{},{},{},{s},{f},{e},{},{},\"{}\",{},\"{}\"\n",
            spec.name,
            job.id,
            spec.gpus,
            spec.run_time,
            spec.time_limit,
            job.state,
            job.restarts,
            job.nodes,
            job.slurm_times,
            job.admin_comment
        ));
    }
    fs::write(path, text).with_context(|| format!("{}", path.display()))
}

pub fn run(args: ReplayArgs) -> Result<()> {
    let network = Network {
        congestion: args.congestion,
        cross_rack: args.cross_rack,
    };
    network.validate().map_err(anyhow::Error::msg)?;
    if !(0.0..=1.0).contains(&args.jct_tolerance) || !(0.0..=1.0).contains(&args.ratio_tolerance) {
        bail!("tolerances are from 0 to 1");
    }
    let (jobs, cluster, description) = workload(&args)?;
    catch_interrupts();
    if !args.sim_only && cluster.nodes > 64 {
        bail!(
            "a live replay runs at most 64 nodes on this host, not {} (--sim-only simulates any size)",
            cluster.nodes
        );
    }
    fs::create_dir_all(&args.out).with_context(|| format!("{}", args.out.display()))?;
    println!("workload: {description}");
    println!(
        "cluster:  {cluster}; network congestion {} (cross-rack x{}); Slurm's backfill every {BACKFILL_INTERVAL_S} s",
        network.congestion, network.cross_rack
    );
    let mut rows = Vec::new();
    let mut latencies = Vec::new();
    for kind in &args.policies {
        if args.sim_only {
            let slice = simulate_slice(&jobs, kind, cluster, network, args.start_latency)?;
            fs::create_dir_all(&args.out).with_context(|| format!("{}", args.out.display()))?;
            fs::write(
                args.out.join(format!("sim-{}.csv", dir_name(kind))),
                sim_csv(&slice),
            )?;
            rows.push(FidelityRow {
                policy: kind.to_string(),
                live: slice.metrics,
                sim: slice.metrics,
                live_killed: slice.killed,
                sim_killed: slice.killed,
            });
            continue;
        }
        eprintln!(
            "cinch replay: {kind}: {} jobs on a local cluster ...",
            jobs.len()
        );
        let dir = args.out.join(format!("live-{}", dir_name(kind)));
        let (live, latency) = live_run(&args, kind, &jobs, cluster, &dir)?;
        eprintln!("cinch replay: {kind}: start latency {latency:.2} s (median of the probe jobs)");
        let slice = simulate_slice(&jobs, kind, cluster, network, latency)?;
        latencies.push(format!("{kind} {latency:.2} s"));
        write_live_csv(&dir.join("jobs.csv"), &jobs, &live)?;
        fs::write(dir.join("sim.csv"), sim_csv(&slice))?;
        let SimSlice {
            metrics: sim,
            killed: sim_killed,
            ..
        } = slice;
        // Jobs end by completing or at their limit (TIMEOUT), live as simulated; any other
        // end, or none, is a failure of the replay.
        let ended = |l: &LiveJob| matches!(l.state.as_str(), "COMPLETED" | "TIMEOUT");
        let failed: Vec<String> = live
            .iter()
            .zip(&jobs)
            .filter(|(l, _)| l.times.is_none() || !ended(l))
            .map(|(l, j)| format!("{} (job {}, {})", j.name, l.id, l.state))
            .collect();
        if !failed.is_empty() {
            eprintln!(
                "cinch replay: {kind}: {} jobs did not end: {}",
                failed.len(),
                failed.join(", ")
            );
        }
        let times: Vec<Times> = live
            .iter()
            .filter(|l| ended(l))
            .filter_map(|l| l.times)
            .collect();
        rows.push(FidelityRow {
            policy: kind.to_string(),
            live: Metrics::of(&times),
            live_killed: live.iter().filter(|l| l.state == "TIMEOUT").count(),
            sim_killed,
            sim,
        });
    }
    let table = replay::table(&rows);
    println!();
    print!("{table}");
    println!(
        "(replayed seconds; x{} = trace seconds. error: simulated avg JCT against live)",
        args.speedup
    );
    let misses = replay::misses(&rows, jobs.len(), args.jct_tolerance, args.ratio_tolerance);
    let report = format!(
        "# cinch replay\n\nworkload: {description}\n\ncluster: {cluster}\n\n\
         start latency (sbatch to the job running, measured; the simulator's): {}\n\n\
         command: `{}`\n\n{table}\n{}\n",
        if latencies.is_empty() {
            "-".to_string()
        } else {
            latencies.join(", ")
        },
        std::env::args().collect::<Vec<_>>().join(" "),
        if args.sim_only {
            "simulated only".to_string()
        } else if misses.is_empty() {
            format!(
                "within tolerance (avg JCT {:.0}%, ratio {})",
                args.jct_tolerance * 100.0,
                args.ratio_tolerance
            )
        } else {
            format!("outside tolerance:\n\n- {}", misses.join("\n- "))
        }
    );
    fs::write(args.out.join("fidelity.md"), report)?;
    println!("report: {}", args.out.join("fidelity.md").display());
    if !args.sim_only {
        for miss in &misses {
            println!("outside tolerance: {miss}");
        }
        if args.check && !misses.is_empty() {
            bail!("{} fidelity checks outside tolerance", misses.len());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(id: u32) -> LiveJob {
        LiveJob {
            id,
            submit_s: 0.0,
            state: "PENDING".into(),
            nodes: String::new(),
            restarts: 0,
            slurm_times: String::new(),
            admin_comment: String::new(),
            times: None,
        }
    }

    #[test]
    fn scontrols_blocks_update_the_replayed_jobs_only() {
        let mut jobs = vec![live(7), live(9)];
        let by_id: BTreeMap<u32, usize> = [(7, 0), (9, 1)].into_iter().collect();
        let shown = "JobId=7 JobName=a\n   JobState=RUNNING Reason=None\n   Restarts=2\n   \
                     SubmitTime=2026-11-25T10:00:00 StartTime=2026-11-25T10:00:05 \
                     EndTime=Unknown\n   NodeList=n[1-2]\n   \
                     AdminComment=cinch: gpus=16 | cinch-decision: why=\"x\"\n\n\
                     JobId=8 JobName=other\n   JobState=COMPLETED\n";
        apply_shown(shown, &by_id, &mut jobs);
        assert_eq!(jobs[0].state, "RUNNING");
        assert_eq!(jobs[0].nodes, "n[1-2]");
        assert_eq!(jobs[0].restarts, 2);
        assert_eq!(
            jobs[0].slurm_times,
            "2026-11-25T10:00:00 2026-11-25T10:00:05 Unknown"
        );
        assert_eq!(
            jobs[0].admin_comment,
            "cinch: gpus=16 | cinch-decision: why='x'"
        );
        // A job scontrol did not show keeps what was last seen; one not replayed is ignored.
        assert_eq!(jobs[1].state, "PENDING");
    }

    #[test]
    fn a_record_says_when_the_program_started_and_whether_it_ended() {
        assert_eq!(record_progress(""), (None, false));
        assert_eq!(
            record_progress("start 1795600000123 n1\n"),
            (Some(1_795_600_000_123), false)
        );
        assert_eq!(
            record_progress("start 1795600000123 n1\nend 1795600001000\n"),
            (Some(1_795_600_000_123), true)
        );
        assert_eq!(record_progress("start x\nend 1\n"), (None, true));
    }

    #[test]
    fn a_jobs_command_runs_cinch_replay_job_with_the_clusters_shape() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: ReplayArgs,
        }
        let args =
            <Cli as clap::Parser>::parse_from(["replay", "--congestion", "1", "--cross-rack", "2"])
                .args;
        let job = JobSpec {
            gpus: 8,
            run_time: 120.0,
            ..replay_job_spec()
        };
        let cluster = ClusterSpec::parse("4x8", 2).unwrap();
        let command = job_command(
            Path::new("/usr/bin/cinch"),
            &job,
            cluster,
            &args,
            Path::new("/r/1"),
        );
        assert_eq!(
            command,
            "exec /usr/bin/cinch replay-job --app bert --bsz 1 --gpus 8 --work 120 --cluster 4x8 \
             --racks 2 --congestion 1 --cross-rack 2 --record /r/1"
        );
    }
}
