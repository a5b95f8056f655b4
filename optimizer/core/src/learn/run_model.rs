//! What a job's run time is likely to be, given its prediction and how good predictions have been
//! here: the queue order that moves between shortest-predicted-first and least-attained-service
//! as prediction accuracy changes (docs/policies/cinch.md).
//!
//! History keeps the latest ended jobs' (prediction at the time, actual run) pairs. Each round
//! they are sorted by prediction and their rank correlation measured: how *informative* the
//! predictions are here (Spearman's rho, less its sampling noise). A job's run time is then taken
//! to be distributed as the actual runs of the jobs whose predictions were nearest its own; the
//! less informative the predictions, the wider that neighbourhood, up to every ended job when they
//! tell nothing; each neighbour's run is scaled by how far the job's prediction is from the
//! neighbourhood's (by the same share: fully when predictions order runs perfectly, not at all
//! when they tell nothing), so the order is continuous in the prediction. On that distribution
//! the job's Gittins index at its attained run time ranks it
//! (Gittins 1979; Tiresias's 2D-Gittins, Gu et al., NSDI'19): with exact predictions it is
//! shortest-remaining-first; with useless ones every new job has the same index (first come,
//! first served among them, as in Tiresias's first queue), and a job that has run long without
//! ending falls behind in a heavy-tailed workload, as least-attained-service does.

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

/// Ended jobs kept for the model.
pub const OUTCOMES: usize = 1000;

/// Ended jobs needed before the model is used (before, predictions are taken as they are).
pub const MIN_OUTCOMES: usize = 30;

/// The narrowest neighbourhood: this many ended jobs with the nearest predictions.
const MIN_WINDOW: usize = 30;

/// A neighbourhood's distribution: sorted actual runs and their running sums, and the
/// geometric mean of the neighbours' predictions.
#[derive(Debug)]
pub struct Distribution {
    runs: Vec<f64>,
    /// `prefix[i]` = sum of `runs[..i]`.
    prefix: Vec<f64>,
    center: f64,
    /// The index of a job that has not run: asked for every waiting job every round.
    at_start: std::sync::OnceLock<Option<f64>>,
    /// Indices of waiting jobs that ran before (requeued), by their attained run in the
    /// distribution's scale: what a job received does not change while it waits, so its index
    /// is asked again every round until the run model is rebuilt (capped at [`KEPT_INDICES`]).
    kept: Mutex<FxHashMap<u64, Option<f64>>>,
}

/// Indices [`Distribution`] keeps for waiting jobs; past this the memo starts again.
const KEPT_INDICES: usize = 4096;

/// What the model says of one job: its neighbourhood's distribution, scaled to its prediction.
#[derive(Debug, Clone)]
pub struct JobDistribution {
    dist: Arc<Distribution>,
    scale: f64,
}

impl JobDistribution {
    /// The job's Gittins index (per second; higher goes first) after `attained` seconds of run;
    /// `None` once it outran every run of its neighbourhood.
    pub fn gittins(&self, attained: f64) -> Option<f64> {
        self.dist
            .gittins(attained / self.scale)
            .map(|g| g / self.scale)
    }

    /// [`Self::gittins`] of a waiting job: the same value, kept between rounds (its attained
    /// run does not change while it waits).
    pub fn gittins_waiting(&self, attained: f64) -> Option<f64> {
        self.dist
            .gittins_kept(attained / self.scale)
            .map(|g| g / self.scale)
    }

    /// Expected run seconds left after `attained` seconds of run.
    pub fn remaining(&self, attained: f64) -> f64 {
        self.dist.remaining(attained / self.scale) * self.scale
    }

    /// A whole run drawn for a job that has run `attained` seconds without ending, `u` uniform
    /// in [0, 1): one of its neighbourhood's runs longer than that, each as likely; as long again
    /// once it outran every one (the model's own rule for what is left, [`Self::remaining`]).
    pub fn sample(&self, attained: f64, u: f64) -> f64 {
        let runs = &self.dist.runs;
        let first = runs.partition_point(|&r| r <= attained / self.scale);
        let n = runs.len() - first;
        if n == 0 {
            return 2.0 * attained.max(1.0);
        }
        let k = ((u.clamp(0.0, 1.0) * n as f64) as usize).min(n - 1);
        (runs[first + k] * self.scale).max(attained)
    }
}

