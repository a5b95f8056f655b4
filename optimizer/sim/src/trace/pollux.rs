//! The Pollux evaluation workloads (`../shared/pollux/workloads/workload-<k>.csv`:
//! `name, time, application, num_replicas, batch_size`). As in the Pollux simulator, a job is
//! done when it has trained its application's fixed number of epochs at its batch size; how
//! long that takes on a consolidated placement comes from the application's convergence curves
//! (`traces/<app>/validation-<batch>.csv`: progress per epoch and the gradient statistics that
//! give the statistical efficiency of a batch size) and the fitted step-time model
//! ([`crate::perf`]). Each job also pays the Pollux simulator's 30 s start-up.

use std::collections::BTreeMap;
use std::path::Path;

use super::{CsvTable, Trace, TraceJob};
use crate::perf::{ideal_shape, App, Network};
use crate::SimError;

/// Epochs each application trains (Pollux artifact, `simulator/applications.py`; also in
/// `../shared/pollux/README.md`).
fn epochs(app: App) -> usize {
    match app {
        App::Bert => 2,
        App::Cifar10 => 100,
        App::Ncf => 10,
        App::ImageNet => 90,
        App::DeepSpeech2 => 80,
        App::Yolov3 => 50,
    }
}

/// The largest GPU count an elastic Pollux job declares, unless it asked for more: every
/// elastic job declares `elastic=1-max(asked, 16)` (16 = a quarter of the 64-GPU cluster).
pub const ELASTIC_MAX_GPUS: u32 = 16;

/// Seconds the Pollux simulator charges each time a job is (re)started.
pub const STARTUP_S: f64 = 30.0;

/// One epoch of a convergence curve.
#[derive(Debug, Clone, Copy)]
struct Epoch {
    progress: f64,
    grad_sqr: f64,
    grad_var: f64,
}

/// What the workload reader needs of each application's measurements.
#[derive(Debug, Clone)]
pub struct AppData {
    /// Convergence curve per validated global batch size.
    curves: BTreeMap<u32, Vec<Epoch>>,
    max_local_bsz: u32,
}

/// The measurement data of all applications, read from a Pollux data directory.
#[derive(Debug, Clone)]
pub struct PolluxApps {
    apps: BTreeMap<App, AppData>,
}

