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

/// Shortest token accepted, as `cinch serve` requires (it makes 64 hex digits).
pub const MIN_TOKEN_LEN: usize = 16;

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
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!(
            "{} holds a {}-character token; tokens need at least {MIN_TOKEN_LEN}",
            path.display(),
            token.len()
        ));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn token_file(name: &str, text: &str, mode: u32) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("cinch-token-{name}-{}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn tokens_must_be_private_single_and_long_enough() {
        let good = token_file("good", "0123456789abcdef0123\n", 0o600);
        assert_eq!(read_token(&good).unwrap(), "0123456789abcdef0123");
        let short = token_file("short", "x\n", 0o600);
        assert!(read_token(&short).unwrap_err().contains("at least 16"));
        let open = token_file("open", "0123456789abcdef0123\n", 0o644);
        assert!(read_token(&open).unwrap_err().contains("chmod 600"));
        let two = token_file("two", "0123456789abcdef 0123456789abcdef\n", 0o600);
        assert!(read_token(&two).unwrap_err().contains("single token"));
        for p in [good, short, open, two] {
            std::fs::remove_file(p).unwrap();
        }
    }
}
