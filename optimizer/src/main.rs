//! `cinch`: the optimizer service and the admin's command line.

mod replay;
mod sim_cli;
mod sim_common;
mod sim_evaluate;
mod sim_stress;
mod sim_studies;
mod sim_suite;
mod why;

/// Rounds and simulations allocate and free many short-lived vectors and strings; glibc's
/// allocator spent about a sixth of a 100,000-job `decide` in malloc, free and consolidation
/// (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use hyper::Method;
use serde_json::{Map, Value};

use cinch_core::learn::history::History;
use cinch_service::client::{AdminClient, ClientError};
use cinch_service::config::{
    default_state_dir, load_token, ServeConfig, ServeOptions, TokenFile, DEFAULT_LISTEN,
};
use cinch_service::server;

#[derive(Parser)]
#[command(
    name = "cinch",
    version,
    about = "Deep-learning-aware GPU scheduling for Slurm"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the optimizer service (REST API for the plugin and for admins).
    #[command(
        after_help = "EXAMPLES:\n  cinch serve --config /etc/cinch/cinch-serve.toml\n  \
        cinch serve --listen-unix /run/cinch/optimizer.sock --state-dir /var/lib/cinch"
    )]
    Serve(ServeOptions),
    /// Show or change the optimizer's policy through its REST API.
    #[command(
        after_help = "EXAMPLES:\n  cinch policy show\n  cinch policy set mode=enforce\n  \
        cinch policy history --limit 5\n  cinch policy --url unix:/run/cinch/optimizer.sock show"
    )]
    Policy(PolicyArgs),
    /// Simulate cinch's policies and the baselines on a trace (default: a built-in
    /// Philly-shaped workload) and compare them.
    #[command(after_help = "EXAMPLES:\n  cinch sim\n  \
        cinch sim --trace ../shared/traces/philly_vc6c71a0.csv --arrival-scale 0.1 --cluster 64x8\n  \
        cinch sim --policies slurm,tiresias,cinch:preempt=false --out report\n  \
        cinch sim --trace history.txt --slurm-conf /etc/slurm/slurm.conf --policies slurm,cinch\n  \
        cinch sim suite --only pollux\n  cinch sim pack --runs 3")]
    Sim(sim_cli::SimArgs),
    /// Check the simulator against real Slurm: replay a trace slice, compressed in time, on a
    /// local cluster (plain Slurm, then each cinch policy) and through the simulator, and
    /// compare (docs/simulator.md, "Fidelity"). With --slurm-conf, on a site's own shape.
    #[command(after_help = "EXAMPLES:\n  cinch replay\n  \
        cinch replay --jobs 200 --cluster 32x8 --speedup 240 --out replay-philly \\\n    \
        --trace ../shared/traces/philly_vc6c71a0.csv --skip 1000\n  \
        cinch replay --trace history.txt --format sacct --slurm-conf /etc/slurm/slurm.conf --sim-only")]
    Replay(replay::ReplayArgs),
    /// The site's sharing model table from its accounting: reads `sacct -P` output (see
    /// EXAMPLES) and prints cinch.conf's `ShareModelMemory` and `ShareModelBusy` from the
    /// `gres/gpumem` and `gres/gpuutil` Slurm's NVML plugin recorded for jobs of one GPU that
    /// named their application (`app=`, `batch=` hints; docs/policies/sharing.md).
    #[command(after_help = "EXAMPLES:\n  \
        sacct -a -P --noconvert -S now-30days \\\n    \
        --format=JobID,AllocTRES,Comment,TRESUsageInMax,TRESUsageInAve > history.txt\n  \
        cinch share-table history.txt >> /etc/slurm/cinch.conf\n  \
        cinch share-table --from-optimizer")]
    ShareTable {
        /// The sacct output (`-`: standard input).
        #[arg(default_value = "-")]
        file: PathBuf,
        /// Instead of sacct's records, what cinch's job watchers read of ended jobs of one GPU
        /// since the optimizer started (admin token; docs/policies/sharing.md).
        #[arg(long)]
        from_optimizer: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// One replayed job (what `cinch replay` submits; not for people).
    #[command(hide = true)]
    ReplayJob(replay::ReplayJobArgs),
    /// The optimizer's recent decisions and their reasons, newest first (admin token).
    #[command(
        after_help = "EXAMPLES:\n  cinch decisions\n  cinch decisions --user alice --limit 50\n  \
        cinch decisions --job 4711 --output json"
    )]
    Decisions(DecisionsArgs),
    /// The running jobs whose GPUs sit idle, and the users who held the most idle GPU-hours, as
    /// the jobs' watchers read them (admin token; docs/policies/idle.md).
    #[command(after_help = "EXAMPLES:\n  cinch idle\n  cinch idle --output json")]
    Idle {
        #[command(flatten)]
        connect: ConnectArgs,
        /// `table` (default) or `json`.
        #[arg(long, value_parser = ["table", "json"], default_value = "table")]
        output: String,
    },
    /// Explain what cinch decided about a job and why (any user, about the jobs Slurm shows
    /// them; reads the job's AdminComment through `scontrol`, no token needed), then the latest
    /// decision the optimizer recorded for it: asked with the admin token where the caller can
    /// read it, else with the caller's MUNGE credential (their own jobs only).
    #[command(
        after_help = "EXAMPLES:\n  cinch why 1234\n  cinch why 1234 --output json\n  \
        cinch why 1234 --from-optimizer --url http://optimizer-host:6830"
    )]
    Why {
        /// The Slurm job id.
        job_id: String,
        /// `text` (default) or `json`.
        #[arg(long, value_parser = ["text", "json"], default_value = "text")]
        output: String,
        /// Fail unless the optimizer's latest decision can be shown (by default, where it cannot
        /// be, the record alone is shown and stderr says why).
        #[arg(long)]
        from_optimizer: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

#[derive(clap::Args)]
struct PolicyArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// `table` (default) or `json` (the service's answer as it is).
    #[arg(long, global = true, value_parser = ["table", "json"], default_value = "table")]
    output: String,
    #[command(subcommand)]
    action: PolicyAction,
}

