//! `cinch serve` settings: a TOML file, flags and environment variables (flags win over the
//! environment, which wins over the file), each key optional. With none at all the service
//! listens on 127.0.0.1:6830 with safe defaults.

use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:6830";

/// Every setting, as a flag (`--listen`), an environment variable (`CINCH_LISTEN`) or a TOML key
/// (`listen`).
#[derive(Debug, Default, Clone, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct ServeOptions {
    /// TOML file with any of the settings below (keys as the flags, with underscores).
    #[arg(long, env = "CINCH_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Also listen on this Unix-domain socket (created mode 0660; the plugin's
    /// `OptimizerUrl=unix:PATH`) [default: none].
    #[arg(long, env = "CINCH_LISTEN_UNIX")]
    pub listen_unix: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:6830].
    #[arg(long, env = "CINCH_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Serve `listen` over TLS with this certificate chain (PEM); with `tls_key_file`. The
    /// plugin then uses `OptimizerUrl=https://...` and `OptimizerCaFile` (slurm-conf/make-tls-cert
    /// makes both) [default: plain HTTP].
    #[arg(long, env = "CINCH_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of `tls_cert_file` (PEM; keep it mode 0600).
    #[arg(long, env = "CINCH_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// Where the policy and its history are kept [default: /var/lib/cinch as root, else
    /// ~/.local/state/cinch].
    #[arg(long, env = "CINCH_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// File holding the admins' bearer token (mode 0600) [default: STATE_DIR/admin.token,
    /// created if missing].
    #[arg(long, env = "CINCH_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// File holding the plugin's bearer token (mode 0600) [default: STATE_DIR/plugin.token,
    /// created if missing].
    #[arg(long, env = "CINCH_PLUGIN_TOKEN_FILE")]
    pub plugin_token_file: Option<PathBuf>,
    /// Largest request body accepted, in bytes [default: 33554432].
    #[arg(long, env = "CINCH_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Longest a request may take, in milliseconds [default: 5000].
    #[arg(long, env = "CINCH_REQUEST_TIMEOUT_MS")]
    pub request_timeout_ms: Option<u64>,
    /// Recent decisions kept for GET /v1/decisions [default: 100000].
    #[arg(long, env = "CINCH_DECISION_LOG_CAPACITY")]
    pub decision_log_capacity: Option<usize>,
    /// Policy versions kept in the history (the newest) [default: 1000].
    #[arg(long, env = "CINCH_POLICY_HISTORY")]
    pub policy_history: Option<usize>,
    /// Seed mixed into every policy run, for reproducible decisions [default: 0].
    #[arg(long, env = "CINCH_SEED")]
    pub seed: Option<u64>,
    /// error, warn, info, debug or trace [default: info].
    #[arg(long, env = "CINCH_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// A site's accounting history to learn run times from at start (the `cinch` policy's
    /// queue order then predicts from day one): `sacct -a -X -P --format=JobID,JobName,User,
    /// Submit,Start,End,Timelimit,AllocTRES,State` output, or `sacct -a -X --json` [default:
    /// none; learned online only].
    #[arg(long, env = "CINCH_IMPORT_HISTORY")]
    pub import_history: Option<PathBuf>,
    /// Hours of the recent past the optimizer keeps a record of (the jobs as its snapshots
    /// showed them and the nodes, in STATE_DIR/record.jsonl, which `cinch sim --trace` reads);
    /// 0 keeps none [default: 72].
    #[arg(long, env = "CINCH_RECORD_HOURS")]
    pub record_hours: Option<u32>,
    /// Most jobs the record keeps (the earliest to leave go first) [default: 200000].
    #[arg(long, env = "CINCH_RECORD_MAX_JOBS")]
    pub record_max_jobs: Option<usize>,
    /// Seconds between two writes of the record to the state directory (and once more at
    /// shutdown) [default: 300].
    #[arg(long, env = "CINCH_RECORD_SAVE_SECONDS")]
    pub record_save_seconds: Option<u64>,
    /// munged's socket, for decoding the MUNGE credentials `cinch why` sends on users' behalf
    /// (Slurm's `AuthInfo=socket=...`) [default: munge's own default].
    #[arg(long, env = "CINCH_MUNGE_SOCKET")]
    pub munge_socket: Option<PathBuf>,
    /// The `unmunge` program [default: unmunge, from PATH].
    #[arg(long, env = "CINCH_UNMUNGE")]
    pub unmunge: Option<PathBuf>,
    /// A program run as `PROGRAM USER JOBID MESSAGE` when a job's GPUs are flagged idle and when
    /// its idle action is taken (docs/policies/idle.md), e.g. a script that mails the user; an
    /// absolute path [default: none].
    #[arg(long, env = "CINCH_IDLE_MAIL_COMMAND")]
    pub idle_mail_command: Option<PathBuf>,
}

