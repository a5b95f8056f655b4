//! GPU sharing as measured (`../shared/gpu/h100-colocation.csv`, how it was made in its
//! README): each model's busy fraction alone, and the speed each job of a shared GPU kept, under
//! time-slicing and under MPS. Read here to fit and check cinch's co-run model
//! ([`cinch_core::models::corun`]) against the measurements, row by row.

use std::collections::BTreeMap;
use std::path::Path;

use cinch_core::models::corun::{CorunModel, ShareMode};

use crate::perf::App;
use crate::table::CsvTable;
use crate::SimError;

/// One measured job of a shared GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct CorunRow {
    pub mode: ShareMode,
    /// The models sharing the GPU, each job once (`resnet50`, `resnet50` for two copies).
    pub jobs: Vec<String>,
    /// The job this row measured.
    pub model: String,
    /// Its samples per second over the same model's alone.
    pub speed: f64,
}

impl CorunRow {
    /// Whether every job on the GPU runs the same model.
    pub fn same_model(&self) -> bool {
        self.jobs.iter().all(|j| *j == self.model)
    }
}

/// The measurements: each model's GPU busy fraction alone (NVML's `utilization.gpu` over the
/// warm window) and the shared rows (time-sliced and under MPS without caps).
#[derive(Debug, Clone, Default)]
pub struct Colocation {
    pub busy: BTreeMap<String, f64>,
    pub rows: Vec<CorunRow>,
}

/// Reads `h100-colocation.csv` (columns `phase,jobs_on_gpu,mix,model,...,speed_vs_alone,...,
/// nvml_util_alone_pct`). Rows of other phases (batch sweeps, capped MPS) are not co-run rows.
pub fn read_colocation(path: &Path) -> Result<Colocation, SimError> {
    let table = CsvTable::read(path)?;
    let (phase, k, mix, model, speed, util) = (
        table.column("phase")?,
        table.column("jobs_on_gpu")?,
        table.column("mix")?,
        table.column("model")?,
        table.column("speed_vs_alone")?,
        table.column("nvml_util_alone_pct")?,
    );
    let mut out = Colocation::default();
    for row in table.rows() {
        let mode = match row.get(phase) {
            "alone-warm" => {
                let pct: f64 = row.parse(util)?;
                if !(0.0..=100.0).contains(&pct) {
                    return Err(row.error(format!("busy {pct}% is not a percentage")));
                }
                out.busy.insert(row.get(model).to_string(), pct / 100.0);
                continue;
            }
            "timeslice" => ShareMode::TimeSlice,
            "mps" => ShareMode::Mps,
            _ => continue,
        };
        let jobs_on_gpu: usize = row.parse(k)?;
        let models: Vec<&str> = row.get(mix).split('+').collect();
        // `resnet50` with 4 jobs is four copies; `resnet50+bert-base` names each job.
        let jobs: Vec<String> = if models.len() == 1 {
            vec![models[0].to_string(); jobs_on_gpu]
        } else if models.len() == jobs_on_gpu {
            models.iter().map(|m| m.to_string()).collect()
        } else {
            return Err(row.error(format!(
                "mix '{}' does not name {jobs_on_gpu} jobs",
                row.get(mix)
            )));
        };
        out.rows.push(CorunRow {
            mode,
            jobs,
            model: row.get(model).to_string(),
            speed: row.parse(speed)?,
        });
    }
    if let Some(r) = out
        .rows
        .iter()
        .find(|r| r.jobs.iter().any(|j| !out.busy.contains_key(j)))
    {
        return Err(SimError::Invalid(format!(
            "{}: no alone-warm busy fraction for a model of '{}'",
            path.display(),
            r.jobs.join("+")
        )));
    }
    Ok(out)
}

