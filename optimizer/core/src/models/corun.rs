//! How fast jobs run when they share one GPU, from what each job keeps the GPU busy alone.
//!
//! Measured on an H100 (`../shared/gpu/h100-colocation.csv`): two copies of a model that keeps
//! the GPU ~99% busy alone run at 0.45x under time-slicing, two that keep it 30-58% busy at
//! 0.94-1.0x. One interference constant for every job (speed `1 / (1 + a (k - 1))`) cannot fit
//! both. What does: the GPU's time is shared out among the jobs' demands, each job's demand
//! being its busy fraction alone `u`, so a job runs at `min(1, capacity / sum of u)`. `capacity`
//! says what sharing costs or gains: under time-slicing some time goes to switching contexts
//! (below 1), under MPS kernels of different jobs overlap (about 1 or above). It is fitted on the
//! measurements (`fit_capacity`) and checked row by row against them in the simulator's tests.
//!
//! A job whose busy fraction is unknown is taken as busy ([`UNKNOWN_BUSY`]): the cautious
//! default, which predicts the most slowdown.

/// How jobs share a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareMode {
    /// CUDA's default time-slicing between processes (what Slurm's shards give).
    TimeSlice,
    /// Under the CUDA MPS control daemon (Slurm's `gres/mps`).
    Mps,
}

/// The busy fraction taken for a job nothing is known of: fully busy, the most slowdown.
pub const UNKNOWN_BUSY: f64 = 1.0;

/// The co-run model: each mode's capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CorunModel {
    pub timeslice_capacity: f64,
    pub mps_capacity: f64,
}

impl Default for CorunModel {
    /// Fitted on the H100 measurements' shared rows (`fit_capacity`; the simulator's
    /// `the_corun_model_fits_the_h100_measurements_better_than_one_constant` refits and checks
    /// them).
    fn default() -> Self {
        CorunModel {
            timeslice_capacity: 0.91,
            mps_capacity: 1.13,
        }
    }
}

impl CorunModel {
    /// The speed, relative to alone, of each of the jobs sharing a GPU, given their busy
    /// fractions alone (each in (0, 1]; out-of-range values are clamped, unknown ones should be
    /// [`UNKNOWN_BUSY`]). A job alone runs at 1.
    pub fn speed(&self, mode: ShareMode, busy: &[f64]) -> f64 {
        self.speed_of(mode, busy.len(), busy.iter().map(|&u| demand_of(u)).sum())
    }

    /// [`CorunModel::speed`] from the number of jobs and their summed demand (each busy
    /// fraction through [`demand_of`]), for callers that keep no list.
    pub fn speed_of(&self, mode: ShareMode, jobs: usize, demand: f64) -> f64 {
        if jobs <= 1 {
            return 1.0;
        }
        let capacity = match mode {
            ShareMode::TimeSlice => self.timeslice_capacity,
            ShareMode::Mps => self.mps_capacity,
        };
        (capacity / demand).min(1.0)
    }
}

/// A job's demand on the GPU: its busy fraction alone, kept within 0.01-1.
pub fn demand_of(busy: f64) -> f64 {
    busy.clamp(0.01, 1.0)
}

/// The capacity that best fits `rows` (each: the busy fractions of the jobs sharing a GPU and
/// the speed measured for them), by least squares on the relative error, searched from 0.5 to
/// 1.5 in steps of 0.005.
pub fn fit_capacity(rows: &[(Vec<f64>, f64)]) -> f64 {
    let cost = |capacity: f64| -> f64 {
        let model = CorunModel {
            timeslice_capacity: capacity,
            mps_capacity: capacity,
        };
        rows.iter()
            .map(|(busy, measured)| {
                let e = model.speed(ShareMode::TimeSlice, busy) / measured - 1.0;
                e * e
            })
            .sum()
    };
    (0..=200)
        .map(|i| 0.5 + 0.005 * f64::from(i))
        .min_by(|a, b| cost(*a).total_cmp(&cost(*b)))
        .unwrap_or(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn light_jobs_share_for_free_and_busy_ones_split_the_gpu() {
        let m = CorunModel::default();
        assert_eq!(m.speed(ShareMode::TimeSlice, &[0.99]), 1.0, "alone");
        assert_eq!(m.speed(ShareMode::TimeSlice, &[0.3, 0.3]), 1.0);
        let busy = m.speed(ShareMode::TimeSlice, &[0.99, 0.99]);
        assert!((busy - 0.91 / 1.98).abs() < 1e-9, "{busy}");
        assert!(
            m.speed(ShareMode::Mps, &[0.99, 0.99]) > busy,
            "MPS overlaps"
        );
        // Unknown jobs are taken as busy: the most slowdown.
        assert!(
            m.speed(ShareMode::TimeSlice, &[UNKNOWN_BUSY, 0.3])
                <= m.speed(ShareMode::TimeSlice, &[0.5, 0.3])
        );
    }

    #[test]
    fn the_fit_recovers_a_capacity_from_rows_it_made() {
        let truth = CorunModel {
            timeslice_capacity: 0.8,
            mps_capacity: 0.8,
        };
        let rows: Vec<(Vec<f64>, f64)> = [vec![0.9, 0.9], vec![0.6, 0.7], vec![1.0; 4]]
            .into_iter()
            .map(|busy| {
                let s = truth.speed(ShareMode::TimeSlice, &busy);
                (busy, s)
            })
            .collect();
        assert!((fit_capacity(&rows) - 0.8).abs() < 0.006);
    }
}
