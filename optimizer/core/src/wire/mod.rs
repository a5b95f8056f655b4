//! What crosses the wire between the plugin and the optimizer: the snapshot, the decisions, the
//! delta exchange, the modes, and why a submission is refused.

pub mod decision;
pub mod exchange;
pub mod idle;
pub mod mode;
pub mod reason;
pub mod refusal;
pub mod snapshot;
pub mod watch;
