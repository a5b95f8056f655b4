//! What cinch knows about jobs and applications: network sensitivity by application, GPU co-run
//! speeds, QoS targets, elastic ranges, GPU sharing, and the checks on users' hints.

pub mod apps;
pub mod corun;
pub mod elastic;
pub mod hints;
pub mod idle;
pub mod progress;
pub mod qos;
pub mod share_table;
pub mod sharing;
