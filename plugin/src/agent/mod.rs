//! cinch's agent: a thread inside slurmctld that, every `IntervalSeconds` and shortly after new
//! submissions, snapshots the cluster through Slurm's public API, asks the optimizer for
//! decisions, and applies them with `slurm_update_job` — and that undoes its own changes when
//! they expire or the optimizer is lost, so Slurm always carries on by itself.
//!
//! The logic is pure and unit-tested ([`round`] behind its ports with a recording double,
//! [`reconcile`], [`view`], [`breaker`], [`http`]); the thread and its Slurm calls (the live
//! ports) are compiled out of unit tests and covered by the end-to-end tests.

pub mod breaker;
pub mod http;
pub mod owned;
pub mod reconcile;
pub mod round;
pub mod view;

#[cfg(not(test))]
pub mod slurm_io;
#[cfg(not(test))]
pub mod thread;

/// Reads the optimizer's plugin token; refuses a file others may read.
pub fn read_token(path: &std::path::Path) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} is readable by group/others (mode {mode:03o}); chmod 600 it",
            path.display()
        ));
    }
    let token = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let token = token.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{} does not hold a single token", path.display()));
    }
    Ok(token.to_string())
}
