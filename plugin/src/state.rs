//! State shared by slurmctld's threads calling into cinch (job_submit, job_modify) and cinch's
//! agent thread. Every lock here is held for microseconds and never across a Slurm RPC, so
//! neither side can stall the other.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use crate::agent::reconcile::Fields;
use crate::config::Config;
use cinch_core::wire::decision::StatedTargets;

/// No job (Slurm's NO_VAL).
pub const NO_JOB: u32 = 0xffff_fffe;

static CONFIG: RwLock<Option<Arc<Config>>> = RwLock::new(None);

/// The settings in force (defaults until init() loaded cinch.conf).
pub fn config() -> Arc<Config> {
    let slot = CONFIG.read().unwrap_or_else(|e| e.into_inner());
    slot.clone().unwrap_or_default()
}

pub fn set_config(config: Config) {
    *CONFIG.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(config));
}

static STATED_TARGETS: RwLock<Option<Arc<StatedTargets>>> = RwLock::new(None);

/// Whose stated QoS targets the optimizer's policy counts, as its latest answer said (`None`:
/// no answer has said yet).
pub fn stated_targets() -> Option<Arc<StatedTargets>> {
    STATED_TARGETS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Keeps `targets` for job_submit, replacing the slot only when they changed.
pub fn set_stated_targets(targets: &StatedTargets) {
    if stated_targets().as_deref() == Some(targets) {
        return;
    }
    *STATED_TARGETS.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(targets.clone()));
}

/// Whether the agent may still call into Slurm (its API and its log): `true` once slurmctld is
/// exiting. The agent holds the read side for the length of each call; [`close_slurm_gate`]
/// takes the write side, so once it returns no agent call into Slurm is under way or can start
/// while slurmctld's exit handlers tear Slurm down.
static SLURM_GATE: RwLock<bool> = RwLock::new(false);

/// Runs `call` (an agent call into Slurm) unless slurmctld is exiting.
pub fn through_slurm_gate<T>(call: impl FnOnce() -> T) -> Option<T> {
    let closed = SLURM_GATE.read().unwrap_or_else(|e| e.into_inner());
    if *closed {
        return None;
    }
    Some(call())
}

