//! When the watcher reads and reports, and the time it stamps each reading with.
//!
//! The optimizer measures a job's rate as the steps between two readings over the seconds
//! between their stamps (`cinch_core::models::progress`), and the wire carries whole seconds. A
//! reading stamped with the wall clock's whole second, taken after a sleep of one interval that
//! began when the last report's work ended, drifts later each interval by that work and now and
//! then crosses a second more: at `interval=5` two readings 5.2 s apart were stamped 6 s apart
//! (a rate a sixth too slow) or 5 s apart, and the end a job's first report predicts moved by a
//! fifth. Here reports keep to their schedule whatever the work took, and a reading is stamped
//! by the monotonic clock from the watcher's start, so two readings an interval apart are
//! stamped exactly an interval apart.

use std::time::{Duration, Instant};

/// The watcher's schedule: a report every `interval`, a GPU sample at least every `step`.
#[derive(Debug)]
pub struct Schedule {
    started: Instant,
    /// The Unix second nearest the start.
    started_unix: i64,
    interval: Duration,
    step: Duration,
    next_report: Instant,
}

impl Schedule {
    /// A schedule whose first report is due at once; `started_unix_s` is the wall clock at
    /// `started`, in seconds.
    pub fn new(started: Instant, started_unix_s: f64, interval: Duration, step: Duration) -> Self {
        Schedule {
            started,
            started_unix: started_unix_s.round() as i64,
            interval,
            step: step.min(interval).max(Duration::from_millis(100)),
            next_report: started,
        }
    }

    /// Whether a report is due at `now`. The next is then due an interval after this one was
    /// (not after `now`, so the work a report does never shifts the ones after it).
    pub fn report_due(&mut self, now: Instant) -> bool {
        if now < self.next_report {
            return false;
        }
        self.next_report += self.interval;
        true
    }

    /// A report that ended at `now`: where the next one's time has passed (the watcher fell a
    /// whole interval behind, a stopped node; or an optimizer that does not answer held the
    /// report for up to its 5 s limit), the next comes an interval after it ended, so the
    /// watcher never sends back to back to catch up.
    pub fn report_ended(&mut self, now: Instant) {
        if self.next_report <= now {
            self.next_report = now + self.interval;
        }
    }

    /// The Unix second a reading taken at `now` is stamped with: the start's, plus the whole
    /// seconds since the start by the monotonic clock, rounded. Within a second of the wall
    /// clock, and readings taken on schedule are stamped exactly their interval apart.
    pub fn stamp(&self, now: Instant) -> i64 {
        let since = now.saturating_duration_since(self.started).as_secs_f64();
        self.started_unix + since.round() as i64
    }

    /// How long to sleep from `now`: to the next report, or a GPU sample step, whichever comes
    /// first.
    pub fn sleep_from(&self, now: Instant) -> Duration {
        self.next_report
            .saturating_duration_since(now)
            .min(self.step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// Reports every 5 s, each taking up to 0.4 s of work and waking 20 ms late,
    /// started a hundredth of a second before a wall-clock second turns: every reading is
    /// stamped 5 s after the one before, and the reports do not drift.
    #[test]
    fn readings_on_schedule_are_stamped_exactly_an_interval_apart() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, 1_000_000.99, secs(5.0), secs(5.0));
        let mut now = t0;
        let mut stamps = Vec::new();
        for k in 0..40 {
            if schedule.report_due(now) {
                stamps.push(schedule.stamp(now));
                // The report's work: reading the outputs, a MUNGE credential, an HTTP post.
                now += secs(0.1 + 0.3 * f64::from(k % 3) / 2.0);
            }
            now += schedule.sleep_from(now) + secs(0.02);
        }
        assert!(stamps.len() >= 39, "{stamps:?}");
        assert_eq!(stamps[0], 1_000_001);
        for pair in stamps.windows(2) {
            assert_eq!(pair[1] - pair[0], 5, "{stamps:?}");
        }
        // No drift: the last report is where the schedule puts it.
        let last = stamps.len() as i64 - 1;
        assert_eq!(stamps[stamps.len() - 1], 1_000_001 + 5 * last);
    }

    /// A long interval is slept in GPU sample steps, landing on the report's time.
    #[test]
    fn a_long_interval_is_slept_in_sample_steps_up_to_the_report() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, 0.0, secs(60.0), secs(5.0));
        assert!(schedule.report_due(t0));
        assert_eq!(schedule.sleep_from(t0 + secs(0.2)), secs(5.0));
        assert_eq!(schedule.sleep_from(t0 + secs(57.0)), secs(3.0));
        assert!(!schedule.report_due(t0 + secs(59.9)));
        assert!(schedule.report_due(t0 + secs(60.0)));
        assert_eq!(schedule.stamp(t0 + secs(60.0)), 60);
    }

    /// A watcher that fell more than an interval behind (its node stopped) reports once, then
    /// an interval later: not once per interval missed.
    #[test]
    fn a_watcher_far_behind_does_not_report_back_to_back() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, 0.0, secs(5.0), secs(5.0));
        assert!(schedule.report_due(t0));
        let late = t0 + secs(32.0);
        assert!(schedule.report_due(late));
        schedule.report_ended(late);
        assert!(!schedule.report_due(late + secs(0.1)));
        assert_eq!(schedule.sleep_from(late + secs(0.1)), secs(4.9));
        assert!(schedule.report_due(late + secs(5.0)));
    }

    /// A report held past the next one's time by an optimizer that does not answer: the next
    /// comes an interval after it ended, not at once.
    #[test]
    fn a_report_that_overran_the_interval_is_followed_an_interval_after_it_ended() {
        let t0 = Instant::now();
        let mut schedule = Schedule::new(t0, 0.0, secs(5.0), secs(5.0));
        assert!(schedule.report_due(t0));
        schedule.report_ended(t0 + secs(1.0));
        assert_eq!(schedule.sleep_from(t0 + secs(1.0)), secs(4.0));
        assert!(schedule.report_due(t0 + secs(5.0)));
        let ended = t0 + secs(10.5);
        schedule.report_ended(ended);
        assert_eq!(schedule.sleep_from(ended), secs(5.0));
        assert!(!schedule.report_due(ended + secs(4.9)));
        assert!(schedule.report_due(ended + secs(5.0)));
    }
}
