//! The queue as one pass of the simulated Slurm takes it: the pending jobs that may start now,
//! handed out one at a time in the policy's order, and the shortest time limit from any point
//! of that order on.
//!
//! A pass rarely takes the whole queue: the main scheduler stops at the first job that cannot
//! start, and backfill once the nodes with free GPUs are all held, or after `bf_max_job_test`
//! jobs. So the queue is a heap, not a sort: laying it out costs a pass over the jobs, and each
//! job taken costs a logarithm of the queue. Jobs held, or with a begin time still to come, are
//! left out of it (no pass starts them, and they cannot start while it runs); they count only
//! in the shortest limit, as every job after a point of the order does.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::State;
use crate::engine::Scheduler;

/// A job's place in the queue: its key in the policy's order, then its submission, then its
/// index, so no two jobs tie (the least comes first).
#[derive(Debug, Clone, Copy)]
pub(super) struct Place {
    key: f64,
    submit: i64,
    pub(super) job: usize,
}

impl Ord for Place {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key
            .total_cmp(&other.key)
            .then(self.submit.cmp(&other.submit))
            .then(self.job.cmp(&other.job))
    }
}

impl PartialOrd for Place {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Place {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Place {}

/// One pass's queue; its buffers are kept from pass to pass.
#[derive(Default)]
pub(crate) struct Queue {
    /// The jobs that may start now and are not taken yet, the first in the order on top.
    waiting: BinaryHeap<Reverse<Place>>,
    /// The jobs that may not start now (held, or begin later), by index.
    later: Vec<usize>,
    /// Every job from the point the pass has reached on, the shortest limit on top: each job
    /// by its limit (a [`Place`] keyed by it), then by its place in the queue. Built the first
    /// time asked (only backfill asks, and only once a job could not start); jobs before that
    /// point are dropped as the pass moves past them.
    limits: Option<BinaryHeap<Reverse<(Place, Place)>>>,
}

impl Queue {
    /// Lays out `state`'s pending jobs in `scheduler`'s order at `now`.
    pub(super) fn fill(&mut self, state: &State, scheduler: &dyn Scheduler, now: f64) {
        let mut waiting = std::mem::take(&mut self.waiting).into_vec();
        waiting.clear();
        self.later.clear();
        for &job in &state.pending {
            if state.eligible(job, now) {
                waiting.push(Reverse(place(state, scheduler, job, now)));
            } else {
                self.later.push(job);
            }
        }
        self.waiting = BinaryHeap::from(waiting);
        self.limits = None;
    }

    /// The next job in the order that may start now, taken out of the queue.
    pub(super) fn next(&mut self) -> Option<Place> {
        self.waiting.pop().map(|Reverse(place)| place)
    }

    /// The shortest time limit of `at` (a job just taken) and every job after it in the order,
    /// those that may not start now included.
    pub(super) fn shortest_limit_from(
        &mut self,
        at: Place,
        state: &State,
        scheduler: &dyn Scheduler,
        now: f64,
    ) -> f64 {
        let limit = |job: usize| state.jobs[job].spec.time_limit;
        let by_limit = |p: Place| {
            let key = limit(p.job);
            Reverse((Place { key, ..p }, p))
        };
        let limits = self.limits.get_or_insert_with(|| {
            (self.waiting.iter().map(|&Reverse(p)| by_limit(p)))
                .chain((self.later.iter()).map(|&job| by_limit(place(state, scheduler, job, now))))
                .collect()
        });
        while limits.peek().is_some_and(|Reverse((_, p))| *p < at) {
            limits.pop();
        }
        let after = limits.peek().map_or(f64::INFINITY, |Reverse((l, _))| l.key);
        limit(at.job).min(after)
    }
}

fn place(state: &State, scheduler: &dyn Scheduler, job: usize, now: f64) -> Place {
    Place {
        key: scheduler.order_key(state, job, now),
        submit: state.jobs[job].spec.submit,
        job,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::SimConfig;
    use crate::workload::JobSpec;

    /// A scheduler whose order is each job's nice, as a test sets it.
    struct ByNice;

    impl Scheduler for ByNice {
        fn name(&self) -> String {
            "by-nice".into()
        }
        fn order_key(&self, state: &State, job: usize, _now: f64) -> f64 {
            state.jobs[job].control.nice as f64
        }
        fn place(&self, _state: &State, _job: usize, _now: f64) -> Option<Vec<(u32, u32)>> {
            None
        }
    }

    /// The queue hands out the jobs that may start in the order a sort from scratch gives, and
    /// the shortest limit from each on is that of the sorted queue's tail, held jobs and jobs
    /// that begin later included: random queues whose keys, members, ties, holds and limits
    /// change between passes, each pass stopped at a random point.
    #[test]
    fn the_queue_comes_in_sorted_order_with_the_shortest_limit_of_the_sorted_tail() {
        let mut rng = cinch_core::util::rng::SeededRng::new(11);
        let specs: Vec<JobSpec> = (0..60)
            .map(|i| JobSpec::for_test(i, (i % 7) as i64, 1, 100.0))
            .collect();
        let mut state = State::new(SimConfig::default(), specs);
        let mut queue = Queue::default();
        let (mut held, mut asked) = (0, 0);
        for _ in 0..300 {
            state.pending = (0..60).filter(|_| rng.unit() < 0.7).collect();
            for j in 0..60 {
                let job = &mut state.jobs[j];
                // Few distinct keys, so ties go to the submit time and then the index.
                job.control.nice = rng.below(4) as i64;
                job.control.hold = rng.unit() < 0.1;
                job.control.begin = (rng.unit() < 0.2).then(|| 50.0 * rng.unit());
                job.spec.time_limit = 100.0 * (1 + rng.below(20)) as f64;
            }
            let now = 25.0;
            let mut sorted: Vec<(f64, i64, usize)> = state
                .pending
                .iter()
                .map(|&j| {
                    let job = &state.jobs[j];
                    (job.control.nice as f64, job.spec.submit, j)
                })
                .collect();
            sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
            held += sorted.iter().filter(|s| !state.eligible(s.2, now)).count();
            queue.fill(&state, &ByNice, now);
            let stop_after = rng.below(50) as usize;
            let ask_from = rng.below(50) as usize;
            let mut taken = 0;
            for (i, &(_, _, job)) in sorted.iter().enumerate() {
                if !state.eligible(job, now) {
                    continue;
                }
                if taken == stop_after {
                    break;
                }
                let at = queue.next().expect("a job that may start is in the queue");
                assert_eq!(at.job, job);
                taken += 1;
                if taken > ask_from {
                    let want = sorted[i..]
                        .iter()
                        .map(|s| state.jobs[s.2].spec.time_limit)
                        .fold(f64::INFINITY, f64::min);
                    let got = queue.shortest_limit_from(at, &state, &ByNice, now);
                    assert_eq!(got, want);
                    asked += 1;
                }
            }
            let eligible = sorted.iter().filter(|s| state.eligible(s.2, now)).count();
            if taken == eligible {
                assert!(queue.next().is_none(), "only the jobs that may start");
            }
        }
        assert!(held > 500 && asked > 500, "{held} held, {asked} asked");
    }
}
