//! `cinch sim`: the simulator's command line (run, fit-model, fidelity).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use cinch_core::policy::PolicyConfig;
use cinch_sim::engine::SimConfig;
use cinch_sim::limits::Limits;
use cinch_sim::perf::{self, App, Network};
use cinch_sim::trace::{self, PolluxApps, TraceFormat};
use cinch_sim::workload::{self, Preemptible, WorkloadOptions};
use cinch_sim::{compare, report, ClusterSpec, SchedulerKind};

use crate::sim_common::{
    check_round_interval, cluster_of_site, read_trace, whole, FormatArg, Generated, PolicyParser,
    Priority, TraceArgs,
};
use crate::sim_studies::{pack_table, sim_sharing, SharingStats};

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, allow_negative_numbers = true)]
pub struct SimArgs {
    #[command(subcommand)]
    pub action: Option<SimAction>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(clap::Subcommand, Debug)]
pub enum SimAction {
    /// Re-derive the performance model's coefficients from the Pollux measurements and print
    /// them with their fit error.
    #[command(after_help = "EXAMPLES:\n  cinch sim fit-model --pollux ../shared/pollux")]
    FitModel {
        /// The Pollux data directory (with traces/<app>/placements.csv).
        #[arg(long, default_value = "../shared/pollux")]
        pollux: PathBuf,
    },
    /// The validation suite: every baseline and cinch on the built-in workload, the generated
    /// heavy-tailed one and every Philly virtual cluster at a load that congests 64x8 GPUs, the
    /// 8 Pollux workloads (16x4) and the Cedar GPU jobs on a cluster they congest, at congestion
    /// 0, 1 and 4, with real time limits, both preemptible sets and three seeds; each case's ideal average JCT, the best
    /// baseline, and the targets of docs/policies/cinch.md (`--check` fails on a miss).
    #[command(after_help = "EXAMPLES:\n  cinch sim suite --check --out suite.md\n  \
        cinch sim suite --only pollux --seeds 1\n  cinch sim suite --half tune\n  \
        cinch sim suite --limits oracle    # the earlier, perfect-predictor yardstick\n  \
        cinch sim suite --studies          # also QoS, elastic and sharing studies\n  \
        cinch sim suite --timings          # also where the time went, per policy and family")]
    Suite(crate::sim_suite::SuiteArgs),
    /// How well cinch predicts run times: train on the first part of a trace, predict the
    /// ended jobs of the rest (median and mean absolute percentage error, share within 2x), per
    /// source, frozen and online. Example: `cinch sim predict --trace
    /// ../shared/traces/philly_vc6c71a0.csv`.
    #[command(after_help = "EXAMPLES:\n  \
        cinch sim predict --trace ../shared/traces/philly_vc6c71a0.csv\n  \
        cinch sim predict --trace sacct.txt --format sacct --train-share 0.7")]
    Predict {
        /// The trace (Philly, Alibaba pods, sacct -P or --json; Pollux workloads).
        #[arg(long)]
        trace: PathBuf,
        /// The trace's format [default: detected from the file's first line].
        #[arg(long, value_enum)]
        format: Option<FormatArg>,
        /// Share of the jobs (by submission) that trains the model (0.05 to 0.95).
        #[arg(long, default_value_t = 0.5)]
        train_share: f64,
    },
    /// GPU sharing and fragmentation by the FGD methodology on the Alibaba GPU-sharing trace:
    /// pods drawn from the trace arrive until their GPU demand reaches the cluster's capacity;
    /// the share of GPUs left unallocated and of pods that failed, per placement policy (first
    /// fit, best fit, dot product, FGD, cinch). Example: `cinch sim pack --traces
    /// ../shared/traces`.
    #[command(after_help = "EXAMPLES:\n  cinch sim pack --runs 5\n  \
        cinch sim pack --traces ../shared/traces --runs 1")]
    Pack {
        /// Directory with `alibaba_gpu_v2023_pods.csv` and `alibaba_gpu_v2023_gpu_nodes.csv`.
        #[arg(long, default_value = "../shared/traces")]
        traces: PathBuf,
        /// Runs (seeds 1..=RUNS) averaged per policy.
        #[arg(long, default_value_t = 5)]
        runs: u64,
    },
    /// Self-simulation: replay a window of a cinch record (the optimizer's STATE_DIR/record.jsonl,
    /// or one `cinch sim --record-out` wrote) under each member of a portfolio, from the state
    /// recorded at the window's start, with the runs not yet ended drawn from the run model, and
    /// say which would have served the window best (docs/policies/portfolio.md).
    #[command(
        after_help = "EXAMPLES:\n  cinch sim evaluate --record /var/lib/cinch/record.jsonl\n  \
        cinch sim evaluate --record record.jsonl --window-hours 72 --draws 5 \\\n    \
        --members slurm,tiresias,qssf,strict,cinch,cinch:preempt=false"
    )]
    Evaluate(crate::sim_evaluate::EvaluateArgs),
    /// Run Tiresias on the 8 Pollux workloads (16x4 GPUs) and compare its average JCT with
    /// the published one.
    #[command(after_help = "EXAMPLES:\n  cinch sim fidelity --pollux ../shared/pollux")]
    Fidelity {
        /// The Pollux data directory (workloads/, traces/, results-jobload/).
        #[arg(long, default_value = "../shared/pollux")]
        pollux: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub source: TraceArgs,
    /// The cluster: NODESxGPUS [default: a cinch record's own nodes with --trace, else 16x8].
    #[arg(long, allow_hyphen_values = true)]
    pub cluster: Option<String>,
    /// Racks (leaf switches) the nodes are split into.
    #[arg(long, value_parser = whole::<u32>, default_value_t = 2)]
    pub racks: u32,
    /// Take the cluster's shape from a site's slurm.conf (its NodeName lines' GPUs) and the
    /// topology.conf beside it (each switch with Nodes= is a rack), instead of --cluster and
    /// --racks: what cinch would have done on your cluster.
    #[arg(long)]
    pub slurm_conf: Option<PathBuf>,
    /// Policies to compare, comma-separated [default: all]. `slurm-switches@SECONDS` sets the
    /// switch wait, `dally@SECONDS` fixes both of dally's timers, `NAME:key=value+key=value`
    /// sets a policy's parameters (e.g. `cinch:preempt=false`); `cinch-` prefixes are accepted.
    /// `perfect` adds the perfect-knowledge reference: cinch told every job's true run time, a
    /// row no site can run, said apart from the ranking (`perfect:cinch:key=value+...` for a
    /// variant of cinch).
    #[arg(long, value_delimiter = ',', value_parser = PolicyParser)]
    pub policies: Vec<SchedulerKind>,
    /// Network congestion: inter-node synchronisation takes 1 + this times as long as
    /// measured (0 = quiet).
    #[arg(long, default_value_t = 1.0)]
    pub congestion: f64,
    /// Extra factor on synchronisation across racks (an oversubscribed spine).
    #[arg(long, default_value_t = 2.0)]
    pub cross_rack: f64,
    /// Seed for the synthetic workload and the application assignment.
    #[arg(long, value_parser = whole::<u64>, default_value_t = 1)]
    pub seed: u64,
    /// The built-in workload to generate when no --trace is given.
    #[arg(long, value_enum, default_value_t = Generated::Philly)]
    pub workload: Generated,
    /// Jobs in the synthetic workload.
    #[arg(long, value_parser = whole::<usize>, default_value_t = 2000)]
    pub jobs: usize,
    /// Offered load of the synthetic workload (GPU demand over cluster GPUs).
    #[arg(long, default_value_t = 0.9)]
    pub load: f64,
    /// Multiply a trace's submit times by this (0.2 = arrivals 5x denser: more load on the
    /// same jobs, as the Pollux and Sia evaluations scale job load).
    #[arg(long, default_value_t = 1.0)]
    pub arrival_scale: f64,
    /// Time limits for jobs whose trace gives none: `empirical` (drawn from a real Slurm GPU
    /// cluster's run/limit distribution, Compute Canada's Cedar, snapped to its users' round
    /// values; about 8% are killed at their limit), `empirical:FILE` (the same from your own
    /// accounting: the Cedar CSV or a `sacct` export with Timelimit and State), or the ablations
    /// `oracle` (every limit exactly twice the run: a perfect predictor no site has) and
    /// `noise:SIGMA` (twice the run times e^N(0, SIGMA), never below it). A trace with its own
    /// limits always uses them.
    #[arg(long, default_value = "empirical", value_parser = crate::sim_common::limits_arg)]
    pub limits: Limits,
    /// Who may be requeued, by every policy alike: `opted-in` (the jobs whose users submit with
    /// `--requeue` and say `ckpt=yes`, the --hinted share) or `all` (a site whose partition
    /// requeues any job).
    #[arg(long, default_value = "opted-in")]
    pub preemptible: Preemptible,
    /// Share of jobs whose users give cinch hints (application, `ckpt=yes`) and submit with
    /// `--requeue`: only those carry hints in the snapshot and may be requeued (0 to 1).
    #[arg(long, default_value_t = workload::DEFAULT_HINTED)]
    pub hinted: f64,
    /// Share of jobs with a QoS target (0 to 1): finish by submission + U(1.5, 3) x their run
    /// time, stated as the `due` hint (and as `--deadline` for `slurm-deadline`); seeded.
    #[arg(long, default_value_t = 0.0)]
    pub qos_share: f64,
    /// Share of jobs that are elastic (0 to 1), among those whose trace gives their scaling
    /// (Pollux workloads): they declare `elastic=1-max(asked,16)`, checkpoint and opt in to
    /// requeue; seeded.
    #[arg(long, default_value_t = 0.0)]
    pub elastic: f64,
    /// Share of jobs whose output shows their progress (a tqdm bar, `step N/M`), which cinch's
    /// watcher reads while they run (0 to 1; seeded): the latest steps and rate, with the
    /// model's delay, error and early ends (docs/simulator.md, "Progress").
    #[arg(long, default_value_t = 0.0)]
    pub progress_share: f64,
    /// Share of jobs that hold their GPUs idle from a point of their run to its end (0 to 1;
    /// seeded): the idle model, an assumption (docs/simulator.md, "Idle GPUs"). cinch's
    /// watchers read the GPUs, and cinch.conf's idle settings below apply.
    #[arg(long, default_value_t = 0.0)]
    pub idle_share: f64,
    /// cinch.conf's IdleAction for every job: `report`, `requeue` (opted-in jobs) or `cancel`.
    #[arg(long, value_parser = ["report", "requeue", "cancel"], default_value = "report")]
    pub idle_action: String,
    /// cinch.conf's IdleGraceMinutes.
    #[arg(long, value_parser = whole::<u32>, default_value_t = 120)]
    pub idle_grace_min: u32,
    /// cinch.conf's IdleWarnMinutes.
    #[arg(long, value_parser = whole::<u32>, default_value_t = 30)]
    pub idle_warn_min: u32,
    /// Share of the jobs of one GPU whose users let them share a GPU (`share=yes`, stating
    /// their peak GPU memory), 0 to 1; needs --share-nodes. Peaks are drawn from the Alibaba
    /// trace's GPU shares (--pods), as the Philly trace records none.
    #[arg(long, default_value_t = 0.0)]
    pub share: f64,
    /// Nodes set aside as sharing nodes (the last ones; their own partition, 16 shards per
    /// GPU of 80G, cinch.conf's default margin and interference).
    #[arg(long, value_parser = whole::<u32>, default_value_t = 0)]
    pub share_nodes: u32,
    /// The interference sharing jobs really suffer (alpha: n jobs on a GPU each run at
    /// 1/(1 + alpha (n - 1))). cinch decides with cinch.conf's default, the measured model,
    /// knowing no job's busy fraction (each counts as fully busy).
    #[arg(long, default_value_t = 0.5)]
    pub share_interference: f64,
    /// How far off the peaks users state are: the spread (standard deviation of the logarithm)
    /// of a log-normal error on each sharing job's true peak; 0: exact. A run over its memory
    /// fails (under shards, with its GPU's other jobs) and its user resubmits it whole.
    #[arg(long, default_value_t = 0.0)]
    pub share_stated_error: f64,
    /// The Alibaba pod list whose GPU shares give the peaks of sharing jobs.
    #[arg(long, default_value = "../shared/traces/alibaba_gpu_v2023_pods.csv")]
    pub pods: PathBuf,
    /// How the simulated Slurm orders jobs, under every policy: `multifactor` (fair share far
    /// above age, Fair Tree over the jobs' users: what most GPU sites run), `basic` (submit
    /// order, Slurm's default priority/basic), or `auto`: multifactor where the jobs have users.
    #[arg(long, value_enum, default_value_t = Priority::Auto)]
    pub priority: Priority,
    /// Seconds between scheduling passes while jobs wait.
    #[arg(long, default_value_t = 30.0)]
    pub tick: f64,
    /// Least seconds between two rounds of a cinch policy's simulated agent (0: a round at every
    /// arrival and end). Multi-GPU jobs submitted between rounds wait for the next one, as
    /// cinch's submit hold keeps them; coarser than a live agent (every 5 s), never finer.
    #[arg(long, default_value_t = crate::sim_common::ROUND_INTERVAL_S)]
    pub round_interval: f64,
    /// cinch.conf's MaxRequeuesPerJob: no job is requeued more often than this.
    #[arg(long, value_parser = whole::<u32>, default_value_t = cinch_core::enact::apply::RequeueLimits::DEFAULT_MAX_PER_JOB)]
    pub max_requeues_per_job: u32,
    /// cinch.conf's MaxRequeuesPerHour: requeues across the cluster in any rolling hour.
    #[arg(long, value_parser = whole::<u32>, default_value_t = cinch_core::enact::apply::RequeueLimits::DEFAULT_MAX_PER_HOUR)]
    pub max_requeues_per_hour: u32,
    /// Where to write the CSV files, plots and report.html.
    #[arg(long, default_value = "cinch-sim-report")]
    pub out: PathBuf,
    /// Print the table only; write no files.
    #[arg(long)]
    pub no_report: bool,
    /// Also write the record the first policy's optimizer kept of the run (what its snapshots
    /// showed, as a live optimizer's STATE_DIR/record.jsonl) to this file, for `cinch sim
    /// evaluate` (`slurm` is recorded as cinch's `passthrough`: Slurm alone, seen by the agent).
    #[arg(long)]
    pub record_out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

pub fn main(args: SimArgs) -> Result<()> {
    match args.action {
        Some(SimAction::FitModel { pollux }) => fit_model(&pollux),
        Some(SimAction::Fidelity { pollux }) => fidelity(&pollux),
        Some(SimAction::Pack { traces, runs }) => {
            print!("{}", pack_table(&traces, runs)?);
            Ok(())
        }
        Some(SimAction::Suite(suite)) => crate::sim_suite::run(suite),
        Some(SimAction::Evaluate(evaluate)) => crate::sim_evaluate::run(evaluate),
        Some(SimAction::Predict {
            trace,
            format,
            train_share,
        }) => predict(&trace, format, train_share),
        None => run(args.run),
    }
}

/// A progress bar per policy on stderr (drawn only on a terminal, with the time left).
/// Progress on stderr: a bar with the time left on a terminal; elsewhere (a log, CI) a line
/// every 10 s, so a long run is not silent until it ends.
fn progress_bar(quiet: bool) -> impl FnMut(&str, usize, usize) {
    let terminal = std::io::stderr().is_terminal();
    let show = !quiet && terminal;
    let lines = !quiet && !terminal;
    let started = std::time::Instant::now();
    let mut last_line = started;
    let mut current: Option<(String, indicatif::ProgressBar)> = None;
    move |name: &str, done: usize, total: usize| {
        if lines && last_line.elapsed() >= std::time::Duration::from_secs(10) {
            last_line = std::time::Instant::now();
            eprintln!(
                "  {name}: {done}/{total} jobs done, {:.0} s so far",
                started.elapsed().as_secs_f64()
            );
        }
        if !show {
            return;
        }
        if current.as_ref().is_none_or(|(n, _)| n != name) {
            let bar = indicatif::ProgressBar::new(total as u64)
                .with_style(
                    indicatif::ProgressStyle::with_template(
                        "  {prefix:<22} [{bar:25}] {percent:>3}% {pos}/{len} jobs, {eta} left",
                    )
                    .expect("a valid template")
                    .progress_chars("#>."),
                )
                .with_prefix(name.to_string());
            current = Some((name.to_string(), bar));
        }
        if let Some((_, bar)) = &current {
            bar.set_position(done as u64);
            if done == total {
                bar.finish_and_clear();
            }
        }
    }
}

fn run(args: RunArgs) -> Result<()> {
    let recorded = match (&args.slurm_conf, &args.cluster, &args.source.trace) {
        (None, None, Some(path)) => trace::record_cluster(path)?,
        _ => None,
    };
    let (cluster, notes, from) = match (&args.slurm_conf, recorded) {
        (Some(path), _) => {
            let (cluster, notes) = cluster_of_site(path)?;
            (cluster, notes, "--slurm-conf")
        }
        (None, Some((cluster, notes))) => (cluster, notes, "the record's nodes"),
        (None, None) => (
            ClusterSpec::parse(args.cluster.as_deref().unwrap_or("16x8"), args.racks)
                .map_err(anyhow::Error::msg)?,
            Vec::new(),
            "",
        ),
    };
    for note in &notes {
        println!("{from}: {note}");
    }
    let network = Network {
        congestion: args.congestion,
        cross_rack: args.cross_rack,
    };
    network.validate().map_err(anyhow::Error::msg)?;
    if !(args.tick.is_finite() && args.tick >= 1.0) {
        bail!("--tick must be at least 1 second, not {}", args.tick);
    }
    check_round_interval(args.round_interval)?;
    if !(0.0..=1.0).contains(&args.hinted) {
        bail!("--hinted must be from 0 to 1, not {}", args.hinted);
    }
    if !(0.0..=1.0).contains(&args.elastic) {
        bail!("--elastic must be from 0 to 1, not {}", args.elastic);
    }
    if !(0.0..=1.0).contains(&args.progress_share) {
        bail!(
            "--progress-share must be from 0 to 1, not {}",
            args.progress_share
        );
    }
    if !(0.0..=1.0).contains(&args.idle_share) {
        bail!("--idle-share must be from 0 to 1, not {}", args.idle_share);
    }
    let idle_rules = cinch_core::wire::idle::IdleRules {
        grace_s: args.idle_grace_min.saturating_mul(60),
        warn_s: args.idle_warn_min.saturating_mul(60),
        ..Default::default()
    };
    idle_rules
        .validate()
        .map_err(|e| anyhow::anyhow!("--idle-grace-min/--idle-warn-min: {e}"))?;
    if !(0.0..=1.0).contains(&args.qos_share) {
        bail!("--qos-share must be from 0 to 1, not {}", args.qos_share);
    }
    if !(0.0..=1.0).contains(&args.share) {
        bail!("--share must be from 0 to 1, not {}", args.share);
    }
    if args.share > 0.0 && args.share_nodes == 0 {
        bail!("--share needs --share-nodes (the nodes that offer shards)");
    }
    if args.share_nodes >= cluster.nodes {
        bail!(
            "--share-nodes ({}) must leave some of the {} nodes whole",
            args.share_nodes,
            cluster.nodes
        );
    }
    if !(0.0..=2.0).contains(&args.share_stated_error) {
        bail!(
            "--share-stated-error must be from 0 to 2, not {}",
            args.share_stated_error
        );
    }
    if !(0.0..=10.0).contains(&args.share_interference) {
        bail!(
            "--share-interference must be from 0 to 10, not {}",
            args.share_interference
        );
    }
    let kinds: Vec<SchedulerKind> = if args.policies.is_empty() {
        cinch_sim::all_kinds()
    } else {
        args.policies.clone()
    };
    let (trace, description) = match args.source.read(cluster)? {
        None => {
            if args.jobs == 0 || !(args.load > 0.0 && args.load <= 10.0) {
                bail!("--jobs must be at least 1 and --load from 0 to 10");
            }
            args.workload
                .generate(args.jobs, cluster.total_gpus(), args.load, args.seed)
        }
        Some(_) if args.workload != Generated::Philly => {
            bail!("--workload generates the jobs: give it or --trace, not both")
        }
        Some((trace, format, path)) => (trace, format!("{} ({format:?})", path.display())),
    };
    if !(args.arrival_scale.is_finite() && args.arrival_scale > 0.0) {
        bail!(
            "--arrival-scale must be above 0, not {}",
            args.arrival_scale
        );
    }
    let mut trace = trace;
    if args.arrival_scale != 1.0 {
        for job in &mut trace.jobs {
            job.submit = (job.submit as f64 * args.arrival_scale).round() as i64;
        }
    }
    let description = if args.arrival_scale != 1.0 {
        format!("{description}, arrivals x{}", args.arrival_scale)
    } else {
        description
    };
    let recorded_opt_ins = trace.jobs.iter().all(|j| j.opted_in.is_some());
    let hinted = if recorded_opt_ins {
        "hints and requeue opt-ins as recorded".to_string()
    } else {
        format!("hints from {}% of jobs", (args.hinted * 100.0).round())
    };
    let users = trace
        .jobs
        .iter()
        .map(|j| j.user.as_str())
        .filter(|u| !u.is_empty())
        .collect::<std::collections::HashSet<_>>()
        .len();
    let multifactor = match args.priority {
        Priority::Multifactor => true,
        Priority::Basic => false,
        Priority::Auto => users >= 2,
    };
    if multifactor && users < 2 {
        bail!("--priority multifactor needs jobs with users (fair share is among users); this workload has {users}");
    }
    let priority = if multifactor {
        format!("Slurm's priorities: multifactor with fair share over the {users} users")
    } else {
        "Slurm's priorities: basic (first in, first out)".to_string()
    };
    let mut description = format!(
        "{description}; {priority}; {hinted}, preemptible: {}; {}",
        match args.preemptible {
            Preemptible::OptedIn => "those that opted in",
            Preemptible::All => "every job",
        },
        if trace.jobs.iter().all(|j| j.time_limit.is_some()) {
            "the trace's own time limits".to_string()
        } else {
            args.limits.to_string()
        }
    );
    if args.elastic > 0.0 {
        description.push_str(&format!(
            "; {}% of jobs elastic",
            (args.elastic * 100.0).round()
        ));
    }
    if args.qos_share > 0.0 {
        description.push_str(&format!(
            "; QoS targets for {}% of jobs",
            (args.qos_share * 100.0).round()
        ));
    }
    if args.progress_share > 0.0 {
        description.push_str(&format!(
            "; {}% of jobs show their progress",
            (args.progress_share * 100.0).round()
        ));
    }
    if args.idle_share > 0.0 {
        description.push_str(&format!(
            "; {}% of jobs hold their GPUs idle for the end of their run (IdleAction={}, grace \
             {} min, warning {} min)",
            (args.idle_share * 100.0).round(),
            args.idle_action,
            args.idle_grace_min,
            args.idle_warn_min
        ));
    }
    let options = WorkloadOptions {
        idle: args.idle_share,
        seed: args.seed,
        limits: args.limits.clone(),
        hinted: args.hinted,
        preemptible: args.preemptible,
        qos_share: args.qos_share,
        elastic: args.elastic,
        progress: args.progress_share,
    };
    let mut jobs = workload::from_trace(&trace, &options);
    let sharing = sim_sharing(
        args.share_nodes,
        cinch_sim::engine::SharingTruth::Interference(args.share_interference),
        cinch_core::models::sharing::ShareParams::default().interference,
        false,
        cinch_core::models::corun::ShareMode::TimeSlice,
    );
    if let Some(s) = &sharing {
        let pods = cinch_sim::packing::read_pod_shapes(&args.pods)
            .with_context(|| format!("--pods {} (peaks of sharing jobs)", args.pods.display()))?;
        let fractions = cinch_sim::packing::one_gpu_fractions(&pods);
        workload::assign_sharing(
            &mut jobs,
            args.share,
            &fractions,
            s.params.gpu_mem_gib,
            args.share_stated_error,
            args.seed,
        );
        description.push_str(&format!(
            "; {}% of one-GPU jobs may share, on {} sharing nodes (true interference {})",
            (args.share * 100.0).round(),
            args.share_nodes,
            args.share_interference
        ));
    }
    if jobs.is_empty() {
        bail!("the workload has no jobs to simulate");
    }
    let config = SimConfig {
        cluster,
        network,
        tick_s: args.tick,
        round_interval_s: args.round_interval,
        max_requeues_per_job: args.max_requeues_per_job,
        max_requeues_per_hour: args.max_requeues_per_hour,
        sharing,
        multifactor: multifactor.then(cinch_sim::fairshare::Multifactor::default),
        idle: (args.idle_share > 0.0).then(|| cinch_sim::engine::SimIdle {
            rules: idle_rules,
            action: cinch_core::wire::idle::IdleAction::parse(&args.idle_action)
                .expect("clap checked it"),
        }),
        ..SimConfig::default()
    };
    println!("workload: {description}; {} jobs", jobs.len());
    for (reason, count) in &trace.skipped {
        println!("  {count} rows: {reason}");
    }
    println!(
        "cluster:  {cluster}; network congestion {} (cross-rack x{})",
        network.congestion, network.cross_rack
    );
    let runs = compare(&jobs, &kinds, config, &mut progress_bar(args.quiet))?;
    if let Some(path) = &args.record_out {
        let Some((_, member)) = kinds[0].member() else {
            bail!("--record-out records a policy's run, not the portfolio's or the reference's");
        };
        let record = cinch_sim::selfsim::record_run(&jobs, &member, config)?;
        let mut file = std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("--record-out {}", path.display()))?,
        );
        record
            .write(&mut file)
            .and_then(|()| std::io::Write::flush(&mut file))
            .with_context(|| format!("--record-out {}", path.display()))?;
        println!(
            "record: {} jobs as {}'s optimizer saw them, in {}",
            record.len(),
            kinds[0],
            path.display()
        );
    }
    if let Some(first) = runs.first() {
        for (name, why) in first.outcome.unschedulable.iter().take(5) {
            println!("  not simulated: {name}: {why}");
        }
        let n = first.outcome.unschedulable.len();
        if n > 5 {
            println!("  ... and {} more jobs the cluster cannot hold", n - 5);
        }
    }
    println!();
    print!("{}", report::table(&runs));
    if args.idle_share > 0.0 {
        for run in &runs {
            println!("{}", crate::sim_studies::idle_line(run));
        }
    }
    for run in &runs {
        if let Some((median, n)) = run.progress_error {
            println!(
                "  {}: the run a job's progress predicted at a tenth of its steps was off by {:.1}% \
                 (median |predicted / actual - 1| over {n} ended jobs that showed progress)",
                run.summary.policy,
                median * 100.0
            );
        }
    }
    print!("{}", report::legend(&runs));
    print!("\n{}", report::verdict(&runs));
    // What the verdict assumes, and (where it assumed hints) the same comparison without them.
    let mut notes = report::Notes {
        multifactor,
        verdict: vec![format!(
            "Assumes: {hinted}{}; the slurm row and every policy's base order is {}.",
            if recorded_opt_ins || args.hinted == 0.0 {
                String::new()
            } else {
                " (only those carry hints and opt in to requeue: --hinted)".to_string()
            },
            if multifactor {
                "Slurm's priority/multifactor with fair share, its main scheduler and backfill (--priority)"
            } else {
                "Slurm's priority/basic, first in first out, its main scheduler and backfill (--priority)"
            }
        )],
    };
    if !recorded_opt_ins && args.hinted > 0.0 && args.share == 0.0 && runs.len() > 1 {
        let unhinted = workload::from_trace(
            &trace,
            &WorkloadOptions {
                hinted: 0.0,
                ..options
            },
        );
        let again = compare(&unhinted, &kinds, config, &mut progress_bar(args.quiet))?;
        let said = report::verdict(&again);
        if let Some(first) = said.lines().next() {
            notes.verdict.push(format!(
                "With no hints and no opt-ins (--hinted 0, every policy run again): {first}"
            ));
        }
    }
    for line in &notes.verdict {
        println!("{line}");
    }
    if let Some(first) = runs.first() {
        println!(
            "ideal avg JCT (every job started at its submission on its best placement): {:.3} h",
            first.summary.ideal_avg_jct / 3600.0
        );
    }
    if config.sharing.is_some() {
        for run in &runs {
            println!(
                "{}: {}",
                run.summary.policy,
                SharingStats::of(&run.outcome.jobs)
            );
        }
    }
    for run in &runs {
        if let Some(summary) = &run.portfolio {
            println!("{}: {summary}", run.summary.policy);
        }
    }
    let wall: Vec<String> = runs
        .iter()
        .map(|r| format!("{} {:.2}s", r.summary.policy, r.wall_s))
        .collect();
    println!("\nsimulated in: {}", wall.join(", "));
    if !args.no_report {
        let about = vec![
            (
                "workload".to_string(),
                format!("{description}; {} jobs", jobs.len()),
            ),
            ("cluster".to_string(), cluster.to_string()),
            (
                "network".to_string(),
                format!(
                    "congestion {} (inter-node sync x{}), cross-rack x{}",
                    network.congestion,
                    1.0 + network.congestion,
                    network.cross_rack
                ),
            ),
            (
                "command".to_string(),
                std::env::args().collect::<Vec<_>>().join(" "),
            ),
        ];
        let files = report::write_all(&args.out, "cinch sim", &about, &runs, &notes)?;
        println!(
            "report: {} ({})",
            args.out.join("report.html").display(),
            files.join(", ")
        );
    }
    Ok(())
}

