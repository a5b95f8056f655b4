//! The order in which Slurm considers pending jobs (its main scheduler and its backfill, under
//! any priority plugin): the highest priority first, then the earliest submission, then the
//! lowest job id. One key, used by the agent's snapshot, the policies and the simulated Slurm.

use std::cmp::Reverse;

/// A pending job's place in Slurm's order: keys sort as Slurm takes the jobs.
pub type OrderKey = (Reverse<u32>, i64, u32);

/// The key of a job of `priority`, submitted at `submit_time` (Unix seconds), with `job_id`.
pub fn order_key(priority: u32, submit_time: i64, job_id: u32) -> OrderKey {
    (Reverse(priority), submit_time, job_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_priority_first_then_earlier_submission_then_lower_id() {
        let mut jobs = [
            (7, order_key(100, 50, 7)),
            (3, order_key(100, 50, 3)),
            (9, order_key(100, 10, 9)),
            (1, order_key(5, 0, 1)),
            (4, order_key(200, 99, 4)),
        ];
        jobs.sort_by_key(|j| j.1);
        assert_eq!(jobs.map(|j| j.0), [4, 9, 3, 7, 1]);
    }
}
