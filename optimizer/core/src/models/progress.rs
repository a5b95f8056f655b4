//! What a running job's own progress says of its end (docs/policies/progress.md): the steps its
//! output shows done and in all (tqdm's `450/1000`, `step 1200/50000`, Keras's `Epoch 3/90`), and
//! the rate between two readings of the watcher on its node. GENIE's profile of a running job,
//! read from what deep-learning jobs already print.
//!
//! The end it gives is only as good as the printed total: a job that stops early (early
//! stopping, a crash) or runs past it (evaluation, saving) ends elsewhere. History scores it
//! against the site's other sources on every job that showed progress
//! ([`crate::learn::history::History::progress_trusted`]); cinch uses it only while it predicts
//! better here.

use crate::wire::snapshot::JobProgress;

/// The least share of its steps a job must have done before its progress predicts its end: the
/// rate of the first steps (warm-up, compilation, the data loader filling) says little.
pub const MIN_FRACTION: f64 = 0.02;

impl JobProgress {
    /// Whether the two readings make sense together: steps within the total, time forward.
    pub fn is_consistent(&self) -> bool {
        self.total > 0
            && self.done <= self.total
            && self.since_done <= self.done
            && self.since < self.at
    }

    /// The share of its steps done at the latest reading, 0 to 1.
    pub fn fraction(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            (self.done as f64 / self.total as f64).min(1.0)
        }
    }

    /// Steps per second between the two readings, once the job has made some.
    pub fn rate(&self) -> Option<f64> {
        if !self.is_consistent() || self.done == self.since_done {
            return None;
        }
        Some((self.done - self.since_done) as f64 / (self.at - self.since) as f64)
    }

    /// Run seconds left at `now`: the steps left at the latest reading at the measured rate,
    /// less the time since. `None` before [`MIN_FRACTION`] of the steps, without a rate, or once
    /// the job has run past the end its progress gave (it runs on beyond its printed total:
    /// other predictions take over).
    pub fn remaining_s(&self, now: i64) -> Option<f64> {
        if self.fraction() < MIN_FRACTION {
            return None;
        }
        let rate = self.rate()?;
        let left = (self.total - self.done) as f64 / rate - (now - self.at).max(0) as f64;
        (left >= 0.0).then_some(left)
    }

    /// The whole run its progress predicts for a run that started at `start`: the time to the
    /// latest reading and what is left then.
    pub fn predicted_run_s(&self, start: i64) -> Option<f64> {
        let left = self.remaining_s(self.at)?;
        Some((self.at - start).max(0) as f64 + left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(done: u64, total: u64, at: i64, since_done: u64, since: i64) -> JobProgress {
        JobProgress {
            total,
            done,
            at,
            since_done,
            since,
        }
    }

    #[test]
    fn the_end_follows_from_the_steps_left_at_the_measured_rate() {
        // 100 steps in 50 s: 2 steps/s; 600 left at 1,100 s: 300 s then, 200 s at 1,200.
        let p = progress(400, 1000, 1100, 300, 1050);
        assert_eq!(p.rate(), Some(2.0));
        assert_eq!(p.remaining_s(1100), Some(300.0));
        assert_eq!(p.remaining_s(1200), Some(200.0));
        // Started at 1,000: 100 s so far and 300 s left.
        assert_eq!(p.predicted_run_s(1000), Some(400.0));
    }

    #[test]
    fn no_end_before_enough_steps_without_a_rate_or_past_the_printed_total() {
        // 1% done: warm-up.
        assert_eq!(progress(10, 1000, 1100, 0, 1000).remaining_s(1100), None);
        // No step between the readings.
        assert_eq!(progress(400, 1000, 1100, 400, 1000).remaining_s(1100), None);
        // 300 s left at 1,100: at 1,500 the job has outrun its progress.
        assert_eq!(progress(400, 1000, 1100, 300, 1050).remaining_s(1500), None);
        // Done all its steps at the latest reading: nothing left then.
        assert_eq!(
            progress(1000, 1000, 1100, 900, 1050).remaining_s(1100),
            Some(0.0)
        );
    }

    #[test]
    fn inconsistent_readings_predict_nothing() {
        for p in [
            progress(1200, 1000, 1100, 300, 1050), // more done than the total
            progress(400, 1000, 1100, 500, 1050),  // fewer done than before
            progress(400, 1000, 1050, 300, 1100),  // time backwards
            progress(0, 0, 1100, 0, 1050),         // no total
        ] {
            assert!(!p.is_consistent(), "{p:?}");
            assert_eq!(p.remaining_s(1100), None, "{p:?}");
        }
    }
}
