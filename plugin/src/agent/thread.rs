//! The agent thread's loop. It holds no slurmctld lock: every Slurm call is an RPC to slurmctld
//! like any client's, and nothing here runs inside job_submit/job_modify.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cinch_core::enact::round::{AskError, ClusterError};
use cinch_core::Decisions;

use super::job_cache::JobCache;
use super::link::{self, Link};
use super::reconcile::JobUpdate;
use super::slurm_io::Loaded;
use super::{http, read_token, round, slurm_io, view};
use crate::config::{Config, LogLevel};
use crate::guard::{self, Outcome};
use crate::slurm::log;
use crate::state::{self, unix_ms, SHARED};

/// What a Slurm call answers once slurmctld is exiting.
const EXITING: &str = "slurmctld is exiting";

/// Shortest time between two rounds triggered by submissions.
const MIN_ROUND_GAP: Duration = Duration::from_secs(1);

/// Whether an agent thread is alive (it clears this as it exits).
static RUNNING: AtomicBool = AtomicBool::new(false);

/// The agent thread, for joining it at `fini` and at exit.
static THREAD: Mutex<Option<libc::pthread_t>> = Mutex::new(None);

/// Starts the agent unless one is running. After `fini` (stop) and a new `init`, a thread that
/// has not exited yet simply carries on; one that has is replaced.
///
/// The thread is made with `pthread_create`, not `std::thread::spawn`: std's spawn registers a
/// thread-local destructor (its spawn hooks) on the *calling* thread, which for `init` is
/// slurmctld's main thread. glibc runs that destructor inside `exit()`, in cinch's code, after
/// the agent thread may still be running: the SIGSEGV in `__call_tls_dtors` seen at shutdown.
/// Nothing cinch does on a slurmctld thread may leave a destructor behind there; the e2e test
/// `slurmctld_never_runs_a_cinch_destructor_and_survives_50_stops` checks it with a probe.
pub fn start(config_path: String) {
    if RUNNING.swap(true, Ordering::SeqCst) {
        return;
    }
    install_exit_handler();
    let arg = Box::into_raw(Box::new(config_path)).cast::<libc::c_void>();
    let mut thread: libc::pthread_t = 0;
    // SAFETY: agent_main takes ownership of `arg` (a leaked Box<String>); default attributes.
    let rc = unsafe { libc::pthread_create(&mut thread, std::ptr::null(), agent_main, arg) };
    if rc != 0 {
        // SAFETY: the thread was not created, so `arg` is still ours to free.
        drop(unsafe { Box::from_raw(arg.cast::<String>()) });
        RUNNING.store(false, Ordering::SeqCst);
        log(
            LogLevel::Error,
            &format!(
                "cannot start the agent thread: {}; cinch only records",
                std::io::Error::from_raw_os_error(rc)
            ),
        );
        return;
    }
    // SAFETY: `thread` is the live thread just created; the name fits the 15-byte limit.
    unsafe { libc::pthread_setname_np(thread, c"cinch-agent".as_ptr()) };
    let previous = THREAD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .replace(thread);
    if let Some(old) = previous {
        // An earlier thread that has exited (RUNNING was clear): reap it without waiting.
        // SAFETY: `old` was created joinable and has not been joined or detached.
        unsafe { libc::pthread_detach(old) };
    }
}

extern "C" fn agent_main(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `start` passes a leaked Box<String> and never touches it again.
    let config_path = *unsafe { Box::from_raw(arg.cast::<String>()) };
    // Nothing may unwind out of a pthread start routine.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
        supervise(config_path.clone());
        RUNNING.store(false, Ordering::SeqCst);
        // An init() that came while this thread was stopping found RUNNING still set and
        // started nothing: carry on for it, unless another thread has taken over.
        if SHARED.stop.load(Ordering::SeqCst) || RUNNING.swap(true, Ordering::SeqCst) {
            break;
        }
    }));
    RUNNING.store(false, Ordering::SeqCst);
    std::ptr::null_mut()
}

