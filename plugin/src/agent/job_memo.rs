//! What a round derives from each job's view alone, kept between rounds while the view is
//! unchanged.
//!
//! Every round turns each of Slurm's jobs into the core's reading and the optimizer's snapshot:
//! it finds and parses cinch's AdminComment record, the job's GPU request, its hints, its node
//! lists. With 10,000 jobs queued that was most of an idle round's cost to slurmctld
//! (docs/benchmarks.md, "Where an idle refresh round's time goes"), though between two rounds
//! few jobs change. The memo keeps the derivation ([`JobFacts`]) beside a copy of the view it
//! came from and derives again only for a job whose view differs in any field: a rule that
//! needs no word from the reader about what changed, so whatever loaded the jobs (a whole load,
//! a delta read, a test's double) the facts are those of the view in hand. What depends on the
//! clock or on cinch.conf is not kept: the round applies it to the facts each time.

use std::sync::{Arc, Weak};

use rustc_hash::{FxHashMap, FxHashSet};

use cinch_core::wire::snapshot::PendingJob;

use super::view::{self, JobFacts, JobView, Shown};

/// The jobs of the last round, each with its facts, in the order they were read.
#[derive(Debug, Default)]
pub struct JobMemo {
    /// Boxed: a round that finds jobs added or gone moves every entry (a pointer each, not
    /// a kilobyte and more).
    #[allow(clippy::vec_box)]
    entries: Vec<Box<(JobView, JobFacts)>>,
    /// Job id -> position (FxHash: looked up for every job of a list that changed, for each
    /// change a round makes, and for an entry given back out of the order lent).
    index: FxHashMap<u32, usize>,
    /// Ids listed more than once (Slurm lists a job once; a reader's double may not). The
    /// index holds the last listing only, so an entry given back under such an id could land
    /// in the wrong listing: those stay lent and are derived again.
    listed_twice: FxHashSet<u32>,
    /// The list the memo was last brought to, without keeping it alive: the reader's cache
    /// changes its list in place only when nobody else holds it (`Arc::make_mut`), which
    /// leaves this pointing nowhere. While it still points at the list a round reads, no job
    /// changed.
    last: Weak<Vec<JobView>>,
    /// Snapshot entries lent and not given back.
    lent: usize,
    /// (job id, position) of the entries lent, in the order lent: most are given back in that
    /// order, and are then put back by position, without looking their ids up.
    lent_at: Vec<(u32, usize)>,
}

impl JobMemo {
    /// Brings the memo to `jobs`: facts kept for each job whose view is unchanged, derived for
    /// the others; jobs no longer listed are forgotten. Returns how many were derived.
    pub fn update(&mut self, jobs: &Arc<Vec<JobView>>) -> usize {
        // The very list of the last round (an idle round between two delta reads): nothing to
        // look at. Lent entries still have to be derived again.
        let same_list = self
            .last
            .upgrade()
            .is_some_and(|last| Arc::ptr_eq(&last, jobs));
        if same_list && self.lent == 0 {
            return 0;
        }
        self.last = Arc::downgrade(jobs);
        self.lent = 0;
        self.lent_at.clear();
        let mut derived = 0;
        let mut derive = |job: &JobView| {
            derived += 1;
            Box::new((job.clone(), view::facts(job)))
        };
        // Most rounds read the same jobs in the same order as the last: updated in place.
        let same_jobs = self.entries.len() == jobs.len()
            && self
                .entries
                .iter()
                .zip(jobs.iter())
                .all(|(e, j)| e.0.job_id == j.job_id);
        if same_jobs {
            for (entry, job) in self.entries.iter_mut().zip(jobs.iter()) {
                if entry.0 != *job || matches!(entry.1.shown, Shown::Lent) {
                    *entry = derive(job);
                }
            }
            return derived;
        }
        let mut old: Vec<Option<Box<(JobView, JobFacts)>>> = std::mem::take(&mut self.entries)
            .into_iter()
            .map(Some)
            .collect();
        let old_index = std::mem::take(&mut self.index);
        self.entries = jobs
            .iter()
            .map(|job| {
                old_index
                    .get(&job.job_id)
                    .and_then(|&i| old[i].take())
                    .filter(|entry| entry.0 == *job && !matches!(entry.1.shown, Shown::Lent))
                    .unwrap_or_else(|| derive(job))
            })
            .collect();
        self.index = FxHashMap::with_capacity_and_hasher(self.entries.len(), Default::default());
        self.listed_twice.clear();
        for (i, entry) in self.entries.iter().enumerate() {
            if self.index.insert(entry.0.job_id, i).is_some() {
                self.listed_twice.insert(entry.0.job_id);
            }
        }
        derived
    }

