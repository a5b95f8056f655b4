//! The elastic jobs' scaling, checked: cinch's built-in scaling model
//! ([`cinch_core::models::elastic::APP_SERIAL`]) is a fit of what the simulator's elastic Pollux jobs
//! really do ([`crate::trace::PolluxApps::scaling`]); [`fit_serial`] re-derives it.

use crate::perf::App;
use crate::trace::Trace;

/// The serial fraction `s` of `speed(n) = n / (1 + s (n - 1))` that best fits (least squares
/// on log speed, grid search to 0.001) the relative speeds on 1..=16 GPUs of every job of `app`
/// in `traces`, each normalised to its speed on one GPU.
pub fn fit_serial(traces: &[Trace], app: App) -> Option<f64> {
    let curves: Vec<&Vec<f64>> = traces
        .iter()
        .flat_map(|t| &t.jobs)
        .filter(|j| j.app == Some(app))
        .filter_map(|j| j.scaling.as_ref())
        .collect();
    if curves.is_empty() {
        return None;
    }
    let error = |s: f64| -> f64 {
        let mut e = 0.0;
        for c in &curves {
            for n in 1..c.len().min(17) {
                let truth = c[n] / c[1];
                let model = cinch_core::models::elastic::speed(s, n as u32);
                e += (truth.ln() - model.ln()).powi(2);
            }
        }
        e
    };
    (0..=1000)
        .map(|k| f64::from(k) / 1000.0)
        .min_by(|a, b| error(*a).total_cmp(&error(*b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{read_pollux_workloads, PolluxApps};

    #[test]
    #[cfg_attr(
        not(shared_pollux),
        ignore = "needs ../shared/pollux (public data sets, not in the repository)"
    )]
    fn the_builtin_scaling_model_is_a_fit_of_the_pollux_data() {
        let pollux =
            crate::shared_dir("pollux").expect("../shared/pollux was here when this was built");
        let apps = PolluxApps::read(&pollux).unwrap();
        let traces = read_pollux_workloads(&pollux, &apps, 4).unwrap();
        let mut wrong = Vec::new();
        for app in App::ALL {
            let fitted = fit_serial(&traces, app).unwrap();
            let builtin = cinch_core::models::elastic::serial_of(Some(app.name()));
            eprintln!("{app}: fitted {fitted:.3}, built in {builtin:.3}");
            if (fitted - builtin).abs() > 0.002 {
                wrong.push(format!("{app}: fitted {fitted:.3}, built in {builtin:.3}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:?}");
    }
}
