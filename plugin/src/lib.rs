//! cinch's Slurm `job_submit` plugin.
//!
//! slurmctld loads this cdylib as `job_submit_cinch.so` (`JobSubmitPlugins=cinch`). Everything
//! Slurm calls goes through [`exports`], where one guard keeps any panic or error inside cinch:
//! a failure is logged and the job passes unchanged, as if cinch were not installed.
//!
//! The pure parts (TRES parsing, cinch.conf, the record) are unit-tested; the FFI glue that needs
//! slurmctld's symbols is compiled out of unit tests and exercised by the end-to-end tests in
//! `tests/`, against a real slurmctld.

pub mod agent;
pub mod config;
pub use cinch_core::slurm::hostlist;
pub use cinch_guard as guard;
pub mod job_desc;
pub mod local_time;
pub mod record;
pub mod share;
pub mod state;
pub mod submit;
pub mod submit_hold;
pub mod users;

#[cfg(test)]
mod properties;

#[cfg(not(test))]
mod exports;
#[cfg(not(test))]
mod slurm;