/// Tells the agent to stop and waits up to `patience` for its thread to end; true if it did
/// (or none was running).
pub fn stop_and_join(patience: Duration) -> bool {
    SHARED.stop.store(true, Ordering::SeqCst);
    SHARED.wake();
    let Some(thread) = THREAD.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return true;
    };
    let deadline = std::time::SystemTime::now() + patience;
    let since_epoch = deadline
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let abstime = libc::timespec {
        tv_sec: since_epoch.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(since_epoch.subsec_nanos() as i32),
    };
    // SAFETY: `thread` is joinable and joined at most once (taken out of THREAD above).
    let rc = unsafe { libc::pthread_timedjoin_np(thread, std::ptr::null_mut(), &abstime) };
    if rc != 0 {
        // Still in a network call: put it back so a later stop can try again.
        THREAD
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(thread);
    }
    rc == 0
}

/// Registers, once, a handler that runs inside slurmctld's `exit()` (22.05 calls no `fini` on
/// SIGTERM): it stops the agent, closes the gate to Slurm's API and log so no agent call into
/// Slurm is under way while Slurm tears itself down, and waits briefly for the thread to end.
fn install_exit_handler() {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: registers a plain function of this library, which is never unmapped (init pins
    // it with RTLD_NODELETE before starting the agent).
    unsafe { libc::atexit(at_exit) };
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        SHARED.stop.store(true, Ordering::SeqCst);
        SHARED.wake();
        state::close_slurm_gate(EXIT_PATIENCE);
        // A thread waiting on the optimizer cannot touch Slurm any more; exit does not wait
        // for it beyond this.
        stop_and_join(EXIT_PATIENCE);
    });
}

/// How long slurmctld's exit waits for the agent: a Slurm RPC under way, or the end of the
/// agent's network call (the request deadline, 1 s by default, usually ends it first).
const EXIT_PATIENCE: Duration = Duration::from_millis(1_500);

