//! `edf`: earliest deadline first, the classic QoS baseline GENIE is measured against. Jobs with
//! a finish target ([`crate::models::qos`]: the user's `due`/`turnaround` hints or Slurm's `--deadline`)
//! go ahead of the jobs without one, the earliest target first, whether it can still be met or
//! not; the others keep Slurm's order. Placement and backfill stay Slurm's. Never preempts.

use super::param_table::ParamError;
use super::Policy;
use crate::learn::history::History;
use crate::models::qos;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::reason::Clause;
use crate::wire::snapshot::Snapshot;

/// Jobs with a target get priorities from here up: above every priority Slurm computes itself
/// (priority/basic counts down from 0xFFFF0000 with each submission; multifactor stays far
/// below), so they go ahead of the jobs without one under either plugin.
const LOWEST_PRIORITY: u32 = 0xFFFF_0001;
/// One priority level per minute of target, counted from the start of the current day (UTC):
/// a job's priority stays fixed for the day, so Slurm is not updated every round. Targets more
/// than this many levels (45 days) after that share the lowest level; targets before it share
/// the highest. The highest stays below strict's reserved priority.
const LEVELS: i64 = 65_000;
const LEVEL_S: i64 = 60;
const DAY_S: i64 = 86_400;

/// The priority of a job whose target is `at` (Unix seconds), seen on the day of `now`.
fn priority_of(at: i64, now: i64) -> u32 {
    let day_start = now.div_euclid(DAY_S) * DAY_S;
    let level = ((at - day_start) / LEVEL_S).clamp(0, LEVELS);
    LOWEST_PRIORITY + (LEVELS - level) as u32
}

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    #[derive(Eq)]
    pub struct EdfParams {
        /// Lifetime of each decision in seconds.
        ttl_s: u32 = 300, range(1, 86_400);
    }
}

impl EdfParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        self.check_ranges()
    }
}

pub struct Edf(pub EdfParams);

impl Policy for Edf {
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        _rng: &mut SeededRng,
        _history: &History,
    ) -> Vec<Decision> {
        snapshot
            .pending
            .iter()
            .filter_map(|job| {
                let targets = qos::targets(job, &[], &qos::UserTargets::Counted { floor_s: 0 });
                let bound = targets.finish_by.or(targets.start_by)?;
                Some(Decision {
                    priority: Some(priority_of(bound.at, now)),
                    ..Decision::explain(
                        job.job_id,
                        Clause::EarliestDeadline {
                            at: bound.at,
                            source: bound.source,
                        },
                        self.0.ttl_s,
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cluster, pending, snapshot};

    #[test]
    fn the_earliest_target_goes_first_and_jobs_without_one_keep_slurms_order() {
        let mut late = pending(1, 1);
        late.hints.insert("due".into(), "9000".into());
        let mut early = pending(2, 1);
        early.deadline = Some(5000);
        let none = pending(3, 1);
        let mut snap = snapshot(cluster(1, 8, 1), vec![late, early, none]);
        snap.time = 1000;
        let d = Edf(EdfParams::default()).decide(
            &snap,
            1000,
            &mut SeededRng::new(1),
            &History::default(),
        );
        assert_eq!(d.len(), 2, "{d:?}");
        let p = |id| d.iter().find(|d| d.job_id == id).unwrap().priority.unwrap();
        assert!(p(2) > p(1), "{d:?}");
        assert!(
            matches!(
                d[1].reason.clauses(),
                [Clause::EarliestDeadline { source, .. }] if source == "--deadline"
            ),
            "{}",
            d[1].reason
        );
    }

    #[test]
    fn jobs_with_a_target_go_ahead_of_every_priority_slurm_computes_and_below_strict() {
        let now = 1_764_000_000; // 2025-11-24
        let day_start = now - now % DAY_S;
        // priority/basic gives the first job submitted after slurmctld starts 0xFFFF0000.
        let basic_top = 0xFFFF_0000_u32;
        for at in [
            0,
            now - 86_400,
            now,
            now + 3_600,
            now + 60 * 86_400,
            i64::MAX / 2,
        ] {
            let p = priority_of(at, now);
            assert!(p > basic_top, "{at}: {p:#x}");
            assert!(p < crate::policy::STRICT_RESERVED_PRIORITY, "{at}: {p:#x}");
        }
        // Earlier targets higher, to the minute, and fixed through the day.
        assert!(priority_of(now + 60, now) > priority_of(now + 120, now));
        assert_eq!(
            priority_of(now + 60, now),
            priority_of(now + 60, day_start + DAY_S - 1)
        );
        assert_eq!(priority_of(now + 60, now), priority_of(now + 119, now));
    }
}