impl PolluxApps {
    pub fn read(pollux: &Path) -> Result<PolluxApps, SimError> {
        let mut apps = BTreeMap::new();
        for app in App::ALL {
            let dir = pollux.join("traces").join(app.name());
            let mut curves = BTreeMap::new();
            let entries = std::fs::read_dir(&dir).map_err(|e| SimError::io(&dir, e))?;
            for entry in entries {
                let path = entry.map_err(|e| SimError::io(&dir, e))?.path();
                let Some(batch) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_prefix("validation-"))
                    .and_then(|n| n.strip_suffix(".csv"))
                else {
                    continue;
                };
                let batch: u32 = batch.parse().map_err(|_| {
                    SimError::Invalid(format!("{}: batch size in the name", path.display()))
                })?;
                let table = CsvTable::read(&path)?;
                let (p, s, v) = (
                    table.column("progress")?,
                    table.column("grad_sqr")?,
                    table.column("grad_var")?,
                );
                let mut curve = Vec::new();
                for row in table.rows() {
                    curve.push(Epoch {
                        progress: row.parse(p)?,
                        grad_sqr: row.parse(s)?,
                        grad_var: row.parse(v)?,
                    });
                }
                curves.insert(batch, curve);
            }
            let measurements = crate::perf::read_measurements(pollux, app)?;
            let sizes = measurements.iter().map(|m| m.local_bsz);
            let data = AppData {
                max_local_bsz: if app == App::Yolov3 {
                    8 // The Pollux artifact caps yolov3's per-GPU batch at 8.
                } else {
                    sizes.max().unwrap_or(1)
                },
                curves,
            };
            if data.curves.is_empty() || data.curves.values().any(|c| c.len() < epochs(app)) {
                return Err(SimError::Invalid(format!(
                    "{}: needs validation-<batch>.csv curves with at least {} epochs",
                    dir.display(),
                    epochs(app)
                )));
            }
            apps.insert(app, data);
        }
        Ok(PolluxApps { apps })
    }

    /// Seconds `app` needs to train its epochs at global `batch` on `gpus` GPUs placed as
    /// consolidated as nodes of `gpus_per_node` allow, on a quiet network, plus the start-up;
    /// and the per-GPU batch it runs with.
    pub fn run_time(
        &self,
        app: App,
        batch: u32,
        gpus: u32,
        gpus_per_node: u32,
    ) -> Result<(f64, f64), String> {
        let data = &self.apps[&app];
        let init_batch = *data.curves.keys().next().expect("curves checked non-empty");
        let max_batch = *data.curves.keys().last().expect("curves checked non-empty");
        if !(init_batch..=max_batch).contains(&batch) {
            return Err(format!(
                "{app} batch_size {batch} is outside the measured {init_batch}..={max_batch}"
            ));
        }
        // How the Pollux simulator splits a fixed global batch over GPUs (gradient
        // accumulation when one GPU cannot hold its share).
        let local = batch.div_ceil(gpus);
        let mut accum = local.div_ceil(data.max_local_bsz) - 1;
        if gpus == 1 && batch > init_batch {
            accum = accum.max(1);
        }
        let atomic = local
            .div_ceil(accum + 1)
            .min(max_batch / (gpus * (accum + 1)))
            .max(1);
        let model = app.model();
        let quiet = Network {
            congestion: 0.0,
            cross_rack: 1.0,
        };
        // The Pollux measurements come from one switch: one rack of any size.
        let shape = ideal_shape(gpus, gpus_per_node, u32::MAX);
        let step = model.step_time(shape, f64::from(atomic), &quiet);
        let sync = step - model.compute(f64::from(atomic));
        let total_step = step + f64::from(accum) * (step - sync);
        let scale = f64::from(batch) / f64::from(init_batch);
        let mut seconds = STARTUP_S;
        let mut progress = 0.0;
        for epoch in 0..epochs(app) {
            // Progress after an epoch: the least over the curves (as the Pollux simulator).
            let next = data
                .curves
                .values()
                .map(|c| c[epoch].progress)
                .fold(f64::INFINITY, f64::min);
            let (sqr, var) = self.grad_stats(app, batch, epoch);
            let gain = (var + sqr) / (var / scale + sqr);
            seconds += (next - progress).max(0.0) * total_step / gain;
            progress = next;
        }
        Ok((seconds, f64::from(atomic * (accum + 1))))
    }

    /// The job's relative speed on 1..=`max_gpus` GPUs (index = GPUs; 1.0 at `gpus`) when its
    /// global batch follows the GPU count linearly from (`batch` on `gpus`), kept within the
    /// validated batch sizes: ONES's rule, with Pollux's statistical efficiency of each batch.
    pub fn scaling(
        &self,
        app: App,
        batch: u32,
        gpus: u32,
        max_gpus: u32,
        gpus_per_node: u32,
    ) -> Result<Vec<f64>, String> {
        let data = &self.apps[&app];
        let init_batch = *data.curves.keys().next().expect("curves checked non-empty");
        let max_batch = *data.curves.keys().last().expect("curves checked non-empty");
        let at = |n: u32| -> Result<f64, String> {
            let b = (u64::from(batch) * u64::from(n) / u64::from(gpus.max(1)))
                .clamp(u64::from(init_batch), u64::from(max_batch)) as u32;
            Ok(self.run_time(app, b, n, gpus_per_node)?.0 - STARTUP_S)
        };
        let reference = at(gpus)?;
        let mut speeds = vec![0.0];
        for n in 1..=max_gpus.max(gpus) {
            speeds.push(reference / at(n)?);
        }
        Ok(speeds)
    }

    /// Gradient statistics at `batch`, interpolated linearly between the validated sizes.
    fn grad_stats(&self, app: App, batch: u32, epoch: usize) -> (f64, f64) {
        let curves = &self.apps[&app].curves;
        let lower = curves.range(..=batch).next_back().expect("batch >= init");
        let upper = curves.range(batch..).next().expect("batch <= max");
        if lower.0 == upper.0 {
            return (lower.1[epoch].grad_sqr, lower.1[epoch].grad_var);
        }
        let w = f64::from(batch - lower.0) / f64::from(upper.0 - lower.0);
        let mix = |a: f64, b: f64| a * (1.0 - w) + b * w;
        (
            mix(lower.1[epoch].grad_sqr, upper.1[epoch].grad_sqr),
            mix(lower.1[epoch].grad_var, upper.1[epoch].grad_var),
        )
    }
}