impl ServeOptions {
    /// Each setting from `self`, else from `fallback`.
    fn or(self, fallback: ServeOptions) -> ServeOptions {
        ServeOptions {
            config: self.config.or(fallback.config),
            listen: self.listen.or(fallback.listen),
            listen_unix: self.listen_unix.or(fallback.listen_unix),
            tls_cert_file: self.tls_cert_file.or(fallback.tls_cert_file),
            tls_key_file: self.tls_key_file.or(fallback.tls_key_file),
            state_dir: self.state_dir.or(fallback.state_dir),
            admin_token_file: self.admin_token_file.or(fallback.admin_token_file),
            plugin_token_file: self.plugin_token_file.or(fallback.plugin_token_file),
            max_body_bytes: self.max_body_bytes.or(fallback.max_body_bytes),
            request_timeout_ms: self.request_timeout_ms.or(fallback.request_timeout_ms),
            decision_log_capacity: self
                .decision_log_capacity
                .or(fallback.decision_log_capacity),
            policy_history: self.policy_history.or(fallback.policy_history),
            seed: self.seed.or(fallback.seed),
            import_history: self.import_history.or(fallback.import_history),
            record_hours: self.record_hours.or(fallback.record_hours),
            record_max_jobs: self.record_max_jobs.or(fallback.record_max_jobs),
            record_save_seconds: self.record_save_seconds.or(fallback.record_save_seconds),
            log_level: self.log_level.or(fallback.log_level),
            munge_socket: self.munge_socket.or(fallback.munge_socket),
            unmunge: self.unmunge.or(fallback.unmunge),
            idle_mail_command: self.idle_mail_command.or(fallback.idle_mail_command),
        }
    }

    /// Flags/environment merged over the config file they name, if any.
    pub fn with_file(self) -> Result<ServeOptions, ConfigError> {
        match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
                    path: path.clone(),
                    cause,
                })?;
                let file: ServeOptions = toml::from_str(&text).map_err(|e| ConfigError::Parse {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                Ok(self.or(file))
            }
            None => Ok(self),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
    #[error("token file {path}: {message}")]
    Token { path: PathBuf, message: String },
}

/// A token file and whether cinch chose its path (and so may create it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFile {
    pub path: PathBuf,
    pub create_if_missing: bool,
}

/// Resolved, validated settings.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub listen_unix: Option<PathBuf>,
    /// (certificate chain, key): `listen` speaks TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
    pub state_dir: PathBuf,
    pub admin_token_file: TokenFile,
    pub plugin_token_file: TokenFile,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    pub decision_log_capacity: usize,
    pub policy_history: usize,
    pub seed: u64,
    pub log_level: tracing::Level,
    pub import_history: Option<PathBuf>,
    /// What the record of the recent past keeps; none when `record_hours` is 0.
    pub record: Option<cinch_core::learn::record::RecordLimits>,
    pub record_save: Duration,
    pub munge_socket: Option<PathBuf>,
    pub unmunge: PathBuf,
    pub idle_mail_command: Option<PathBuf>,
}

/// `/var/lib/cinch` for root, else the user's XDG state directory.
pub fn default_state_dir() -> PathBuf {
    let is_root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if is_root {
        return PathBuf::from("/var/lib/cinch");
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("cinch");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".local/state/cinch")
}

