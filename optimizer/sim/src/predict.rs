//! How well cinch predicts run times (`cinch sim predict`; docs/policies/qos.md): the trace's
//! first part trains the same [`History`] the service keeps, the rest is predicted, and each
//! prediction is compared with the job's real run time. Only what the trace says of a job at
//! its submission is used (user, job name, GPUs, the time limit where the trace has one): the
//! simulator's made-up limits are not, or the limit source would predict its own invention.
//!
//! Two ways: **frozen**, the model as it stood when the first test job arrived (the jobs of the
//! first part that had ended by then), never updated; **online**, as a live agent learns: each
//! test job predicted at its submission from every job that ended before it.

use cinch_core::learn::history::History;
use cinch_core::util::stats::percentile;

use crate::trace::{Trace, TraceJob};

/// Run time assumed when nothing predicts one (the `cinch` policy's `default_run_s`).
const DEFAULT_RUN_S: f64 = 3600.0;

/// One predictor's accuracy on the test jobs it could predict.
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    pub source: &'static str,
    /// Test jobs it predicted.
    pub predicted: usize,
    /// Median and mean absolute percentage error (|predicted - actual| / actual).
    pub median_ape: f64,
    pub mean_ape: f64,
    /// Share of its predictions within 2x of the actual run time (either way).
    pub within_2x: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Accuracy {
    pub online: bool,
    pub train_jobs: usize,
    /// Jobs of the first part the frozen model had learned (those ended before the split).
    pub learned_at_split: usize,
    pub test_jobs: usize,
    pub scores: Vec<Score>,
}

/// The sources scored, in report order.
const SOURCES: [&str; 5] = [
    "cinch (best source so far)",
    "time limit x learned ratio",
    "similar jobs (user, name, GPUs)",
    "user's jobs on as many GPUs",
    "median of the first part",
];

/// Scores the predictors on `trace`: its first `train_share` of jobs (by submission) train, the
/// ended jobs of the rest are predicted.
pub fn evaluate(trace: &Trace, train_share: f64, online: bool) -> Result<Accuracy, String> {
    if !(0.05..=0.95).contains(&train_share) {
        return Err(format!(
            "the training share must be from 0.05 to 0.95, not {train_share}"
        ));
    }
    let mut jobs: Vec<&TraceJob> = trace.jobs.iter().collect();
    jobs.sort_by_key(|j| j.submit);
    let split = ((jobs.len() as f64) * train_share).round() as usize;
    let (train, test) = jobs.split_at(split.min(jobs.len()));
    let test: Vec<&TraceJob> = test.iter().copied().filter(|j| j.ended).collect();
    if train.is_empty() || test.is_empty() {
        return Err(format!(
            "too few jobs to split ({} in the first part, {} ended in the rest)",
            train.len(),
            test.len()
        ));
    }
    let split_time = test[0].submit;
    // Every ended job, by the time it ended: what the model may have learned by a given time.
    let mut ends: Vec<(f64, &TraceJob)> = jobs
        .iter()
        .copied()
        .filter(|j| j.ended)
        .map(|j| (j.submit as f64 + j.run_time, j))
        .collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let in_train = |j: &TraceJob| j.submit < split_time;
    let mut train_runs: Vec<f64> = ends
        .iter()
        .filter(|(end, j)| in_train(j) && *end <= split_time as f64)
        .map(|(_, j)| j.run_time)
        .collect();
    train_runs.sort_by(f64::total_cmp);
    let median = percentile(&train_runs, 0.5);

    let mut history = History::default();
    let mut learned = 0usize;
    let mut next_end = 0usize;
    let learn = |history: &mut History, j: &TraceJob| {
        j.import_into(history);
    };
    // The frozen model: the first part's jobs ended by the split.
    while next_end < ends.len() && ends[next_end].0 <= split_time as f64 {
        let (_, j) = ends[next_end];
        if in_train(j) {
            learn(&mut history, j);
            learned += 1;
        }
        next_end += 1;
    }
    let mut errors: Vec<Vec<(f64, f64)>> = vec![Vec::new(); SOURCES.len()];
    for job in &test {
        if online {
            while next_end < ends.len() && ends[next_end].0 <= job.submit as f64 {
                learn(&mut history, ends[next_end].1);
                next_end += 1;
            }
        }
        let name = job.job_name.as_deref();
        let chosen = history
            .predict_run_s(&job.user, name, job.gpus, job.time_limit, DEFAULT_RUN_S)
            .run_s;
        let [limit, similar, user_gpus] =
            history.source_predictions(&job.user, name, job.gpus, job.time_limit);
        let predictions = [Some(chosen), limit, similar, user_gpus, Some(median)];
        for (i, p) in predictions.into_iter().enumerate() {
            if let Some(p) = p {
                errors[i].push((p, job.run_time));
            }
        }
    }
    let scores = SOURCES
        .iter()
        .zip(errors)
        .map(|(&source, pairs)| score(source, &pairs))
        .collect();
    Ok(Accuracy {
        online,
        train_jobs: train.len(),
        learned_at_split: learned,
        test_jobs: test.len(),
        scores,
    })
}

