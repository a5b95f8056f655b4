//! cinch's optimizer. Its scheduling policies are pure functions of a cluster snapshot, the time
//! and a seeded random generator, so that the service (`cinch serve`), the trace-driven
//! simulator and the tests run the very same code.
//!
//! The core (snapshot, decisions, policies) needs only serde; the HTTP service and its
//! dependencies sit behind the default `service` feature, so the Slurm plugin can share the
//! core's types without pulling a web stack into slurmctld.

pub mod decision;
pub mod policy;
pub mod rng;
#[cfg(feature = "service")]
pub mod service;
pub mod snapshot;
pub mod testing;

pub use decision::{Decision, Decisions};
pub use policy::{Mode, Policy, PolicyConfig, PolicySettings};
pub use rng::SeededRng;
pub use snapshot::{Snapshot, SCHEMA_VERSION};

/// The cinch release, shared by the plugin, the service and the simulator.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
