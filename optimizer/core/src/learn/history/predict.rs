//! Predicting run times from the history: which source (limit, similar jobs, the user's jobs on
//! as many GPUs) to trust for a job, and a round's [`Predictor`] that looks each user up once.

use rustc_hash::FxHashMap;

use super::{
    History, Mean, RunPrediction, RunSource, MIN_SCORED, MIN_USER_RATIO_RUNS, MODEL_EVERY,
};
use crate::learn::run_model::{JobDistribution, RunModel, MIN_OUTCOMES};

/// What history knows of the jobs of one user, name and GPU count.
#[derive(Debug, Clone, Copy, PartialEq)]
struct UserKnowledge {
    /// How much of their limits the user's (else everybody's) jobs ran (geometric mean).
    ratio: f64,
    similar: Option<f64>,
    user_gpus: Option<f64>,
}

impl UserKnowledge {
    pub(super) fn candidates(self, limit_s: Option<f64>) -> [Option<f64>; 3] {
        let limit = limit_s.filter(|&l| l > 0.0).map(|l| l * self.ratio);
        [limit, self.similar, self.user_gpus]
    }
}

/// What the history holds of one user's jobs: looked up once per user a round, then each job
/// needs only the lookups of its own name and GPU count, and only where the user has any.
#[derive(Clone, Copy)]
struct UserEntry<'h> {
    /// How much of their limits the user's (else everybody's) jobs ran (geometric mean).
    ratio: f64,
    by_job: Option<&'h FxHashMap<String, FxHashMap<u32, Mean>>>,
    /// The user's runs of jobs without a name, looked up once: most jobs of a trace without
    /// names ask for it, and the empty name compares slowly ([`crate::util::non_empty`]).
    unnamed: Option<&'h FxHashMap<u32, Mean>>,
    by_gpus: Option<&'h FxHashMap<u32, Mean>>,
}

impl<'h> UserEntry<'h> {
    /// The user's runs of the job name, by GPU count.
    fn named(self, name: &str) -> Option<&'h FxHashMap<u32, Mean>> {
        if name.is_empty() {
            return self.unnamed;
        }
        self.by_job.and_then(|names| names.get(name))
    }

    fn knowledge(self, name: &str, gpus: u32) -> UserKnowledge {
        self.knowledge_of(self.named(name), gpus)
    }

    /// [`UserEntry::knowledge`] with the name already looked up ([`UserEntry::named`]).
    fn knowledge_of(self, named: Option<&FxHashMap<u32, Mean>>, gpus: u32) -> UserKnowledge {
        let similar = named
            .and_then(|by_gpus| by_gpus.get(&gpus))
            .map(|m| m.value.exp());
        let user_gpus = self
            .by_gpus
            .and_then(|by_gpus| by_gpus.get(&gpus))
            .filter(|m| m.count >= 2)
            .map(|m| m.value.exp());
        UserKnowledge {
            ratio: self.ratio,
            similar,
            user_gpus,
        }
    }
}

/// [`History::predict_run_s`] for the many jobs of one round, each user looked up once
/// ([`History::predictor`]). Keyed by user, not by (user, name, GPUs): a round has few users
/// and may have as many names as jobs, and a memo as large as the queue costs more to fill
/// than the lookups it saves.
pub struct Predictor<'h, 's> {
    history: &'h History,
    /// Keyed by [`crate::util::non_empty`]: the empty name compares slowly.
    memo: std::cell::RefCell<FxHashMap<Option<&'s str>, UserEntry<'h>>>,
    /// The last job's user and name with what they looked up: a queue lists a user's jobs of
    /// one name together (arrays, sweeps), and every job of a trace without users or names is
    /// the same empty pair; told apart from the next job without hashing either string.
    last: std::cell::Cell<Option<LastLookup<'h, 's>>>,
    model: Option<std::sync::Arc<RunModel>>,
    /// What the history's earlier predictors worked out, taken from it for the round and
    /// handed back when the predictor is dropped.
    kept: std::cell::RefCell<Kept>,
}

/// What predictors worked out, kept in the history between rounds: every change to what a
/// prediction or the run model reads comes with a job learned, counted in
/// [`History::finished`], so until the next one a job asked about again is predicted as it was,
/// and the run model (rebuilt only as jobs are learned) gives the same distributions. After
/// one, a job's entry stays and its prediction is worked out again when it is next asked.
pub(crate) type KeptPredictions = crate::learn::Derived<Kept>;

