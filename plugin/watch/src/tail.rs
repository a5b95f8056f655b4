//! A job's output file, read from where the watcher left off: only what the job wrote since, and
//! of a burst larger than a read takes, only its end (the latest progress is all that counts).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// The most bytes one read takes.
pub const MAX_READ: u64 = 256 * 1024;

#[derive(Debug)]
pub struct Tail {
    pub path: PathBuf,
    offset: u64,
}

impl Tail {
    /// Watches `path` from its current end: what the job wrote before the watcher started is
    /// read too (a watcher started late still sees the bar), up to [`MAX_READ`] of its end.
    pub fn new(path: PathBuf) -> Tail {
        Tail { path, offset: 0 }
    }

    /// What was written since the last read (at most [`MAX_READ`] bytes: the end of it). A file
    /// that shrank was truncated or replaced: read again from its start. A file that is not
    /// there (yet) gives nothing.
    pub fn read_new(&mut self) -> std::io::Result<Vec<u8>> {
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
        }
        let from = self.offset.max(len.saturating_sub(MAX_READ));
        file.seek(SeekFrom::Start(from))?;
        let mut out = Vec::with_capacity((len - from) as usize);
        file.take(len - from).read_to_end(&mut out)?;
        self.offset = from + out.len() as u64;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_only_what_is_new_and_the_end_of_a_burst() {
        let dir = std::env::temp_dir().join(format!("cinch-watch-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("slurm-7.out");
        let mut tail = Tail::new(path.clone());
        assert!(tail.read_new().unwrap().is_empty(), "not there yet");
        let mut f = File::create(&path).unwrap();
        f.write_all(b"step 1/10\n").unwrap();
        assert_eq!(tail.read_new().unwrap(), b"step 1/10\n");
        assert!(tail.read_new().unwrap().is_empty());
        f.write_all(b"step 2/10\n").unwrap();
        assert_eq!(tail.read_new().unwrap(), b"step 2/10\n");
        // A burst larger than one read: its end.
        let burst = vec![b'x'; (MAX_READ + 100) as usize];
        f.write_all(&burst).unwrap();
        f.write_all(b"step 3/10\n").unwrap();
        let got = tail.read_new().unwrap();
        assert_eq!(got.len() as u64, MAX_READ);
        assert!(got.ends_with(b"step 3/10\n"));
        // Truncated and written again: from the start.
        let mut f = File::create(&path).unwrap();
        f.write_all(b"step 4/10\n").unwrap();
        assert_eq!(tail.read_new().unwrap(), b"step 4/10\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