/// The H100 measurement standing for each Pollux application, and its busy fraction alone
/// there (NVML, `alone-warm` rows): ResNet-18 on CIFAR for cifar10, ResNet-50 for imagenet. YOLOv3
/// was not measured: a job running it is taken as busy ([`cinch_core::models::corun::UNKNOWN_BUSY`]).
/// A test checks the numbers against the file.
pub const APP_BUSY: [(App, Option<&str>, f64); 6] = [
    (App::Bert, Some("bert-base"), 0.577),
    (App::Cifar10, Some("resnet18-cifar"), 0.294),
    (App::DeepSpeech2, Some("deepspeech2"), 0.582),
    (App::ImageNet, Some("resnet50"), 0.993),
    (App::Ncf, Some("ncf"), 0.334),
    (App::Yolov3, None, cinch_core::models::corun::UNKNOWN_BUSY),
];

/// A simulated job's busy fraction alone, by its application ([`APP_BUSY`]).
pub fn app_busy(app: App) -> f64 {
    APP_BUSY
        .iter()
        .find(|(a, _, _)| *a == app)
        .map_or(cinch_core::models::corun::UNKNOWN_BUSY, |&(_, _, busy)| {
            busy
        })
}

impl Colocation {
    /// The rows of `mode` as (busy fractions of the jobs sharing, speed measured).
    pub fn fit_rows(&self, mode: ShareMode, same_model: Option<bool>) -> Vec<(Vec<f64>, f64)> {
        self.rows
            .iter()
            .filter(|r| r.mode == mode && same_model.is_none_or(|s| r.same_model() == s))
            .map(|r| (r.jobs.iter().map(|j| self.busy[j]).collect(), r.speed))
            .collect()
    }

    /// Each row's relative error under `model`, and under one interference constant `a` for
    /// every job (speed `1 / (1 + a (k - 1))`, cinch's earlier model), for the rows of `mode`.
    pub fn errors(&self, model: &CorunModel, a: f64, mode: ShareMode) -> Vec<(f64, f64)> {
        self.rows
            .iter()
            .filter(|r| r.mode == mode)
            .map(|r| {
                let busy: Vec<f64> = r.jobs.iter().map(|j| self.busy[j]).collect();
                let ours = model.speed(mode, &busy);
                let constant = 1.0 / (1.0 + a * (r.jobs.len() as f64 - 1.0));
                (
                    (ours / r.speed - 1.0).abs(),
                    (constant / r.speed - 1.0).abs(),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinch_core::models::corun::fit_capacity;

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    fn worst(v: &[f64]) -> f64 {
        v.iter().copied().fold(0.0, f64::max)
    }

    /// The co-run model against every shared row of the H100 measurements, as the issue asks:
    /// its one capacity per mode fitted on the table, each row's error checked against one
    /// interference constant (a = 0.5, cinch's earlier model), which it must beat on the median
    /// and the worst row. Then, to see how it does on jobs it was not fitted on: refitted on the
    /// same-model rows only and checked on the mixed pairs (printed, not asserted: the model
    /// does not beat the constant's median there under time-slicing, nor its worst under MPS).
    /// Both are stated in docs/policies/sharing.md.
    #[test]
    #[cfg_attr(
        not(shared_gpu),
        ignore = "needs ../shared/gpu/h100-colocation.csv (measurements, not in the repository)"
    )]
    fn the_corun_model_fits_the_h100_measurements_better_than_one_constant() {
        let dir = crate::shared_dir("gpu").expect("../shared/gpu was here when this was built");
        let data = read_colocation(&dir.join("h100-colocation.csv")).unwrap();
        assert_eq!(data.busy.len(), 7, "{:?}", data.busy);
        let defaults = CorunModel::default();
        // "N rows: median error ..% (constant ..%), worst ..% (constant ..%)", and whether the
        // model beats the constant on both.
        let stats = |errors: &[(f64, f64)]| -> (String, bool) {
            let ours: Vec<f64> = errors.iter().map(|e| e.0).collect();
            let constant: Vec<f64> = errors.iter().map(|e| e.1).collect();
            let (m, w) = (median(ours.clone()), worst(&ours));
            let (cm, cw) = (median(constant.clone()), worst(&constant));
            let text = format!(
                "{} rows: median error {:.1}% (constant {:.1}%), worst {:.1}% (constant {:.1}%)",
                errors.len(),
                100.0 * m,
                100.0 * cm,
                100.0 * w,
                100.0 * cw
            );
            (text, m < cm && w < cw)
        };
        for (mode, default_capacity) in [
            (ShareMode::TimeSlice, defaults.timeslice_capacity),
            (ShareMode::Mps, defaults.mps_capacity),
        ] {
            let capacity = fit_capacity(&data.fit_rows(mode, None));
            assert!(
                (capacity - default_capacity).abs() < 0.006,
                "{mode:?}: fitted {capacity}, default {default_capacity}"
            );
            let errors = data.errors(&defaults, 0.5, mode);
            let (text, beats) = stats(&errors);
            let line = format!("{mode:?}, capacity {capacity:.3}, {text}");
            println!("{line}");
            assert!(errors.len() >= 30, "{line}");
            assert!(beats, "{line}");

            // Held out: fitted on the same-model rows, checked on the mixed pairs.
            let same = fit_capacity(&data.fit_rows(mode, Some(true)));
            let model = CorunModel {
                timeslice_capacity: same,
                mps_capacity: same,
            };
            let mixed: Vec<(f64, f64)> = data
                .rows
                .iter()
                .filter(|r| r.mode == mode)
                .zip(data.errors(&model, 0.5, mode))
                .filter(|(r, _)| !r.same_model())
                .map(|(_, e)| e)
                .collect();
            println!(
                "{mode:?}, fitted on same-model rows (capacity {same:.3}), mixed pairs: {}",
                stats(&mixed).0
            );
            assert_eq!(mixed.len(), 10);
        }
    }

    #[test]
    #[cfg_attr(
        not(shared_gpu),
        ignore = "needs ../shared/gpu/h100-colocation.csv (measurements, not in the repository)"
    )]
    fn each_applications_busy_fraction_is_its_measured_models() {
        let dir = crate::shared_dir("gpu").expect("../shared/gpu was here when this was built");
        let data = read_colocation(&dir.join("h100-colocation.csv")).unwrap();
        assert_eq!(APP_BUSY.len(), App::ALL.len());
        for (app, model, busy) in APP_BUSY {
            match model {
                Some(m) => assert!((data.busy[m] - busy).abs() < 1e-9, "{app}: {m}"),
                None => assert_eq!(busy, cinch_core::models::corun::UNKNOWN_BUSY, "{app}"),
            }
            assert_eq!(app_busy(app), busy);
        }
    }

