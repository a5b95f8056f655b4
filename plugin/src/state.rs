//! State shared by slurmctld's threads calling into cinch (job_submit, job_modify) and cinch's
//! agent thread. Every lock here is held for microseconds and never across a Slurm RPC, so
//! neither side can stall the other.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use crate::agent::reconcile::Fields;
use crate::config::Config;

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

pub struct Shared {
    wake: Mutex<bool>,
    wake_cv: Condvar,
    /// The job the agent is updating right now: job_modify calls for it are cinch's own.
    pub in_flight: AtomicU32,
    /// Fields users/admins changed, reported by job_modify, collected by the agent.
    foreign: Mutex<Vec<(u32, Fields)>>,
    /// Until when (Unix ms) the agent counts as live and enforcing: job_submit's hold rule
    /// applies only then, so a dead agent never holds new jobs.
    pub enforcing_until_ms: AtomicI64,
    pub stop: AtomicBool,
}

pub static SHARED: Shared = Shared {
    wake: Mutex::new(false),
    wake_cv: Condvar::new(),
    in_flight: AtomicU32::new(NO_JOB),
    foreign: Mutex::new(Vec::new()),
    enforcing_until_ms: AtomicI64::new(0),
    stop: AtomicBool::new(false),
};

pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Shared {
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

    pub fn enforcing(&self, now_ms: i64) -> bool {
        self.enforcing_until_ms.load(Ordering::Relaxed) > now_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_is_seen_once() {
        let shared = Shared {
            wake: Mutex::new(false),
            wake_cv: Condvar::new(),
            in_flight: AtomicU32::new(NO_JOB),
            foreign: Mutex::new(Vec::new()),
            enforcing_until_ms: AtomicI64::new(0),
            stop: AtomicBool::new(false),
        };
        assert!(!shared.wait(Duration::from_millis(10)));
        shared.wake();
        assert!(shared.wait(Duration::from_secs(5)));
        assert!(!shared.wait(Duration::from_millis(10)));
        shared.report_foreign(3, Fields::NICE);
        assert_eq!(shared.take_foreign(), vec![(3, Fields::NICE)]);
        assert!(shared.take_foreign().is_empty());
    }
}