fn score(source: &'static str, pairs: &[(f64, f64)]) -> Score {
    let mut ape: Vec<f64> = pairs
        .iter()
        .map(|&(p, actual)| (p - actual).abs() / actual.max(1.0))
        .collect();
    ape.sort_by(f64::total_cmp);
    let n = pairs.len().max(1) as f64;
    Score {
        source,
        predicted: pairs.len(),
        median_ape: percentile(&ape, 0.5),
        mean_ape: ape.iter().sum::<f64>() / n,
        within_2x: pairs
            .iter()
            .filter(|&&(p, actual)| {
                let r = p / actual.max(1.0);
                (0.5..=2.0).contains(&r)
            })
            .count() as f64
            / n,
    }
}

/// The scores as a Markdown table.
pub fn table(a: &Accuracy) -> String {
    let mut out = format!(
        "{} model: {} jobs in the first part ({} ended by the split and learned), {} ended jobs \
         predicted\n\n| source | predicted | median APE | mean APE | within 2x |\n|---|---|---|---|---|\n",
        if a.online { "online" } else { "frozen" },
        a.train_jobs,
        a.learned_at_split,
        a.test_jobs
    );
    for s in &a.scores {
        if s.predicted == 0 {
            out.push_str(&format!("| {} | 0 | - | - | - |\n", s.source));
            continue;
        }
        out.push_str(&format!(
            "| {} | {} ({:.0}%) | {:.0}% | {:.0}% | {:.1}% |\n",
            s.source,
            s.predicted,
            100.0 * s.predicted as f64 / a.test_jobs.max(1) as f64,
            100.0 * s.median_ape,
            100.0 * s.mean_ape,
            100.0 * s.within_2x
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(i: usize, user: &str, name: &str, run: f64) -> TraceJob {
        TraceJob {
            user: user.into(),
            job_name: Some(name.into()),
            ..TraceJob::new(format!("j{i}"), i as i64 * 1000, 1, run)
        }
    }

    #[test]
    fn repeated_jobs_are_predicted_from_their_history_and_only_what_ended_is_learned() {
        // Alice's "train" runs 600 s, Bob's "eval" 6000 s, alternating.
        let jobs: Vec<TraceJob> = (0..40)
            .map(|i| {
                if i % 2 == 0 {
                    job(i, "alice", "train", 600.0)
                } else {
                    job(i, "bob", "eval", 6000.0)
                }
            })
            .collect();
        let trace = Trace {
            jobs,
            skipped: Vec::new(),
        };
        let a = evaluate(&trace, 0.5, false).unwrap();
        assert_eq!((a.train_jobs, a.test_jobs), (20, 20));
        // Bob's jobs submitted at 15,000, 17,000 and 19,000 s end after the split at 20,000 s:
        // the frozen model never saw them.
        assert_eq!(a.learned_at_split, 17);
        let cinch = &a.scores[0];
        assert_eq!(cinch.predicted, 20);
        assert!(
            cinch.median_ape < 1e-9 && cinch.within_2x == 1.0,
            "{cinch:?}"
        );
        // The constant median is off by far for one of the two kinds.
        assert!(a.scores[4].within_2x <= 0.5, "{:?}", a.scores[4]);
        // No limits in this trace: the limit source predicts nothing.
        assert_eq!(a.scores[1].predicted, 0);
        let online = evaluate(&trace, 0.5, true).unwrap();
        assert!(online.scores[0].mean_ape < 1e-9);
        assert!(table(&online)
            .contains("| cinch (best source so far) | 20 (100%) | 0% | 0% | 100.0% |"));
    }

    #[test]
    fn jobs_cut_by_the_end_of_the_trace_are_not_predicted_and_bad_splits_are_refused() {
        let mut jobs: Vec<TraceJob> = (0..10).map(|i| job(i, "a", "x", 100.0)).collect();
        jobs[9].ended = false;
        let trace = Trace {
            jobs,
            skipped: Vec::new(),
        };
        assert_eq!(evaluate(&trace, 0.5, true).unwrap().test_jobs, 4);
        assert!(evaluate(&trace, 1.0, true)
            .unwrap_err()
            .contains("0.05 to 0.95"));
        let empty = Trace::default();
        assert!(evaluate(&empty, 0.5, true)
            .unwrap_err()
            .contains("too few jobs"));
    }
}
