//! The agent thread's loop. It holds no slurmctld lock: every Slurm call is an RPC to slurmctld
//! like any client's, and nothing here runs inside job_submit/job_modify.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cinch_core::{Decisions, SCHEMA_VERSION};

use super::reconcile::JobUpdate;
use super::{http, read_token, round, slurm_io, view};
use crate::config::{Config, LogLevel};
use crate::guard::{self, Outcome};
use crate::slurm::log;
use crate::state::{self, unix_ms, SHARED};

/// Shortest time between two rounds triggered by submissions.
const MIN_ROUND_GAP: Duration = Duration::from_secs(1);

/// Whether an agent thread is alive (it clears this as it exits).
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Starts the agent unless one is running. After `fini` (stop) and a new `init`, a thread that
/// has not exited yet simply carries on; one that has is replaced.
pub fn start(config_path: String) {
    if RUNNING.swap(true, Ordering::SeqCst) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("cinch-agent".into())
        .spawn(move || loop {
            supervise(config_path.clone());
            RUNNING.store(false, Ordering::SeqCst);
            // An init() that came while this thread was stopping found RUNNING still set and
            // started nothing: carry on for it, unless another thread has taken over.
            if SHARED.stop.load(Ordering::SeqCst) || RUNNING.swap(true, Ordering::SeqCst) {
                break;
            }
        });
    if let Err(e) = spawned {
        RUNNING.store(false, Ordering::SeqCst);
        log(
            LogLevel::Error,
            &format!("cannot start the agent thread: {e}; cinch only records"),
        );
    }
}

/// Runs the loop inside the plugin's guard: a panic is logged (with its location) and the loop
/// restarts after a pause, so the agent never silently dies.
fn supervise(config_path: String) {
    while !SHARED.stop.load(Ordering::Relaxed) {
        let outcome = guard::run(|| {
            Agent::new(config_path.clone()).run();
            Ok(0)
        });
        match outcome {
            Outcome::Panicked(message) | Outcome::Failed(message) => {
                SHARED.enforcing_until_ms.store(0, Ordering::Relaxed);
                log(
                    LogLevel::Error,
                    &format!("agent: internal error (panic: {message}); restarting in 5 s"),
                );
                std::thread::sleep(Duration::from_secs(5));
            }
            Outcome::Done(_) | Outcome::Rejected { .. } => return,
        }
    }
}

/// The loop's state: the round's own, and what the live ports remember for their log lines.
struct Agent {
    rounds: round::Agent,
    ports: LivePorts,
    was_primary: Option<bool>,
    /// job_submit calls already summarised in the log, and when.
    latency_logged: (u64, i64),
}

impl Agent {
    fn new(config_path: String) -> Agent {
        Agent {
            rounds: round::Agent::default(),
            ports: LivePorts {
                config_path,
                token_problem: None,
            },
            was_primary: None,
            latency_logged: (0, 0),
        }
    }

    fn run(&mut self) {
        let mut last_round = std::time::Instant::now() - MIN_ROUND_GAP;
        loop {
            let config = state::config();
            let woken = SHARED.wait(Duration::from_secs(u64::from(config.interval_s)));
            if SHARED.stop.load(Ordering::Relaxed) {
                return;
            }
            if woken {
                // Rounds cost slurmctld RPCs: during a burst of submissions, one round per
                // MIN_ROUND_GAP takes every new job at once (well inside the submit hold).
                let since = last_round.elapsed();
                std::thread::sleep(
                    MIN_ROUND_GAP
                        .saturating_sub(since)
                        .max(Duration::from_millis(100)),
                );
            }
            last_round = std::time::Instant::now();
            let primary = slurm_io::is_primary();
            if self.was_primary != Some(primary) {
                log(
                    LogLevel::Info,
                    if primary {
                        "agent: running on the primary controller"
                    } else {
                        "agent: dormant on a backup controller; Slurm schedules on its own"
                    },
                );
                self.was_primary = Some(primary);
            }
            if primary {
                let now_ms = unix_ms();
                self.log_submit_latency(now_ms);
                let outcome = self.rounds.round(
                    &state::config(),
                    &mut self.ports,
                    now_ms,
                    SHARED.take_foreign(),
                );
                SHARED
                    .enforcing_until_ms
                    .store(outcome.enforcing_until_ms, Ordering::Relaxed);
            }
        }
    }

