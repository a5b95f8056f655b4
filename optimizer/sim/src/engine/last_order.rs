//! Sorting a queue that moved little since the last look. Between two of the agent's
//! snapshots most waiting jobs keep their relative order: laying them out in
//! the last order first and then sorting stably costs about a pass, as the sort merges the runs
//! it finds. Keys must be unique, so the result does not depend on how the jobs came.

/// Which jobs of the queue are still to be laid out, kept between looks to spare a clear.
#[derive(Default)]
pub(crate) struct LastOrderFirst {
    /// Per job index, `epoch` while the look under way has the job still to lay out.
    mark: Vec<u64>,
    epoch: u64,
}

impl LastOrderFirst {
    /// Pushes `key(j)` onto `out` for every job `j` of `queue`: those in `last` first, in its
    /// order, then the others in `queue`'s order. `jobs` bounds every job index.
    pub(crate) fn keys<K>(
        &mut self,
        jobs: usize,
        last: &[usize],
        queue: &[usize],
        mut key: impl FnMut(usize) -> K,
        out: &mut Vec<K>,
    ) {
        self.mark.resize(jobs, 0);
        self.epoch += 1;
        let epoch = self.epoch;
        for &j in queue {
            self.mark[j] = epoch;
        }
        for &j in last {
            if self.mark[j] == epoch {
                self.mark[j] = 0;
                out.push(key(j));
            }
        }
        for &j in queue {
            if self.mark[j] == epoch {
                out.push(key(j));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_orders_jobs_come_first_and_each_job_once() {
        let mut marks = LastOrderFirst::default();
        let mut out = Vec::new();
        // Job 4 left, job 9 is new; jobs 7, 2 and 5 keep the last order.
        marks.keys(10, &[7, 4, 2, 5], &[2, 9, 5, 7], |j| j, &mut out);
        assert_eq!(out, vec![7, 2, 5, 9]);
        // A second look with the same marks starts clean.
        out.clear();
        marks.keys(10, &[9, 5], &[5, 7, 9], |j| j * 10, &mut out);
        assert_eq!(out, vec![90, 50, 70]);
    }
}