/// Below this many kept jobs, entries of jobs no longer asked about are not swept.
const MIN_SWEPT: usize = 4096;

#[derive(Default)]
pub(crate) struct Kept {
    /// [`History::finished`] when the distributions were worked out.
    finished: u64,
    /// Each job's prediction with what it was asked for: a job's user, name, GPUs and limit
    /// may change while it waits (`scontrol update`), and then it is predicted again. An entry
    /// outlives the lessons after it (its prediction is worked out again, in place, at the
    /// next ask): a busy cluster learns a job nearly every round, and dropping every entry then
    /// made each ask an insert with its user and name copied.
    by_job: FxHashMap<u32, KeptJob>,
    /// Predictors made so far: each entry says by which it was last asked about.
    generation: u64,
    /// Jobs the latest predictor and the one before asked about: once `by_job` holds more than
    /// twice as many (and more than [`MIN_SWEPT`]), it is swept down to those jobs, so ended
    /// jobs do not pile up. Two, because a round may make two predictors (elastic sizing asks
    /// about its few jobs first).
    asked: [usize; 2],
    /// The run model's distribution of each prediction asked, by the prediction's bits: a
    /// round asks for every running and waiting job's, and jobs of one user on as many GPUs
    /// share one prediction.
    distributions: FxHashMap<u64, JobDistribution>,
}

struct KeptJob {
    /// [`History::finished`] when `prediction` was worked out.
    finished: u64,
    /// The predictor ([`Kept::generation`]) that last asked about the job.
    asked_by: u64,
    user: Box<str>,
    name: Box<str>,
    gpus: u32,
    limit_s: Option<u64>,
    default_s: u64,
    prediction: RunPrediction,
}

impl Drop for Predictor<'_, '_> {
    fn drop(&mut self) {
        let kept = std::mem::take(self.kept.get_mut());
        *self
            .history
            .kept
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = kept;
    }
}

/// A user and job name as [`Predictor`] last looked them up.
#[derive(Clone, Copy)]
struct LastLookup<'h, 's> {
    user: &'s str,
    name: &'s str,
    entry: UserEntry<'h>,
    named: Option<&'h FxHashMap<u32, Mean>>,
}

/// Whether two strings are equal, without comparing bytes when both are empty or one string.
fn same_str(a: &str, b: &str) -> bool {
    a.len() == b.len() && (a.is_empty() || std::ptr::eq(a.as_ptr(), b.as_ptr()) || a == b)
}

impl<'s> Predictor<'_, 's> {
    /// The same as [`History::predict_run_s`].
    pub fn predict_run_s(
        &self,
        user: &'s str,
        name: Option<&'s str>,
        gpus: u32,
        limit_s: Option<f64>,
        default_s: f64,
    ) -> RunPrediction {
        let name = name.unwrap_or("");
        let last = match self.last.get() {
            Some(last) if same_str(last.user, user) && same_str(last.name, name) => last,
            _ => {
                let entry = *self
                    .memo
                    .borrow_mut()
                    .entry(crate::util::non_empty(user))
                    .or_insert_with(|| self.history.user_entry(user));
                let last = LastLookup {
                    user,
                    name,
                    entry,
                    named: entry.named(name),
                };
                self.last.set(Some(last));
                last
            }
        };
        let knowledge = last.entry.knowledge_of(last.named, gpus);
        self.history
            .choose(knowledge.candidates(limit_s), default_s)
    }

    /// [`Self::predict_run_s`] for job `job_id`, kept until the history learns a job (or the
    /// job is asked about with other inputs).
    pub fn predict_job_run_s(
        &self,
        job_id: u32,
        user: &'s str,
        name: Option<&'s str>,
        gpus: u32,
        limit_s: Option<f64>,
        default_s: f64,
    ) -> RunPrediction {
        let (limit_bits, default_bits) = (limit_s.map(f64::to_bits), default_s.to_bits());
        let name_str = name.unwrap_or("");
        let finished = self.history.finished;
        let mut kept = self.kept.borrow_mut();
        let Kept {
            by_job,
            generation,
            asked,
            ..
        } = &mut *kept;
        let generation = *generation;
        // Each job counted once per predictor, as the sweep reads it.
        match by_job.get_mut(&job_id) {
            None => asked[0] += 1,
            Some(k) => {
                asked[0] += usize::from(k.asked_by != generation);
                k.asked_by = generation;
                if k.gpus == gpus
                    && k.limit_s == limit_bits
                    && k.default_s == default_bits
                    && same_str(&k.user, user)
                    && same_str(&k.name, name_str)
                {
                    if k.finished != finished {
                        // Learned since: the same inputs, predicted again in place.
                        k.prediction = self.predict_run_s(user, name, gpus, limit_s, default_s);
                        k.finished = finished;
                    }
                    debug_assert_eq!(
                        k.prediction,
                        self.predict_run_s(user, name, gpus, limit_s, default_s),
                        "job {job_id}'s kept prediction is the one worked out now"
                    );
                    return k.prediction;
                }
            }
        }
        let prediction = self.predict_run_s(user, name, gpus, limit_s, default_s);
        by_job.insert(
            job_id,
            KeptJob {
                finished,
                asked_by: generation,
                user: user.into(),
                name: name_str.into(),
                gpus,
                limit_s: limit_bits,
                default_s: default_bits,
                prediction,
            },
        );
        prediction
    }

    pub fn history(&self) -> &History {
        self.history
    }

    /// The run model of this round ([`History::run_model`]).
    pub fn model(&self) -> Option<&RunModel> {
        self.model.as_deref()
    }

    /// The run model's distribution of a job predicted to run `predicted_s`
    /// ([`RunModel::distribution`]), worked out once per prediction a round; `None` without
    /// a model.
    pub fn distribution(&self, predicted_s: f64) -> Option<JobDistribution> {
        let model = self.model.as_deref()?;
        Some(
            self.kept
                .borrow_mut()
                .distributions
                .entry(predicted_s.to_bits())
                .or_insert_with(|| model.distribution(predicted_s))
                .clone(),
        )
    }
}

