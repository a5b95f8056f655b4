//! How fast a training job runs on a placement: a compact model fitted to the Pollux measurements
//! (Qiao et al., "Pollux", OSDI'21; artifact petuum/adaptdl, branch osdi21-artifact, commit
//! c793c708, `simulator/traces/<app>/{placements,scalability}.csv`, measured on 16 nodes x 4 T4).
//!
//! Per application, the time of one training step with `k` GPUs of local batch `m` on `n` nodes:
//!
//! ```text
//! step = compute(m) + sync(n, k)
//! compute(m)   = compute_base + compute_per_sample * m
//! sync(1, 1)   = 0
//! sync(1, k)   = intra_base + intra_per_gpu * (k - 2)                 (one node, k >= 2)
//! sync(n>1, k) = (inter_base + inter_per_gpu * (k - 2)) * network      (over the network)
//! ```
//!
//! `network` is 1 for the measured conditions; [`Network`] raises it for congestion and for
//! placements that cross racks (the measurements come from one switch, so the rack factor is an
//! assumption, documented in docs/simulator.md). The coefficients below are least-squares fits;
//! `cinch sim fit-model --pollux DIR` re-derives them and prints the fit error, and a test checks
//! the built-in table against the data when `../shared/pollux` is present.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use super::SimError;

/// The six applications Pollux measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum App {
    Bert,
    Cifar10,
    DeepSpeech2,
    ImageNet,
    Ncf,
    Yolov3,
}

impl App {
    pub const ALL: [App; 6] = [
        App::Bert,
        App::Cifar10,
        App::DeepSpeech2,
        App::ImageNet,
        App::Ncf,
        App::Yolov3,
    ];

    pub fn name(self) -> &'static str {
        match self {
            App::Bert => "bert",
            App::Cifar10 => "cifar10",
            App::DeepSpeech2 => "deepspeech2",
            App::ImageNet => "imagenet",
            App::Ncf => "ncf",
            App::Yolov3 => "yolov3",
        }
    }

    /// The fitted model of this application.
    pub fn model(self) -> &'static AppModel {
        &BUILTIN_MODELS[self as usize]
    }
}

impl fmt::Display for App {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for App {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        App::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = App::ALL.iter().map(|a| a.name()).collect();
                format!("unknown application '{s}' (known: {})", names.join(", "))
            })
    }
}

/// One application's fitted step-time coefficients (seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AppModel {
    pub compute_base: f64,
    pub compute_per_sample: f64,
    pub intra_base: f64,
    pub intra_per_gpu: f64,
    pub inter_base: f64,
    pub inter_per_gpu: f64,
    /// The median per-GPU batch size measured: used for jobs that do not say theirs (Philly).
    pub typical_local_bsz: u32,
}

/// Fitted by `cinch sim fit-model --pollux ../shared/pollux` (see the module comment for the
/// source); the order follows [`App::ALL`].
pub const BUILTIN_MODELS: [AppModel; 6] = [
    // bert
    AppModel {
        compute_base: 1.75818e-1,
        compute_per_sample: 5.81286e-2,
        intra_base: 5.54995e-2,
        intra_per_gpu: 2.20088e-2,
        inter_base: 9.29827e-1,
        inter_per_gpu: 7.23347e-3,
        typical_local_bsz: 8,
    },
    // cifar10
    AppModel {
        compute_base: 1.55661e-2,
        compute_per_sample: 7.06478e-4,
        intra_base: 5.34035e-3,
        intra_per_gpu: 1.18344e-2,
        inter_base: 5.30056e-2,
        inter_per_gpu: 2.30367e-3,
        typical_local_bsz: 182,
    },
    // deepspeech2
    AppModel {
        compute_base: 2.12152e-1,
        compute_per_sample: 2.71347e-2,
        intra_base: 5.64475e-2,
        intra_per_gpu: 1.92993e-2,
        inter_base: 2.75166e-1,
        inter_per_gpu: 6.01125e-3,
        typical_local_bsz: 28,
    },
    // imagenet
    AppModel {
        compute_base: 6.56189e-2,
        compute_per_sample: 4.46192e-3,
        intra_base: 4.34564e-3,
        intra_per_gpu: 6.27471e-4,
        inter_base: 8.67271e-2,
        inter_per_gpu: 4.02634e-3,
        typical_local_bsz: 81,
    },
    // ncf
    AppModel {
        compute_base: 7.07083e-3,
        compute_per_sample: 5.26229e-7,
        intra_base: 3.51910e-3,
        intra_per_gpu: 6.71123e-4,
        inter_base: 1.44613e-2,
        inter_per_gpu: 5.90251e-4,
        typical_local_bsz: 363,
    },
    // yolov3
    AppModel {
        compute_base: 2.09553e-1,
        compute_per_sample: 2.35681e-2,
        intra_base: 1.97232e-2,
        intra_per_gpu: 3.19874e-2,
        inter_base: 7.03666e-1,
        inter_per_gpu: 8.17005e-3,
        typical_local_bsz: 8,
    },
];

