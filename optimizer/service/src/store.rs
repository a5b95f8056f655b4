//! The policy and its history, persisted so they survive restarts.
//!
//! Storage is one JSON file replaced atomically (write a temporary file, fsync it, rename it over
//! the old one, fsync the directory) rather than an embedded database: the data is small (one
//! record per admin change), written rarely, by one process, and an admin can read it with
//! `cat`. A change is acknowledged only after the rename is durable, so a crash at any moment
//! leaves either the old file or the new one — never a torn one — and loses nothing that was
//! acknowledged. A file that cannot be read is an error at start-up, never silently reset.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use serde::{Deserialize, Serialize};

use cinch_core::policy::PolicySettings;

use super::state_file::temp_path;

/// One version of the policy settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyRecord {
    /// Increases by one with every change, starting at 1.
    pub version: u64,
    /// Unix seconds.
    pub changed_at: i64,
    /// What changed it, e.g. `PUT /v1/policy` or `PATCH /v1/policy: mode`.
    pub change: String,
    pub settings: PolicySettings,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredFile {
    /// Layout of this file, for future migrations.
    format: u32,
    /// Every version, oldest first; the last is in force.
    history: Vec<PolicyRecord>,
}

const FORMAT: u32 = 1;
const FILE_NAME: &str = "policy.json";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot use state directory {path}: {cause}")]
    Dir {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot read {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(
        "{path} is not a valid cinch policy file ({reason}); refusing to start rather than lose \
         the policy — fix or move it away"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot write {path}: {cause}")]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
}

/// Why an update did not happen; the stored policy is unchanged in every case.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct PolicyStore {
    path: PathBuf,
    history: RwLock<Vec<PolicyRecord>>,
    /// Versions kept (the newest); older ones are dropped as new ones are stored.
    max_history: usize,
    /// Serialises read-modify-write cycles (and the file writes inside them).
    writer: Mutex<()>,
}

impl PolicyStore {
    /// Opens the store in `dir` (created 0700 if missing), writing the defaults on first use,
    /// keeping the newest `max_history` versions (at least 1).
    pub fn open(dir: &Path, now: i64, max_history: usize) -> Result<PolicyStore, StoreError> {
        let max_history = max_history.max(1);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|cause| StoreError::Dir {
                path: dir.to_path_buf(),
                cause,
            })?;
        // Whoever may write the directory may swap the policy file: only its owner.
        let mode = fs::metadata(dir)
            .map_err(|cause| StoreError::Dir {
                path: dir.to_path_buf(),
                cause,
            })?
            .permissions()
            .mode()
            & 0o777;
        if mode & 0o022 != 0 {
            return Err(StoreError::Dir {
                path: dir.to_path_buf(),
                cause: std::io::Error::other(format!(
                    "it is writable by group/others (mode {mode:03o}); run: chmod 700 {}",
                    dir.display()
                )),
            });
        }
        let path = dir.join(FILE_NAME);
        // A temporary file left by a crash was never acknowledged: drop it.
        let _ = fs::remove_file(temp_path(&path));
        let history = match fs::read(&path) {
            Ok(bytes) => parse(&path, &bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let history = vec![PolicyRecord {
                    version: 1,
                    changed_at: now,
                    change: "initial defaults".into(),
                    settings: PolicySettings::default(),
                }];
                write_atomically(&path, &history)?;
                history
            }
            Err(cause) => return Err(StoreError::Read { path, cause }),
        };
        Ok(PolicyStore {
            path,
            history: RwLock::new(history),
            max_history,
            writer: Mutex::new(()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn current(&self) -> PolicyRecord {
        let history = self.history.read().unwrap_or_else(|e| e.into_inner());
        history.last().cloned().expect("history is never empty")
    }

    pub fn history(&self) -> Vec<PolicyRecord> {
        self.history
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Computes new settings from the current ones and stores them as a new version. Nothing
    /// changes — in memory or on disk — unless `change` succeeds and the file is durably written.
    /// It blocks on fsync: async callers run it on the blocking pool.
    pub fn update<F>(&self, now: i64, what: String, change: F) -> Result<PolicyRecord, UpdateError>
    where
        F: FnOnce(&PolicySettings) -> Result<PolicySettings, String>,
    {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.current();
        let settings = change(&current.settings).map_err(UpdateError::Invalid)?;
        let record = PolicyRecord {
            version: current.version + 1,
            changed_at: now,
            change: what,
            settings,
        };
        let mut next = self.history();
        next.push(record.clone());
        // Bounded: a PUT storm must not grow the file (and every later write) without end.
        let excess = next.len().saturating_sub(self.max_history);
        next.drain(..excess);
        write_atomically(&self.path, &next)?;
        *self.history.write().unwrap_or_else(|e| e.into_inner()) = next;
        Ok(record)
    }
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<PolicyRecord>, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let file: StoredFile = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if file.format != FORMAT {
        return Err(corrupt(format!("unknown format {}", file.format)));
    }
    if file.history.is_empty() {
        return Err(corrupt("empty history".into()));
    }
    Ok(file.history)
}

fn write_atomically(path: &Path, history: &[PolicyRecord]) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(&StoredFile {
        format: FORMAT,
        history: history.to_vec(),
    })
    .expect("policy records serialise");
    super::state_file::write_atomically(path, &bytes).map_err(|cause| StoreError::Write {
        path: path.to_path_buf(),
        cause,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinch_core::policy::Mode;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cinch-store-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn enforce(s: &PolicySettings) -> Result<PolicySettings, String> {
        Ok(PolicySettings {
            mode: Mode::Enforce,
            ..s.clone()
        })
    }

    #[test]
    fn changes_survive_a_reopen() {
        let dir = temp_dir("reopen");
        let store = PolicyStore::open(&dir, 10, 100).unwrap();
        assert_eq!(store.current().version, 1);
        store.update(20, "test".into(), enforce).unwrap();
        drop(store);
        let store = PolicyStore::open(&dir, 30, 100).unwrap();
        assert_eq!(store.current().version, 2);
        assert_eq!(store.current().settings.mode, Mode::Enforce);
        assert_eq!(store.history().len(), 2);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_refused_change_leaves_memory_and_disk_alone() {
        let dir = temp_dir("refused");
        let store = PolicyStore::open(&dir, 10, 100).unwrap();
        let before = fs::read(store.path()).unwrap();
        let err = store
            .update(20, "test".into(), |_| Err("no".into()))
            .unwrap_err();
        assert!(matches!(err, UpdateError::Invalid(_)));
        assert_eq!(store.current().version, 1);
        assert_eq!(fs::read(store.path()).unwrap(), before);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_crash_before_the_rename_loses_nothing_acknowledged() {
        let dir = temp_dir("crash");
        let store = PolicyStore::open(&dir, 10, 100).unwrap();
        store.update(20, "acknowledged".into(), enforce).unwrap();
        // A crash mid-write leaves a torn temporary file beside the real one.
        fs::write(temp_path(store.path()), b"{\"format\":1,\"hist").unwrap();
        drop(store);
        let store = PolicyStore::open(&dir, 30, 100).unwrap();
        assert_eq!(store.current().change, "acknowledged");
        assert!(!temp_path(store.path()).exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_state_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("open-dir");
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let err = PolicyStore::open(&dir, 0, 100).err().expect("must refuse");
        assert!(err.to_string().contains("chmod 700"), "{err}");
        assert!(!dir.join(FILE_NAME).exists(), "nothing written");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(PolicyStore::open(&dir, 0, 100).is_ok());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_history_keeps_the_newest_versions_only() {
        let dir = temp_dir("bounded");
        let store = PolicyStore::open(&dir, 10, 3).unwrap();
        for t in 0..5 {
            store
                .update(20 + t, format!("change {t}"), enforce)
                .unwrap();
        }
        let versions: Vec<u64> = store.history().iter().map(|r| r.version).collect();
        assert_eq!(versions, vec![4, 5, 6]);
        drop(store);
        let store = PolicyStore::open(&dir, 30, 3).unwrap();
        assert_eq!(store.current().version, 6);
        assert_eq!(store.history().len(), 3);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_a_reset() {
        let dir = temp_dir("corrupt");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(FILE_NAME), b"not json").unwrap();
        let err = PolicyStore::open(&dir, 0, 100).err().expect("must refuse");
        assert!(err.to_string().contains("refusing to start"), "{err}");
        assert_eq!(fs::read(dir.join(FILE_NAME)).unwrap(), b"not json");
        fs::remove_dir_all(&dir).unwrap();
    }
}
