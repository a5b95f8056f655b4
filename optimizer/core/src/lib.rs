//! cinch's pure core, shared by the Slurm plugin, the optimizer service and the simulator:
//! the snapshot the plugin sends, the decisions it gets back, and the scheduling policies —
//! pure functions of (snapshot, now, seeded rng), so every caller runs the very same code.
//! Only serde here: nothing that would pull a runtime or a web stack into slurmctld.

pub mod admin_comment;
pub mod apply;
pub mod apps;
pub mod corun;
pub mod decision;
pub mod elastic;
pub mod endpoint;
pub mod exchange;
pub mod gres;
pub mod hints;
pub mod history;
pub mod hostlist;
pub mod job_hints;
pub mod mode;
pub mod policy;
pub mod qos;
pub mod refusal;
pub mod rng;
pub mod round;
pub mod run_model;
pub mod scontrol;
pub mod share_table;
pub mod sharing;
pub mod slurm_time;
pub mod snapshot;
pub mod stats;
pub mod testing;
#[cfg(feature = "tls")]
pub mod tls;
pub mod token;

pub use decision::{Decision, Decisions};
pub use history::History;
pub use mode::Mode;
pub use policy::{Policy, PolicyConfig, PolicySettings};
pub use rng::SeededRng;
pub use snapshot::{Snapshot, SCHEMA_VERSION};