    /// The jobs with their facts, in the order `update` was given them.
    pub fn jobs(&self) -> impl ExactSizeIterator<Item = (&JobView, &JobFacts)> {
        self.entries.iter().map(|entry| (&entry.0, &entry.1))
    }

    /// Lends the first `most` waiting jobs' snapshot entries in the order of `key`, leaving
    /// [`Shown::Lent`] in their place.
    pub fn lend_pending<K: Ord>(
        &mut self,
        most: usize,
        key: impl Fn(&PendingJob) -> K,
    ) -> Vec<PendingJob> {
        let mut waiting: Vec<(K, usize)> = self
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, entry)| match &entry.1.shown {
                Shown::Pending(job) => Some((key(job), i)),
                _ => None,
            })
            .collect();
        // By position after the key: the order a stable sort of Slurm's order gives.
        waiting.sort_unstable();
        waiting.truncate(most);
        self.lent_at.clear();
        self.lent_at.reserve(waiting.len());
        let mut lent = Vec::with_capacity(waiting.len());
        for (_, i) in waiting {
            let shown = &mut self.entries[i].1.shown;
            match std::mem::replace(shown, Shown::Lent) {
                Shown::Pending(job) => {
                    self.lent_at.push((job.job_id, i));
                    lent.push(job);
                }
                // (Only waiting jobs were picked above.)
                other => *shown = other,
            }
        }
        self.lent += lent.len();
        lent
    }

    /// Takes back what [`JobMemo::lend_pending`] lent, with the user's begin time as the
    /// facts keep it. An entry not given back is derived again at the next update.
    pub fn give_back(&mut self, pending: Vec<PendingJob>) {
        // Where the next entry lent comes back if it comes in the order lent.
        let mut next = 0;
        for mut job in pending {
            // An id listed twice: which listing's entry is this? (It is derived again.)
            if !self.listed_twice.is_empty() && self.listed_twice.contains(&job.job_id) {
                continue;
            }
            let at = match self.lent_at.get(next) {
                Some(&(id, i)) if id == job.job_id => {
                    next += 1;
                    i
                }
                // Out of order: by id.
                _ => match self.index.get(&job.job_id) {
                    Some(&i) => i,
                    None => continue,
                },
            };
            let (view, facts) = &mut *self.entries[at];
            if matches!(facts.shown, Shown::Lent) && view.job_id == job.job_id {
                self.lent -= 1;
                job.begin_time = facts.users_begin;
                facts.shown = Shown::Pending(job);
            }
        }
    }

    /// One job and its facts.
    pub fn get(&self, job_id: u32) -> Option<(&JobView, &JobFacts)> {
        self.index
            .get(&job_id)
            .map(|&i| (&self.entries[i].0, &self.entries[i].1))
    }

    /// A memo of `jobs`, every fact derived (for tests).
    #[cfg(test)]
    pub fn of(jobs: &[JobView]) -> JobMemo {
        let mut memo = JobMemo::default();
        memo.update(&Arc::new(jobs.to_vec()));
        memo
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::view::tests::job;
    use crate::agent::view::JobState;
    use proptest::prelude::*;

    /// A list of jobs as a reader hands it out (each call a new one: compared job by job).
    fn list(jobs: &[JobView]) -> Arc<Vec<JobView>> {
        Arc::new(jobs.to_vec())
    }

    #[test]
    fn the_same_list_again_is_not_looked_at_and_a_list_changed_in_place_is() {
        let mut jobs = Arc::new(vec![job(1, JobState::Pending), job(2, JobState::Running)]);
        let mut memo = JobMemo::default();
        assert_eq!(memo.update(&jobs), 2);
        assert_eq!(memo.update(&jobs), 0);
        // The reader's cache changes the list it alone holds in place, as a delta read does.
        Arc::make_mut(&mut jobs)[0].admin_comment =
            Some("cinch-decision: prio=7 until=2026-11-26T10:00:00Z why=x".into());
        assert_eq!(memo.update(&jobs), 1);
        assert_eq!(memo.get(1).unwrap().1.applied.prio, Some(7));
        // Entries lent and not given back are derived again even from the same list.
        let lent = memo.lend_pending(1, |j| j.job_id);
        assert_eq!(lent.len(), 1);
        assert_eq!(memo.update(&jobs), 1);
        assert_eq!(memo.get(1).unwrap().1, &view::facts(&jobs[0]));
    }

    #[test]
    fn facts_are_derived_again_only_for_jobs_whose_view_changed() {
        let mut memo = JobMemo::default();
        let mut jobs = vec![
            job(1, JobState::Pending),
            job(2, JobState::Pending),
            job(3, JobState::Running),
        ];
        assert_eq!(memo.update(&list(&jobs)), 3);
        assert_eq!(memo.update(&list(&jobs)), 0);
        jobs[1].admin_comment =
            Some("cinch-decision: prio=5 until=2026-11-26T10:00:00Z why=test".into());
        jobs.remove(0);
        jobs.push(job(4, JobState::Pending));
        assert_eq!(memo.update(&list(&jobs)), 2, "job 2 changed, job 4 is new");
        assert_eq!(memo.get(2).unwrap().1.applied.prio, Some(5));
        assert!(memo.get(1).is_none(), "job 1 is gone");
        let order: Vec<u32> = memo.jobs().map(|(j, _)| j.job_id).collect();
        assert_eq!(order, [2, 3, 4]);
    }

    #[test]
    fn snapshot_entries_lent_and_not_given_back_are_derived_again() {
        let jobs = vec![job(1, JobState::Pending), job(2, JobState::Pending)];
        let mut memo = JobMemo::of(&jobs);
        let lent = memo.lend_pending(2, |j| std::cmp::Reverse(j.job_id));
        let order: Vec<u32> = lent.iter().map(|j| j.job_id).collect();
        assert_eq!(order, [2, 1], "lent in the key's order");
        // Job 1's entry comes back, job 2's does not (a round cut short).
        memo.give_back(lent.into_iter().filter(|j| j.job_id == 1).collect());
        assert_eq!(memo.get(1).unwrap().1, &view::facts(&jobs[0]));
        assert_eq!(memo.get(2).unwrap().1.shown, Shown::Lent);
        assert_eq!(memo.update(&list(&jobs)), 1, "only job 2 is derived again");
        for (seen, facts) in memo.jobs() {
            assert_eq!(facts, &view::facts(seen));
        }
    }

    #[test]
    fn a_job_listed_twice_keeps_facts_for_each_listing() {
        let mut jobs = vec![job(7, JobState::Pending), job(7, JobState::Pending)];
        let mut memo = JobMemo::of(&jobs);
        assert_eq!(memo.jobs().len(), 2);
        assert_eq!(memo.update(&list(&jobs)), 0, "the same listing again");
        // A new job: the listings are matched by id, and the second 7 finds the one kept entry
        // taken by the first and derives its own.
        jobs.push(job(8, JobState::Pending));
        assert_eq!(memo.update(&list(&jobs)), 2);
        assert_eq!(memo.jobs().len(), 3);
    }

    #[test]
    fn entries_given_back_in_any_order_or_in_part_land_in_their_own_place() {
        let jobs: Vec<JobView> = (1..=5).map(|id| job(id, JobState::Pending)).collect();
        let mut memo = JobMemo::of(&jobs);
        let mut lent = memo.lend_pending(5, |j| std::cmp::Reverse(j.job_id));
        // Some back in the order lent, then the rest shuffled, one never.
        let rest = lent.split_off(2);
        memo.give_back(lent);
        let mut rest: Vec<PendingJob> = rest.into_iter().filter(|j| j.job_id != 2).collect();
        rest.reverse();
        memo.give_back(rest);
        for (seen, facts) in memo.jobs() {
            if seen.job_id == 2 {
                assert_eq!(facts.shown, Shown::Lent);
            } else {
                assert_eq!(facts, &view::facts(seen));
            }
        }
        assert_eq!(memo.update(&list(&jobs)), 1, "only job 2 is derived again");
    }

    #[test]
    fn entries_of_a_job_listed_twice_are_not_given_back_into_the_wrong_listing() {
        // Two listings of job 3 that differ: each must keep the facts of its own view.
        let mut jobs = vec![job(3, JobState::Pending), job(3, JobState::Pending)];
        jobs[1].req_nodes = Some("n1".into());
        jobs[1].tres_per_node = None;
        jobs[1].tres_per_job = Some("gres/gpu:4".into());
        let mut memo = JobMemo::default();
        memo.update(&list(&jobs));
        let lent = memo.lend_pending(2, |j| j.job_id);
        assert_eq!(lent.len(), 2);
        memo.give_back(lent);
        assert_eq!(memo.update(&list(&jobs)), 2, "both listings derived again");
        for ((seen, facts), job) in memo.jobs().zip(&jobs) {
            assert_eq!(seen, job);
            assert_eq!(facts, &view::facts(job));
        }
    }

    /// One job of a few shapes: pending or running, with or without cinch's record, a hint,
    /// a node list, a GPU request per job or per node.
    fn a_job() -> impl Strategy<Value = JobView> {
        (
            1u32..8,
            any::<bool>(),
            prop::option::of(0u32..3),
            any::<bool>(),
            any::<bool>(),
            1u32..5,
        )
            .prop_map(|(id, running, record, hinted, pinned, gpus)| {
                let mut j = job(id, if running { JobState::Running } else { JobState::Pending });
                j.admin_comment = record.map(|r| match r {
                    0 => "cinch: gpus=4 requeue=yes".to_string(),
                    1 => format!("cinch-decision: prio={gpus} until=2026-11-26T10:00:00Z why=x"),
                    _ => "ticket 9 | cinch-decision: pin=n1 nodes_was=2 until=2026-11-26T10:00:00Z why=y"
                        .to_string(),
                });
                j.comment = hinted.then(|| format!("cinch:app=bert,ckpt=yes,elastic=1-{gpus}"));
                j.req_nodes = pinned.then(|| "n1".to_string());
                if gpus % 2 == 0 {
                    j.tres_per_node = None;
                    j.tres_per_job = Some(format!("gres/gpu:{gpus}"));
                }
                j.nodes = running.then(|| "n[1-2]".to_string());
                j
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Whatever the rounds read, one after another, and whatever of the snapshot entries
        /// they lent came back, the memo's facts are exactly those derived afresh from the
        /// views in hand.
        #[test]
        fn kept_facts_are_always_those_of_the_view_in_hand(
            rounds in prop::collection::vec(
                // How the lent entries come back: not, in the order lent, or reversed.
                (prop::collection::vec(a_job(), 0..6), 0usize..4, 0u8..3),
                1..6,
            )
        ) {
            let mut memo = JobMemo::default();
            for (jobs, lend, back) in rounds {
                memo.update(&list(&jobs));
                prop_assert_eq!(memo.jobs().len(), jobs.len());
                for ((seen, facts), job) in memo.jobs().zip(&jobs) {
                    prop_assert_eq!(seen, job);
                    prop_assert_eq!(facts, &view::facts(job));
                }
                let lent = memo.lend_pending(lend, |j| j.job_id);
                prop_assert!(lent.len() <= lend);
                if back > 0 {
                    // A snapshot's entries come back with the begin time the clock left them.
                    let mut lent: Vec<PendingJob> =
                        lent.into_iter().map(|j| PendingJob { begin_time: None, ..j }).collect();
                    if back == 2 {
                        lent.reverse();
                    }
                    memo.give_back(lent);
                    for ((_, facts), job) in memo.jobs().zip(&jobs) {
                        if jobs.iter().filter(|j| j.job_id == job.job_id).count() == 1 {
                            prop_assert_eq!(facts, &view::facts(job));
                        }
                    }
                }
            }
        }
    }
}