/// The network the simulated cluster runs on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Network {
    /// Background traffic: inter-node synchronisation takes `1 + congestion` times as long as
    /// measured (0 = the measured, quiet network).
    pub congestion: f64,
    /// Extra factor on inter-node synchronisation when a job's nodes sit in more than one rack
    /// (an oversubscribed spine; an assumption, the measurements come from one switch).
    pub cross_rack: f64,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            congestion: 1.0,
            cross_rack: 2.0,
        }
    }
}

impl Network {
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=100.0).contains(&self.congestion) {
            return Err(format!(
                "congestion must be from 0 to 100, not {}",
                self.congestion
            ));
        }
        if !(1.0..=100.0).contains(&self.cross_rack) {
            return Err(format!(
                "the cross-rack factor must be from 1 to 100, not {}",
                self.cross_rack
            ));
        }
        Ok(())
    }
}

/// The shape of a placement, which is all the model needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub gpus: u32,
    pub nodes: u32,
    pub racks: u32,
}

impl AppModel {
    pub fn compute(&self, local_bsz: f64) -> f64 {
        self.compute_base + self.compute_per_sample * local_bsz
    }

    /// Gradient synchronisation per step as measured (quiet network, one switch).
    pub fn sync_measured(&self, nodes: u32, gpus: u32) -> f64 {
        let extra = f64::from(gpus.saturating_sub(2));
        if gpus <= 1 {
            0.0
        } else if nodes <= 1 {
            self.intra_base + self.intra_per_gpu * extra
        } else {
            self.inter_base + self.inter_per_gpu * extra
        }
    }

    /// Seconds per step on `shape` with local batch `local_bsz` on `network`.
    pub fn step_time(&self, shape: Shape, local_bsz: f64, network: &Network) -> f64 {
        let mut sync = self.sync_measured(shape.nodes, shape.gpus);
        if shape.nodes > 1 {
            sync *= 1.0 + network.congestion;
            if shape.racks > 1 {
                sync *= network.cross_rack;
            }
        }
        self.compute(local_bsz) + sync
    }
}

/// The most consolidated shape for `gpus` on nodes of `gpus_per_node`: fewest nodes, in as
/// few racks of `nodes_per_rack` as they fit.
pub fn ideal_shape(gpus: u32, gpus_per_node: u32, nodes_per_rack: u32) -> Shape {
    let nodes = gpus.div_ceil(gpus_per_node.max(1)).max(1);
    Shape {
        gpus,
        nodes,
        racks: nodes.div_ceil(nodes_per_rack.max(1)),
    }
}

/// Progress rate on `shape` relative to the ideal shape (1 = as fast as consolidated).
pub fn relative_speed(
    app: App,
    shape: Shape,
    ideal: Shape,
    local_bsz: f64,
    network: &Network,
) -> f64 {
    let model = app.model();
    let ideal = model.step_time(ideal, local_bsz, network);
    let actual = model.step_time(shape, local_bsz, network);
    (ideal / actual).min(1.0)
}

