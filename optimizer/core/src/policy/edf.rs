//! `edf`: earliest deadline first, the classic QoS baseline GENIE is measured against. Jobs with
//! a finish target ([`crate::qos`]: the user's `due`/`turnaround` hints or Slurm's `--deadline`)
//! go ahead of the jobs without one, the earliest target first, whether it can still be met or
//! not; the others keep Slurm's order. Placement and backfill stay Slurm's. Never preempts.

use serde::{Deserialize, Serialize};

use super::Policy;
use crate::decision::Decision;
use crate::history::History;
use crate::qos;
use crate::rng::SeededRng;
use crate::slurm_time::format_time;
use crate::snapshot::Snapshot;

/// Priorities of jobs with a target go down from here as their target (Unix seconds) is later:
/// a fixed priority per job, so Slurm is not updated every round.
const TOP_PRIORITY: u32 = 4_000_000_000;
/// Targets from 1970 to this many seconds later map onto distinct priorities.
const SPAN_S: i64 = 3_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct EdfParams {
    /// Lifetime of each decision in seconds (1 to 86400).
    pub ttl_s: u32,
}

impl Default for EdfParams {
    fn default() -> Self {
        EdfParams { ttl_s: 300 }
    }
}

impl EdfParams {
    pub fn validate(&self) -> Result<(), String> {
        super::check_ttl(self.ttl_s)
    }
}

pub struct Edf(pub EdfParams);

impl Policy for Edf {
    fn decide(
        &self,
        snapshot: &Snapshot,
        _now: i64,
        _rng: &mut SeededRng,
        _history: &History,
    ) -> Vec<Decision> {
        snapshot
            .pending
            .iter()
            .filter_map(|job| {
                let targets = qos::targets(job, &[], &qos::UserTargets::Counted { floor_s: 0 });
                let bound = targets.finish_by.or(targets.start_by)?;
                let at = bound.at.clamp(0, SPAN_S);
                Some(Decision {
                    priority: Some(TOP_PRIORITY - at as u32),
                    ..Decision::explain(
                        job.job_id,
                        format!(
                            "earliest deadline first: target {} ({})",
                            format_time(bound.at),
                            bound.source
                        ),
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
        assert!(d[1].reason.contains("(--deadline)"), "{}", d[1].reason);
    }
}
