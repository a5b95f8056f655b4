//! cinch's agent: a thread inside slurmctld that, every `IntervalSeconds` and shortly after new
//! submissions, snapshots the cluster through Slurm's public API, asks the optimizer for
//! decisions, and applies them with `slurm_update_job` — and that undoes its own changes when
//! they expire or the optimizer is lost, so Slurm always carries on by itself.
//!
//! The logic is pure and unit-tested (the core's round, adapted in [`round`] and tested with a
//! recording double, [`reconcile`], [`view`], [`http`]); the thread and its Slurm calls (the
//! live ports) are compiled out of unit tests and covered by the end-to-end tests.

pub use cinch_http as http;
pub mod job_cache;
pub mod job_memo;
pub mod link;
pub mod owned;
pub mod reconcile;
pub mod round;
pub mod snapshot;
pub mod view;

#[cfg(not(test))]
pub mod slurm_io;
#[cfg(not(test))]
pub mod thread;

/// Reads the optimizer's plugin token by the one rule for token files (private, one token, long
/// enough).
pub fn read_token(path: &std::path::Path) -> Result<String, String> {
    cinch_core::net::token::read_token_file(path).map_err(|e| format!("{}: {e}", path.display()))
}
