//! Prometheus text-format metrics, kept in atomics: no locks on the hot path, no extra crate.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use cinch_core::decision::Decision;

/// Upper bounds of the decision-latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Default)]
pub struct Metrics {
    snapshots: AtomicU64,
    pinned: AtomicU64,
    delayed: AtomicU64,
    held: AtomicU64,
    reprioritized: AtomicU64,
    explained: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_ns: AtomicU64,
    /// (status, count) for error responses; few distinct statuses, rarely written.
    errors: Mutex<Vec<(u16, u64)>>,
}

impl Metrics {
    pub fn record_schedule(&self, elapsed: Duration, decisions: &[Decision]) {
        self.snapshots.fetch_add(1, Relaxed);
        let seconds = elapsed.as_secs_f64();
        for (bound, bucket) in LATENCY_BUCKETS.iter().zip(&self.latency_buckets) {
            if seconds <= *bound {
                bucket.fetch_add(1, Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Relaxed);
        self.latency_sum_ns
            .fetch_add(elapsed.as_nanos().min(u128::from(u64::MAX)) as u64, Relaxed);
        for d in decisions {
            let counter = if d.pin_nodes.is_some() {
                &self.pinned
            } else if d.delay_until.is_some() {
                &self.delayed
            } else if d.hold.is_some() {
                &self.held
            } else if d.priority.is_some() || d.nice.is_some() {
                &self.reprioritized
            } else {
                &self.explained
            };
            counter.fetch_add(1, Relaxed);
        }
    }

    pub fn count_error(&self, status: u16) {
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        match errors.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => errors.push((status, 1)),
        }
    }

    /// The Prometheus exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        counter(
            &mut out,
            "cinch_snapshots_received_total",
            "Snapshots scheduled via POST /v1/schedule.",
            self.snapshots.load(Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP cinch_decisions_total Decisions returned, by their main action.\n\
             # TYPE cinch_decisions_total counter"
        );
        for (action, value) in [
            ("pin", &self.pinned),
            ("delay", &self.delayed),
            ("hold", &self.held),
            ("reprioritize", &self.reprioritized),
            ("explain", &self.explained),
        ] {
            let _ = writeln!(
                out,
                "cinch_decisions_total{{action=\"{action}\"}} {}",
                value.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP cinch_decision_latency_seconds Time to parse a snapshot, decide and encode \
             the answer.\n# TYPE cinch_decision_latency_seconds histogram"
        );
        for (bound, bucket) in LATENCY_BUCKETS.iter().zip(&self.latency_buckets) {
            let _ = writeln!(
                out,
                "cinch_decision_latency_seconds_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Relaxed)
            );
        }
        let count = self.latency_count.load(Relaxed);
        let _ = writeln!(
            out,
            "cinch_decision_latency_seconds_bucket{{le=\"+Inf\"}} {count}\n\
             cinch_decision_latency_seconds_sum {}\n\
             cinch_decision_latency_seconds_count {count}",
            self.latency_sum_ns.load(Relaxed) as f64 / 1e9
        );
        let _ = writeln!(
            out,
            "# HELP cinch_http_errors_total Error responses, by HTTP status.\n\
             # TYPE cinch_http_errors_total counter"
        );
        let mut errors = self
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        errors.sort();
        for (status, n) in errors {
            let _ = writeln!(out, "cinch_http_errors_total{{status=\"{status}\"}} {n}");
        }
        out
    }
}
