//! Slurm's jobs as the agent last read them, brought up to date by loading only what changed.
//!
//! Slurm's job load has no delta: once anything changed since a given time, slurmctld packs
//! every job (with 10,000 queued, 90-250 ms of its CPU), and every submission changes something.
//! From Slurm 23.02 the agent reads the jobs in two steps instead (`thread.rs` drives them):
//! - whether anything changed at all: slurmctld's own `last_job_update`, read in place (no RPC),
//!   and the jobs job_modify saw an update reach (cinch's own updates too);
//! - which jobs: every job's id and state word (`slurm_load_job_state`, a few bytes a job), so
//!   new jobs, purged jobs and jobs whose state changed (started, ended, requeued, suspended,
//!   completing) are told apart from the rest;
//!
//! and then loads those jobs one by one. What changes none of these (a priority recomputed by
//! priority/multifactor, Slurm's expected start of a pending job) is picked up by the full read
//! that still runs once a minute, and costs a full load only when Slurm changed something since
//! the last one. This module is the pure part: which jobs to load again, and the merge.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::view::JobView;

/// The jobs last read, shared with the rounds that use them, and where each job is.
#[derive(Debug, Default)]
pub struct JobCache {
    views: Arc<Vec<JobView>>,
    index: HashMap<u32, usize>,
}

/// What a delta read loads again and drops.
#[derive(Debug, Default, PartialEq)]
pub struct Delta {
    /// New jobs, jobs whose state word changed, and jobs an update reached (ascending ids).
    pub reload: Vec<u32>,
    /// Jobs Slurm no longer lists (ascending ids).
    pub gone: Vec<u32>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.reload.is_empty() && self.gone.is_empty()
    }
}

impl JobCache {
    pub fn new(views: Vec<JobView>) -> JobCache {
        let index = index_of(&views);
        JobCache {
            views: Arc::new(views),
            index,
        }
    }

    /// The jobs, in Slurm's order (new jobs after those already known, as Slurm lists them).
    pub fn views(&self) -> &Arc<Vec<JobView>> {
        &self.views
    }

    /// What to load again, given every job's id and state word now (`slurm_load_job_state`) and
    /// the jobs updates reached since the last read.
    pub fn delta(&self, states: &[(u32, u32)], modified: &[u32]) -> Delta {
        let now: HashMap<u32, u32> = states.iter().copied().collect();
        let mut reload: Vec<u32> = states
            .iter()
            .filter(|(id, state)| {
                self.index
                    .get(id)
                    .is_none_or(|&i| self.views[i].slurm_state != *state)
            })
            .map(|&(id, _)| id)
            .collect();
        reload.extend(
            modified
                .iter()
                .filter(|id| now.contains_key(id) || self.index.contains_key(id)),
        );
        reload.sort_unstable();
        reload.dedup();
        let mut gone: Vec<u32> = self
            .views
            .iter()
            .map(|j| j.job_id)
            .filter(|id| !now.contains_key(id) && reload.binary_search(id).is_err())
            .collect();
        gone.sort_unstable();
        Delta { reload, gone }
    }

    /// Brings the jobs up to date: `loaded` holds what loading `delta.reload` returned (an
    /// array's or heterogeneous job's other records too). A job of `reload` that no load
    /// returned is gone. Known jobs keep their place; new ones follow in id order.
    pub fn merge(&mut self, delta: &Delta, loaded: Vec<JobView>) {
        if delta.is_empty() && loaded.is_empty() {
            return;
        }
        let gone: HashSet<u32> = delta.gone.iter().copied().collect();
        let reloaded: HashSet<u32> = delta.reload.iter().copied().collect();
        let mut fresh: HashMap<u32, JobView> = loaded.into_iter().map(|j| (j.job_id, j)).collect();
        // The rounds that shared the old list are over; this copies only if one still holds it.
        let views = Arc::make_mut(&mut self.views);
        let before = views.len();
        views.retain_mut(|job| {
            if gone.contains(&job.job_id) {
                return false;
            }
            match fresh.remove(&job.job_id) {
                Some(newer) => {
                    *job = newer;
                    true
                }
                None => !reloaded.contains(&job.job_id),
            }
        });
        let kept = views.len();
        let mut new: Vec<JobView> = fresh.into_values().collect();
        new.sort_unstable_by_key(|j| j.job_id);
        views.extend(new);
        if kept != before || views.len() != kept {
            self.index = index_of(views);
        }
    }
}