impl ServeConfig {
    pub fn resolve(options: ServeOptions) -> Result<ServeConfig, ConfigError> {
        let o = options.with_file()?;
        let state_dir = o.state_dir.unwrap_or_else(default_state_dir);
        let token = |explicit: Option<PathBuf>, name: &str| match explicit {
            Some(path) => TokenFile {
                path,
                create_if_missing: false,
            },
            None => TokenFile {
                path: state_dir.join(name),
                create_if_missing: true,
            },
        };
        let max_body_bytes = o.max_body_bytes.unwrap_or(32 << 20);
        if !(1024..=(1 << 30)).contains(&max_body_bytes) {
            return Err(ConfigError::Invalid(format!(
                "max_body_bytes must be from 1024 to 1073741824, not {max_body_bytes}"
            )));
        }
        let timeout_ms = o.request_timeout_ms.unwrap_or(5_000);
        if !(10..=600_000).contains(&timeout_ms) {
            return Err(ConfigError::Invalid(format!(
                "request_timeout_ms must be from 10 to 600000, not {timeout_ms}"
            )));
        }
        let capacity = o.decision_log_capacity.unwrap_or(100_000);
        if capacity > 10_000_000 {
            return Err(ConfigError::Invalid(format!(
                "decision_log_capacity must be at most 10000000, not {capacity}"
            )));
        }
        if let Some(path) = &o.idle_mail_command {
            if !path.is_absolute() || !path.is_file() {
                return Err(ConfigError::Invalid(format!(
                    "idle_mail_command must be the absolute path of a program, not {}",
                    path.display()
                )));
            }
        }
        if let Some(path) = &o.listen_unix {
            if !path.is_absolute() || path.as_os_str().len() > 107 {
                return Err(ConfigError::Invalid(format!(
                    "listen_unix must be an absolute path of at most 107 bytes, not {}",
                    path.display()
                )));
            }
        }
        let tls = match (o.tls_cert_file, o.tls_key_file) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(ConfigError::Invalid(
                    "tls_cert_file and tls_key_file go together: set both for TLS, or neither"
                        .into(),
                ))
            }
        };
        let policy_history = o.policy_history.unwrap_or(1_000);
        if !(1..=1_000_000).contains(&policy_history) {
            return Err(ConfigError::Invalid(format!(
                "policy_history must be from 1 to 1000000, not {policy_history}"
            )));
        }
        let record_hours = o.record_hours.unwrap_or(72);
        if record_hours > 24 * 31 {
            return Err(ConfigError::Invalid(format!(
                "record_hours must be from 0 to 744 (31 days), not {record_hours}"
            )));
        }
        let record_max_jobs = o.record_max_jobs.unwrap_or(200_000);
        if !(1..=5_000_000).contains(&record_max_jobs) {
            return Err(ConfigError::Invalid(format!(
                "record_max_jobs must be from 1 to 5000000, not {record_max_jobs}"
            )));
        }
        let record_save_seconds = o.record_save_seconds.unwrap_or(300);
        if !(10..=86_400).contains(&record_save_seconds) {
            return Err(ConfigError::Invalid(format!(
                "record_save_seconds must be from 10 to 86400, not {record_save_seconds}"
            )));
        }
        let level = o.log_level.as_deref().unwrap_or("info");
        let log_level = level.parse().map_err(|_| {
            ConfigError::Invalid(format!(
                "log_level must be error, warn, info, debug or trace, not '{level}'"
            ))
        })?;
        Ok(ServeConfig {
            listen: o
                .listen
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default")),
            listen_unix: o.listen_unix,
            tls,
            admin_token_file: token(o.admin_token_file, "admin.token"),
            plugin_token_file: token(o.plugin_token_file, "plugin.token"),
            state_dir,
            max_body_bytes,
            request_timeout: Duration::from_millis(timeout_ms),
            decision_log_capacity: capacity,
            policy_history,
            seed: o.seed.unwrap_or(0),
            log_level,
            import_history: o.import_history,
            record: (record_hours > 0).then_some(cinch_core::learn::record::RecordLimits {
                window_s: i64::from(record_hours) * 3600,
                max_jobs: record_max_jobs,
            }),
            record_save: Duration::from_secs(record_save_seconds),
            munge_socket: o.munge_socket,
            unmunge: o.unmunge.unwrap_or_else(|| "unmunge".into()),
            idle_mail_command: o.idle_mail_command,
        })
    }
}

