//! `qssf`: quasi-shortest-service-first (Helios, SC'21), the survey's history-based baseline. A
//! waiting job's predicted service is its GPUs times its predicted run time. Helios predicts run
//! times from each user's history of similar jobs; here the prediction is the one cinch's own
//! policy uses ([`History::predict_run_s`]: the source that has predicted best on this cluster so
//! far among the time limit scaled by what jobs really run of theirs, similar jobs of the same
//! user and name, and the user's jobs on as many GPUs), so the baseline is at least as well
//! informed as cinch. Smaller predicted service gets a higher Slurm priority; placement and
//! backfill stay Slurm's. Never preempts.

use super::param_table::ParamError;
use super::Policy;
use crate::learn::history::{History, Predictor};
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::reason::Clause;
use crate::wire::snapshot::{PendingJob, Snapshot};

/// Priorities go down from here by one per [`SERVICE_PER_STEP`] GPU-seconds of predicted service.
pub const TOP_PRIORITY: u32 = 1_000_000_000;
pub const SERVICE_PER_STEP: f64 = 10.0;

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    #[derive(Eq)]
    pub struct QssfParams {
        /// Run time assumed for a job with no history and no time limit, seconds.
        default_run_s: u32 = 3600, at_least(1);
        /// Lifetime of each decision in seconds.
        ttl_s: u32 = 300, range(1, 86_400);
    }
}

impl QssfParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        self.check_ranges()
    }
}

pub struct Qssf(pub QssfParams);

impl Qssf {
    /// Predicted run seconds and where the prediction comes from.
    pub fn predicted_run_s<'s>(
        &self,
        job: &'s PendingJob,
        predictor: &Predictor<'_, 's>,
    ) -> (f64, &'static str) {
        let p = predictor.predict_job_run_s(
            job.job_id,
            &job.user,
            job.name.as_deref(),
            job.gpus,
            job.time_limit_min.map(|m| f64::from(m) * 60.0),
            f64::from(self.0.default_run_s),
        );
        (p.run_s, p.source.describe())
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
        let predictor = history.predictor();
        snapshot
            .pending
            .iter()
            .map(|job| {
                let (run_s, source) = self.predicted_run_s(job, &predictor);
                let service = f64::from(job.gpus) * run_s;
                let steps = (service / SERVICE_PER_STEP).min(f64::from(TOP_PRIORITY - 1));
                Decision {
                    priority: Some(TOP_PRIORITY - steps as u32),
                    ..Decision::explain(
                        job.job_id,
                        Clause::PredictedService { service, source },
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

    #[test]
    fn it_predicts_as_cinch_does_from_similar_jobs_before_limits() {
        // Ann's "train" runs took 2 hours although she asks for 10: QSSF predicts 2 hours for
        // her next one, as cinch's predictor does, not her limit.
        let mut history = History::default();
        for _ in 0..3 {
            history.import_run("ann", Some("train"), 4, Some(36_000.0), 7_200.0);
        }
        let mut job = pending(1, 4);
        job.user = "ann".into();
        job.name = Some("train".into());
        job.time_limit_min = Some(600);
        let q = Qssf(QssfParams::default());
        let (run_s, source) = q.predicted_run_s(&job, &history.predictor());
        assert!((run_s - 7_200.0).abs() < 1.0, "{run_s}");
        assert_eq!(source, crate::learn::history::RunSource::Similar.describe());
        let p = history.predict_run_s("ann", Some("train"), 4, Some(36_000.0), 3600.0);
        assert_eq!(p.run_s, run_s);
    }
}