/// One measured row: (nodes, GPUs, local batch, step time, sync time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    pub nodes: u32,
    pub gpus: u32,
    pub local_bsz: u32,
    pub step_time: f64,
    pub sync_time: f64,
}

/// A model fitted from measurements, with its error on them.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub app: App,
    pub model: AppModel,
    pub rows: usize,
    /// Mean absolute percentage error of the predicted step time, in percent.
    pub mape: f64,
    /// Worst absolute percentage error, in percent.
    pub max_error: f64,
}

/// Reads `<pollux>/traces/<app>/placements.csv` and `scalability.csv`.
pub fn read_measurements(pollux: &Path, app: App) -> Result<Vec<Measurement>, SimError> {
    let dir = pollux.join("traces").join(app.name());
    let mut rows = Vec::new();
    let placements = dir.join("placements.csv");
    let table = crate::table::CsvTable::read(&placements)?;
    let (p, m, s, y) = (
        table.column("placement")?,
        table.column("local_bsz")?,
        table.column("step_time")?,
        table.column("sync_time")?,
    );
    for row in table.rows() {
        let placement = row.get(p);
        if placement.is_empty() || !placement.bytes().all(|b| b.is_ascii_digit()) {
            return Err(row.error(format!("placement '{placement}' is not a string of digits")));
        }
        rows.push(Measurement {
            nodes: placement.len() as u32,
            gpus: placement.bytes().map(|b| u32::from(b - b'0')).sum(),
            local_bsz: row.parse(m)?,
            step_time: row.parse(s)?,
            sync_time: row.parse(y)?,
        });
    }
    let scalability = dir.join("scalability.csv");
    let table = crate::table::CsvTable::read(&scalability)?;
    let (n, k, m, s, y) = (
        table.column("num_nodes")?,
        table.column("num_replicas")?,
        table.column("local_bsz")?,
        table.column("step_time")?,
        table.column("sync_time")?,
    );
    for row in table.rows() {
        rows.push(Measurement {
            nodes: row.parse(n)?,
            gpus: row.parse(k)?,
            local_bsz: row.parse(m)?,
            step_time: row.parse(s)?,
            sync_time: row.parse(y)?,
        });
    }
    Ok(rows)
}

/// Ordinary least squares `y = a + b x`; `(mean, 0)` when x does not vary.
fn least_squares(points: impl Iterator<Item = (f64, f64)> + Clone) -> (f64, f64) {
    let n = points.clone().count() as f64;
    if n == 0.0 {
        return (0.0, 0.0);
    }
    let (sx, sy) = points
        .clone()
        .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let (sxx, sxy) = points.fold((0.0, 0.0), |(sxx, sxy), (x, y)| {
        (sxx + (x - mx) * (x - mx), sxy + (x - mx) * (y - my))
    });
    let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - b * mx, b)
}

/// Fits the step-time model of one application to its measurements.
pub fn fit(app: App, rows: &[Measurement]) -> Fit {
    let (compute_base, compute_per_sample) = least_squares(
        rows.iter()
            .map(|r| (f64::from(r.local_bsz), r.step_time - r.sync_time)),
    );
    let (intra_base, intra_per_gpu) = least_squares(
        rows.iter()
            .filter(|r| r.nodes == 1 && r.gpus >= 2)
            .map(|r| (f64::from(r.gpus - 2), r.sync_time)),
    );
    let (inter_base, inter_per_gpu) = least_squares(
        rows.iter()
            .filter(|r| r.nodes > 1)
            .map(|r| (f64::from(r.gpus.saturating_sub(2)), r.sync_time)),
    );
    let mut sizes: Vec<u32> = rows.iter().map(|r| r.local_bsz).collect();
    sizes.sort_unstable();
    let model = AppModel {
        compute_base,
        compute_per_sample,
        intra_base,
        intra_per_gpu,
        inter_base,
        inter_per_gpu,
        typical_local_bsz: sizes.get(sizes.len() / 2).copied().unwrap_or(1),
    };
    let (mape, max_error) = fit_error(&model, rows);
    Fit {
        app,
        model,
        rows: rows.len(),
        mape,
        max_error,
    }
}

