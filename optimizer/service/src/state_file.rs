//! How the service replaces a file in its state directory (the policy, the record, the
//! portfolio): whole and atomically, so a crash at any moment leaves the old file or the new one,
//! never a torn one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where [`write_atomically`] writes before the rename: one left by a crash is removed at
/// start-up.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    PathBuf::from(temp)
}

/// Replaces `path` with `bytes`: a temporary file beside it (`<path>.tmp`, mode 0600: these files
/// name users and their jobs), fsynced, renamed over the old one, and the directory fsynced, so
/// the change is durable when this returns.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = temp_path(path);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, path)?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}
