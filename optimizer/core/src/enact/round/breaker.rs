//! Circuit breaker for the optimizer: after consecutive failures cinch stops asking for a growing
//! back-off and stands aside (Slurm schedules alone); one success closes it again. It reports
//! only *changes* of state, so slurmctld.log gets one line per outage, not one per round.

use std::time::Duration;

/// Failures in a row before the breaker opens.
pub const FAILURES_TO_OPEN: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Talking to the optimizer.
    Closed,
    /// Standing aside until `retry_at` (Unix ms).
    Open { retry_at: i64, backoff_ms: i64 },
}

/// A change worth one log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    Opened { failures: u32, error: String },
    Closed,
}

#[derive(Debug, Clone)]
pub struct Breaker {
    state: State,
    failures: u32,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            state: State::Closed,
            failures: 0,
        }
    }
}

impl Breaker {
    pub fn state(&self) -> State {
        self.state
    }

    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// Whether to ask the optimizer now (always when closed; when open, once the back-off passed).
    pub fn allow(&self, now_ms: i64) -> bool {
        match self.state {
            State::Closed => true,
            State::Open { retry_at, .. } => now_ms >= retry_at,
        }
    }

    pub fn success(&mut self) -> Option<Transition> {
        self.failures = 0;
        let was_open = self.is_open();
        self.state = State::Closed;
        was_open.then_some(Transition::Closed)
    }

    pub fn failure(&mut self, now_ms: i64, error: &str) -> Option<Transition> {
        self.failures = self.failures.saturating_add(1);
        match self.state {
            State::Closed if self.failures >= FAILURES_TO_OPEN => {
                let backoff_ms = FIRST_BACKOFF.as_millis() as i64;
                self.state = State::Open {
                    retry_at: now_ms + backoff_ms,
                    backoff_ms,
                };
                Some(Transition::Opened {
                    failures: self.failures,
                    error: error.to_string(),
                })
            }
            State::Closed => None,
            State::Open { backoff_ms, .. } => {
                let backoff_ms = (backoff_ms * 2).min(MAX_BACKOFF.as_millis() as i64);
                self.state = State::Open {
                    retry_at: now_ms + backoff_ms,
                    backoff_ms,
                };
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_reports_it_once() {
        let mut b = Breaker::default();
        assert_eq!(b.failure(0, "refused"), None);
        assert_eq!(b.failure(1, "refused"), None);
        assert_eq!(
            b.failure(2, "refused"),
            Some(Transition::Opened {
                failures: 3,
                error: "refused".into()
            })
        );
        assert!(b.is_open());
        assert!(!b.allow(1_000));
        assert!(b.allow(2_002));
        assert_eq!(b.failure(2_002, "refused"), None, "still open: no new line");
        assert_eq!(
            b.state(),
            State::Open {
                retry_at: 6_002,
                backoff_ms: 4_000
            }
        );
    }

    #[test]
    fn back_off_doubles_up_to_a_cap() {
        let mut b = Breaker::default();
        for t in 0..3 {
            b.failure(t, "x");
        }
        let mut now = 0;
        for _ in 0..20 {
            if let State::Open { retry_at, .. } = b.state() {
                now = retry_at;
            }
            b.failure(now, "x");
        }
        assert_eq!(
            b.state(),
            State::Open {
                retry_at: now + 60_000,
                backoff_ms: 60_000
            }
        );
    }

    #[test]
    fn a_success_closes_and_reports_only_when_it_was_open() {
        let mut b = Breaker::default();
        b.failure(0, "x");
        assert_eq!(b.success(), None, "a single failure never opened it");
        for t in 0..3 {
            b.failure(t, "x");
        }
        assert_eq!(b.success(), Some(Transition::Closed));
        assert!(b.allow(0));
    }
}