fn predict(path: &Path, format: Option<FormatArg>, train_share: f64) -> Result<()> {
    let format = match format {
        Some(f) => f.into(),
        None => TraceFormat::detect(path)?,
    };
    let cluster = ClusterSpec::parse("16x8", 1).map_err(anyhow::Error::msg)?;
    let trace = read_trace(path, format, None, cluster)?;
    println!("{}: {} jobs\n", path.display(), trace.jobs.len());
    for online in [false, true] {
        let accuracy = cinch_sim::predict::evaluate(&trace, train_share, online)
            .map_err(anyhow::Error::msg)?;
        println!("{}", cinch_sim::predict::table(&accuracy));
    }
    Ok(())
}

fn fit_model(pollux: &Path) -> Result<()> {
    println!(
        "{:<12} {:>5} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>5} {:>7} {:>7}",
        "app",
        "rows",
        "comp_base",
        "comp/sample",
        "intra_base",
        "intra/gpu",
        "inter_base",
        "inter/gpu",
        "bsz",
        "MAPE%",
        "max%"
    );
    for app in App::ALL {
        let rows = perf::read_measurements(pollux, app)?;
        let fit = perf::fit(app, &rows);
        let m = &fit.model;
        println!(
            "{:<12} {:>5} {:>12.5e} {:>12.5e} {:>12.5e} {:>12.5e} {:>12.5e} {:>12.5e} {:>5} {:>7.1} {:>7.1}",
            app.name(),
            fit.rows,
            m.compute_base,
            m.compute_per_sample,
            m.intra_base,
            m.intra_per_gpu,
            m.inter_base,
            m.inter_per_gpu,
            m.typical_local_bsz,
            fit.mape,
            fit.max_error
        );
        let (builtin_mape, _) = perf::fit_error(app.model(), &rows);
        if (builtin_mape - fit.mape).abs() > 0.5 {
            println!(
                "  note: the built-in {app} model's error is {builtin_mape:.1}%: update perf.rs"
            );
        }
    }
    Ok(())
}

