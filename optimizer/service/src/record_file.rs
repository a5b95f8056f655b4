//! The record of the recent past (cinch_core::learn::record) in the state directory:
//! `record.jsonl`, read at start-up and written every `record_save_seconds` and at shutdown, each
//! time whole and atomically (a temporary file, fsynced, renamed over the old one), mode 0600 (it
//! names users and their jobs). A file that cannot be read is an error at start-up, never
//! silently reset, as for the policy.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cinch_core::learn::record::{Record, RecordLimits};

pub const FILE_NAME: &str = "record.jsonl";

#[derive(Debug, thiserror::Error)]
pub enum RecordFileError {
    #[error(
        "{path} is not a valid cinch record ({reason}); refusing to start rather than lose it — \
         move it away (cinch starts a new record) or set record_hours = 0"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot read {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
}

/// The record and where it is kept.
pub struct RecordStore {
    pub path: PathBuf,
    pub record: Mutex<Record>,
}

impl RecordStore {
    /// The record in `state_dir`, or a new one if there is none yet.
    pub fn open(state_dir: &Path, limits: RecordLimits) -> Result<RecordStore, RecordFileError> {
        let path = state_dir.join(FILE_NAME);
        let record = match std::fs::File::open(&path) {
            Ok(file) => Record::read(std::io::BufReader::new(file), limits).map_err(|e| {
                RecordFileError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                }
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Record::new(limits),
            Err(cause) => return Err(RecordFileError::Read { path, cause }),
        };
        Ok(RecordStore {
            path,
            record: Mutex::new(record),
        })
    }

    /// Writes the record as it is now; the jobs it holds, or why it could not.
    pub fn save(&self) -> std::io::Result<usize> {
        let (bytes, jobs) = {
            let record = super::lock(&self.record);
            let mut bytes = Vec::with_capacity(256 * record.len() + 4096);
            record.write(&mut bytes)?;
            (bytes, record.len())
        };
        super::state_file::write_atomically(&self.path, &bytes)?;
        Ok(jobs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinch_core::testing::{cluster, pending, snapshot, ScratchDir};
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_record_survives_a_restart_and_a_bad_file_stops_the_start() {
        let dir = ScratchDir::new("record-file");
        let store = RecordStore::open(&dir, RecordLimits::default()).unwrap();
        let snap = snapshot(cluster(2, 8, 1), vec![pending(5, 2)]);
        store.record.lock().unwrap().observe(&snap);
        assert_eq!(store.save().unwrap(), 1);
        let mode = std::fs::metadata(&store.path).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "it names users: only the service reads it"
        );
        let again = RecordStore::open(&dir, RecordLimits::default()).unwrap();
        assert_eq!(*again.record.lock().unwrap(), *store.record.lock().unwrap());
        std::fs::write(&store.path, "{\"cinch_record\":1}\n").unwrap();
        let err = RecordStore::open(&dir, RecordLimits::default())
            .err()
            .expect("a bad record stops the start")
            .to_string();
        assert!(
            err.contains("record.jsonl is not a valid cinch record"),
            "{err}"
        );
        assert!(err.contains("line 1"), "{err}");
    }
}