/// CPU time slurmctld's process has used so far (all threads: the agent, the RPC handlers that
/// serve its loads, and whatever Slurm itself does meanwhile).
pub(crate) fn process_cpu() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time the calling thread has used so far.
pub(crate) fn thread_cpu() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// The agent's own log lines: through the gate, so none is written while slurmctld exits.
fn agent_log(level: LogLevel, message: &str) {
    state::through_slurm_gate(|| log(level, message));
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
                agent_log(
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
                requeue_delay: None,
                jobs: None,
                nodes: None,
                job_reads: JobReads::default(),
                jobs_read_in_round: false,
                nodes_read_in_round: false,
                load_cpu: Duration::ZERO,
                ask_cpu: Duration::ZERO,
                link: Link::default(),
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
            let Some(primary) = state::through_slurm_gate(slurm_io::is_primary) else {
                return;
            };
            if self.was_primary != Some(primary) {
                agent_log(
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
                let (cpu_before, own_before, wall_before) =
                    (process_cpu(), thread_cpu(), std::time::Instant::now());
                self.ports.load_cpu = Duration::ZERO;
                self.ports.ask_cpu = Duration::ZERO;
                self.ports.jobs_read_in_round = false;
                self.ports.nodes_read_in_round = false;
                let outcome = self.rounds.round(
                    &state::config(),
                    &mut self.ports,
                    now_ms,
                    SHARED.take_foreign(),
                );
                if !outcome.skipped {
                    self.rounds.last_round_s = wall_before.elapsed().as_secs_f64();
                    // What a full round cost slurmctld (its RPC handlers included), for admins
                    // and slurm-conf/bench-rounds.
                    agent_log(
                        LogLevel::Verbose,
                        &format!(
                            "agent: round: {:.1} ms CPU in slurmctld, {:.1} ms of it in the agent \
                             thread, {:.1} ms wall (reading Slurm {:.1} ms, optimizer exchange \
                             {:.1} ms{}{})",
                            (process_cpu() - cpu_before).as_secs_f64() * 1e3,
                            (thread_cpu() - own_before).as_secs_f64() * 1e3,
                            wall_before.elapsed().as_secs_f64() * 1e3,
                            self.ports.load_cpu.as_secs_f64() * 1e3,
                            self.ports.ask_cpu.as_secs_f64() * 1e3,
                            std::mem::take(&mut self.ports.link.note),
                            self.ports.job_reads.take_summary(),
                        ),
                    );
                }
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
            agent_log(
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
    /// Slurm's requeue delay, read once from slurmctld's configuration (the credential lifetime
    /// it keeps is the one it started with); `Err` with the error logged while it cannot be read.
    requeue_delay: Option<Result<u32, String>>,
    /// The jobs and nodes last read, reused (shared, not copied) while Slurm answers "no
    /// change"; the jobs brought up to date by delta reads where the release allows.
    jobs: Option<LiveJobs>,
    nodes: Option<Cached<Vec<view::NodeView>>>,
    /// Job reads since the last round's log line: whole loads, delta reads, jobs they loaded.
    job_reads: JobReads,
    /// Whether this round already brought the jobs / nodes up to date (its skip check did): its
    /// read then takes them as they were a moment before instead of asking Slurm again.
    jobs_read_in_round: bool,
    nodes_read_in_round: bool,
    /// slurmctld CPU spent this round reading Slurm (RPCs, their handlers, our copies) and
    /// talking to the optimizer (encoding, HTTP, decoding), for the round's log line.
    load_cpu: Duration,
    ask_cpu: Duration,
    /// The exchange with the optimizer, in deltas where it can.
    link: Link,
}

/// What the round's log line counts slurmctld CPU under.
#[derive(Clone, Copy)]
enum Spent {
    ReadingSlurm,
    Optimizer,
}

impl LivePorts {
    /// Runs `work`, counting the slurmctld CPU it takes under `what` for the round's log line.
    fn timed<T>(&mut self, what: Spent, work: impl FnOnce(&mut Self) -> T) -> T {
        let started = process_cpu();
        let out = work(self);
        let spent = process_cpu().saturating_sub(started);
        match what {
            Spent::ReadingSlurm => self.load_cpu += spent,
            Spent::Optimizer => self.ask_cpu += spent,
        }
        out
    }

    /// Slurm's jobs now, loaded again only where Slurm says they changed.
    fn refreshed_jobs(&mut self) -> Result<Arc<Vec<view::JobView>>, String> {
        if !std::mem::take(&mut self.jobs_read_in_round) {
            self.refresh_jobs()?;
        }
        Ok(self
            .jobs
            .as_ref()
            .map(|c| c.cache.views().clone())
            .unwrap_or_default())
    }

    /// Slurm's nodes now, loaded again only when Slurm says they changed.
    fn refreshed_nodes(&mut self) -> Result<Arc<Vec<view::NodeView>>, String> {
        if !std::mem::take(&mut self.nodes_read_in_round) {
            self.refresh_nodes()?;
        }
        Ok(self
            .nodes
            .as_ref()
            .map(|c| c.views.clone())
            .unwrap_or_default())
    }

    /// Brings the cached jobs up to date; true if any changed.
    fn refresh_jobs(&mut self) -> Result<bool, String> {
        #[cfg(slurm_job_states)]
        if let Some(jobs) = self.jobs.as_mut() {
            if !jobs.stale && jobs.whole_checked_at.elapsed() < FULL_READ_WITH_DELTAS {
                match jobs.delta_read(&mut self.job_reads)? {
                    DeltaRead::Done(changed) => return Ok(changed),
                    DeltaRead::TooMuch => {}
                }
            }
        }
        self.full_read()
    }

    /// Loads every job unless Slurm says none changed since the last whole load.
    fn full_read(&mut self) -> Result<bool, String> {
        let since = match &self.jobs {
            Some(j) if !j.stale && j.loaded_at.elapsed() < FULL_RELOAD => (j.slurm_at - 1).max(1),
            _ => 0,
        };
        let started = unix_s();
        // This load covers every update reported so far.
        drop(SHARED.take_modified());
        match state::through_slurm_gate(|| slurm_io::load_jobs(since)) {
            Some(Ok(Loaded::Unchanged)) => {
                if let Some(jobs) = self.jobs.as_mut() {
                    jobs.whole_checked_at = std::time::Instant::now();
                    jobs.read_from = started;
                }
                Ok(false)
            }
            Some(Ok(Loaded::Fresh(views, slurm_at))) => {
                self.job_reads.full += 1;
                self.jobs = Some(LiveJobs {
                    cache: JobCache::new(views),
                    slurm_at,
                    loaded_at: std::time::Instant::now(),
                    whole_checked_at: std::time::Instant::now(),
                    read_from: started,
                    stale: false,
                });
                Ok(true)
            }
            Some(Err(e)) => Err(e),
            None => Err(EXITING.into()),
        }
    }

    /// Brings the cached nodes up to date; true if Slurm sent new ones.
    fn refresh_nodes(&mut self) -> Result<bool, String> {
        Cached::refresh(&mut self.nodes, slurm_io::load_nodes)
    }
}

/// Slurm's jobs as last read (`job_cache.rs` says how they are kept up to date).
struct LiveJobs {
    cache: JobCache,
    /// Slurm's time of the last change as of the last whole load: the next whole load asks for
    /// the jobs only if something changed since.
    slurm_at: i64,
    /// When every job was last loaded.
    loaded_at: std::time::Instant,
    /// When a whole load was last asked for (and loaded, or answered "no change").
    whole_checked_at: std::time::Instant,
    /// The Unix second the last read began: a change Slurm stamps at or after it may be missing.
    read_from: i64,
    /// A delta read failed part way (the updates it took are lost): the next read is whole.
    stale: bool,
}

/// Job reads since the last round's log line.
#[derive(Default)]
struct JobReads {
    full: u32,
    delta: u32,
    loaded: u32,
}

impl JobReads {
    /// For the round's log line; empty when nothing was read.
    fn take_summary(&mut self) -> String {
        let reads = std::mem::take(self);
        if reads.full == 0 && reads.delta == 0 {
            return String::new();
        }
        format!(
            "; jobs read: {} whole, {} delta ({} jobs loaded)",
            reads.full, reads.delta, reads.loaded
        )
    }
}

/// With delta reads, every job is still loaded at least this often when Slurm changed anything
/// since the last whole load: what a delta read cannot see (a priority recomputed by
/// priority/multifactor, Slurm's expected start of a pending job) is then no older than the
/// optimizer's own once-a-minute refresh.
#[cfg(slurm_job_states)]
const FULL_READ_WITH_DELTAS: Duration = Duration::from_secs(60);

/// More jobs to load again than this are read with one whole load: one RPC a job costs more.
#[cfg(slurm_job_states)]
const MAX_JOBS_LOADED_ONE_BY_ONE: usize = 64;

#[cfg(slurm_job_states)]
enum DeltaRead {
    /// The jobs are up to date; true if any changed.
    Done(bool),
    /// Too many jobs changed to load one by one: read them whole.
    TooMuch,
}

#[cfg(slurm_job_states)]
impl LiveJobs {
    /// Loads only the jobs that are new, changed state or were updated since the last read.
    fn delta_read(&mut self, reads: &mut JobReads) -> Result<DeltaRead, String> {
        let started = unix_s();
        let modified = SHARED.take_modified();
        let stamp = slurm_io::last_job_update();
        if modified.unknown {
            self.stale = true;
            return Ok(DeltaRead::TooMuch);
        }
        if stamp < self.read_from && modified.ids.is_empty() {
            return Ok(DeltaRead::Done(false));
        }
        // Until this read is through, the updates just taken are known only to it.
        self.stale = true;
        let states = state::through_slurm_gate(slurm_io::load_job_states)
            .unwrap_or_else(|| Err(EXITING.into()))?;
        let delta = self.cache.delta(&states, &modified.ids);
        if delta.reload.len() > MAX_JOBS_LOADED_ONE_BY_ONE {
            return Ok(DeltaRead::TooMuch);
        }
        let mut loaded = Vec::with_capacity(delta.reload.len());
        for &job_id in &delta.reload {
            loaded.extend(
                state::through_slurm_gate(|| slurm_io::load_job(job_id))
                    .unwrap_or_else(|| Err(EXITING.into()))?,
            );
        }
        reads.delta += 1;
        reads.loaded += delta.reload.len() as u32;
        self.cache.merge(&delta, loaded);
        self.stale = false;
        self.read_from = started;
        Ok(DeltaRead::Done(!delta.is_empty()))
    }
}

/// Unix seconds now (Slurm's own clock for its change stamps).
fn unix_s() -> i64 {
    unix_ms().div_euclid(1000)
}

/// Records read from Slurm, with Slurm's time of their last change.
struct Cached<T> {
    views: Arc<T>,
    slurm_at: i64,
    read_at: std::time::Instant,
}

/// Records are read afresh at least this often, even when Slurm says nothing changed: a change
/// Slurm does not stamp (a priority recomputed by a plugin) is then seen within this time.
const FULL_RELOAD: Duration = Duration::from_secs(300);

impl<T> Cached<T> {
    fn new(views: T, slurm_at: i64) -> Cached<T> {
        Cached {
            views: Arc::new(views),
            slurm_at,
            read_at: std::time::Instant::now(),
        }
    }

    /// Loads what changed since the cache was read into it (through the gate); true if Slurm
    /// sent new records.
    fn refresh(
        cache: &mut Option<Cached<T>>,
        load: impl FnOnce(i64) -> Result<Loaded<T>, String>,
    ) -> Result<bool, String> {
        let since = Cached::since(cache);
        match state::through_slurm_gate(|| load(since)) {
            Some(Ok(Loaded::Unchanged)) => Ok(false),
            Some(Ok(Loaded::Fresh(views, at))) => {
                *cache = Some(Cached::new(views, at));
                Ok(true)
            }
            Some(Err(e)) => Err(e),
            None => Err(EXITING.into()),
        }
    }

    /// The update time to load with: the cache's, or 0 (everything) when none or too old.
    /// One second earlier than Slurm's stamp: Slurm's times are whole seconds, so a change in
    /// the same second as the last load must not read as "no change".
    fn since(cache: &Option<Cached<T>>) -> i64 {
        match cache {
            Some(c) if c.read_at.elapsed() < FULL_RELOAD => (c.slurm_at - 1).max(1),
            _ => 0,
        }
    }
}

impl round::Ports for LivePorts {
    fn publish_stated_targets(&mut self, targets: &cinch_core::wire::decision::StatedTargets) {
        state::set_stated_targets(targets);
    }

    fn publish_sharing(
        &mut self,
        at_ms: i64,
        view: Option<cinch_core::models::sharing::ShareView>,
    ) {
        crate::share::publish(at_ms, view);
    }

    fn cluster_unchanged(&mut self) -> bool {
        // This check is where a changed job list is loaded when the round may be skipped (the
        // round's read then reuses it), so it counts as reading Slurm.
        self.timed(Spent::ReadingSlurm, |ports| {
            if ports.jobs.is_none() || ports.nodes.is_none() {
                return false;
            }
            let jobs = ports.refresh_jobs();
            ports.jobs_read_in_round = jobs.is_ok();
            if !matches!(jobs, Ok(false)) {
                return false;
            }
            let nodes = ports.refresh_nodes();
            ports.nodes_read_in_round = nodes.is_ok();
            matches!(nodes, Ok(false))
        })
    }

    fn load_jobs(&mut self) -> Result<Arc<Vec<view::JobView>>, String> {
        self.timed(Spent::ReadingSlurm, Self::refreshed_jobs)
    }

    fn load_nodes(&mut self) -> Result<Arc<Vec<view::NodeView>>, String> {
        self.timed(Spent::ReadingSlurm, Self::refreshed_nodes)
    }

    fn load_topology(&mut self) -> view::TopologyView {
        self.timed(Spent::ReadingSlurm, |_| {
            state::through_slurm_gate(slurm_io::load_topology).unwrap_or_default()
        })
    }

    fn requeue_delay_s(&mut self) -> u32 {
        if let Some(Ok(delay)) = self.requeue_delay {
            return delay;
        }
        let read = self.timed(Spent::ReadingSlurm, |_| {
            state::through_slurm_gate(slurm_io::load_requeue_delay)
                .unwrap_or_else(|| Err(EXITING.into()))
        });
        match &read {
            Ok(delay) => agent_log(
                LogLevel::Info,
                &format!("agent: Slurm's requeue delay is {delay} s (AuthInfo cred_expire + 1)"),
            ),
            Err(why) if !matches!(self.requeue_delay, Some(Err(_))) => agent_log(
                LogLevel::Error,
                &format!(
                    "agent: cannot read Slurm's requeue delay ({why}); the optimizer is told \
                     Slurm's default, {} s",
                    cinch_core::slurm::scontrol::DEFAULT_REQUEUE_DELAY_S
                ),
            ),
            Err(_) => {}
        }
        let delay = read
            .as_ref()
            .map_or(cinch_core::slurm::scontrol::DEFAULT_REQUEUE_DELAY_S, |d| *d);
        self.requeue_delay = Some(read);
        delay
    }

    fn update_job(&mut self, update: &JobUpdate) -> Result<(), ClusterError> {
        state::through_slurm_gate(|| slurm_io::update_job(update))
            .unwrap_or_else(|| Err(ClusterError::Unreachable(EXITING.into())))
    }

    fn requeue_job(&mut self, job_id: u32) -> Result<(), ClusterError> {
        // A requeue is no update (job_modify does not see it): the next read loads the job.
        SHARED.report_modified(job_id);
        state::through_slurm_gate(|| slurm_io::requeue_job(job_id))
            .unwrap_or_else(|| Err(ClusterError::Unreachable(EXITING.into())))
    }

    fn cancel_job(&mut self, job_id: u32) -> Result<(), ClusterError> {
        SHARED.report_modified(job_id);
        state::through_slurm_gate(|| slurm_io::cancel_job(job_id))
            .unwrap_or_else(|| Err(ClusterError::Unreachable(EXITING.into())))
    }

    fn token(&mut self, config: &Config) -> Option<String> {
        // Never hand the token to a transport that would carry it off this host in clear text.
        if let Err(why) = config.transport_allowed() {
            if self.token_problem.as_deref() != Some(why.as_str()) {
                agent_log(LogLevel::Error, &format!("agent: {why}"));
                self.token_problem = Some(why);
            }
            return None;
        }
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
                    agent_log(
                        LogLevel::Info,
                        &format!("agent: optimizer token read from {}", path.display()),
                    );
                }
                Some(token)
            }
            Err(problem) => {
                if self.token_problem.as_deref() != Some(problem.as_str()) {
                    agent_log(
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
    ) -> Result<Decisions, AskError> {
        self.timed(Spent::Optimizer, |ports| {
            let mut transport = Http { config, token };
            ports
                .link
                .exchange(&mut transport, snapshot, std::time::Instant::now())
        })
    }

    fn policy_version(&mut self, config: &Config) -> Result<u64, AskError> {
        self.timed(Spent::Optimizer, |_| health_policy_version(config))
    }

    fn answer_done(&mut self, answer: Decisions) {
        self.timed(Spent::Optimizer, |ports| ports.link.give_back(answer));
    }

    fn log(&mut self, level: LogLevel, message: &str) {
        agent_log(level, message);
    }
}

/// `GET /healthz` on the optimizer: the epoch of its answers (its policy version on an older
/// optimizer).
fn health_policy_version(config: &Config) -> Result<u64, AskError> {
    config.transport_allowed().map_err(AskError::Unreachable)?;
    let response = http::get(
        &config.optimizer_url,
        "/healthz",
        http::Limits {
            connect: Duration::from_millis(u64::from(config.connect_timeout_ms)),
            total: Duration::from_millis(u64::from(config.request_timeout_ms)),
            max_body: 64 * 1024,
        },
        config.optimizer_ca_file.as_deref(),
    )
    .map_err(|e| AskError::Unreachable(e.to_string()))?;
    if response.status != 200 {
        return Err(AskError::Refused(format!(
            "optimizer health check answered HTTP {}",
            response.status
        )));
    }
    // The epoch of its answers where it says one (it also moves when a job's GPUs turn idle),
    // else its policy version.
    serde_json::from_slice::<serde_json::Value>(&response.body)
        .ok()
        .and_then(|v| {
            v.get("answer_epoch")
                .or_else(|| v.get("policy_version"))?
                .as_u64()
        })
        .ok_or_else(|| AskError::Invalid("optimizer health check without a policy version".into()))
}

/// The optimizer over HTTP, under cinch.conf's limits.
struct Http<'a> {
    config: &'a Config,
    token: &'a str,
}

impl link::Transport for Http<'_> {
    fn post(&mut self, path: &str, body: &[u8]) -> Result<http::Response, String> {
        let config = self.config;
        http::post_json(
            &config.optimizer_url,
            path,
            self.token,
            body,
            http::Limits {
                connect: Duration::from_millis(u64::from(config.connect_timeout_ms)),
                total: Duration::from_millis(u64::from(config.request_timeout_ms)),
                max_body: config.max_answer_bytes as usize,
            },
            config.optimizer_ca_file.as_deref(),
        )
        .map_err(|e| e.to_string())
    }

    fn log(&mut self, level: LogLevel, message: &str) {
        agent_log(level, message);
    }
}