/// How the admin CLI reaches the service and proves it is the admin.
#[derive(clap::Args, Clone)]
struct ConnectArgs {
    /// The service's URL, `http://host:port` or `unix:/path/to.sock` [default: from --config's
    /// `listen`, else http://127.0.0.1:6830].
    #[arg(long, env = "CINCH_URL")]
    url: Option<String>,
    /// Send the admin token over plain HTTP to a host other than this one (use https:// instead
    /// where you can).
    #[arg(long)]
    allow_remote_plain_http: bool,
    /// For an https:// URL: the CA certificate(s) (PEM) the service's certificate must chain to
    /// [default: the system's CA bundle].
    #[arg(long, env = "CINCH_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// File with the admin token [default: from --config, else the service's default].
    #[arg(long, env = "CINCH_ADMIN_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// The `cinch serve` TOML config, to find the URL and token file.
    #[arg(long, env = "CINCH_CONFIG")]
    config: Option<PathBuf>,
    /// The service's state directory, where it keeps admin.token by default.
    #[arg(long, env = "CINCH_STATE_DIR")]
    state_dir: Option<PathBuf>,
}

#[derive(clap::Args)]
struct DecisionsArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Only this job's decisions.
    #[arg(long)]
    job: Option<u32>,
    /// Only this user's jobs.
    #[arg(long)]
    user: Option<String>,
    /// The newest N (1-10000).
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// `table` (default) or `json`.
    #[arg(long, value_parser = ["table", "json"], default_value = "table")]
    output: String,
}

#[derive(Subcommand)]
enum PolicyAction {
    /// Print the policy in force.
    #[command(after_help = "EXAMPLES:\n  cinch policy show\n  cinch policy show --output json")]
    Show,
    /// Change settings: `mode=enforce`, `policy=consolidate`, or a parameter such as `ttl_s=120`
    /// (values are JSON when they parse as JSON, else strings; `KEY=null` restores a default).
    Set {
        #[arg(required = true, value_name = "KEY=VALUE")]
        settings: Vec<String>,
    },
    /// Print every version of the policy.
    #[command(
        after_help = "EXAMPLES:\n  cinch policy history\n  cinch policy history --limit 5 --output json"
    )]
    History {
        /// Only the newest N versions.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Evaluate the `portfolio` policy now: replay the recent window of the optimizer's record
    /// under each member (seconds) and run the winner, as every `every_h` does.
    #[command(
        after_help = "EXAMPLES:\n  cinch policy set policy=portfolio\n  cinch policy evaluate"
    )]
    Evaluate,
}

/// `cinch policy set --help`'s list of what may be set: the mode, and each policy of the
/// registry with its parameters and their defaults and what it is (from the code, so it never
/// goes stale).
fn policy_keys_help() -> String {
    let mut text = String::from(
        "KEYS:\n  mode=off|shadow|enforce\n  policy=NAME (then its parameters below; a key the policy \
         does not have is refused)\n\nPARAMETERS (defaults):\n",
    );
    for info in cinch_core::policy::POLICIES {
        let name = info.name;
        let Ok(config) = cinch_core::PolicyConfig::defaults_for(name) else {
            continue;
        };
        let Ok(Value::Object(fields)) = serde_json::to_value(&config) else {
            continue;
        };
        let params: Vec<String> = match fields.get("params") {
            Some(Value::Object(params)) => params.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            _ => Vec::new(),
        };
        let params = if params.is_empty() {
            "(no parameters)".to_string()
        } else {
            params.join(", ")
        };
        let kind = if info.baseline { "baseline: " } else { "" };
        text.push_str(&format!(
            "  {name}: {params}\n      ({kind}{})\n",
            info.summary
        ));
    }
    text.push_str(
        "\nEXAMPLES:\n  cinch policy set mode=shadow\n  cinch policy set policy=cinch ttl_s=120\n  \
         cinch policy set preempt=false max_wait_s=null\n",
    );
    text
}