fn fidelity(pollux: &Path) -> Result<()> {
    let apps = PolluxApps::read(pollux)?;
    let summary = pollux.join("results-jobload/tiresias-1.0/summary.json");
    let text = std::fs::read_to_string(&summary)
        .with_context(|| format!("reading {}", summary.display()))?;
    let published: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", summary.display()))?;
    let cluster = ClusterSpec::parse("16x4", 1).map_err(anyhow::Error::msg)?;
    let config = SimConfig {
        cluster,
        // The Pollux simulator models no congestion or racks.
        network: Network {
            congestion: 0.0,
            cross_rack: 1.0,
        },
        tick_s: 60.0,
        restart_penalty_s: trace::STARTUP_S,
        ..SimConfig::default()
    };
    println!(
        "{:<12} {:>5} {:>14} {:>16} {:>8} {:>10}",
        "workload", "jobs", "ours avg JCT h", "published avg h", "ratio", "sim time s"
    );
    let (mut ours_sum, mut theirs_sum, mut n) = (0.0, 0.0, 0.0);
    for k in 1..=trace::WORKLOADS {
        let name = format!("workload-{k}");
        let path = trace::workload_path(pollux, k);
        let trace = trace::read_pollux_workload(&path, &apps, cluster.gpus_per_node)?;
        // The Pollux artifact's Tiresias may preempt every job: all of them opt in here. Its
        // simulator has no time limits and kills nothing: the oracle's limits never kill, and
        // only this Slurm-less comparison uses them.
        let jobs = workload::from_trace(
            &trace,
            &WorkloadOptions {
                hinted: 1.0,
                preemptible: Preemptible::All,
                limits: Limits::Oracle,
                ..WorkloadOptions::default()
            },
        );
        // The Pollux artifact's Tiresias: one queue threshold, 16 GPU-hours, no promotion.
        let tiresias =
            SchedulerKind::Policy(PolicyConfig::Tiresias(cinch_core::policy::TiresiasParams {
                thresholds_gpu_h: vec![16.0],
                promote_knob: 0.0,
                ..cinch_core::policy::TiresiasParams::default()
            }));
        let runs = compare(&jobs, &[tiresias], config, &mut |_, _, _| {})?;
        let ours = runs[0].summary.avg_jct / 3600.0;
        let theirs = published["avgs"][&name]
            .as_f64()
            .with_context(|| format!("{}: no avgs.{name}", summary.display()))?
            / 3600.0;
        println!(
            "{:<12} {:>5} {:>14.3} {:>16.3} {:>8.3} {:>10.3}",
            name,
            jobs.len(),
            ours,
            theirs,
            ours / theirs,
            runs[0].wall_s
        );
        ours_sum += ours;
        theirs_sum += theirs;
        n += 1.0;
    }
    println!(
        "{:<12} {:>5} {:>14.3} {:>16.3} {:>8.3}",
        "mean",
        "",
        ours_sum / n,
        theirs_sum / n,
        ours_sum / theirs_sum
    );
    Ok(())
}
