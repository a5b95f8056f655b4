//! cinch's optimizer. Its scheduling policies are pure functions of a cluster snapshot, the time
//! and a seeded random generator, so that the service (`cinch serve`) and the trace-driven
//! simulator (`cinch sim`) run the very same code. This crate is the skeleton those grow from.

/// The cinch release, shared by the plugin, the service and the simulator.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The subcommands `cinch` offers, with a one-line summary each.
pub const COMMANDS: &[(&str, &str)] = &[("version", "print cinch's version")];
