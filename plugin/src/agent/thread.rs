//! The agent thread's loop. It holds no slurmctld lock: every Slurm call is an RPC to slurmctld
//! like any client's, and nothing here runs inside job_submit/job_modify.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cinch_core::{Decisions, Mode, SCHEMA_VERSION};

use super::breaker::{Breaker, Transition};
use super::reconcile::{reconcile, Fields, Input};
use super::{http, read_token, slurm_io, view};
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

struct Agent {
    config_path: String,
    breaker: Breaker,
    renewed: HashMap<u32, i64>,
    foreign: HashMap<u32, Fields>,
    /// Last shadow line logged per job, so a decision is logged once, not every round.
    shadowed: HashMap<u32, String>,
    /// Whether the last round could read Slurm (logged on change only).
    slurm_ok: Option<bool>,
    /// The last token problem logged.
    token_problem: Option<String>,
    was_primary: Option<bool>,
    /// job_submit calls already summarised in the log, and when.
    latency_logged: (u64, i64),
}

impl Agent {
    fn new(config_path: String) -> Agent {
        Agent {
            config_path,
            breaker: Breaker::default(),
            renewed: HashMap::new(),
            foreign: HashMap::new(),
            shadowed: HashMap::new(),
            slurm_ok: None,
            token_problem: None,
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
                self.round(&state::config());
            }
        }
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

    /// Asks the optimizer; `Err` carries why there is no usable answer.
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

    fn round(&mut self, config: &Config) {
        let now_ms = unix_ms();
        self.log_submit_latency(now_ms);
        let now = now_ms / 1000;
        for (job, fields) in SHARED.take_foreign() {
            let entry = self.foreign.entry(job).or_default();
            *entry = entry.union(fields);
        }
        let loaded = slurm_io::load_jobs().and_then(|jobs| Ok((jobs, slurm_io::load_nodes()?)));
        let (jobs, nodes) = match loaded {
            Ok(x) => {
                if self.slurm_ok != Some(true) {
                    log(
                        LogLevel::Info,
                        "agent: reading the cluster through Slurm's API",
                    );
                    self.slurm_ok = Some(true);
                }
                x
            }
            Err(e) => {
                if self.slurm_ok != Some(false) {
                    log(
                        LogLevel::Error,
                        &format!("agent: cannot read the cluster ({e}); will retry"),
                    );
                    self.slurm_ok = Some(false);
                }
                SHARED.enforcing_until_ms.store(0, Ordering::Relaxed);
                return;
            }
        };
        let switches = slurm_io::load_switches();

        // Ask the optimizer unless cinch is off, has no token, or the breaker says wait.
        let mut answer: Option<Decisions> = None;
        let mut failed_now = false;
        if config.mode != Mode::Off {
            if let Some(token) = self.token(config) {
                if self.breaker.allow(now_ms) {
                    let snapshot = view::snapshot(now, &jobs, &nodes, &switches);
                    if config.log_level >= LogLevel::Debug {
                        let free: Vec<String> = snapshot
                            .nodes
                            .iter()
                            .map(|n| {
                                format!(
                                    "{}:{}/{}/{:?}@{}",
                                    n.name,
                                    n.gpus_alloc,
                                    n.gpus_total,
                                    n.state,
                                    n.rack.as_deref().unwrap_or("-")
                                )
                            })
                            .collect();
                        log(
                            LogLevel::Debug,
                            &format!(
                                "agent: snapshot {} pending, {} running; free GPUs {}",
                                snapshot.pending.len(),
                                snapshot.running.len(),
                                free.join(" ")
                            ),
                        );
                    }
                    match self.ask(config, &token, &snapshot) {
                        Ok(d) => {
                            if let Some(Transition::Closed) = self.breaker.success() {
                                log(
                                    LogLevel::Info,
                                    "agent: the optimizer answers again; cinch resumes",
                                );
                            }
                            answer = Some(d);
                        }
                        Err(e) => {
                            failed_now = true;
                            if let Some(Transition::Opened { failures, error }) =
                                self.breaker.failure(now_ms, &e)
                            {
                                log(
                                    LogLevel::Error,
                                    &format!(
                                        "agent: optimizer unusable after {failures} tries ({error}); cinch stands \
                                         aside and undoes its changes; Slurm schedules on its own"
                                    ),
                                );
                            } else if !self.breaker.is_open() {
                                log(
                                    LogLevel::Verbose,
                                    &format!("agent: no answer this round: {e}"),
                                );
                            }
                        }
                    }
                }
            } else {
                self.breaker = Breaker::default();
            }
        }

        // The stricter of cinch.conf's mode and the optimizer's.
        let mode = match &answer {
            Some(d) => config.mode.stricter(d.mode),
            None => config.mode,
        };
        let empty: [cinch_core::Decision; 0] = [];
        let decisions = match &answer {
            Some(d) => Some(&d.decisions[..]),
            // A passing failure: keep what was applied until its TTL (and release submit holds).
            None if failed_now && !self.breaker.is_open() => Some(&empty[..]),
            None => None,
        };
        let names: HashSet<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let out = reconcile(
            &jobs,
            &Input {
                now,
                mode,
                decisions,
                nodes: &names,
                foreign: &self.foreign,
                renewed: &self.renewed,
            },
        );

        if !out.refused.is_empty() {
            let shown: Vec<&str> = out.refused.iter().take(3).map(String::as_str).collect();
            log(
                LogLevel::Error,
                &format!(
                    "agent: refused {} invalid decision(s) from the optimizer: {}",
                    out.refused.len(),
                    shown.join("; ")
                ),
            );
        }
        for (job, line) in &out.shadow {
            if self.shadowed.get(job) != Some(line) {
                log(LogLevel::Info, &format!("shadow: job {job}: would {line}"));
                self.shadowed.insert(*job, line.clone());
            }
        }
        for update in &out.updates {
            match slurm_io::update_job(update) {
                Ok(()) => log(
                    LogLevel::Info,
                    &format!("job {}: {}", update.job_id, update.summary),
                ),
                Err(e) => log(
                    LogLevel::Error,
                    &format!(
                        "job {}: Slurm refused '{}': {e}",
                        update.job_id, update.summary
                    ),
                ),
            }
            self.renewed.remove(&update.job_id);
        }
        for (job, why) in &out.requeues {
            match slurm_io::requeue_job(*job) {
                Ok(()) => log(LogLevel::Info, &format!("job {job}: requeued: {why}")),
                Err(e) => log(
                    LogLevel::Error,
                    &format!("job {job}: Slurm refused the requeue ({why}): {e}"),
                ),
            }
        }
        self.renewed.extend(out.renewed);
        // Forget jobs Slurm no longer has pending.
        let pending: HashSet<u32> = jobs
            .iter()
            .filter(|j| j.state == view::JobState::Pending)
            .map(|j| j.job_id)
            .collect();
        self.renewed.retain(|j, _| pending.contains(j));
        self.foreign.retain(|j, _| pending.contains(j));
        self.shadowed.retain(|j, _| pending.contains(j));

        let enforcing = mode == Mode::Enforce && answer.is_some();
        let until = if enforcing {
            now_ms + 3 * 1000 * i64::from(config.interval_s)
        } else {
            0
        };
        SHARED.enforcing_until_ms.store(until, Ordering::Relaxed);
    }
}
