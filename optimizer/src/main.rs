//! `cinch`: the optimizer service and the admin's command line.

mod sim_cli;
mod sim_suite;
mod why;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use hyper::Method;
use serde_json::{Map, Value};

use cinch_core::history::History;
use cinch_service::client::AdminClient;
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
        cinch sim suite --only pollux\n  cinch sim pack --runs 3")]
    Sim(sim_cli::SimArgs),
    /// Explain what cinch decided about a job and why (any user, about the jobs Slurm shows
    /// them; reads the job's AdminComment through `scontrol`, no token needed).
    ///
    /// EXAMPLES:
    ///   cinch why 1234
    ///   cinch why 1234 --output json
    Why {
        /// The Slurm job id.
        job_id: String,
        /// `text` (default) or `json`.
        #[arg(long, value_parser = ["text", "json"], default_value = "text")]
        output: String,
    },
}

#[derive(clap::Args)]
struct PolicyArgs {
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
    #[command(subcommand)]
    action: PolicyAction,
}

#[derive(Subcommand)]
enum PolicyAction {
    /// Print the policy in force.
    Show,
    /// Change settings: `mode=enforce`, `policy=consolidate`, or a parameter such as `ttl_s=120`
    /// (values are JSON when they parse as JSON, else strings; `KEY=null` restores a default).
    Set {
        #[arg(required = true, value_name = "KEY=VALUE")]
        settings: Vec<String>,
    },
    /// Print every version of the policy.
    History {
        /// Only the newest N versions.
        #[arg(long)]
        limit: Option<usize>,
    },
}

/// `cinch policy set --help`'s list of what may be set: the mode, the policy names, and each
/// policy's parameters with their defaults (from the code, so it never goes stale).
fn policy_keys_help() -> String {
    let mut text = String::from(
        "KEYS:\n  mode=off|shadow|enforce\n  policy=NAME (then its parameters below; a key the policy \
         does not have is refused)\n\nPARAMETERS (defaults):\n",
    );
    for name in cinch_core::policy::POLICY_NAMES {
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
        text.push_str(&format!("  {name}: {params}\n"));
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
        Command::Why { job_id, output } => why::run(&job_id, output == "json"),
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

fn policy(args: PolicyArgs) -> Result<()> {
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
    let endpoint = cinch_core::endpoint::Endpoint::parse(&url)?;
    if endpoint.in_clear() && !args.allow_remote_plain_http {
        anyhow::bail!(
            "{url} is not on this host: the admin token would travel in clear text; use \
             https:// (cinch serve --tls-cert-file), run cinch policy on the optimizer's host, or \
             pass --allow-remote-plain-http on a trusted network"
        );
    }
    let (token, _) = load_token(&token_file)?;
    let client = AdminClient::new(&url, token, args.ca_file.as_deref())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (method, path, body) = match &args.action {
        PolicyAction::Show => (Method::GET, "/v1/policy".to_string(), None),
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
    let answer = runtime.block_on(client.send(method, &path, body.as_ref()))?;
    match args.action {
        PolicyAction::History { .. } => print_history(&answer),
        _ => println!("{}", serde_json::to_string_pretty(&answer)?),
    }
    Ok(())
}

fn print_history(history: &Value) {
    println!(
        "{:>7}  {:<20}  {:<8}  {:<12}  change",
        "version", "changed (UTC)", "mode", "policy"
    );
    for record in history.as_array().into_iter().flatten() {
        let settings = &record["settings"];
        println!(
            "{:>7}  {:<20}  {:<8}  {:<12}  {}",
            record["version"],
            utc(record["changed_at"].as_i64().unwrap_or(0)),
            settings["mode"].as_str().unwrap_or("?"),
            settings["policy"]["name"].as_str().unwrap_or("?"),
            record["change"].as_str().unwrap_or(""),
        );
    }
}

/// `YYYY-MM-DD HH:MM:SS` for Unix seconds (civil-from-days; no date crate needed for one format).
fn utc(seconds: i64) -> String {
    let (days, rem) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert_eq!(p.source, cinch_core::history::RunSource::Similar);
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
    fn formats_utc_times() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_795_000_000), "2026-11-18 11:06:40"); // date -u -d @1795000000
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
    }
}