fn index_of(views: &[JobView]) -> HashMap<u32, usize> {
    views
        .iter()
        .enumerate()
        .map(|(i, j)| (j.job_id, i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::view::tests::job;
    use crate::agent::view::JobState;
    use proptest::prelude::*;

    fn state_of(j: &JobView) -> (u32, u32) {
        (j.job_id, j.slurm_state)
    }

    fn running(id: u32) -> JobView {
        JobView {
            nodes: Some("n1".into()),
            ..job(id, JobState::Running)
        }
    }

    #[test]
    fn only_new_changed_updated_and_purged_jobs_are_read_again() {
        let cache = JobCache::new(vec![
            job(1, JobState::Pending),
            job(2, JobState::Pending),
            job(3, JobState::Pending),
            job(4, JobState::Pending),
        ]);
        // Slurm now: 1 as it was, 2 started, 3 purged, 4 updated (same state), 5 new.
        let states = [(1, 0), (2, 1), (4, 0), (5, 0)];
        let delta = cache.delta(&states, &[4, 99]);
        assert_eq!(
            delta,
            Delta {
                reload: vec![2, 4, 5],
                gone: vec![3],
            }
        );
    }

    #[test]
    fn merging_replaces_in_place_drops_the_gone_and_appends_the_new() {
        let mut cache = JobCache::new(vec![
            job(1, JobState::Pending),
            job(2, JobState::Pending),
            job(3, JobState::Pending),
        ]);
        let shared = cache.views().clone();
        let delta = Delta {
            reload: vec![2, 7, 9],
            gone: vec![1],
        };
        // 9 was purged between the state list and its load: no record comes back for it.
        cache.merge(&delta, vec![job(7, JobState::Pending), running(2)]);
        let ids: Vec<u32> = cache.views().iter().map(|j| j.job_id).collect();
        assert_eq!(ids, vec![2, 3, 7]);
        assert_eq!(cache.views()[0].state, JobState::Running);
        // A round that still held the old list keeps it as it was.
        assert_eq!(shared.len(), 3);
        assert_eq!(shared[1].state, JobState::Pending);
        // And the index follows the new places.
        let again = cache.delta(&[(2, 1), (3, 0), (7, 0)], &[]);
        assert!(again.is_empty(), "{again:?}");
    }

    /// A job: (id, state 0-3, a field an update may change).
    fn a_job() -> impl Strategy<Value = (u32, u32, u32)> {
        (0u32..40, 0u32..4, 0u32..3)
    }

    fn view((id, state, priority): (u32, u32, u32)) -> JobView {
        JobView {
            slurm_state: state,
            priority,
            ..job(id, JobState::Pending)
        }
    }

    fn by_id(jobs: Vec<(u32, u32, u32)>) -> Vec<JobView> {
        let mut seen = HashSet::new();
        jobs.into_iter()
            .filter(|j| seen.insert(j.0))
            .map(view)
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Whatever Slurm did between two reads, a delta read (told which jobs updates reached)
        /// ends with exactly the jobs a full load would give.
        #[test]
        fn a_delta_read_ends_where_a_full_load_would(
            before in proptest::collection::vec(a_job(), 0..30),
            after in proptest::collection::vec(a_job(), 0..30),
        ) {
            let before = by_id(before);
            let after = by_id(after);
            let mut cache = JobCache::new(before.clone());
            // Updates change fields but not states: job_modify names those jobs. Some jobs were
            // updated and then purged (odd ids among those gone).
            let mut modified: Vec<u32> = after
                .iter()
                .filter(|j| before.iter().any(|b| b.job_id == j.job_id && b.priority != j.priority))
                .map(|j| j.job_id)
                .collect();
            modified.extend(
                before
                    .iter()
                    .filter(|b| b.job_id % 2 == 1 && !after.iter().any(|a| a.job_id == b.job_id))
                    .map(|b| b.job_id),
            );
            let states: Vec<(u32, u32)> = after.iter().map(state_of).collect();
            let delta = cache.delta(&states, &modified);
            let loaded: Vec<JobView> = delta
                .reload
                .iter()
                .filter_map(|id| after.iter().find(|j| j.job_id == *id).cloned())
                .collect();
            cache.merge(&delta, loaded);
            let mut got: Vec<JobView> = cache.views().to_vec();
            got.sort_by_key(|j| j.job_id);
            let mut want = after.clone();
            want.sort_by_key(|j| j.job_id);
            prop_assert_eq!(got, want);
            // Nothing is loaded that neither changed nor is new.
            for id in &delta.reload {
                let was = before.iter().find(|b| b.job_id == *id);
                let is = after.iter().find(|a| a.job_id == *id);
                prop_assert!(
                    was != is || (is.is_some() && modified.contains(id)),
                    "job {} reloaded for nothing",
                    id
                );
            }
        }
    }
}
