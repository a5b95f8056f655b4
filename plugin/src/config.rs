//! `cinch.conf`, read from beside slurm.conf when the plugin loads.
//!
//! The format is Slurm's own: one `Key=Value` per line, `#` starts a comment, keys are
//! case-insensitive. A mistake in this file must never stop slurmctld: every unknown key or bad
//! value becomes a [`Problem`] (logged to slurmctld.log by the plugin) and the affected setting
//! keeps its safe default.

use std::fmt;
use std::str::FromStr;

use cinch_core::net::endpoint::Endpoint;

/// What cinch may do to jobs: the same three modes the optimizer uses.
pub use cinch_core::Mode;

/// How much cinch itself logs (slurmctld's `SlurmctldDebug` filters on top of this).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error,
    Info,
    Verbose,
    Debug,
}

impl FromStr for LogLevel {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.to_ascii_lowercase().as_str() {
            "error" => Ok(LogLevel::Error),
            "info" => Ok(LogLevel::Info),
            "verbose" => Ok(LogLevel::Verbose),
            "debug" => Ok(LogLevel::Debug),
            _ => Err(()),
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogLevel::Error => "error",
            LogLevel::Info => "info",
            LogLevel::Verbose => "verbose",
            LogLevel::Debug => "debug",
        })
    }
}

/// The plugin's settings. `Default` is what cinch runs with when cinch.conf is absent.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where `cinch serve` listens: `unix:/path`, `http://` on this host, or `https://` anywhere.
    pub optimizer_url: String,
    /// PEM file with the certificates (CAs, or the optimizer's own self-signed certificate) that
    /// an `https://` optimizer's certificate must chain to; `None`: the system's CA bundle.
    pub optimizer_ca_file: Option<String>,
    pub connect_timeout_ms: u32,
    pub request_timeout_ms: u32,
    pub mode: Mode,
    pub log_level: LogLevel,
    /// Seconds between the agent's rounds (it also runs shortly after each submission).
    pub interval_s: u32,
    /// Seconds job_submit holds a new multi-GPU job (BeginTime) in enforce mode while the
    /// optimizer is answering, so the next round can place it; 0 turns it off. The hold lapses by
    /// itself if cinch goes away.
    pub submit_hold_s: u32,
    /// File with the optimizer's plugin token; `None`: `cinch-optimizer.token` beside cinch.conf.
    pub optimizer_token_file: Option<String>,
    /// Allow the token and snapshots to go over plain HTTP to a host other than this one.
    pub allow_remote_plain_http: bool,
    /// A job is requeued (preempted) by cinch at most this often; 0 turns requeues off.
    pub max_requeues_per_job: u32,
    /// Requeues across the cluster in any rolling hour.
    pub max_requeues_per_hour: u32,
    /// Largest optimizer answer read, in bytes; a larger one is a failed round.
    pub max_answer_bytes: u32,
    /// Most decisions one answer may carry (and never more than the jobs in the snapshot); more
    /// is a failed round.
    pub max_decisions: u32,
    /// Test hook: a job with exactly this name makes `job_submit` panic *inside* its guard, to
    /// prove that a bug in cinch leaves slurmctld running and the job unmodified. Unset by default.
    pub test_panic_job_name: Option<String>,
    /// GPU sharing (docs/policies/sharing.md): the partition of the sharing nodes, whose GPUs
    /// are cut into shards; `None`: opted-in jobs keep whole GPUs.
    pub share_partition: Option<String>,
    /// Memory per GPU, safety margin and interference of the sharing nodes.
    pub share: cinch_core::models::sharing::ShareParams,
    /// Peak GPU memory of known models (`ShareModelMemory`).
    pub share_models: cinch_core::models::sharing::ModelTable,
    /// Busy fraction alone of known models (`ShareModelBusy`).
    pub share_busy: cinch_core::models::sharing::ModelTable,
    /// Under MPS (`ShareMode=mps`), the SM share each shared job gets
    /// (`ShareMpsThreadPercent`, 1-100; 100: no cap, which the H100 measurements favour).
    pub share_mps_thread_percent: u32,
    /// Where refusals at sbatch point users (`UserGuide`): the user guide the cinch package
    /// installs, or a site's own page.
    pub user_guide: String,
    /// Partitions and QOS whose jobs cinch leaves alone (`ExcludePartitions`, `ExcludeQOS`):
    /// they are not in the optimizer's snapshot, and the agent refuses any decision for them.
    pub exclude_partitions: Vec<String>,
    pub exclude_qos: Vec<String>,
    /// Whether cinch may order jobs that ask for no GPUs (`OrderCpuJobs`); by default it leaves
    /// them to Slurm's own priorities.
    pub order_cpu_jobs: bool,
    /// When a running job's GPUs count as idle (`IdleGpuPercent`, `IdleGraceMinutes`,
    /// `IdleWarnMinutes`; docs/policies/idle.md).
    pub idle: IdleRules,
    /// What cinch does with a job whose GPUs stayed idle (`IdleAction`), and per partition and
    /// QOS (`IdleActionPartitions`, `IdleActionQOS`: `name:action,...`; a QOS's wins).
    pub idle_action: IdleAction,
    pub idle_action_partitions: Vec<(String, IdleAction)>,
    pub idle_action_qos: Vec<(String, IdleAction)>,
}