/// How many evaluation workloads the Pollux artifact has (`workloads/workload-1.csv` ..).
pub const WORKLOADS: u32 = 8;

/// The path of evaluation workload `k` (1-based) under a Pollux data directory.
pub fn workload_path(pollux: &Path, k: u32) -> std::path::PathBuf {
    pollux.join("workloads").join(format!("workload-{k}.csv"))
}

/// All [`WORKLOADS`] evaluation workloads, in order.
pub fn read_pollux_workloads(
    pollux: &Path,
    apps: &PolluxApps,
    gpus_per_node: u32,
) -> Result<Vec<Trace>, SimError> {
    (1..=WORKLOADS)
        .map(|k| read_pollux_workload(&workload_path(pollux, k), apps, gpus_per_node))
        .collect()
}

/// Reads one Pollux workload; run times need the measurement data and the cluster's node size.
pub fn read_pollux_workload(
    path: &Path,
    apps: &PolluxApps,
    gpus_per_node: u32,
) -> Result<Trace, SimError> {
    let table = CsvTable::read(path)?;
    let (name, time, app, replicas, batch) = (
        table.column("name")?,
        table.column("time")?,
        table.column("application")?,
        table.column("num_replicas")?,
        table.column("batch_size")?,
    );
    let mut trace = Trace::default();
    for row in table.rows() {
        let submit: i64 = row.parse(time)?;
        let app: App = row.parse(app)?;
        let gpus: u32 = row.parse(replicas)?;
        let batch: u32 = row.parse(batch)?;
        if submit < 0 {
            return Err(row.error(format!("time {submit} is negative")));
        }
        if gpus == 0 {
            return Err(row.error("num_replicas is 0"));
        }
        let (run_time, local_bsz) = apps
            .run_time(app, batch, gpus, gpus_per_node)
            .map_err(|e| row.error(e))?;
        let scaling = apps
            .scaling(app, batch, gpus, gpus.max(ELASTIC_MAX_GPUS), gpus_per_node)
            .map_err(|e| row.error(e))?;
        trace.jobs.push(TraceJob {
            app: Some(app),
            local_bsz: Some(local_bsz),
            scaling: Some(scaling),
            ..TraceJob::new(row.get(name), submit, gpus, run_time)
        });
    }
    // Pollux workloads keep their own time origin (the published JCTs count from it).
    trace.jobs.sort_by_key(|j| j.submit);
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(
        not(shared_pollux),
        ignore = "needs ../shared/pollux (public data sets, not in the repository)"
    )]
    fn pollux_workloads_read_with_plausible_run_times() {
        let pollux =
            crate::shared_dir("pollux").expect("../shared/pollux was here when this was built");
        let apps = PolluxApps::read(&pollux).unwrap();
        let trace = read_pollux_workload(&workload_path(&pollux, 1), &apps, 4).unwrap();
        assert_eq!(trace.jobs.len(), 160);
        for job in &trace.jobs {
            // From a couple of minutes (small ncf runs) to well under two days.
            assert!(
                (60.0..172_800.0).contains(&job.run_time),
                "{} {:?} {}",
                job.name,
                job.app,
                job.run_time
            );
        }
        // More GPUs on the same batch finish sooner when the job scales (cifar10 on one node).
        let (one, _) = apps.run_time(App::Cifar10, 512, 1, 4).unwrap();
        let (four, _) = apps.run_time(App::Cifar10, 512, 4, 4).unwrap();
        assert!(four < one, "1 GPU {one} s, 4 GPUs {four} s");
        let err = apps.run_time(App::Bert, 5, 1, 4).unwrap_err();
        assert!(err.contains("outside the measured"), "{err}");
    }

    #[test]
    #[cfg_attr(
        not(shared_pollux),
        ignore = "needs ../shared/pollux (public data sets, not in the repository)"
    )]
    fn a_workload_row_with_an_unknown_application_names_its_line() {
        let pollux =
            crate::shared_dir("pollux").expect("../shared/pollux was here when this was built");
        let apps = PolluxApps::read(&pollux).unwrap();
        let path = crate::trace::test_files::write(
            "w.csv",
            "name,time,application,num_replicas,batch_size\nx-0,5,cifar10,2,512\nx-1,9,gpt5,2,512\n",
        );
        let err = read_pollux_workload(&path, &apps, 4)
            .unwrap_err()
            .to_string();
        assert!(err.contains("w.csv:3:") && err.contains("gpt5"), "{err}");
    }
}
