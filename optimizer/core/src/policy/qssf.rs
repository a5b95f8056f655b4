//! `qssf`: quasi-shortest-service-first (Helios, SC'21), the survey's history-based baseline. A
//! waiting job's predicted service is its GPUs times its predicted run time: the mean run time of
//! the same user's earlier jobs on as many GPUs, else of all jobs on as many GPUs (learned from
//! snapshots), else its time limit. Smaller predicted service gets a higher Slurm priority;
//! placement and backfill stay Slurm's. Never preempts.

use serde::{Deserialize, Serialize};

use super::Policy;
use crate::decision::Decision;
use crate::history::History;
use crate::rng::SeededRng;
use crate::snapshot::{PendingJob, Snapshot};

/// Priorities go down from here by one per [`SERVICE_PER_STEP`] GPU-seconds of predicted service.
pub const TOP_PRIORITY: u32 = 1_000_000_000;
pub const SERVICE_PER_STEP: f64 = 10.0;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct QssfParams {
    /// Run time assumed for a job with no history and no time limit (seconds, 1 or more).
    pub default_run_s: u32,
    /// Lifetime of each decision in seconds (1 to 86400).
    pub ttl_s: u32,
}

impl Default for QssfParams {
    fn default() -> Self {
        QssfParams {
            default_run_s: 3600,
            ttl_s: 300,
        }
    }
}

impl QssfParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.default_run_s == 0 {
            return Err("default_run_s must be at least 1".into());
        }
        super::check_ttl(self.ttl_s)
    }
}

pub struct Qssf(pub QssfParams);

impl Qssf {
    /// Predicted run seconds and where the prediction comes from.
    pub fn predicted_run_s(&self, job: &PendingJob, history: &History) -> (f64, &'static str) {
        if let Some(mean) = history.mean_run_s(&job.user, job.gpus) {
            return (mean, "history");
        }
        match job.time_limit_min {
            Some(limit) => (f64::from(limit) * 60.0, "time limit"),
            None => (f64::from(self.0.default_run_s), "default"),
        }
    }
}

impl Policy for Qssf {
    fn decide(
        &self,
        snapshot: &Snapshot,
        _now: i64,
        _rng: &mut SeededRng,
        history: &History,
    ) -> Vec<Decision> {
        snapshot
            .pending
            .iter()
            .map(|job| {
                let (run_s, source) = self.predicted_run_s(job, history);
                let service = f64::from(job.gpus) * run_s;
                let steps = (service / SERVICE_PER_STEP).min(f64::from(TOP_PRIORITY - 1));
                Decision {
                    priority: Some(TOP_PRIORITY - steps as u32),
                    ..Decision::explain(
                        job.job_id,
                        format!(
                            "predicted service {:.1} GPU-hours ({source}): shorter first",
                            service / 3600.0
                        ),
                        self.0.ttl_s,
                    )
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cluster, pending, snapshot};

    #[test]
    fn smaller_predicted_service_gets_the_higher_priority() {
        let mut long = pending(1, 4);
        long.time_limit_min = Some(600);
        let mut short = pending(2, 4);
        short.time_limit_min = Some(10);
        let snap = snapshot(cluster(2, 8, 1), vec![long, short]);
        let d = Qssf(QssfParams::default()).decide(
            &snap,
            snap.time,
            &mut SeededRng::new(1),
            &History::default(),
        );
        assert!(d[1].priority > d[0].priority, "{d:?}");
        assert!(d.iter().all(|d| d.priority.is_some_and(|p| p >= 1)));
    }
}