use cinch_core::wire::idle::{IdleAction, IdleRules, MAX_IDLE_WAIT_S};

/// The user guide as the cinch package installs it.
pub const DEFAULT_USER_GUIDE: &str = "/usr/share/doc/cinch/users.md";

pub const DEFAULT_OPTIMIZER_URL: &str = "http://127.0.0.1:6830";
/// Timeouts outside this range are refused: 0 would disable them, minutes would stall the loop.
pub const TIMEOUT_RANGE_MS: std::ops::RangeInclusive<u32> = 1..=60_000;

impl Default for Config {
    fn default() -> Self {
        Config {
            optimizer_url: DEFAULT_OPTIMIZER_URL.to_string(),
            connect_timeout_ms: 200,
            request_timeout_ms: 1_000,
            mode: Mode::Shadow,
            log_level: LogLevel::Info,
            interval_s: cinch_core::enact::round::DEFAULT_INTERVAL_S,
            submit_hold_s: 5,
            optimizer_token_file: None,
            optimizer_ca_file: None,
            allow_remote_plain_http: false,
            max_requeues_per_job: cinch_core::enact::apply::RequeueLimits::DEFAULT_MAX_PER_JOB,
            max_requeues_per_hour: cinch_core::enact::apply::RequeueLimits::DEFAULT_MAX_PER_HOUR,
            max_answer_bytes: 8 << 20,
            max_decisions: cinch_core::enact::round::DEFAULT_MAX_DECISIONS,
            test_panic_job_name: None,
            share_partition: None,
            share: cinch_core::models::sharing::ShareParams::default(),
            share_models: cinch_core::models::sharing::ModelTable::default(),
            share_busy: cinch_core::models::sharing::ModelTable::default(),
            share_mps_thread_percent: 100,
            user_guide: DEFAULT_USER_GUIDE.to_string(),
            exclude_partitions: Vec::new(),
            exclude_qos: Vec::new(),
            order_cpu_jobs: false,
            idle: IdleRules::default(),
            idle_action: IdleAction::Report,
            idle_action_partitions: Vec::new(),
            idle_action_qos: Vec::new(),
        }
    }
}

/// One thing wrong with cinch.conf, and what cinch did about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// The keys cinch.conf understands, as written in the docs.
pub const KEYS: [&str; 33] = [
    "OptimizerUrl",
    "OptimizerTokenFile",
    "OptimizerCaFile",
    "ConnectTimeoutMs",
    "RequestTimeoutMs",
    "IntervalSeconds",
    "SubmitHoldSeconds",
    "Mode",
    "LogLevel",
    "AllowRemotePlainHttp",
    "MaxRequeuesPerJob",
    "MaxRequeuesPerHour",
    "MaxAnswerBytes",
    "MaxDecisions",
    "TestPanicJobName",
    "SharePartition",
    "ShareGpuMemory",
    "ShareMarginPercent",
    "ShareInterference",
    "ShareModelMemory",
    "ShareModelBusy",
    "ShareMode",
    "ShareMpsThreadPercent",
    "UserGuide",
    "ExcludePartitions",
    "ExcludeQOS",
    "OrderCpuJobs",
    "IdleGpuPercent",
    "IdleGraceMinutes",
    "IdleWarnMinutes",
    "IdleAction",
    "IdleActionPartitions",
    "IdleActionQOS",
];

