//! The trace-driven simulator: cinch's real policies and the baselines they must beat, on real
//! traces, with a data-driven model of how placement slows training (docs/simulator.md).
//!
//! - [`trace`]: one reader per trace format; [`workload`]: jobs from a trace or the built-in
//!   Philly-shaped generator;
//! - [`perf`]: step time per placement, fitted to the Pollux measurements;
//! - [`engine`]: the discrete-event core with a simulated Slurm (priority, main scheduler, backfill);
//! - [`sched`]: the schedulers, one file each (Slurm, Slurm --switches, strict consolidation,
//!   Tiresias, QSSF, and cinch's policies through Snapshot/Decisions);
//! - [`metrics`], [`report`]: the comparison table, CSV, SVG plots and the HTML report;
//! - [`predict`]: how well run times are predicted (train on a trace's first part, predict the
//!   rest).

pub mod cluster;
pub mod colocation;
pub mod elastic;
pub mod engine;
pub mod fairshare;
pub mod kind;
pub mod limits;
pub mod metrics;
pub mod packing;
pub mod perf;
pub mod portfolio;
pub mod predict;
pub mod replay;
pub mod report;
pub mod sched;
pub mod search;
pub mod selfsim;
mod settings;
mod table;
pub mod trace;
pub mod workload;

use std::path::{Path, PathBuf};

pub use cluster::ClusterSpec;
pub use engine::{simulate, Outcome, SimConfig};
pub use kind::{all_kinds, SchedulerKind};
pub use metrics::{summarize, Summary};
pub use workload::JobSpec;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The I/O error is part of the message, not a `source`: printed with its chain (`{:#}`),
    /// it would otherwise appear twice.
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("{policy}: {waiting} jobs wait and can never start (the policy never places them)")]
    Stalled { policy: String, waiting: usize },
}

impl SimError {
    pub fn io(path: &Path, source: std::io::Error) -> SimError {
        SimError::Io {
            path: path.to_path_buf(),
            cause: source,
        }
    }

    pub fn parse(path: &Path, line: usize, message: impl Into<String>) -> SimError {
        SimError::Parse {
            path: path.to_path_buf(),
            line,
            message: message.into(),
        }
    }
}

/// One policy's run: its summary and everything it produced.
pub struct PolicyRun {
    pub kind: SchedulerKind,
    pub summary: Summary,
    pub outcome: Outcome,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
    /// Median delay timer the policy applied (cinch's delaying policies), seconds.
    pub median_delay_s: Option<f64>,
    /// How far progress predicted ends (see [`engine::Scheduler::progress_error`]).
    pub progress_error: Option<(f64, usize)>,
    /// The portfolio's evaluations over the run, in a line (see
    /// [`engine::Scheduler::portfolio_summary`]).
    pub portfolio: Option<String>,
}

/// Runs every policy on the same jobs and cluster.
pub fn compare(
    jobs: &[JobSpec],
    kinds: &[SchedulerKind],
    config: SimConfig,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Vec<PolicyRun>, SimError> {
    let mut runs = Vec::with_capacity(kinds.len());
    for kind in kinds {
        let mut scheduler = kind.build_for(config);
        let name = kind.to_string();
        let started = std::time::Instant::now();
        let outcome = simulate(jobs, scheduler.as_mut(), config, &mut |done, total| {
            progress(&name, done, total)
        })?;
        let wall_s = started.elapsed().as_secs_f64();
        runs.push(PolicyRun {
            summary: summarize(&name, &outcome, &config.cluster),
            kind: kind.clone(),
            outcome,
            wall_s,
            median_delay_s: scheduler.median_delay_s(),
            progress_error: scheduler.progress_error(),
            portfolio: scheduler.portfolio_summary(),
        });
    }
    Ok(runs)
}

/// `../shared/<name>` (or `$CINCH_SHARED/<name>`), when the shared data is on this machine.
/// Tests that need it are ignored, with the reason, when it is absent (see build.rs): a
/// newcomer's clone has no `../shared`.
pub fn shared_dir(name: &str) -> Option<PathBuf> {
    let base = std::env::var_os("CINCH_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let dir = base.join(name);
    dir.is_dir().then_some(dir)
}