impl History {
    /// What each source predicts for a job now (limit, similar, user-GPUs), where it can.
    pub(super) fn candidates(
        &self,
        user: &str,
        name: &str,
        gpus: u32,
        limit_s: Option<f64>,
    ) -> [Option<f64>; 3] {
        self.of_user(user, name, gpus).candidates(limit_s)
    }

    /// What history says of a job of `user` named `name` on `gpus` GPUs, whatever its limit.
    fn of_user(&self, user: &str, name: &str, gpus: u32) -> UserKnowledge {
        self.user_entry(user).knowledge(name, gpus)
    }

    /// What history holds of `user`'s jobs.
    fn user_entry(&self, user: &str) -> UserEntry<'_> {
        let ratio_ln = self
            .log_limit_ratio_by_user
            .get(user)
            .filter(|m| m.count >= MIN_USER_RATIO_RUNS)
            .or(self.log_limit_ratio.as_ref())
            .map_or(0.5f64.ln(), |m| m.value);
        let by_job = self.log_run_by_job.get(user);
        UserEntry {
            ratio: ratio_ln.exp(),
            by_job,
            unnamed: by_job.and_then(|names| names.get("")),
            by_gpus: self.log_run_by_user_gpus.get(user),
        }
    }

    /// The run model of the latest ended jobs ([`crate::learn::run_model`]): what a job's run time is
    /// likely to be given its prediction, and how informative predictions are here; `None` until
    /// enough jobs ended with a prediction.
    pub fn run_model(&self) -> Option<std::sync::Arc<RunModel>> {
        if self.outcomes.len() < MIN_OUTCOMES {
            return None;
        }
        let mut cache = self
            .model
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*cache {
            Some((at, model)) if self.finished < at + MODEL_EVERY => model.clone(),
            _ => {
                let model = RunModel::new(self.outcomes.iter().copied()).map(std::sync::Arc::new);
                *cache = Some((self.finished, model.clone()));
                model
            }
        }
    }

    /// A predictor for one round: [`History::predict_run_s`] for many jobs, looking each
    /// (user, name, GPUs) up once.
    pub fn predictor(&self) -> Predictor<'_, '_> {
        let mut kept = std::mem::take(
            &mut *self
                .kept
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if kept.finished != self.finished {
            kept.distributions.clear();
            kept.finished = self.finished;
        }
        // Jobs the last two predictors did not ask about have mostly left the queue.
        if kept.by_job.len() > MIN_SWEPT.max(2 * (kept.asked[0] + kept.asked[1])) {
            let last = kept.generation;
            kept.by_job.retain(|_, k| k.asked_by + 1 >= last);
        }
        kept.generation += 1;
        kept.asked = [0, kept.asked[0]];
        Predictor {
            history: self,
            memo: std::cell::RefCell::new(FxHashMap::default()),
            last: std::cell::Cell::new(None),
            model: self.run_model(),
            kept: std::cell::RefCell::new(kept),
        }
    }

    /// What each source (limit, similar jobs, the user's jobs on as many GPUs) predicts for a
    /// job now, where it can: for measuring the sources apart (`cinch sim predict`).
    pub fn source_predictions(
        &self,
        user: &str,
        name: Option<&str>,
        gpus: u32,
        limit_s: Option<f64>,
    ) -> [Option<f64>; 3] {
        self.candidates(user, name.unwrap_or(""), gpus, limit_s)
    }

    /// The run time to expect of a job: from the source that has predicted best here so far
    /// among those that can predict it (each scored on at least `MIN_SCORED` (10) ended jobs),
    /// else from similar jobs, else from the time limit, else `default_s`. The sources and their
    /// scoring are learned online from snapshots only, so a site whose time limits mean nothing
    /// ends up on its history, and one whose limits are tight on its limits.
    pub fn predict_run_s(
        &self,
        user: &str,
        name: Option<&str>,
        gpus: u32,
        limit_s: Option<f64>,
        default_s: f64,
    ) -> RunPrediction {
        let candidates = self.candidates(user, name.unwrap_or(""), gpus, limit_s);
        self.choose(candidates, default_s)
    }

    /// The prediction of the source that has predicted best here among `candidates`.
    pub(super) fn choose(&self, candidates: [Option<f64>; 3], default_s: f64) -> RunPrediction {
        const SOURCES: [RunSource; 3] = [RunSource::Limit, RunSource::Similar, RunSource::UserGpus];
        let error = |i: usize| {
            self.source_error[i]
                .filter(|m| m.count >= MIN_SCORED)
                .map(|m| m.value)
        };
        let scored = (0..3)
            .filter(|&i| candidates[i].is_some())
            .filter_map(|i| error(i).map(|e| (i, e)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        // Unscored: similar jobs, then the limit, then the user's jobs on as many GPUs.
        let chosen = scored
            .map(|(i, _)| i)
            .or_else(|| [1, 0, 2].into_iter().find(|&i| candidates[i].is_some()));
        match chosen {
            Some(i) => RunPrediction {
                run_s: candidates[i].expect("chosen among the present").max(1.0),
                source: SOURCES[i],
                log_error: error(i),
            },
            None => RunPrediction {
                run_s: default_s.max(1.0),
                source: RunSource::Default,
                log_error: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::run_model::MIN_OUTCOMES;

    #[test]
    fn a_rounds_predictor_answers_as_the_history_whatever_job_came_before() {
        let mut h = History::default();
        for (user, name, gpus, run_s) in [
            ("ann", Some("train"), 4, 7_200.0),
            ("ann", Some("eval"), 4, 600.0),
            ("bob", Some("train"), 4, 20_000.0),
            ("bob", None, 1, 300.0),
            ("", None, 8, 50_000.0),
            ("", Some(""), 2, 900.0),
        ] {
            for _ in 0..3 {
                assert!(h.import_run(user, name, gpus, Some(36_000.0), run_s));
            }
        }
        let jobs: Vec<(String, Option<String>, u32)> = [
            ("ann", Some("train"), 4),
            ("ann", Some("train"), 4),
            ("ann", Some("eval"), 4),
            ("ann", Some("train"), 4),
            ("bob", Some("train"), 4),
            ("ann", Some("train"), 4),
            ("bob", None, 1),
            ("bob", Some(""), 1),
            ("", None, 8),
            ("", None, 2),
            ("", Some("train"), 4),
            ("ann", None, 4),
            ("anna", Some("train"), 4),
        ]
        .into_iter()
        .map(|(u, n, g)| (u.to_string(), n.map(str::to_string), g))
        .collect();
        let predictor = h.predictor();
        for (user, name, gpus) in &jobs {
            assert_eq!(
                predictor.predict_run_s(user, name.as_deref(), *gpus, Some(36_000.0), 3_600.0),
                h.predict_run_s(user, name.as_deref(), *gpus, Some(36_000.0), 3_600.0),
                "{user}/{name:?}/{gpus}"
            );
        }
    }

    #[test]
    fn a_jobs_prediction_is_kept_until_the_history_learns_or_the_job_changes() {
        let mut h = History::default();
        for _ in 0..3 {
            assert!(h.import_run("ann", Some("train"), 4, Some(36_000.0), 7_200.0));
            assert!(h.import_run("ann", Some("eval"), 4, Some(36_000.0), 600.0));
        }
        let ask = |h: &History, name: &str, gpus: u32, limit_s: f64| {
            let kept =
                h.predictor()
                    .predict_job_run_s(7, "ann", Some(name), gpus, Some(limit_s), 3_600.0);
            (
                kept,
                h.predict_run_s("ann", Some(name), gpus, Some(limit_s), 3_600.0),
            )
        };
        let (first, _) = ask(&h, "train", 4, 36_000.0);
        assert_eq!(
            h.kept.0.lock().unwrap().by_job.len(),
            1,
            "handed back when dropped"
        );
        let (again, fresh) = ask(&h, "train", 4, 36_000.0);
        assert_eq!((again, again), (first, fresh));
        // The job renamed, resized or given another limit while it waits.
        for (name, gpus, limit_s) in [("eval", 4, 36_000.0), ("train", 1, 36_000.0)] {
            let (kept, fresh) = ask(&h, name, gpus, limit_s);
            assert_eq!(kept, fresh, "{name} {gpus} {limit_s}");
        }
        let (kept, fresh) = ask(&h, "train", 4, 1_800.0);
        assert_eq!(kept, fresh);
        assert_eq!(ask(&h, "train", 4, 36_000.0).0, first);
        // A job learned: what was kept goes.
        for _ in 0..3 {
            assert!(h.import_run("ann", Some("train"), 4, Some(36_000.0), 30_000.0));
        }
        let (kept, fresh) = ask(&h, "train", 4, 36_000.0);
        assert_ne!(fresh, first, "the history learned longer runs");
        assert_eq!(kept, fresh);
    }

    #[test]
    fn kept_predictions_outlive_a_lesson_and_ended_jobs_are_swept() {
        let mut h = History::default();
        let kept_jobs = |h: &History| h.kept.0.lock().unwrap().by_job.len();
        let ask_jobs = |h: &History, ids: std::ops::Range<u32>| {
            let predictor = h.predictor();
            for id in ids {
                let kept = predictor.predict_job_run_s(id, "ann", None, 1, Some(7_200.0), 600.0);
                assert_eq!(kept, h.predict_run_s("ann", None, 1, Some(7_200.0), 600.0));
            }
        };
        let many = MIN_SWEPT as u32 + 100;
        ask_jobs(&h, 0..many);
        assert_eq!(kept_jobs(&h), many as usize);
        // A lesson leaves the entries: each is predicted again, in place, when asked.
        assert!(h.import_run("ann", None, 1, Some(7_200.0), 3_000.0));
        ask_jobs(&h, 0..10);
        ask_jobs(&h, 20..30);
        assert_eq!(
            kept_jobs(&h),
            many as usize,
            "not swept while the last two predictors asked about half of it or more"
        );
        // The next predictor sweeps what the last two did not ask about.
        ask_jobs(&h, 0..5);
        assert_eq!(kept_jobs(&h), 20, "the last two predictors' jobs");
        // Fewer than MIN_SWEPT are left alone.
        ask_jobs(&h, 0..1);
        ask_jobs(&h, 0..1);
        assert_eq!(kept_jobs(&h), 20);
    }

    #[test]
    fn a_rounds_predictor_gives_the_run_models_distribution_of_each_prediction() {
        let mut h = History::default();
        assert!(h.predictor().distribution(600.0).is_none(), "no model yet");
        for i in 0..(MIN_OUTCOMES as u32 * 2) {
            let run_s = 300.0 * f64::from(1 + i % 7);
            assert!(h.import_run(&format!("u{}", i % 3), None, 1, Some(7_200.0), run_s));
        }
        let model = h.run_model().expect("enough outcomes for a model");
        let predictor = h.predictor();
        for predicted in [600.0, 1_800.0, 600.0, 5_000.0, 1_800.0] {
            let (asked, direct) = (
                predictor.distribution(predicted).expect("a model"),
                model.distribution(predicted),
            );
            for ran in [0.0, 200.0, 900.0] {
                assert_eq!(
                    asked.remaining(ran),
                    direct.remaining(ran),
                    "{predicted} {ran}"
                );
                assert_eq!(asked.gittins(ran), direct.gittins(ran), "{predicted} {ran}");
            }
        }
        assert_eq!(
            predictor.kept.borrow().distributions.len(),
            3,
            "one per prediction"
        );
    }
}