/// Parses cinch.conf text. Never fails: problems are returned beside a usable config.
pub fn parse(text: &str) -> (Config, Vec<Problem>) {
    let mut config = Config::default();
    let mut problems = Vec::new();
    let mut seen: Vec<(&'static str, usize)> = Vec::new();

    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let mut problem = |message: String| problems.push(Problem { line, message });
        // Bytes that were not UTF-8 (decoded lossily by the caller) spoil only their own line.
        if content.contains(char::REPLACEMENT_CHARACTER) {
            problem("not valid UTF-8; line ignored".into());
            continue;
        }
        let Some((key, value)) = content.split_once('=') else {
            problem(format!(
                "expected Key=Value, found '{content}'; line ignored"
            ));
            continue;
        };
        let (key, value) = (key.trim(), unquote(value.trim()));
        let Some(canonical) = KEYS.iter().copied().find(|k| k.eq_ignore_ascii_case(key)) else {
            problem(format!(
                "unknown key '{key}' ignored (known keys: {})",
                KEYS.join(", ")
            ));
            continue;
        };
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == canonical) {
            problem(format!(
                "{canonical} is set again (first on line {first}); the later value is used"
            ));
        } else {
            seen.push((canonical, line));
        }
        if let Err(message) = apply(&mut config, canonical, value) {
            problem(message);
        }
    }

    if config.request_timeout_ms < config.connect_timeout_ms {
        problems.push(Problem {
            line: seen
                .iter()
                .find(|(k, _)| *k == "RequestTimeoutMs")
                .map_or(0, |(_, l)| *l),
            message: format!(
                "RequestTimeoutMs={} is shorter than ConnectTimeoutMs={}; using {} for both",
                config.request_timeout_ms, config.connect_timeout_ms, config.connect_timeout_ms
            ),
        });
        config.request_timeout_ms = config.connect_timeout_ms;
    }
    if let Err(why) = config.transport_allowed() {
        problems.push(Problem {
            line: seen
                .iter()
                .find(|(k, _)| *k == "OptimizerUrl")
                .map_or(0, |(_, l)| *l),
            message: why,
        });
    }
    (config, problems)
}

impl Config {
    /// Whether the agent may send its token and snapshots to `optimizer_url`: over TLS or on
    /// this host (a Unix socket, localhost, a loopback address) always; in clear text to another
    /// host only when the admin said so.
    pub fn transport_allowed(&self) -> Result<(), String> {
        let in_clear = Endpoint::parse(&self.optimizer_url).is_ok_and(|e| e.in_clear());
        if !in_clear || self.allow_remote_plain_http {
            Ok(())
        } else {
            Err(format!(
                "OptimizerUrl={} is not on this host and the token and job data would travel in \
                 clear text: cinch stands aside (use https:// with OptimizerCaFile, unix:/path or a \
                 loopback address with a sidecar optimizer, or set AllowRemotePlainHttp=yes on a \
                 trusted network)",
                self.optimizer_url
            ))
        }
    }
}

fn unquote(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
}