fn main() -> ExitCode {
    let command = Cli::command().mut_subcommand("policy", |policy| {
        policy.mut_subcommand("set", |set| set.after_help(policy_keys_help()))
    });
    let cli = match Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Serve(options) => serve(options),
        Command::Policy(args) => policy(args),
        Command::Sim(args) => sim_cli::main(args),
        Command::Why {
            job_id,
            output,
            from_optimizer,
            connect,
        } => {
            // What the job's watcher last read of its progress, if the optimizer holds any.
            let progress = ask_about_job(&job_id, "progress", connect.clone()).ok();
            match ask_about_job(&job_id, "decision", connect) {
                Ok(latest) => why::run(&job_id, output == "json", Some(latest), progress),
                Err(e) if from_optimizer => Err(e.context("--from-optimizer")),
                // No optimizer to ask (down, not reachable from here, or no decision about the
                // job): the job's record is all there is, and the user is told why.
                Err(e) => {
                    eprintln!("cinch why: without the optimizer's latest decision: {e:#}");
                    why::run(&job_id, output == "json", None, progress)
                }
            }
        }
        Command::Decisions(args) => decisions(args),
        Command::Idle { connect, output } => idle(connect, &output),
        Command::ShareTable {
            from_optimizer: true,
            connect,
            ..
        } => share_table_from_optimizer(connect),
        Command::ShareTable { file, .. } => share_table(&file),
        Command::Replay(args) => replay::run(args),
        Command::ReplayJob(args) => replay::run_job(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cinch: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(options: ServeOptions) -> Result<()> {
    let config = ServeConfig::resolve(options)?;
    tracing_subscriber::fmt()
        .with_max_level(config.log_level)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let history = match &config.import_history {
        Some(path) => {
            let (history, imported) = import_history(path)?;
            tracing::info!(path = %path.display(), "{imported}");
            history
        }
        None => History::default(),
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(server::run_with(config, history))?;
    Ok(())
}

/// What a site's `sacct` export teaches the run-time predictor (`cinch serve --import-history`),
/// and a line saying how much of it was used. `--json` output is told from `-P` output by its
/// first character.
fn import_history(path: &std::path::Path) -> Result<(History, String)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the history to import, {}", path.display()))?;
    let trace = if text.trim_start().starts_with('{') {
        cinch_sim::trace::read_sacct_json(path)
    } else {
        cinch_sim::trace::read_sacct_parsable(path)
    }
    .with_context(|| format!("cannot import the history in {}", path.display()))?;
    let mut jobs: Vec<_> = trace.jobs.iter().collect();
    // Learned in the order the jobs ended, as online.
    jobs.sort_by(|a, b| (a.submit as f64 + a.run_time).total_cmp(&(b.submit as f64 + b.run_time)));
    let mut history = History::default();
    let learned = jobs.iter().filter(|j| j.import_into(&mut history)).count();
    let skipped: usize = trace.skipped.iter().map(|(_, n)| n).sum();
    let summary = format!(
        "imported the run times of {learned} ended GPU jobs ({} shorter than a minute, {skipped} \
         rows without a GPU run skipped)",
        jobs.len() - learned
    );
    if learned == 0 {
        bail!(
            "{} holds no ended GPU job to learn from: {summary}",
            path.display()
        );
    }
    Ok((history, summary))
}

/// Builds the merge patch `cinch policy set` sends.
fn settings_patch(settings: &[String]) -> Result<Value> {
    let mut patch = Map::new();
    let mut params = Map::new();
    let mut policy_name = None;
    for setting in settings {
        let Some((key, raw)) = setting.split_once('=') else {
            bail!("'{setting}' is not KEY=VALUE");
        };
        let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.into()));
        match key {
            "mode" => {
                patch.insert("mode".into(), value);
            }
            "policy" | "name" => policy_name = Some(value),
            "" => bail!("'{setting}' has an empty key"),
            param => {
                params.insert(param.into(), value);
            }
        }
    }
    let mut policy = Map::new();
    if let Some(name) = policy_name {
        policy.insert("name".into(), name);
    }
    if !params.is_empty() {
        policy.insert("params".into(), Value::Object(params));
    }
    if !policy.is_empty() {
        patch.insert("policy".into(), Value::Object(policy));
    }
    Ok(Value::Object(patch))
}

/// Where the service is and how the admin CLI reaches it, from the command line's settings.
struct Connection {
    url: String,
    token_file: TokenFile,
    ca_file: Option<PathBuf>,
    allow_remote_plain_http: bool,
}