/// (mean, max) absolute percentage error of `model`'s step time on `rows`.
pub fn fit_error(model: &AppModel, rows: &[Measurement]) -> (f64, f64) {
    let quiet = Network {
        congestion: 0.0,
        cross_rack: 1.0,
    };
    let errors: Vec<f64> = rows
        .iter()
        .map(|r| {
            let shape = Shape {
                gpus: r.gpus,
                nodes: r.nodes,
                racks: 1,
            };
            let predicted = model.step_time(shape, f64::from(r.local_bsz), &quiet);
            100.0 * (predicted - r.step_time).abs() / r.step_time
        })
        .collect();
    let mean = errors.iter().sum::<f64>() / errors.len().max(1) as f64;
    (mean, errors.iter().copied().fold(0.0, f64::max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreading_slows_communication_heavy_models_far_more_than_compute_bound_ones() {
        let net = Network::default();
        let spread = Shape {
            gpus: 8,
            nodes: 2,
            racks: 1,
        };
        let ideal = ideal_shape(8, 8, 4);
        let bert = relative_speed(App::Bert, spread, ideal, 8.0, &net);
        let imagenet = relative_speed(App::ImageNet, spread, ideal, 81.0, &net);
        assert!(bert < 0.5, "bert on 2 nodes runs at {bert}");
        assert!(imagenet > bert + 0.2, "imagenet {imagenet} vs bert {bert}");
        // Across racks is slower again, and a consolidated job runs at full speed.
        let cross = Shape { racks: 2, ..spread };
        assert!(relative_speed(App::Bert, cross, ideal, 8.0, &net) < bert);
        assert_eq!(relative_speed(App::Bert, ideal, ideal, 8.0, &net), 1.0);
        // A quiet network hurts less than a congested one.
        let quiet = Network {
            congestion: 0.0,
            cross_rack: 1.0,
        };
        assert!(relative_speed(App::Bert, spread, ideal, 8.0, &quiet) > bert);
    }

    #[test]
    fn least_squares_recovers_a_line() {
        let points: Vec<(f64, f64)> = (0..10).map(|x| (x as f64, 3.0 + 0.5 * x as f64)).collect();
        let (a, b) = least_squares(points.iter().copied());
        assert!(
            (a - 3.0).abs() < 1e-12 && (b - 0.5).abs() < 1e-12,
            "{a} {b}"
        );
    }

    #[test]
    #[cfg_attr(
        not(shared_pollux),
        ignore = "needs ../shared/pollux (public data sets, not in the repository)"
    )]
    fn the_builtin_models_match_a_fresh_fit_of_the_pollux_data() {
        let pollux =
            crate::shared_dir("pollux").expect("../shared/pollux was here when this was built");
        for app in App::ALL {
            let rows = read_measurements(&pollux, app).unwrap();
            let fitted = fit(app, &rows);
            let builtin = app.model();
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-3 * a.abs().max(b.abs()) + 1e-6;
            let m = &fitted.model;
            for (name, a, b) in [
                ("compute_base", m.compute_base, builtin.compute_base),
                (
                    "compute_per_sample",
                    m.compute_per_sample,
                    builtin.compute_per_sample,
                ),
                ("intra_base", m.intra_base, builtin.intra_base),
                ("intra_per_gpu", m.intra_per_gpu, builtin.intra_per_gpu),
                ("inter_base", m.inter_base, builtin.inter_base),
                ("inter_per_gpu", m.inter_per_gpu, builtin.inter_per_gpu),
            ] {
                assert!(close(a, b), "{app} {name}: fitted {a}, built in {b}");
            }
            assert_eq!(m.typical_local_bsz, builtin.typical_local_bsz, "{app}");
            // The fit is useful: step times within 15% on average (docs/simulator.md).
            let (mape, _) = fit_error(builtin, &rows);
            assert!(mape < 15.0, "{app}: mean error {mape}%");
        }
    }
}