/// Sets one key; on a bad value leaves the current (default) value and says so.
fn apply(config: &mut Config, key: &'static str, value: &str) -> Result<(), String> {
    let defaults = Config::default();
    match key {
        "OptimizerUrl" => {
            validate_url(value).map_err(|why| {
                format!(
                    "OptimizerUrl='{value}' {why}; using default {}",
                    defaults.optimizer_url
                )
            })?;
            config.optimizer_url = value.trim_end_matches('/').to_string();
        }
        "ConnectTimeoutMs" => {
            config.connect_timeout_ms = parse_timeout(key, value, defaults.connect_timeout_ms)?;
        }
        "RequestTimeoutMs" => {
            config.request_timeout_ms = parse_timeout(key, value, defaults.request_timeout_ms)?;
        }
        "Mode" => {
            config.mode = value.parse().map_err(|()| {
                format!(
                    "Mode='{value}' is not one of off, shadow, enforce; using default {}",
                    defaults.mode
                )
            })?;
        }
        "LogLevel" => {
            config.log_level = value.parse().map_err(|()| {
                format!(
                    "LogLevel='{value}' is not one of error, info, verbose, debug; \
                     using default {}",
                    defaults.log_level
                )
            })?;
        }
        "OptimizerTokenFile" => {
            if !value.starts_with('/') {
                return Err(format!(
                    "OptimizerTokenFile='{value}' must be an absolute path; using the default \
                     (cinch-optimizer.token beside cinch.conf)"
                ));
            }
            config.optimizer_token_file = Some(value.to_string());
        }
        "OptimizerCaFile" => {
            if !value.starts_with('/') {
                return Err(format!(
                    "OptimizerCaFile='{value}' must be an absolute path; using the system's CA \
                     bundle"
                ));
            }
            config.optimizer_ca_file = Some(value.to_string());
        }
        "IntervalSeconds" => {
            config.interval_s = parse_in(key, value, 1..=3600, defaults.interval_s, "seconds")?;
        }
        "SubmitHoldSeconds" => {
            config.submit_hold_s =
                parse_in(key, value, 0..=300, defaults.submit_hold_s, "seconds")?;
        }
        "AllowRemotePlainHttp" => {
            config.allow_remote_plain_http = yes_no(key, value, "")?;
        }
        "MaxRequeuesPerJob" => {
            config.max_requeues_per_job = parse_in(
                key,
                value,
                0..=100,
                defaults.max_requeues_per_job,
                "requeues",
            )?;
        }
        "MaxRequeuesPerHour" => {
            config.max_requeues_per_hour = parse_in(
                key,
                value,
                0..=10_000,
                defaults.max_requeues_per_hour,
                "requeues",
            )?;
        }
        "MaxAnswerBytes" => {
            config.max_answer_bytes = parse_in(
                key,
                value,
                65_536..=(256 << 20),
                defaults.max_answer_bytes,
                "bytes",
            )?;
        }
        "MaxDecisions" => {
            config.max_decisions = parse_in(
                key,
                value,
                1..=1_000_000,
                defaults.max_decisions,
                "decisions",
            )?;
        }
        "UserGuide" => {
            if value.is_empty() || value.contains(char::is_whitespace) {
                return Err(format!(
                    "UserGuide='{value}' is not one path or URL; refusals keep pointing at \
                     {DEFAULT_USER_GUIDE}"
                ));
            }
            config.user_guide = value.to_string();
        }
        "ExcludePartitions" => config.exclude_partitions = name_list(value),
        "ExcludeQOS" => config.exclude_qos = name_list(value),
        "OrderCpuJobs" => {
            config.order_cpu_jobs = yes_no(key, value, " (cinch leaves CPU-only jobs alone)")?;
        }
        "IdleGpuPercent" => {
            config.idle.gpu_percent =
                parse_in(key, value, 0..=100, defaults.idle.gpu_percent, "percent")?;
        }
        "IdleGraceMinutes" => {
            config.idle.grace_s = idle_minutes_s(key, value, defaults.idle.grace_s)?;
        }
        "IdleWarnMinutes" => {
            config.idle.warn_s = idle_minutes_s(key, value, defaults.idle.warn_s)?;
        }
        "IdleAction" => {
            config.idle_action = IdleAction::parse(value).ok_or_else(|| {
                format!("IdleAction='{value}' is not report, requeue or cancel; using report")
            })?;
        }
        "IdleActionPartitions" => config.idle_action_partitions = idle_actions(key, value)?,
        "IdleActionQOS" => config.idle_action_qos = idle_actions(key, value)?,
        "TestPanicJobName" => {
            config.test_panic_job_name = (!value.is_empty()).then(|| value.to_string());
        }
        "SharePartition" => {
            if value.is_empty() || value.contains([',', ' ']) {
                return Err(format!(
                    "SharePartition='{value}' is not one partition name; GPU sharing stays off"
                ));
            }
            config.share_partition = Some(value.to_string());
        }
        "ShareGpuMemory" => {
            config.share.gpu_mem_gib =
                cinch_core::models::sharing::parse_gib(value).map_err(|e| {
                    format!(
                        "ShareGpuMemory: {e}; using default {:.0}G",
                        defaults.share.gpu_mem_gib
                    )
                })?;
        }
        "ShareMarginPercent" => {
            let percent = parse_in(
                key,
                value,
                0..=90,
                (defaults.share.margin * 100.0).round() as u32,
                "percent",
            )?;
            config.share.margin = f64::from(percent) / 100.0;
        }
        "ShareInterference" => {
            use cinch_core::models::sharing::Interference;
            config.share.interference = if value.eq_ignore_ascii_case("measured") {
                defaults.share.interference
            } else {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|a| (0.0..=10.0).contains(a))
                    .map(Interference::Constant)
                    .ok_or_else(|| {
                        format!(
                            "ShareInterference='{value}' is neither 'measured' nor a number from \
                             0 to 10; using default {}",
                            defaults.share.interference
                        )
                    })?
            };
        }
        "ShareModelMemory" => {
            config.share_models = cinch_core::models::sharing::ModelTable::parse(value)
                .map_err(|e| format!("ShareModelMemory: {e}; the table is left empty"))?;
        }
        "ShareMode" => {
            use cinch_core::models::corun::ShareMode;
            config.share.mode = match value.to_ascii_lowercase().as_str() {
                "shards" => ShareMode::TimeSlice,
                "mps" => ShareMode::Mps,
                _ => {
                    return Err(format!(
                        "ShareMode='{value}' is neither shards nor mps; using default shards"
                    ))
                }
            };
        }
        "ShareMpsThreadPercent" => {
            config.share_mps_thread_percent = parse_in(
                key,
                value,
                1..=100,
                defaults.share_mps_thread_percent,
                "percent",
            )?;
        }
        "ShareModelBusy" => {
            config.share_busy = cinch_core::models::sharing::ModelTable::parse_busy(value)
                .map_err(|e| format!("ShareModelBusy: {e}; the table is left empty"))?;
        }
        _ => unreachable!("apply() is only called with names from KEYS"),
    }
    Ok(())
}

/// `yes` or `no` (any case) for a setting whose default is no; `default_means` follows "using
/// default no" in the error.
fn yes_no(key: &str, value: &str, default_means: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!(
            "{key}='{value}' is not yes or no; using default no{default_means}"
        )),
    }
}

/// Names separated by commas or spaces (`ExcludePartitions=debug,cpu`); empty ones are skipped,
/// so every value is a valid list (an empty one excludes nothing).
/// An idle wait given in minutes (up to a week), in seconds.
fn idle_minutes_s(key: &str, value: &str, default_s: u32) -> Result<u32, String> {
    let range = 0..=MAX_IDLE_WAIT_S / 60;
    Ok(60 * parse_in(key, value, range, default_s / 60, "minutes")?)
}