impl Distribution {
    fn new(mut runs: Vec<f64>, center: f64) -> Distribution {
        runs.sort_by(f64::total_cmp);
        let mut prefix = Vec::with_capacity(runs.len() + 1);
        prefix.push(0.0);
        for r in &runs {
            prefix.push(prefix.last().copied().unwrap_or(0.0) + r);
        }
        Distribution {
            runs,
            prefix,
            center,
            at_start: std::sync::OnceLock::new(),
            kept: Mutex::new(FxHashMap::default()),
        }
    }

    /// The Gittins index of a job that has run `attained` seconds without ending: the best
    /// probability of ending within a further quantum over the expected time that quantum
    /// costs, per second (higher: goes first). `None` when it has outrun every run seen.
    pub fn gittins(&self, attained: f64) -> Option<f64> {
        if attained <= 0.0 {
            return *self.at_start.get_or_init(|| self.index(0.0));
        }
        self.index(attained)
    }

    /// [`Self::gittins`], kept for the next ask of the same attained run.
    fn gittins_kept(&self, attained: f64) -> Option<f64> {
        if attained <= 0.0 {
            return self.gittins(attained);
        }
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() >= KEPT_INDICES {
            kept.clear();
        }
        *kept
            .entry(attained.to_bits())
            .or_insert_with(|| self.index(attained))
    }

    fn index(&self, attained: f64) -> Option<f64> {
        let first = self.runs.partition_point(|&r| r <= attained);
        let n = self.runs.len() - first;
        if n == 0 {
            return None;
        }
        let mut best: f64 = 0.0;
        // A quantum ending at a later run: ends k of the n, costs the first k runs' time past
        // `attained` plus the quantum for the n - k that go on. Every k up to 16, then k grows
        // by a sixth each step (the supremum to within a few percent, at a fraction of the cost:
        // this runs for every running job every round).
        let mut k = 1;
        while k <= n {
            let end = self.runs[first + k - 1];
            let spent = self.prefix[first + k] - self.prefix[first] - k as f64 * attained
                + (n - k) as f64 * (end - attained);
            if spent > 0.0 {
                best = best.max(k as f64 / spent);
            }
            k = if k < 16 || k == n {
                k + 1
            } else {
                (k + k / 6).min(n)
            };
        }
        Some(best)
    }

    /// Expected run left for a job that has run `attained` seconds: the mean of the runs longer
    /// than that, less `attained`; as long again once it outran every run seen.
    pub fn remaining(&self, attained: f64) -> f64 {
        let first = self.runs.partition_point(|&r| r <= attained);
        let n = self.runs.len() - first;
        if n == 0 {
            return attained.max(1.0);
        }
        let mean = (self.prefix[self.runs.len()] - self.prefix[first]) / n as f64;
        (mean - attained).max(1.0)
    }
}

/// The last run model the history built, with the count of jobs seen to end when it was.
pub(crate) type ModelCache = super::Derived<Option<(u64, Option<Arc<RunModel>>)>>;

/// The model for one round, built from History's latest outcomes.
#[derive(Debug)]
pub struct RunModel {
    /// (ln predicted, actual run s), by prediction.
    by_prediction: Vec<(f64, f64)>,
    /// 0 (predictions tell nothing) to 1 (they order run times perfectly).
    pub informativeness: f64,
    /// Spearman's rank correlation of predictions and runs, as measured.
    pub rho: f64,
    /// Neighbours each job's distribution is made of.
    pub window: usize,
    /// Distributions by the window's first position.
    cache: Mutex<FxHashMap<usize, Arc<Distribution>>>,
}

