//! The schedulers the simulator compares: Slurm's own default (the engine's model of slurmctld,
//! what every admin already has), and every policy of the core (cinch's own and the research and
//! Slurm baselines: strict consolidation, Tiresias, QSSF, the `--switches` wait) driven through
//! the same Snapshot/Decisions/apply path as live.

mod cinch;
mod placement;
mod slurm;

pub use cinch::{snapshot as agent_snapshot, CinchPolicy};
pub use placement::{first_fit, pinned};
pub use slurm::{SlurmDeadline, SlurmDefault};

pub use crate::engine::Scheduler;
