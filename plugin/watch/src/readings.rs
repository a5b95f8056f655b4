//! The watcher's readings of one job's progress over time, and the report they make: the latest
//! reading and the earliest within the rate window, so the optimizer measures the recent rate
//! (`cinch_core::models::progress`).

use std::collections::VecDeque;

use cinch_core::wire::snapshot::JobProgress;

use crate::lines::Mark;

/// Readings kept: one per interval over the window, and no more whatever the settings.
const MAX_READINGS: usize = 64;

/// One job's readings, oldest first.
#[derive(Debug, Default)]
pub struct Readings {
    kept: VecDeque<(i64, Mark)>,
}

impl Readings {
    /// Takes what the output showed at `now`. A different total, or fewer steps done than
    /// before, is a new run of the steps (a restart from the start, another phase): the
    /// readings start again from it.
    pub fn push(&mut self, now: i64, mark: Mark, window_s: i64) {
        if let Some(&(at, last)) = self.kept.back() {
            if now <= at {
                return;
            }
            if last.total != mark.total || mark.done < last.done {
                self.kept.clear();
            }
        }
        self.kept.push_back((now, mark));
        // The earliest reading within the window is kept, and one before it no longer.
        while self.kept.len() > 2 && now - self.kept[1].0 >= window_s {
            self.kept.pop_front();
        }
        while self.kept.len() > MAX_READINGS {
            self.kept.pop_front();
        }
    }

    /// The report: the latest reading and the earliest kept, once steps were made between
    /// them.
    pub fn report(&self) -> Option<JobProgress> {
        let &(since, first) = self.kept.front()?;
        let &(at, latest) = self.kept.back()?;
        (at > since && latest.done > first.done).then_some(JobProgress {
            total: latest.total,
            done: latest.done,
            at,
            since_done: first.done,
            since,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(done: u64, total: u64) -> Mark {
        Mark { done, total }
    }

    #[test]
    fn the_report_spans_the_window_and_follows_the_latest_reading() {
        let mut r = Readings::default();
        r.push(0, mark(0, 1000), 600);
        assert_eq!(r.report(), None, "one reading gives no rate");
        for (i, t) in (60..=900).step_by(60).enumerate() {
            r.push(t, mark(10 * (i as u64 + 1), 1000), 600);
        }
        let p = r.report().unwrap();
        assert_eq!((p.at, p.done), (900, 150));
        // The earliest reading within 600 s of the latest, or the last before them.
        assert_eq!((p.since, p.since_done), (300, 50));
        assert!(p.is_consistent());
    }

    #[test]
    fn a_new_total_or_fewer_steps_start_the_readings_again() {
        let mut r = Readings::default();
        r.push(0, mark(100, 1000), 600);
        r.push(60, mark(200, 1000), 600);
        assert!(r.report().is_some());
        r.push(120, mark(50, 1000), 600);
        assert_eq!(r.report(), None, "restarted from its checkpoint");
        r.push(180, mark(80, 1000), 600);
        assert_eq!(r.report().map(|p| (p.since_done, p.done)), Some((50, 80)));
        r.push(240, mark(10, 20), 600);
        assert_eq!(r.report(), None, "another phase");
        // No step between two readings: no rate.
        r.push(300, mark(10, 20), 600);
        assert_eq!(r.report(), None);
    }
}