impl RunModel {
    /// From (predicted, actual) run seconds of ended jobs; `None` below [`MIN_OUTCOMES`].
    pub fn new(outcomes: impl Iterator<Item = (f64, f64)>) -> Option<RunModel> {
        let mut by_prediction: Vec<(f64, f64)> = outcomes
            .filter(|(p, a)| *p > 0.0 && *a > 0.0)
            .map(|(p, a)| (p.ln(), a))
            .collect();
        let n = by_prediction.len();
        if n < MIN_OUTCOMES {
            return None;
        }
        by_prediction.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let rho = spearman(&by_prediction);
        // Less what a rank correlation of unrelated values reaches by chance (two standard
        // errors), so a few lucky outcomes do not pass for information.
        let noise = 2.0 / (n as f64 - 1.0).sqrt();
        let informativeness = ((rho - noise) / (1.0 - noise)).clamp(0.0, 1.0);
        let window = (MIN_WINDOW as f64 + (1.0 - informativeness) * (n - MIN_WINDOW) as f64)
            .round()
            .clamp(MIN_WINDOW as f64, n as f64) as usize;
        Some(RunModel {
            by_prediction,
            informativeness,
            rho,
            window,
            cache: Mutex::new(FxHashMap::default()),
        })
    }

    /// The distribution of a job predicted to run `predicted_s`: the actual runs of the
    /// [`RunModel::window`] ended jobs whose predictions were nearest, scaled by the job's
    /// prediction over theirs to the power of [`RunModel::informativeness`].
    pub fn distribution(&self, predicted_s: f64) -> JobDistribution {
        let n = self.by_prediction.len();
        let ln_p = predicted_s.max(1.0).ln();
        let at = self.by_prediction.partition_point(|(p, _)| *p < ln_p);
        let start = at.saturating_sub(self.window / 2).min(n - self.window);
        let dist = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(start)
            .or_insert_with(|| {
                let window = &self.by_prediction[start..start + self.window];
                let center = window.iter().map(|&(p, _)| p).sum::<f64>() / window.len() as f64;
                Arc::new(Distribution::new(
                    window.iter().map(|&(_, a)| a).collect(),
                    center,
                ))
            })
            .clone();
        let scale = ((ln_p - dist.center) * self.informativeness).exp();
        JobDistribution { dist, scale }
    }
}