/// `name:action,...` (`gpu:requeue,interactive:cancel`): all of it, or an error and none.
fn idle_actions(key: &str, value: &str) -> Result<Vec<(String, IdleAction)>, String> {
    name_list(value)
        .iter()
        .map(|pair| {
            let parsed = pair
                .split_once(':')
                .filter(|(name, _)| !name.is_empty())
                .and_then(|(name, action)| Some((name.to_string(), IdleAction::parse(action)?)));
            parsed.ok_or_else(|| {
                format!(
                    "{key}: '{pair}' is not name:report, name:requeue or name:cancel; \
                     the whole setting is ignored (IdleAction applies)"
                )
            })
        })
        .collect()
}

fn name_list(value: &str) -> Vec<String> {
    value
        .split([',', ' ', '\t'])
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect()
}

impl Config {
    /// Why the admin keeps cinch off this job, if they do: it asks for no GPUs (unless
    /// `OrderCpuJobs=yes`), or one of its partitions or its QOS is excluded.
    pub fn hands_off(
        &self,
        gpus: u64,
        partitions: Option<&str>,
        qos: Option<&str>,
    ) -> Option<String> {
        if gpus == 0 && !self.order_cpu_jobs {
            return Some("a CPU-only job (OrderCpuJobs=no)".to_string());
        }
        // A job submitted to several partitions is left alone if any of them is excluded.
        // (Asked for every job every round: most sites exclude none, and then nothing is split.)
        let excluded = partitions
            .filter(|_| !self.exclude_partitions.is_empty())
            .unwrap_or("")
            .split(',')
            .find(|p| self.exclude_partitions.iter().any(|x| x == p));
        if let Some(partition) = excluded {
            return Some(format!("partition {partition} (ExcludePartitions)"));
        }
        let qos = qos.filter(|q| self.exclude_qos.iter().any(|x| x == q))?;
        Some(format!("QOS {qos} (ExcludeQOS)"))
    }
}

impl Config {
    /// Whether any job's idle action is other than report.
    pub fn idle_actions_set(&self) -> bool {
        self.idle_action != IdleAction::Report
            || self
                .idle_action_partitions
                .iter()
                .chain(&self.idle_action_qos)
                .any(|(_, a)| *a != IdleAction::Report)
    }

    /// What cinch does with a job in `partitions` (Slurm's comma list) and `qos` whose GPUs
    /// stay idle: its QOS's `IdleActionQOS`, else its partition's `IdleActionPartitions` (the
    /// first of its partitions listed), else `IdleAction`.
    pub fn idle_action_for(&self, partitions: Option<&str>, qos: Option<&str>) -> IdleAction {
        let listed = |list: &[(String, IdleAction)], name: &str| {
            list.iter().find(|(n, _)| n == name).map(|(_, a)| *a)
        };
        qos.and_then(|q| listed(&self.idle_action_qos, q))
            .or_else(|| {
                partitions?
                    .split(',')
                    .find_map(|p| listed(&self.idle_action_partitions, p))
            })
            .unwrap_or(self.idle_action)
    }
}

fn parse_timeout(key: &str, value: &str, default: u32) -> Result<u32, String> {
    parse_in(key, value, TIMEOUT_RANGE_MS, default, "milliseconds")
}

fn parse_in(
    key: &str,
    value: &str,
    range: std::ops::RangeInclusive<u32>,
    default: u32,
    unit: &str,
) -> Result<u32, String> {
    match value.parse::<u32>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(format!(
            "{key}='{value}' is not a whole number of {unit} from {} to {}; \
             using default {default}",
            range.start(),
            range.end()
        )),
    }
}