/// Closes the gate, waiting up to `patience` for a call under way to return; false if one did
/// not (a Slurm RPC stuck for that long), in which case the gate stays open.
pub fn close_slurm_gate(patience: Duration) -> bool {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match SLURM_GATE.try_write() {
            Ok(mut closed) => {
                *closed = true;
                return true;
            }
            Err(std::sync::TryLockError::Poisoned(e)) => {
                *e.into_inner() = true;
                return true;
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                if std::time::Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

pub struct Shared {
    wake: Mutex<bool>,
    wake_cv: Condvar,
    /// The job the agent is updating right now: job_modify calls for it are cinch's own.
    pub in_flight: AtomicU32,
    /// Fields users/admins changed, reported by job_modify, collected by the agent.
    foreign: Mutex<Vec<(u32, Fields)>>,
    /// Jobs an update reached (anyone's, cinch's own too), reported by job_modify: the agent's
    /// delta reads load these again, since a changed setting does not change a job's state.
    modified: Mutex<ModifiedJobs>,
    /// Until when (Unix ms) the agent counts as live and enforcing: job_submit's hold rule
    /// applies only then, so a dead agent never holds new jobs.
    pub enforcing_until_ms: AtomicI64,
    pub stop: AtomicBool,
}

pub static SHARED: Shared = Shared::new();

impl Default for Shared {
    fn default() -> Self {
        Shared::new()
    }
}

pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Shared {
    pub const fn new() -> Shared {
        Shared {
            wake: Mutex::new(false),
            wake_cv: Condvar::new(),
            in_flight: AtomicU32::new(NO_JOB),
            foreign: Mutex::new(Vec::new()),
            modified: Mutex::new(ModifiedJobs::new()),
            enforcing_until_ms: AtomicI64::new(0),
            stop: AtomicBool::new(false),
        }
    }

    /// Asks the agent for a round soon (called from job_submit: one uncontended lock).
    pub fn wake(&self) {
        *self.wake.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake_cv.notify_one();
    }

    /// Waits up to `timeout` for a wake-up; true when woken rather than timed out.
    pub fn wait(&self, timeout: Duration) -> bool {
        let guard = self.wake.lock().unwrap_or_else(|e| e.into_inner());
        let (mut woken, _) = self
            .wake_cv
            .wait_timeout_while(guard, timeout, |woken| {
                !*woken && !self.stop.load(Ordering::Relaxed)
            })
            .unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *woken)
    }

    pub fn report_foreign(&self, job_id: u32, fields: Fields) {
        self.foreign
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((job_id, fields));
    }

    pub fn take_foreign(&self) -> Vec<(u32, Fields)> {
        std::mem::take(&mut *self.foreign.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Notes that an update reached `job_id` (`NO_VAL`: a job job_modify could not name).
    pub fn report_modified(&self, job_id: u32) {
        self.modified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(job_id);
    }

    /// The jobs updates reached since the last take.
    pub fn take_modified(&self) -> ModifiedJobs {
        std::mem::replace(
            &mut *self.modified.lock().unwrap_or_else(|e| e.into_inner()),
            ModifiedJobs::new(),
        )
    }
}

/// The jobs updates reached between two reads of Slurm's jobs.
#[derive(Debug, Default, PartialEq)]
pub struct ModifiedJobs {
    pub ids: Vec<u32>,
    /// An update named no single job, or more jobs than are worth loading one by one: the next
    /// read loads every job.
    pub unknown: bool,
}

/// More updated jobs than this between two reads are read with one load of every job (and
/// job_modify's list stays small under slurmctld's lock).
pub const MAX_MODIFIED: usize = 256;

impl ModifiedJobs {
    pub const fn new() -> ModifiedJobs {
        ModifiedJobs {
            ids: Vec::new(),
            unknown: false,
        }
    }

    fn note(&mut self, job_id: u32) {
        if self.unknown {
            return;
        }
        if job_id == cinch_slurm_ffi::NO_VAL || self.ids.len() >= MAX_MODIFIED {
            self.ids = Vec::new();
            self.unknown = true;
        } else {
            self.ids.push(job_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modified_jobs_are_taken_once_and_too_many_read_as_unknown() {
        let shared = Shared::new();
        shared.report_modified(7);
        shared.report_modified(9);
        assert_eq!(shared.take_modified().ids, vec![7, 9]);
        assert_eq!(shared.take_modified(), ModifiedJobs::new());
        shared.report_modified(cinch_slurm_ffi::NO_VAL);
        shared.report_modified(3);
        assert_eq!(
            shared.take_modified(),
            ModifiedJobs {
                ids: Vec::new(),
                unknown: true
            }
        );
        for id in 0..=MAX_MODIFIED as u32 {
            shared.report_modified(id);
        }
        assert!(shared.take_modified().unknown);
    }

    #[test]
    fn a_wake_is_seen_once() {
        let shared = Shared::new();
        assert!(!shared.wait(Duration::from_millis(10)));
        shared.wake();
        assert!(shared.wait(Duration::from_secs(5)));
        assert!(!shared.wait(Duration::from_millis(10)));
        shared.report_foreign(3, Fields::NICE);
        assert_eq!(shared.take_foreign(), vec![(3, Fields::NICE)]);
        assert!(shared.take_foreign().is_empty());
    }

    #[test]
    fn a_closed_slurm_gate_waits_for_the_call_under_way_and_lets_no_new_one_start() {
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let caller = std::thread::spawn(move || {
            through_slurm_gate(|| {
                entered_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(200));
                "finished"
            })
        });
        entered_rx.recv().unwrap();
        let started = std::time::Instant::now();
        assert!(close_slurm_gate(Duration::from_secs(5)));
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "closed mid-call"
        );
        assert_eq!(caller.join().unwrap(), Some("finished"));
        assert_eq!(through_slurm_gate(|| "called"), None);
        *SLURM_GATE.write().unwrap() = false; // other tests in this process use the gate
    }
}

/// Durations of job_submit calls in whole microseconds (bucket i = [i, i+1) µs; the last bucket
/// holds everything slower), kept with relaxed atomics so recording costs a few nanoseconds.
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BUCKETS],
    max_ns: AtomicU64,
}

const LATENCY_BUCKETS: usize = 1001;

pub static SUBMIT_LATENCY: LatencyHistogram = LatencyHistogram {
    buckets: [const { AtomicU64::new(0) }; LATENCY_BUCKETS],
    max_ns: AtomicU64::new(0),
};

/// count, p50, p99 (µs; the top bucket reads as ">= 1000") and max (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_ns: u64,
}

impl LatencyHistogram {
    pub fn record(&self, elapsed: Duration) {
        let us = (elapsed.as_micros() as usize).min(LATENCY_BUCKETS - 1);
        self.buckets[us].fetch_add(1, Ordering::Relaxed);
        self.max_ns.fetch_max(
            elapsed.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    pub fn summary(&self) -> LatencySummary {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let count: u64 = counts.iter().sum();
        let quantile = |q: f64| -> u64 {
            let rank = ((q * count as f64).ceil() as u64).max(1);
            let mut seen = 0;
            for (us, n) in counts.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    // The upper edge of the bucket: a conservative reading.
                    return us as u64 + 1;
                }
            }
            LATENCY_BUCKETS as u64
        };
        LatencySummary {
            count,
            p50_us: if count == 0 { 0 } else { quantile(0.5) },
            p99_us: if count == 0 { 0 } else { quantile(0.99) },
            max_ns: self.max_ns.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod latency_tests {
    use super::*;

    #[test]
    fn quantiles_read_bucket_upper_edges() {
        let h = LatencyHistogram {
            buckets: [const { AtomicU64::new(0) }; LATENCY_BUCKETS],
            max_ns: AtomicU64::new(0),
        };
        assert_eq!(h.summary().count, 0);
        for _ in 0..98 {
            h.record(Duration::from_nanos(3_500)); // bucket 3
        }
        h.record(Duration::from_micros(40));
        h.record(Duration::from_millis(5)); // overflow bucket
        let s = h.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_us, 4);
        assert_eq!(s.p99_us, 41);
        assert_eq!(s.max_ns, 5_000_000);
    }
}
