//! What is expected of running jobs: each one's remaining run (under the run model or as predicted)
//! and the release model built from them when a job has to wait.

use super::*;

/// Each running job's expected remaining run seconds, what is expected of its run and its GPUs,
/// by its position in the snapshot. Every round needs the remaining runs (the release model);
/// only preemption needs rank scores, and only of the jobs that may be requeued, so each score
/// is worked out when asked.
pub(super) struct RunningLeft {
    left: Vec<(f64, Expectation, f64)>,
    /// The releases those remaining runs make, worked out for the first plan of the round
    /// that needs them and handed to the next (again with requeued jobs' GPUs free).
    releases: OnceCell<ReleaseEvents>,
}

impl RunningLeft {
    /// The running jobs' releases by their expected ends.
    pub(super) fn releases(
        &self,
        snapshot: &Snapshot,
        cluster: &Cluster,
        now: i64,
    ) -> ReleaseEvents {
        let of = || ReleaseEvents::of(snapshot, cluster, |k, _| now + self.of(k).ceil() as i64);
        let events = self.releases.get_or_init(of);
        debug_assert!(
            *events == of(),
            "a plan of the round read other releases than the first"
        );
        events.clone()
    }

    pub(super) fn of(&self, position: usize) -> f64 {
        self.left.get(position).map_or(0.0, |l| l.0)
    }

    /// GPU-seconds, as [`Ranked::score`]: GPUs times the job's size per GPU.
    pub(super) fn score(&self, position: usize) -> f64 {
        self.left
            .get(position)
            .map_or(0.0, |(_, expectation, gpus)| gpus * expectation.per_gpu())
    }
}

/// What is expected of a job's run from here: under the run model, its distribution at the run
/// it has received; else the prediction as it is.
pub(super) enum Expectation {
    Model(JobDistribution, f64),
    Plain(f64),
}

impl Expectation {
    /// Expected remaining run seconds: the run model's, else what is left of the prediction
    /// (as long again once past it).
    pub(super) fn remaining(&self) -> f64 {
        match self {
            Expectation::Model(d, ran_s) => d.remaining(*ran_s),
            Expectation::Plain(remaining) => *remaining,
        }
    }

    /// The rank per GPU: its Gittins size under the run model (past every run seen: least
    /// attained service, as long again), else the remaining run.
    pub(super) fn per_gpu(&self) -> f64 {
        match self {
            Expectation::Model(d, ran_s) => size_of_index(d.gittins(*ran_s), *ran_s),
            Expectation::Plain(remaining) => *remaining,
        }
    }

    /// [`Expectation::per_gpu`] of a waiting job, whose index the run model keeps between
    /// rounds.
    pub(super) fn per_gpu_waiting(&self) -> f64 {
        match self {
            Expectation::Model(d, ran_s) => size_of_index(d.gittins_waiting(*ran_s), *ran_s),
            Expectation::Plain(remaining) => *remaining,
        }
    }
}

/// The size a Gittins index stands for (per GPU), as long again as `ran_s` past every run seen.
fn size_of_index(index: Option<f64>, ran_s: f64) -> f64 {
    index.map_or(ran_s.max(1.0), |g| 1.0 / g.max(1e-12))
}

/// The release model of a plan, built the first time a job has to wait (a round that starts
/// every pending job at once, most rounds of a cluster with room, never needs it); what the plan
/// took before is replayed onto it, so it is the model built at the start and kept up to date.
pub(super) struct LazyReleases {
    pub(super) built: Option<Releases>,
    /// Free GPUs per node before the plan took any.
    pub(super) initial_free: Vec<u32>,
    pub(super) taken: Vec<(Vec<(usize, u32)>, i64)>,
}

impl LazyReleases {
    pub(super) fn new(initial_free: Vec<u32>) -> Self {
        LazyReleases {
            built: None,
            initial_free,
            taken: Vec::new(),
        }
    }

    pub(super) fn take(&mut self, taken: &[(usize, u32)], end: i64) {
        match &mut self.built {
            Some(releases) => releases.take(taken, end),
            None => self.taken.push((taken.to_vec(), end)),
        }
    }

    pub(super) fn get<'c>(
        &mut self,
        cluster: &Cluster<'c>,
        build: impl Fn(&Cluster<'c>, Vec<u32>) -> Releases,
    ) -> &mut Releases {
        if let Some(releases) = self.built.take() {
            return self.built.insert(releases);
        }
        let mut releases = build(cluster, std::mem::take(&mut self.initial_free));
        for (taken, end) in self.taken.drain(..) {
            releases.take(&taken, end);
        }
        self.built.insert(releases)
    }
}

impl Cinch {
    /// Every running job's predicted remaining run seconds, computed on first use.
    pub(super) fn running_left<'c, 's>(
        &self,
        cell: &'c OnceCell<RunningLeft>,
        snapshot: &'s Snapshot,
        predictor: &Predictor<'_, 's>,
        now: i64,
    ) -> &'c RunningLeft {
        cell.get_or_init(|| RunningLeft {
            left: snapshot
                .running
                .iter()
                .map(|j| self.running_remaining_s(predictor, j, now))
                .collect(),
            releases: OnceCell::new(),
        })
    }

    /// A running job's predicted remaining run seconds, what is expected of its run (its rank
    /// score is worked out from it when asked) and its GPUs.
    pub(super) fn running_remaining_s<'s>(
        &self,
        predictor: &Predictor<'_, 's>,
        job: &'s RunningJob,
        now: i64,
    ) -> (f64, Expectation, f64) {
        let gpus = f64::from(job.gpus.max(1));
        // What its own progress says, if the admin lets it count (`progress`) and while it
        // predicts better here than the other sources: exactly its remaining run, as a profile.
        if let Some(left) = job
            .progress
            .filter(|_| self.0.progress && predictor.history().progress_trusted())
            .and_then(|p| p.remaining_s(now))
        {
            let left = left.max(1.0);
            return (left, Expectation::Plain(left), gpus);
        }
        if let Some(profile) = (!job.hints.is_empty())
            .then(|| qos::profile(&job.hints))
            .flatten()
        {
            // What the job said it has done, else its time in this run.
            let done = profile
                .done_s
                .unwrap_or((now - job.start_time).max(0) as f64);
            let left = (profile.run_s - done).max(1.0);
            return (left, Expectation::Plain(left), gpus);
        }
        let prediction = self.predict(
            predictor,
            job.job_id,
            &job.user,
            job.name.as_deref(),
            job.gpus,
            job.time_limit_min,
            &job.hints,
        );
        let attained =
            predictor
                .history()
                .attained_service(job.job_id, Some((job.gpus, job.start_time)), now);
        let expectation = self.expect(predictor, prediction, attained / gpus);
        (expectation.remaining(), expectation, gpus)
    }
}