/// `unix:/path` or `http://host[:port][/path]`, parsed as the agent and `cinch policy` parse it.
fn validate_url(url: &str) -> Result<(), String> {
    Endpoint::parse(url)
        .map(|_| ())
        .map_err(|e| e.why.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharing_settings_parse_and_bad_ones_keep_their_defaults() {
        let (config, problems) = parse(
            "SharePartition=gpu-shared\nShareGpuMemory=40G\nShareMarginPercent=20\n\
             ShareInterference=0.3\nShareModelMemory=bert:32=10G,resnet50=8G\n\
             ShareModelBusy=bert=58%\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(config.share_partition.as_deref(), Some("gpu-shared"));
        assert_eq!(config.share.gpu_mem_gib, 40.0);
        assert_eq!(config.share.margin, 0.2);
        assert_eq!(
            config.share.interference,
            cinch_core::models::sharing::Interference::Constant(0.3)
        );
        assert_eq!(config.share_models.lookup("bert", Some(32)), Some(10.0));
        assert_eq!(config.share_busy.lookup("bert", Some(32)), Some(0.58));
        let (config, problems) = parse("ShareInterference=Measured\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            config.share,
            cinch_core::models::sharing::ShareParams::default()
        );
        let (config, problems) = parse("ShareMode=MPS\nShareMpsThreadPercent=50\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(config.share.mode, cinch_core::models::corun::ShareMode::Mps);
        assert_eq!(config.share_mps_thread_percent, 50);
        let (config, problems) = parse("ShareMode=vgpu\nShareMpsThreadPercent=0\n");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].message.contains("neither shards nor mps"),
            "{problems:?}"
        );
        assert_eq!(
            config.share.mode,
            cinch_core::models::corun::ShareMode::TimeSlice
        );
        assert_eq!(config.share_mps_thread_percent, 100);
        let (config, problems) = parse(
            "SharePartition=a,b\nShareGpuMemory=lots\nShareMarginPercent=95\n\
             ShareInterference=-1\nShareModelMemory=bert\nShareModelBusy=bert=2\n",
        );
        assert_eq!(problems.len(), 6, "{problems:?}");
        assert_eq!(config.share_partition, None);
        assert_eq!(
            config.share,
            cinch_core::models::sharing::ShareParams::default()
        );
        assert!(config.share_models.is_empty());
        assert!(config.share_busy.is_empty());
    }

    #[test]
    fn idle_rules_and_actions_per_partition_and_qos_with_bad_values_changing_nothing() {
        let (config, problems) = parse("");
        assert!(problems.is_empty());
        assert_eq!(config.idle, IdleRules::default());
        assert_eq!(
            config.idle_action_for(Some("gpu"), None),
            IdleAction::Report
        );
        let (config, problems) = parse(
            "IdleGpuPercent=2\nIdleGraceMinutes=90\nIdleWarnMinutes=0\nIdleAction=requeue\n\
             IdleActionPartitions=interactive:cancel, debug:report\nIdleActionQOS=long:cancel\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            config.idle,
            IdleRules {
                gpu_percent: 2,
                grace_s: 5400,
                warn_s: 0
            }
        );
        assert_eq!(
            config.idle_action_for(Some("gpu"), None),
            IdleAction::Requeue
        );
        assert_eq!(
            config.idle_action_for(Some("gpu,interactive"), Some("normal")),
            IdleAction::Cancel
        );
        assert_eq!(
            config.idle_action_for(Some("debug"), None),
            IdleAction::Report
        );
        // The QOS's wins over the partition's.
        assert_eq!(
            config.idle_action_for(Some("debug"), Some("long")),
            IdleAction::Cancel
        );
        // A bad value is a problem and changes nothing: one bad pair drops the whole list.
        let (config, problems) = parse(
            "IdleGpuPercent=101\nIdleGraceMinutes=-1\nIdleAction=kill\n\
             IdleActionPartitions=gpu:cancel,interactive:kill\nIdleActionQOS=:cancel\n",
        );
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert_eq!(config.idle, IdleRules::default());
        assert_eq!(config.idle_action, IdleAction::Report);
        assert!(config.idle_action_partitions.is_empty() && config.idle_action_qos.is_empty());
        assert!(
            problems[3].message.contains("'interactive:kill'"),
            "{problems:?}"
        );
    }

    #[test]
    fn the_admin_keeps_cinch_off_cpu_jobs_and_excluded_partitions_and_qos() {
        let (config, problems) = parse("");
        assert!(problems.is_empty());
        assert_eq!(
            config.hands_off(0, Some("gpu"), None).as_deref(),
            Some("a CPU-only job (OrderCpuJobs=no)")
        );
        assert_eq!(config.hands_off(2, Some("gpu"), Some("normal")), None);
        let (config, problems) =
            parse("ExcludePartitions=debug, interactive\nExcludeQOS=urgent\nOrderCpuJobs=yes\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(config.exclude_partitions, ["debug", "interactive"]);
        assert_eq!(config.hands_off(0, Some("gpu"), None), None);
        assert_eq!(
            config
                .hands_off(4, Some("gpu,interactive"), None)
                .as_deref(),
            Some("partition interactive (ExcludePartitions)")
        );
        assert_eq!(
            config.hands_off(4, Some("gpu"), Some("urgent")).as_deref(),
            Some("QOS urgent (ExcludeQOS)")
        );
        assert_eq!(
            config.hands_off(4, Some("debugging"), Some("urgent2")),
            None
        );
        // A bad yes/no keeps the default, which leaves CPU-only jobs alone.
        let (config, problems) = parse("OrderCpuJobs=maybe\n");
        assert!(!config.order_cpu_jobs);
        assert!(problems[0]
            .message
            .contains("OrderCpuJobs='maybe' is not yes or no"));
    }

    #[test]
    fn refusals_point_at_the_installed_guide_or_the_sites_own() {
        assert_eq!(parse("").0.user_guide, DEFAULT_USER_GUIDE);
        let (config, problems) = parse("UserGuide=https://hpc.example.org/cinch\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(config.user_guide, "https://hpc.example.org/cinch");
        let (config, problems) = parse("UserGuide=my guide\n");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(config.user_guide, DEFAULT_USER_GUIDE);
    }

    #[test]
    fn no_file_content_means_defaults() {
        let (config, problems) = parse("");
        assert_eq!(config, Config::default());
        assert!(problems.is_empty());
        assert_eq!(
            config.mode,
            Mode::Shadow,
            "the safe default changes nothing"
        );
    }

    #[test]
    fn a_remote_optimizer_over_plain_http_needs_the_admins_explicit_yes() {
        let (config, problems) = parse("OptimizerUrl=http://10.1.2.3:6830\n");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].message.contains("AllowRemotePlainHttp=yes"));
        assert_eq!(problems[0].line, 1);
        assert!(config.transport_allowed().is_err());
        for local in [
            "unix:/run/cinch/optimizer.sock",
            "http://localhost:6830",
            "http://[::1]:1",
            "https://optimizer.example:6831",
        ] {
            let (config, problems) = parse(&format!("OptimizerUrl={local}\n"));
            assert!(
                problems.is_empty() && config.transport_allowed().is_ok(),
                "{local}"
            );
        }
        let (config, problems) =
            parse("OptimizerUrl=http://10.1.2.3:6830\nAllowRemotePlainHttp=yes\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert!(config.transport_allowed().is_ok());
        let (config, problems) = parse(
            "OptimizerCaFile=/etc/slurm/cinch-ca.pem
",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            config.optimizer_ca_file.as_deref(),
            Some("/etc/slurm/cinch-ca.pem")
        );
        let (config, problems) = parse(
            "OptimizerCaFile=ca.pem
",
        );
        assert!(
            problems[0].message.contains("absolute path"),
            "{problems:?}"
        );
        assert_eq!(config.optimizer_ca_file, None);
    }

    #[test]
    fn reads_every_key_case_insensitively_with_comments() {
        let text = "# cinch settings\n\
                    OptimizerUrl=http://ctl.example:7000/  # trailing slash dropped\n\
                    connecttimeoutms=150\n\
                    REQUESTTIMEOUTMS = 900\n\
                    Mode=\"Enforce\"\n\
                    LogLevel=debug\n\
                    IntervalSeconds=2\n\
                    SubmitHoldSeconds=0\n\
                    OptimizerTokenFile=/etc/slurm/tok\n\
                    optimizercafile=/etc/slurm/ca.pem\n\
                    AllowRemotePlainHttp=Yes\n\
                    MaxRequeuesPerJob=0\n\
                    maxrequeuesperhour=500\n\
                    MaxAnswerBytes=1048576\n\
                    MaxDecisions=2000\n\
                    TestPanicJobName=boom\n";
        let (config, problems) = parse(text);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            config,
            Config {
                optimizer_url: "http://ctl.example:7000".into(),
                connect_timeout_ms: 150,
                request_timeout_ms: 900,
                mode: Mode::Enforce,
                log_level: LogLevel::Debug,
                interval_s: 2,
                submit_hold_s: 0,
                optimizer_token_file: Some("/etc/slurm/tok".into()),
                optimizer_ca_file: Some("/etc/slurm/ca.pem".into()),
                allow_remote_plain_http: true,
                max_requeues_per_job: 0,
                max_requeues_per_hour: 500,
                max_answer_bytes: 1 << 20,
                max_decisions: 2000,
                test_panic_job_name: Some("boom".into()),
                ..Config::default()
            }
        );
    }

    #[test]
    fn bad_values_keep_defaults_and_are_reported_with_their_line() {
        let text = "Mode=enforse\nConnectTimeoutMs=-5\nRequestTimeoutMs=0\n\
                    OptimizerUrl=ftp://x\nLogLevel=loud\nIntervalSeconds=0\n\
                    SubmitHoldSeconds=301\nOptimizerTokenFile=relative.token\n\
                    MaxRequeuesPerJob=101\nMaxRequeuesPerHour=-1\nMaxAnswerBytes=100\n\
                    MaxDecisions=0\n";
        let (config, problems) = parse(text);
        assert_eq!(config, Config::default());
        let lines: Vec<usize> = problems.iter().map(|p| p.line).collect();
        assert_eq!(lines, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert!(problems[5].message.contains("seconds from 1 to 3600"));
        assert!(problems[7].message.contains("absolute path"));
        assert!(problems[0].message.contains("Mode='enforse'"));
        assert!(problems[0].message.contains("using default shadow"));
        assert!(problems[1].message.contains("from 1 to 60000"));
        assert!(problems[3].message.contains("http://"));
        assert!(problems[4].message.contains("LogLevel='loud'"));
    }

    #[test]
    fn unknown_keys_and_garbage_lines_are_reported_and_ignored() {
        let (config, problems) = parse("Mode=enforce\nFrobnicate=yes\nthis is not a setting\n");
        assert_eq!(config.mode, Mode::Enforce, "good lines still apply");
        assert_eq!(problems.len(), 2);
        assert_eq!(problems[0].line, 2);
        assert!(problems[0].message.contains("unknown key 'Frobnicate'"));
        assert_eq!(problems[1].line, 3);
        assert!(problems[1].message.contains("expected Key=Value"));
    }

    #[test]
    fn a_repeated_key_is_reported_and_the_last_value_wins() {
        let (config, problems) = parse("Mode=off\nMode=enforce\n");
        assert_eq!(config.mode, Mode::Enforce);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].message.contains("first on line 1"));
    }

    #[test]
    fn request_timeout_never_shorter_than_connect_timeout() {
        let (config, problems) = parse("ConnectTimeoutMs=500\nRequestTimeoutMs=100\n");
        assert_eq!(config.request_timeout_ms, 500);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].line, 2);
    }

    #[test]
    fn url_validation() {
        assert!(validate_url("http://127.0.0.1:6830").is_ok());
        assert!(validate_url("http://[::1]:6830/base").is_ok());
        assert!(validate_url("http://optimizer").is_ok());
        assert!(validate_url("http://:80").is_err());
        assert!(validate_url("http://host:0").is_err());
        assert!(validate_url("http://host:99999").is_err());
        assert!(validate_url("ftp://host").is_err());
    }

    #[test]
    fn binary_garbage_never_panics() {
        let text = "\u{0}\u{1}=\u{2}\n=\n==\n#\n   \nMode==off\n";
        let (config, problems) = parse(text);
        assert_eq!(config.mode, Mode::Shadow);
        assert!(!problems.is_empty());
    }

    #[test]
    fn a_line_that_is_not_utf8_is_reported_and_the_rest_kept() {
        let bytes = b"Mode=enforce\nLogLevel=verb\xffose\nIntervalSeconds=7\n";
        let (config, problems) = parse(&String::from_utf8_lossy(bytes));
        assert_eq!(config.mode, Mode::Enforce);
        assert_eq!(config.interval_s, 7);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].line, 2);
        assert!(problems[0].message.contains("UTF-8"), "{problems:?}");
    }

    /// The rows of docs/cinch-conf.md's table: (key, values, default).
    fn documented() -> Vec<(String, String, String)> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cinch-conf.md");
        let text = std::fs::read_to_string(path).expect("docs/cinch-conf.md is in the checkout");
        text.lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| {
                let cells: Vec<&str> = l.split(" | ").collect();
                let unquote = |c: &str| c.trim().trim_matches('|').trim().to_string();
                (
                    unquote(cells[0]).trim_matches('`').to_string(),
                    unquote(cells[1]),
                    unquote(cells[2]),
                )
            })
            .collect()
    }

    #[test]
    fn the_admin_guide_documents_every_key_with_its_real_default_and_range() {
        let rows = documented();
        let names: Vec<&str> = rows.iter().map(|(k, _, _)| k.as_str()).collect();
        for key in KEYS {
            assert!(names.contains(&key), "{key} is not in docs/cinch-conf.md");
        }
        for name in &names {
            assert!(
                KEYS.contains(name),
                "docs/cinch-conf.md documents unknown key {name}"
            );
        }
        let mut checked = 0;
        for (key, values, default) in &rows {
            // A default written as one value (`5`, `shadow`, `8388608` (8 MiB)) is what cinch
            // takes when the key is absent.
            if let Some(value) = default
                .strip_prefix('`')
                .and_then(|d| d.split('`').next())
                .filter(|v| !v.contains(' ') && !v.contains('.'))
            {
                let (config, problems) = parse(&format!("{key}={value}\n"));
                assert!(problems.is_empty(), "{key}={value}: {problems:?}");
                assert_eq!(
                    config,
                    Config::default(),
                    "docs/cinch-conf.md's default for {key} ({value}) is not cinch's"
                );
                checked += 1;
            }
            // A range written `A–B`: both ends are taken, one past either refused.
            if let Some((low, high)) = values.split_once('–') {
                let (Ok(low), Ok(high)) = (low.trim().parse::<i64>(), high.trim().parse::<i64>())
                else {
                    continue;
                };
                for (value, ok) in [
                    (low, true),
                    (high, true),
                    (low - 1, false),
                    (high + 1, false),
                ] {
                    let (_, problems) = parse(&format!("{key}={value}\n"));
                    // (Only the key's own problems: a timeout may also clash with another.)
                    let own = problems
                        .iter()
                        .any(|p| p.message.starts_with(&format!("{key}='")));
                    assert_eq!(!own, ok, "{key}={value}: {problems:?}");
                }
            }
        }
        assert!(checked >= 15, "only {checked} defaults checked");
    }
}
