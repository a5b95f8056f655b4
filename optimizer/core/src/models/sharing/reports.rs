//! What similar jobs measured of themselves: the largest peak memory and busy fraction by key.

use super::*;

/// Similar-job keys the observed-peak book keeps, and job ids per key it counts.
pub(super) const MAX_KEYS: usize = 10_000;
pub(super) const MAX_JOBS_PER_KEY: usize = 64;

/// Which jobs count as similar for observed peaks: the same user running the same application
/// (its `app=` hint, else its job name) at the same batch size.
pub fn similar_key(
    user: &str,
    name: Option<&str>,
    hints: &crate::slurm::job_hints::Hints,
) -> Option<String> {
    let what = hints
        .get(HINT_APP)
        .map(String::as_str)
        .or(name)
        .filter(|s| !s.is_empty())?;
    Some(match hints.get(HINT_BATCH) {
        Some(batch) => format!("{user}/{what}:{batch}"),
        None => format!("{user}/{what}"),
    })
}

/// The largest value reported per similar-job key, and by which jobs.
#[derive(Debug, Clone, Default)]
pub(super) struct KeyedMax {
    by_key: HashMap<String, (f64, BTreeSet<u32>)>,
}

impl KeyedMax {
    fn record(&mut self, key: &str, job_id: u32, value: f64) {
        if !(value.is_finite() && value > 0.0) {
            return;
        }
        if !self.by_key.contains_key(key) && self.by_key.len() >= MAX_KEYS {
            return;
        }
        let entry = self
            .by_key
            .entry(key.to_string())
            .or_insert((0.0, BTreeSet::new()));
        entry.0 = entry.0.max(value);
        if entry.1.len() < MAX_JOBS_PER_KEY {
            entry.1.insert(job_id);
        }
    }

    fn observed(&self, key: &str, job_id: u32) -> Option<(f64, u32)> {
        let (value, jobs) = self.by_key.get(key)?;
        let others = jobs.iter().filter(|&&j| j != job_id).count() as u32;
        (others > 0).then_some((*value, others))
    }
}

/// What jobs reported of themselves, by [`similar_key`]: the largest peak GPU memory and the
/// largest busy fraction, and how many jobs reported each.
#[derive(Debug, Clone, Default)]
pub struct ReportBook {
    peaks: KeyedMax,
    busy: KeyedMax,
}

impl ReportBook {
    /// Notes that job `job_id` reported a peak of `gib`.
    pub fn record_peak(&mut self, key: &str, job_id: u32, gib: f64) {
        self.peaks.record(key, job_id, gib);
    }

    /// Notes that job `job_id` reported keeping its GPU `busy` (a fraction) alone.
    pub fn record_busy(&mut self, key: &str, job_id: u32, busy: f64) {
        if busy <= 1.0 {
            self.busy.record(key, job_id, busy);
        }
    }

    /// The largest peak observed for similar jobs other than `job_id`, and how many reported.
    pub fn observed_peak(&self, key: &str, job_id: u32) -> Option<(f64, u32)> {
        self.peaks.observed(key, job_id)
    }

    /// The largest busy fraction similar jobs other than `job_id` reported, and how many did.
    pub fn observed_busy(&self, key: &str, job_id: u32) -> Option<(f64, u32)> {
        self.busy.observed(key, job_id)
    }

    /// Keys with a reported peak, and with a reported busy fraction.
    pub fn len(&self) -> (usize, usize) {
        (self.peaks.by_key.len(), self.busy.by_key.len())
    }

    pub fn is_empty(&self) -> bool {
        self.peaks.by_key.is_empty() && self.busy.by_key.is_empty()
    }
}