pub use cinch_core::net::token::MIN_TOKEN_LEN;

/// Reads a bearer token by the one rule for token files (cinch_core::net::token); a missing file that
/// cinch may create is created with a fresh random token, mode 0600.
pub fn load_token(file: &TokenFile) -> Result<(String, bool), ConfigError> {
    use cinch_core::net::token::{read_token_file, TokenError};
    let path = &file.path;
    let err = |message: String| ConfigError::Token {
        path: path.clone(),
        message,
    };
    match read_token_file(path) {
        Ok(token) => Ok((token, false)),
        Err(TokenError::Io(e))
            if e.kind() == std::io::ErrorKind::NotFound && file.create_if_missing =>
        {
            let token = random_token().map_err(|e| err(format!("cannot make a token: {e}")))?;
            create_private(path, &token).map_err(|e| err(format!("cannot create: {e}")))?;
            Ok((token, true))
        }
        Err(e @ (TokenError::Short(_) | TokenError::Empty)) => Err(err(format!(
            "{e} (delete the file and cinch serve makes a 64-character one)"
        ))),
        Err(e) => Err(err(e.to_string())),
    }
}

fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn create_private(path: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    writeln!(file, "{token}")?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinch_core::testing::ScratchDir;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> ScratchDir {
        ScratchDir::new(&format!("config-{name}"))
    }

    #[test]
    fn no_settings_at_all_means_loopback_and_safe_defaults() {
        let config = ServeConfig::resolve(ServeOptions::default()).unwrap();
        assert_eq!(config.listen.to_string(), DEFAULT_LISTEN);
        assert!(config.listen.ip().is_loopback());
        assert!(config.admin_token_file.create_if_missing);
        assert_eq!(config.request_timeout, Duration::from_secs(5));
    }

    #[test]
    fn flags_win_over_the_file() {
        let d = dir("precedence");
        let file = d.join("serve.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:7000\"\nseed = 9\n").unwrap();
        let options = ServeOptions {
            config: Some(file),
            seed: Some(3),
            ..ServeOptions::default()
        };
        let config = ServeConfig::resolve(options).unwrap();
        assert_eq!(config.listen.port(), 7000);
        assert_eq!(config.seed, 3);
    }

    #[test]
    fn bad_files_and_values_are_clear_errors() {
        let d = dir("bad");
        let file = d.join("serve.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:7000\"\nlisten_port = 1\n").unwrap();
        let options = ServeOptions {
            config: Some(file),
            ..ServeOptions::default()
        };
        let err = ServeConfig::resolve(options).unwrap_err().to_string();
        assert!(err.contains("unknown field `listen_port`"), "{err}");

        let options = ServeOptions {
            request_timeout_ms: Some(0),
            ..ServeOptions::default()
        };
        let err = ServeConfig::resolve(options).unwrap_err().to_string();
        assert!(err.contains("request_timeout_ms must be"), "{err}");
    }

    #[test]
    fn the_example_config_for_admins_is_valid() {
        let text = include_str!("../../../slurm-conf/examples/cinch-serve.toml");
        let options: ServeOptions = toml::from_str(text).unwrap();
        assert_eq!(options.listen.unwrap().to_string(), DEFAULT_LISTEN);
        assert_eq!(options.request_timeout_ms, Some(5_000));
    }

    #[test]
    fn tokens_are_created_private_and_refused_when_readable_by_others() {
        let d = dir("tokens");
        let file = TokenFile {
            path: d.join("sub/admin.token"),
            create_if_missing: true,
        };
        let (token, created) = load_token(&file).unwrap();
        assert!(created);
        assert_eq!(token.len(), 64);
        let mode = std::fs::metadata(&file.path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_token(&file).unwrap(), (token, false));

        std::fs::set_permissions(&file.path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_token(&file).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");

        let explicit = TokenFile {
            path: d.join("missing.token"),
            create_if_missing: false,
        };
        assert!(
            load_token(&explicit).is_err(),
            "an explicit path is never invented"
        );

        std::fs::set_permissions(&file.path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&file.path, "x\n").unwrap();
        let err = load_token(&file).unwrap_err().to_string();
        assert!(err.contains("at least 16"), "a 1-byte token: {err}");
    }
}