impl Connection {
    fn resolve(args: ConnectArgs) -> Result<Connection> {
        let serve = ServeOptions {
            config: args.config,
            state_dir: args.state_dir,
            ..ServeOptions::default()
        }
        .with_file()?;
        let url = args.url.unwrap_or_else(|| {
            let scheme = if serve.tls_cert_file.is_some() {
                "https"
            } else {
                "http"
            };
            format!(
                "{scheme}://{}",
                serve
                    .listen
                    .map_or(DEFAULT_LISTEN.to_string(), |l| l.to_string())
            )
        });
        let token_file = TokenFile {
            path: args
                .token_file
                .or(serve.admin_token_file)
                .unwrap_or_else(|| {
                    serve
                        .state_dir
                        .unwrap_or_else(default_state_dir)
                        .join("admin.token")
                }),
            create_if_missing: false,
        };
        Ok(Connection {
            url,
            token_file,
            ca_file: args.ca_file,
            allow_remote_plain_http: args.allow_remote_plain_http,
        })
    }

    /// A client that proves the admin with the admin token.
    fn admin(&self) -> Result<AdminClient> {
        let endpoint = cinch_core::net::endpoint::Endpoint::parse(&self.url)?;
        if endpoint.in_clear() && !self.allow_remote_plain_http {
            anyhow::bail!(
                "{} is not on this host: the admin token would travel in clear text; use \
                 https:// (cinch serve --tls-cert-file), run cinch policy on the optimizer's \
                 host, or pass --allow-remote-plain-http on a trusted network",
                self.url
            );
        }
        let (token, _) = load_token(&self.token_file)?;
        Ok(AdminClient::new(&self.url, token, self.ca_file.as_deref())?)
    }
}