/// Spearman's rank correlation of the pairs (sorted by their first value), ties at mean ranks.
fn spearman(sorted_by_first: &[(f64, f64)]) -> f64 {
    let n = sorted_by_first.len();
    if n < 3 {
        return 0.0;
    }
    let ranks = |values: &mut Vec<(f64, usize)>| -> Vec<f64> {
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut out = vec![0.0; values.len()];
        let mut i = 0;
        while i < values.len() {
            let mut j = i;
            while j + 1 < values.len() && values[j + 1].0 == values[i].0 {
                j += 1;
            }
            let rank = (i + j) as f64 / 2.0;
            for v in &values[i..=j] {
                out[v.1] = rank;
            }
            i = j + 1;
        }
        out
    };
    let mut x: Vec<(f64, usize)> = sorted_by_first
        .iter()
        .enumerate()
        .map(|(i, p)| (p.0, i))
        .collect();
    let mut y: Vec<(f64, usize)> = sorted_by_first
        .iter()
        .enumerate()
        .map(|(i, p)| (p.1, i))
        .collect();
    let (rx, ry) = (ranks(&mut x), ranks(&mut y));
    let mean = (n as f64 - 1.0) / 2.0;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let (dx, dy) = (rx[i] - mean, ry[i] - mean);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if sxx == 0.0 || syy == 0.0 {
        0.0
    } else {
        sxy / (sxx * syy).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_jobs_kept_index_is_the_index_and_the_memo_stays_capped() {
        let model = RunModel::new((1..=200).map(|i| (f64::from(i) * 60.0, f64::from(i) * 90.0)))
            .expect("enough outcomes");
        let d = model.distribution(3_000.0);
        for ran in [0.0, 1.0, 59.5, 600.0, 4_000.0, 1e9] {
            assert_eq!(d.gittins_waiting(ran), d.gittins(ran), "{ran}");
            assert_eq!(d.gittins_waiting(ran), d.gittins(ran), "asked again: {ran}");
        }
        for k in 0..(KEPT_INDICES + 10) {
            let ran = 1.0 + k as f64;
            assert_eq!(d.gittins_waiting(ran), d.gittins(ran));
        }
        let kept = d.dist.kept.lock().expect("not poisoned").len();
        assert!((1..KEPT_INDICES).contains(&kept), "{kept}");
    }

    #[test]
    fn a_drawn_run_is_one_of_the_longer_runs_of_its_neighbourhood() {
        // Runs of 100, 200, ..., 4000 s, predictions telling nothing: one neighbourhood of all.
        let model = RunModel::new((1..=40).map(|i| (1000.0, 100.0 * f64::from(i)))).unwrap();
        let d = model.distribution(1000.0);
        let draws: Vec<f64> = (0..10)
            .map(|k| d.sample(2050.0, f64::from(k) / 10.0))
            .collect();
        assert!(draws.iter().all(|&r| r > 2050.0), "{draws:?}");
        assert_eq!(draws[0], 2100.0);
        assert_eq!(d.sample(2050.0, 0.999), 4000.0);
        assert_eq!(d.sample(0.0, 0.0), 100.0);
        // Past every run seen: as long again.
        assert_eq!(d.sample(5000.0, 0.5), 10000.0);
    }

    #[test]
    fn the_gittins_index_is_shortest_remaining_first_for_a_known_run() {
        // Every run 100 s: a job that ran 60 s has 40 left, index 1/40.
        let d = Distribution::new(vec![100.0; 10], 0.0);
        assert!((d.gittins(60.0).unwrap() - 1.0 / 40.0).abs() < 1e-12);
        assert!((d.gittins(0.0).unwrap() - 1.0 / 100.0).abs() < 1e-12);
        assert_eq!(d.remaining(60.0), 40.0);
        assert_eq!(d.gittins(100.0), None);
        assert_eq!(d.remaining(150.0), 150.0);
    }

    #[test]
    fn a_job_that_ran_long_falls_behind_in_a_heavy_tail() {
        // Nine runs of 10 s and one of 1000 s: a new job is likely short (index near 1/10 s);
        // one that ran 20 s is the long one (1/980).
        let mut runs = vec![10.0; 9];
        runs.push(1000.0);
        let d = Distribution::new(runs, 0.0);
        let new = d.gittins(0.0).unwrap();
        let old = d.gittins(20.0).unwrap();
        assert!(new > 0.05, "{new}");
        assert!((old - 1.0 / 980.0).abs() < 1e-12, "{old}");
        assert!(new > 40.0 * old);
    }

    #[test]
    fn informative_predictions_give_narrow_neighbourhoods_and_useless_ones_every_job() {
        // Predictions equal to the runs: rho 1, the narrowest window, a short job's
        // distribution short.
        let exact: Vec<(f64, f64)> = (1..=200)
            .map(|i| (i as f64 * 60.0, i as f64 * 60.0))
            .collect();
        let m = RunModel::new(exact.into_iter()).unwrap();
        assert!(m.rho > 0.999);
        assert_eq!(m.window, MIN_WINDOW);
        let short = m.distribution(120.0).remaining(0.0);
        let long = m.distribution(11_000.0).remaining(0.0);
        assert!(short < 2000.0 && long > 10_000.0, "{short} {long}");
        // Within one neighbourhood too, the shorter prediction goes first.
        let (a, b) = (m.distribution(120.0), m.distribution(130.0));
        assert!(a.gittins(0.0) > b.gittins(0.0));
        // Predictions unrelated to the runs (a fixed shuffle): no information, the whole set
        // for everyone, so every new job ranks alike.
        let unrelated: Vec<(f64, f64)> = (1..=200)
            .map(|i| (i as f64 * 60.0, ((i * 7919) % 200 + 1) as f64 * 60.0))
            .collect();
        let m = RunModel::new(unrelated.into_iter()).unwrap();
        assert!(m.rho.abs() < 0.2, "{}", m.rho);
        assert_eq!(m.informativeness, 0.0);
        assert_eq!(m.window, 200);
        assert_eq!(
            m.distribution(120.0).gittins(0.0),
            m.distribution(11_000.0).gittins(0.0)
        );
        assert!(RunModel::new((1..10).map(|i| (f64::from(i), 1.0))).is_none());
    }
}
