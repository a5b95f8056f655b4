//! cinch's optimizer: the service (`cinch serve`) around the pure core in `cinch-core`, whose
//! modules are re-exported here so callers need one crate.

pub use cinch_core::{
    apply, decision, history, policy, rng, snapshot, testing, Decision, Decisions, History, Mode,
    Policy, PolicyConfig, PolicySettings, SeededRng, Snapshot, SCHEMA_VERSION,
};

#[cfg(feature = "service")]
pub mod service;
pub mod sim;

/// The cinch release, shared by the plugin, the service and the simulator.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