    #[test]
    fn a_mix_that_does_not_name_its_jobs_is_refused_with_its_line() {
        let path = std::env::temp_dir().join(format!("cinch-coloc-{}.csv", std::process::id()));
        std::fs::write(
            &path,
            "phase,jobs_on_gpu,mix,model,batch,samples_per_s,speed_vs_alone,peak_alloc_gib,\
             peak_reserved_gib,nvml_util_alone_pct\n\
             alone-warm,1,a,a,8,100,,1,1,50\n\
             alone-warm,1,b,b,8,100,,1,1,90\n\
             timeslice,2,a,a,8,80,0.8,1,1,\n\
             mps,2,a+b,b,8,60,0.6,1,1,\n\
             timeslice,4,a+b,a,8,60,0.6,1,1,\n",
        )
        .unwrap();
        let err = read_colocation(&path).unwrap_err().to_string();
        assert!(err.contains(":6: mix 'a+b' does not name 4 jobs"), "{err}");
        std::fs::write(
            &path,
            std::fs::read_to_string(&path)
                .unwrap()
                .replace("timeslice,4,a+b,a,8,60,0.6,1,1,\n", ""),
        )
        .unwrap();
        let data = read_colocation(&path).unwrap();
        assert_eq!(data.busy["b"], 0.9);
        assert_eq!(data.rows.len(), 2);
        assert_eq!(data.rows[0].jobs, ["a", "a"]);
        assert!(data.rows[0].same_model() && !data.rows[1].same_model());
        assert_eq!(data.fit_rows(ShareMode::Mps, None), [(vec![0.5, 0.9], 0.6)]);
        std::fs::remove_file(&path).unwrap();
    }
}
