//! cinch's pure core, shared by the Slurm plugin, the optimizer service and the simulator:
//! the snapshot the plugin sends, the decisions it gets back, and the scheduling policies —
//! pure functions of (snapshot, now, seeded rng), so every caller runs the very same code.
//! Only serde here: nothing that would pull a runtime or a web stack into slurmctld.
//!
//! Laid out by stage, each importing only the stages before it (docs/architecture.md,
//! "Modules"; `optimizer/tests/modules.rs` fails on an arrow back):
//! `util` → `slurm` → `wire` → `net` → `models` → `learn` → `policy` → `enact`, with `testing`
//! (scenario builders) beside them.

pub mod util;

pub mod slurm;

pub mod wire;

pub mod net;

pub mod models;

pub mod learn;

pub mod policy;

pub mod enact;

pub mod testing;

pub use learn::history::History;
pub use policy::{Policy, PolicyConfig, PolicySettings};
pub use util::rng::SeededRng;
pub use wire::decision::{Decision, Decisions};
pub use wire::mode::Mode;
pub use wire::snapshot::{Snapshot, SCHEMA_VERSION};