    /// At most every 10 s, when there were new submissions: job_submit's own latency.
    fn log_submit_latency(&mut self, now_ms: i64) {
        let summary = state::SUBMIT_LATENCY.summary();
        let (logged, at) = self.latency_logged;
        if summary.count > logged && now_ms - at >= 10_000 {
            log(
                LogLevel::Verbose,
                &format!(
                    "job_submit latency over {} calls: p50 <= {} us, p99 <= {} us, max {} us",
                    summary.count,
                    summary.p50_us,
                    summary.p99_us,
                    summary.max_ns / 1000
                ),
            );
            self.latency_logged = (summary.count, now_ms);
        }
    }
}

/// The round's ports inside slurmctld: Slurm's API, the HTTP client, the token file and
/// slurmctld's log.
struct LivePorts {
    config_path: String,
    /// The last token problem logged.
    token_problem: Option<String>,
}

impl round::Ports for LivePorts {
    fn load_jobs(&mut self) -> Result<Vec<view::JobView>, String> {
        slurm_io::load_jobs()
    }

    fn load_nodes(&mut self) -> Result<Vec<view::NodeView>, String> {
        slurm_io::load_nodes()
    }

    fn load_switches(&mut self) -> Vec<view::SwitchView> {
        slurm_io::load_switches()
    }

    fn update_job(&mut self, update: &JobUpdate) -> Result<(), String> {
        slurm_io::update_job(update)
    }

    fn requeue_job(&mut self, job_id: u32) -> Result<(), String> {
        slurm_io::requeue_job(job_id)
    }

    fn token(&mut self, config: &Config) -> Option<String> {
        let path = match &config.optimizer_token_file {
            Some(p) => PathBuf::from(p),
            None => PathBuf::from(&self.config_path)
                .parent()
                .map(|d| d.join("cinch-optimizer.token"))
                .unwrap_or_else(|| PathBuf::from("cinch-optimizer.token")),
        };
        match read_token(&path) {
            Ok(token) => {
                if self.token_problem.take().is_some() {
                    log(
                        LogLevel::Info,
                        &format!("agent: optimizer token read from {}", path.display()),
                    );
                }
                Some(token)
            }
            Err(problem) => {
                if self.token_problem.as_deref() != Some(problem.as_str()) {
                    log(
                        LogLevel::Error,
                        &format!("agent: no optimizer token ({problem}); cinch stands aside"),
                    );
                    self.token_problem = Some(problem);
                }
                None
            }
        }
    }

    fn ask(
        &mut self,
        config: &Config,
        token: &str,
        snapshot: &cinch_core::Snapshot,
    ) -> Result<Decisions, String> {
        let body =
            serde_json::to_vec(snapshot).map_err(|e| format!("cannot encode snapshot: {e}"))?;
        let response = http::post_json(
            &config.optimizer_url,
            "/v1/schedule",
            token,
            &body,
            Duration::from_millis(u64::from(config.connect_timeout_ms)),
            Duration::from_millis(u64::from(config.request_timeout_ms)),
        )
        .map_err(|e| e.to_string())?;
        if response.status != 200 {
            let text = String::from_utf8_lossy(&response.body);
            return Err(format!(
                "optimizer answered HTTP {}: {}",
                response.status,
                text.chars().take(300).collect::<String>()
            ));
        }
        let decisions: Decisions = serde_json::from_slice(&response.body)
            .map_err(|e| format!("optimizer answered malformed decisions: {e}"))?;
        if decisions.schema_version != SCHEMA_VERSION {
            return Err(format!(
                "optimizer speaks schema_version {}, cinch {SCHEMA_VERSION}",
                decisions.schema_version
            ));
        }
        Ok(decisions)
    }

    fn log(&mut self, level: LogLevel, message: &str) {
        log(level, message);
    }
}