/// What the optimizer holds about `job_id`: its latest `decision`, or the latest `progress`
/// reading of its watcher (an error where it holds none the caller may see). Asked with the admin
/// token where the caller can read it; otherwise with the caller's own MUNGE credential (one per
/// request: munged refuses one used twice), which the service accepts for the caller's own jobs
/// only.
fn ask_about_job(job_id: &str, what: &str, connect: ConnectArgs) -> Result<Value> {
    let Ok(id) = job_id.parse::<u32>() else {
        bail!("the optimizer knows jobs by number; '{job_id}' is not one");
    };
    let connection = Connection::resolve(connect)?;
    let client = match connection.admin() {
        Ok(client) => client,
        Err(admin) => {
            let credential = why::munge_credential(id).with_context(|| {
                format!("no admin token ({admin:#}), and no MUNGE credential either")
            })?;
            AdminClient::new(
                &connection.url,
                String::new(),
                connection.ca_file.as_deref(),
            )?
            .with_munge(&credential)
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let path = format!("/v1/jobs/{id}/{what}");
    Ok(runtime.block_on(client.send(Method::GET, &path, None))?)
}

/// One request to the service's admin API, from the command line's connection settings.
fn admin_request(
    connect: ConnectArgs,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<Value> {
    let connection = Connection::resolve(connect)?;
    let client = connection.admin().with_context(|| {
        format!(
            "this is an admin command: it needs the optimizer's admin token, {}, and this user \
             cannot use it (run it as root or the optimizer's user, or pass --token-file; users \
             ask about their own jobs with cinch why JOBID)",
            connection.token_file.path.display()
        )
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime
        .block_on(client.send(method, path, body))
        .map_err(|e| match e {
            ClientError::Api { status: 401, .. } => anyhow::Error::new(e).context(format!(
                "the optimizer at {} refused the admin token read from {} (is it the service's \
                 admin token? see --token-file and --state-dir)",
                connection.url,
                connection.token_file.path.display()
            )),
            other => other.into(),
        })
}

fn decisions(args: DecisionsArgs) -> Result<()> {
    if !(1..=10_000).contains(&args.limit) {
        bail!("--limit must be from 1 to 10000, not {}", args.limit);
    }
    let mut path = format!("/v1/decisions?limit={}", args.limit);
    if let Some(job) = args.job {
        path.push_str(&format!("&job_id={job}"));
    }
    if let Some(user) = &args.user {
        if user.is_empty()
            || !user
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            bail!("--user '{user}' is not a user name");
        }
        path.push_str(&format!("&user={user}"));
    }
    let answer = admin_request(args.connect, Method::GET, &path, None)?;
    if args.output == "json" {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        print!("{}", decisions_table(&answer));
    }
    Ok(())
}

fn share_table_from_optimizer(connect: ConnectArgs) -> Result<()> {
    let answer = admin_request(connect, Method::GET, "/v1/share-table", None)?;
    let lines = answer["conf_lines"]
        .as_str()
        .context("the optimizer's share table has no conf_lines")?;
    print!("{lines}");
    Ok(())
}

fn idle(connect: ConnectArgs, output: &str) -> Result<()> {
    let answer = admin_request(connect, Method::GET, "/v1/idle", None)?;
    if output == "json" {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        let report: cinch_service::idle::IdleReport = serde_json::from_value(answer)
            .context("the optimizer's idle report is not what this cinch reads")?;
        print!("{}", idle_tables(&report));
    }
    Ok(())
}

/// `cinch idle`'s two tables: the idle jobs, then the users by idle GPU-hours.
fn idle_tables(report: &cinch_service::idle::IdleReport) -> String {
    let rules = &report.rules;
    let mut out = format!(
        "Idle: GPUs under {}% busy; flagged after {} min, acted on {} min later.\n\n",
        rules.gpu_percent,
        rules.grace_s / 60,
        rules.warn_s / 60
    );
    if report.jobs.is_empty() {
        out.push_str("No running job's GPUs are idle.\n");
    } else {
        let mut rows = vec![[
            "job".to_string(),
            "user".into(),
            "gpus".into(),
            "busy".into(),
            "state".into(),
            "idle since".into(),
            "action".into(),
            "at".into(),
            "idle GPU-h".into(),
        ]];
        for j in &report.jobs {
            rows.push([
                j.job_id.to_string(),
                j.user.clone(),
                j.gpus.to_string(),
                format!("{}%", j.busy_percent),
                j.state.clone(),
                why::local_time(j.idle_since),
                j.action.name().to_string(),
                why::local_time(j.act_at),
                format!("{:.1}", j.idle_gpu_hours),
            ]);
        }
        out.push_str(&aligned(&rows));
    }
    out.push('\n');
    if report.users.is_empty() {
        out.push_str("No user's GPUs were read idle since the optimizer started.\n");
    } else {
        let mut rows = vec![[
            "user".to_string(),
            "idle GPU-h".into(),
            "of GPU-h read".into(),
            "idle share".into(),
            "jobs idle".into(),
        ]];
        for u in &report.users {
            rows.push([
                u.user.clone(),
                format!("{:.1}", u.idle_gpu_hours),
                format!("{:.1}", u.read_gpu_hours),
                format!(
                    "{:.0}%",
                    100.0 * u.idle_gpu_hours / u.read_gpu_hours.max(f64::MIN_POSITIVE)
                ),
                u.idle_jobs.to_string(),
            ]);
        }
        out.push_str(&aligned(&rows));
    }
    out
}

/// Rows as columns as wide as their widest cell.
fn aligned<const N: usize>(rows: &[[String; N]]) -> String {
    let mut width = [0usize; N];
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = width
            .iter()
            .zip(row)
            .map(|(w, cell)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// One line per decision: when, which job and user, the policy and mode, what it changes, why.
fn decisions_table(answer: &Value) -> String {
    let mut rows: Vec<[String; 7]> = vec![[
        "time".into(),
        "job".into(),
        "user".into(),
        "policy".into(),
        "mode".into(),
        "action".into(),
        "why".into(),
    ]];
    for record in answer.as_array().into_iter().flatten() {
        let d = &record["decision"];
        let mut actions = Vec::new();
        if let Some(nodes) = d["pin_nodes"].as_array() {
            let names: Vec<&str> = nodes.iter().filter_map(Value::as_str).collect();
            actions.push(format!("pin {}", names.join(",")));
        }
        if let Some(t) = d["delay_until"].as_i64() {
            actions.push(format!("delay to {}", why::local_time(t)));
        }
        match d["hold"].as_bool() {
            Some(true) => actions.push("hold".into()),
            Some(false) => actions.push("release".into()),
            None => {}
        }
        if let Some(p) = d["priority"].as_u64() {
            actions.push(format!("priority {p}"));
        }
        if let Some(n) = d["nice"].as_i64() {
            actions.push(format!("nice {n}"));
        }
        if d["requeue"].as_bool() == Some(true) {
            actions.push("requeue".into());
        }
        if d["idle"]["cancel"].as_bool() == Some(true) {
            actions.push("cancel".into());
        } else if d["idle"].is_object() && d["requeue"].as_bool() != Some(true) {
            actions.push("idle warning".into());
        }
        if let Some(g) = d["gpus"].as_u64() {
            actions.push(format!("{g} GPUs"));
        }
        let action = if actions.is_empty() {
            "(none: explains)".to_string()
        } else {
            actions.join("; ")
        };
        rows.push([
            why::local_time(record["time"].as_i64().unwrap_or(0)),
            d["job_id"].to_string(),
            record["user"].as_str().unwrap_or("").to_string(),
            record["policy"].as_str().unwrap_or("").to_string(),
            record["mode"].as_str().unwrap_or("").to_string(),
            action,
            d["reason"].as_str().unwrap_or("").to_string(),
        ]);
    }
    // Every column as wide as its widest cell (the job id right-aligned), the reason last.
    let mut width = [0usize; 6];
    for row in &rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (k, (w, cell)) in width.iter().zip(row).enumerate() {
            if k == 1 {
                line.push_str(&format!("{cell:>w$}  "));
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        line.push_str(&row[6]);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The policy in force, in words: its version, mode, policy and every parameter, with the
/// default beside each one that differs.
fn policy_table(record: &Value) -> String {
    let settings = &record["settings"];
    let name = settings["policy"]["name"].as_str().unwrap_or("?");
    let mut out = format!(
        "version {}, changed {} ({})\nmode:   {}\npolicy: {name}\n",
        record["version"],
        why::local_time(record["changed_at"].as_i64().unwrap_or(0)),
        record["change"].as_str().unwrap_or(""),
        settings["mode"].as_str().unwrap_or("?"),
    );
    let defaults = cinch_core::PolicyConfig::defaults_for(name)
        .ok()
        .and_then(|c| serde_json::to_value(c).ok())
        .map(|v| v["params"].clone())
        .unwrap_or(Value::Null);
    if let Some(params) = settings["policy"]["params"].as_object() {
        for (key, value) in params {
            match defaults.get(key) {
                Some(default) if default != value => {
                    out.push_str(&format!("  {key} = {value}   (default {default})\n"));
                }
                _ => out.push_str(&format!("  {key} = {value}\n")),
            }
        }
    }
    if let Ok(config) =
        serde_json::from_value::<cinch_core::PolicyConfig>(settings["policy"].clone())
    {
        out.push_str(&users_options(&config));
    }
    out
}

/// What users' own `--cinch-*` requests count under `config` and the plugin's settings: the
/// same rules sbatch tells users by (docs/users.md, "What counts here").
fn users_options(config: &cinch_core::PolicyConfig) -> String {
    use cinch_core::wire::decision::StatedTargets;
    let name = config.name();
    let targets = match config.stated_targets() {
        _ if name == "portfolio" => "as the member in force counts them".to_string(),
        StatedTargets::Everyone => "count for every user".to_string(),
        StatedTargets::Listed { accounts, qos } if accounts.is_empty() && qos.is_empty() => {
            "do not count (user_targets=false; Slurm's --deadline does)".to_string()
        }
        StatedTargets::Listed { accounts, qos } => format!(
            "count only in accounts [{}] and QOS [{}] (user_target_accounts, user_target_qos)",
            accounts.join(", "),
            qos.join(", ")
        ),
        StatedTargets::Unused { .. } => format!("do not count: {name} does not use them"),
    };
    let requeues = if config.info().requeues {
        format!("with --requeue, {name} may requeue the job (MaxRequeuesPerJob in cinch.conf; 0: never)")
    } else {
        format!("do not count: {name} never requeues")
    };
    format!(
        "users' --cinch-* options here (sbatch tells users when theirs do not count):\n  \
         --cinch-due, --cinch-turnaround, --cinch-start-within: {targets}\n  \
         --cinch-ckpt, --cinch-elastic: {requeues}\n  \
         --cinch-share, --cinch-gpu-mem: count where cinch.conf names a SharePartition and \
         Mode=enforce\n  \
         --cinch-app, --cinch-batch: always read; ignored for jobs in ExcludePartitions or \
         ExcludeQOS\n"
    )
}

fn policy(args: PolicyArgs) -> Result<()> {
    let (method, path, body) = match &args.action {
        PolicyAction::Show => (Method::GET, "/v1/policy".to_string(), None),
        PolicyAction::Evaluate => (Method::POST, "/v1/portfolio/evaluate".to_string(), None),
        PolicyAction::Set { settings } => (
            Method::PATCH,
            "/v1/policy".to_string(),
            Some(settings_patch(settings)?),
        ),
        PolicyAction::History { limit } => (
            Method::GET,
            match limit {
                Some(n) => format!("/v1/policy/history?limit={n}"),
                None => "/v1/policy/history".to_string(),
            },
            None,
        ),
    };
    let answer = admin_request(args.connect.clone(), method, &path, body.as_ref())?;
    let portfolio = matches!(args.action, PolicyAction::Show)
        && answer["settings"]["policy"]["name"] == "portfolio";
    match (args.output.as_str(), args.action) {
        ("json", _) => println!("{}", serde_json::to_string_pretty(&answer)?),
        (_, PolicyAction::History { .. }) => print_history(&answer),
        (_, PolicyAction::Evaluate) => print!(
            "{}",
            portfolio_table(&serde_json::json!({
                "in_force": answer["after"],
                "evaluations": [answer],
            }))
        ),
        _ => print!("{}", policy_table(&answer)),
    }
    if portfolio && args.output != "json" {
        let view = admin_request(args.connect, Method::GET, "/v1/portfolio", None)?;
        print!("{}", portfolio_table(&view));
    }
    Ok(())
}

/// The portfolio's member in force and its latest evaluation, as `cinch policy show` prints
/// them.
fn portfolio_table(view: &Value) -> String {
    let mut out = match (view["in_force"].as_str(), view["since"].as_i64()) {
        (Some(member), Some(since)) => {
            format!("in force: {member}, since {}\n", why::local_time(since))
        }
        (Some(member), None) => format!("in force: {member}\n"),
        (None, _) => "in force: none (the policy in force is not portfolio)\n".to_string(),
    };
    let variants: Vec<&str> = view["variants"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !variants.is_empty() {
        out.push_str(&format!(
            "variants the parameter search keeps: {}\n",
            variants.join(", ")
        ));
    }
    let Some(latest) = view["evaluations"].as_array().and_then(|e| e.first()) else {
        out.push_str("no evaluation yet (every every_h; cinch policy evaluate runs one now)\n");
        return out;
    };
    out.push_str(&format!(
        "latest evaluation {}: the window {} .. {} replayed under each member\n",
        why::local_time(latest["at"].as_i64().unwrap_or(0)),
        why::local_time(latest["window_start"].as_i64().unwrap_or(0)),
        why::local_time(latest["window_end"].as_i64().unwrap_or(0)),
    ));
    if let Some(with) = latest["replayed_with"].as_str().filter(|w| !w.is_empty()) {
        out.push_str(&format!("  replayed with {with}\n"));
    }
    let results = latest["results"].as_array().cloned().unwrap_or_default();
    // As wide as the longest name (a searched variant names its parameters).
    let width = results
        .iter()
        .filter_map(|r| r["member"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(0)
        .max(14);
    // Finish targets missed, when the window judged any.
    let targeted = results
        .iter()
        .filter_map(|r| r["qos_targeted"].as_u64())
        .max()
        .unwrap_or(0);
    out.push_str(&format!(
        "  {:<width$} {:>8} {:>8} {:>8} {:>6}{}\n",
        "member",
        "mean h",
        "p99 h",
        "fairness",
        "jobs",
        if targeted > 0 { "  targets missed" } else { "" }
    ));
    for r in &results {
        let missed = match r["qos_missed"].as_f64() {
            Some(m) if targeted > 0 => format!("  {:>5.1}% of {targeted}", m * 100.0),
            _ => String::new(),
        };
        out.push_str(&format!(
            "  {:<width$} {:>8.3} {:>8.3} {:>8.3} {:>6}{missed}\n",
            r["member"].as_str().unwrap_or("?"),
            r["mean_h"].as_f64().unwrap_or(f64::NAN),
            r["p99_h"].as_f64().unwrap_or(f64::NAN),
            r["fairness"].as_f64().unwrap_or(f64::NAN),
            // Through a string: a JSON value ignores the width.
            r["jobs"]
                .as_u64()
                .map_or("?".to_string(), |j| j.to_string()),
        ));
    }
    out.push_str(&format!(
        "  why: {}\n",
        latest["why"].as_str().unwrap_or("")
    ));
    out
}

fn print_history(history: &Value) {
    println!(
        "{:>7}  {:<20}  {:<8}  {:<12}  change",
        "version", "changed", "mode", "policy"
    );
    for record in history.as_array().into_iter().flatten() {
        let settings = &record["settings"];
        println!(
            "{:>7}  {:<20}  {:<8}  {:<12}  {}",
            record["version"],
            why::local_time(record["changed_at"].as_i64().unwrap_or(0)),
            settings["mode"].as_str().unwrap_or("?"),
            settings["policy"]["name"].as_str().unwrap_or("?"),
            record["change"].as_str().unwrap_or(""),
        );
    }
}

/// `cinch share-table`: the model table from sacct output.
fn share_table(file: &std::path::Path) -> Result<()> {
    let text = if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading sacct output from standard input")?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let table = cinch_core::models::share_table::from_sacct(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    print!("{}", table.conf_lines());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn policy_show_gives_the_finish_targets_missed_when_the_window_judged_any() {
        let view = |targeted: u64| {
            json!({
                "in_force": "tiresias", "since": 0, "variants": [],
                "evaluations": [{
                    "at": 0, "window_start": 0, "window_end": 3600, "why": "kept",
                    "results": [
                        {"member": "cinch", "mean_h": 1.0, "p99_h": 2.0, "fairness": 0.9,
                         "jobs": 30, "qos_targeted": targeted, "qos_missed": 0.25},
                        {"member": "tiresias", "mean_h": 0.8, "p99_h": 2.5, "fairness": 0.8,
                         "jobs": 30, "qos_targeted": targeted, "qos_missed": 0.125},
                    ],
                }],
            })
        };
        let table = portfolio_table(&view(8));
        assert!(table.contains("jobs  targets missed\n"), "{table}");
        assert!(table.contains("30   25.0% of 8\n"), "{table}");
        assert!(table.contains("30   12.5% of 8\n"), "{table}");
        let table = portfolio_table(&view(0));
        assert!(!table.contains("targets missed"), "{table}");
        assert!(table.contains("    30\n"), "{table}");
    }

    #[test]
    fn an_imported_sacct_history_predicts_a_users_next_similar_job() {
        let dir = std::env::temp_dir().join(format!("cinch-import-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sacct.txt");
        let mut text =
            String::from("JobID|JobName|User|Submit|Start|End|Timelimit|AllocTRES|State\n");
        for (i, hour) in (10..13).enumerate() {
            text.push_str(&format!(
                "{}|bert|ann|2024-03-01T{hour}:00:00|2024-03-01T{hour}:00:00|2024-03-01T{hour}:40:00|\
                 1-00:00:00|cpu=16,gres/gpu=8,node=1|COMPLETED\n",
                100 + i
            ));
        }
        text.push_str("200|prep|bob|2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T10:09:00|10:00|cpu=2|COMPLETED\n");
        std::fs::write(&path, text).unwrap();
        let (history, summary) = import_history(&path).unwrap();
        assert!(
            summary.contains("run times of 3 ended GPU jobs"),
            "{summary}"
        );
        assert!(summary.contains("1 rows without a GPU run"), "{summary}");
        let p = history.predict_run_s("ann", Some("bert"), 8, Some(86_400.0), 3_600.0);
        assert_eq!(p.source, cinch_core::learn::history::RunSource::Similar);
        assert!((p.run_s - 2_400.0).abs() < 1.0, "{p:?}");

        // Nothing to learn from: a clear error, not an empty history.
        std::fs::write(
            &path,
            "JobID|JobName|User|Submit|Start|End|Timelimit|AllocTRES|State\n",
        )
        .unwrap();
        let err = import_history(&path).unwrap_err();
        assert!(format!("{err:#}").contains("no ended GPU job"), "{err:#}");
        let err = import_history(&dir.join("missing.txt")).unwrap_err();
        assert!(
            format!("{err:#}").contains("cannot read the history"),
            "{err:#}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn set_arguments_become_a_merge_patch() {
        let args: Vec<String> = [
            "mode=enforce",
            "policy=consolidate",
            "ttl_s=120",
            "cross_rack=false",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            settings_patch(&args).unwrap(),
            json!({"mode": "enforce", "policy": {"name": "consolidate",
                   "params": {"ttl_s": 120, "cross_rack": false}}})
        );
        assert!(settings_patch(&["mode".to_string()]).is_err());
    }

    #[test]
    fn the_policy_and_decisions_read_as_tables() {
        let record = json!({"version": 3, "changed_at": 0, "change": "PATCH /v1/policy: policy",
            "settings": {"mode": "shadow", "policy": {"name": "consolidate",
                "params": {"cross_rack": true, "min_gpus": 2, "ttl_s": 120}}}});
        let table = policy_table(&record);
        assert!(table.starts_with("version 3, changed "), "{table}");
        assert!(
            table.contains("mode:   shadow\npolicy: consolidate\n"),
            "{table}"
        );
        assert!(table.contains("  ttl_s = 120   (default 300)\n"), "{table}");
        assert!(table.contains("  min_gpus = 2\n"), "{table}");
        let log = json!([{"time": 0, "policy": "cinch", "mode": "enforce", "user": "ann",
            "decision": {"job_id": 7, "pin_nodes": ["n1", "n2"], "priority": 5,
                "reason": "consolidated", "ttl_s": 300}}]);
        let table = decisions_table(&log);
        assert_eq!(table.lines().count(), 2, "{table}");
        assert!(table.contains("pin n1,n2; priority 5"), "{table}");
        assert!(table.trim_end().ends_with("consolidated"), "{table}");
        // Columns line up with their header whatever the cells' widths.
        let log = json!([
            {"time": 0, "policy": "cinch", "mode": "enforce", "user": "a-rather-long-user-name",
             "decision": {"job_id": 7, "pin_nodes": ["node-001", "node-002", "node-003"],
                 "priority": 991811034, "reason": "consolidated", "ttl_s": 300}},
            {"time": 0, "policy": "cinch", "mode": "shadow", "user": "bo",
             "decision": {"job_id": 1234567, "reason": "shorter first", "ttl_s": 300}}]);
        let table = decisions_table(&log);
        let lines: Vec<&str> = table.lines().collect();
        let at = |line: &str, word: &str| line.find(word).unwrap();
        assert_eq!(at(lines[0], "why"), at(lines[1], "consolidated"), "{table}");
        assert_eq!(
            at(lines[0], "why"),
            at(lines[2], "shorter first"),
            "{table}"
        );
        assert_eq!(at(lines[0], "mode"), at(lines[2], "shadow"), "{table}");
        assert_eq!(
            at(lines[0], "job") + 3,
            at(lines[1], " 7 ") + 2,
            "the job id right-aligned under its header: {table}"
        );
    }
}
