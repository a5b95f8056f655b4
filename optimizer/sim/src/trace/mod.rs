//! Trace readers, one file per format. Each turns a file into the simulator's [`TraceJob`]s;
//! a row that cannot be read is an error naming the file and line, never silently dropped.
//! Rows that are valid but outside what the simulator models (CPU-only pods, jobs that never
//! ran) are skipped and counted in [`Trace::skipped`].

mod alibaba;
mod cedar;
mod philly;
mod pollux;
mod record;
mod sacct;

use std::path::Path;
use std::str::FromStr;

pub use alibaba::read_alibaba_pods;
pub use cedar::read_cedar;
pub use philly::read_philly;
pub use pollux::{
    read_pollux_workload, read_pollux_workloads, workload_path, PolluxApps, STARTUP_S, WORKLOADS,
};
pub use record::{cluster_of_nodes, read_record, record_cluster};
pub use sacct::{read_sacct_json, read_sacct_parsable, SACCT_FIELDS};

use super::perf::App;
pub(crate) use super::table::CsvTable;
use super::SimError;

/// One job as a trace describes it, before the simulator assigns it anything.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// The trace's own id (for reports).
    pub name: String,
    /// The name its user gave the job (sacct's JobName), when the trace says: what history
    /// keys similar jobs by.
    pub job_name: Option<String>,
    pub user: String,
    /// Seconds from the start of the trace.
    pub submit: i64,
    pub gpus: u32,
    /// Set when the job asked for a fixed number of GPUs on each node.
    pub gpus_per_node: Option<u32>,
    /// Run time on its most consolidated placement, seconds (> 0).
    pub run_time: f64,
    /// What the user told the scheduler the job needs at most (seconds), if the trace says.
    pub time_limit: Option<f64>,
    /// The application, when the trace names it.
    pub app: Option<App>,
    /// Per-GPU batch size, when the trace says.
    pub local_bsz: Option<f64>,
    /// Whether the job ended within the trace: a job still running when the trace was cut has
    /// only a lower bound for its run time (no ground truth for predictions).
    pub ended: bool,
    /// Whether Slurm killed the job at its time limit (TIMEOUT): its run time is then only a
    /// lower bound of what it needed, just past its limit.
    pub timed_out: bool,
    /// How fast the job would run on each GPU count if it were elastic: index n = relative
    /// speed on n GPUs (consolidated, global batch scaled with the count up to the largest
    /// validated batch), 1.0 at `gpus`; for the Pollux workloads, from its measurements.
    pub scaling: Option<Vec<f64>>,
    /// Whether the job's user opted in to requeues (`--requeue` with `ckpt=yes`), when the
    /// trace says (a cinch record); otherwise the simulator draws the hinted share.
    pub opted_in: Option<bool>,
}

impl TraceJob {
    /// Teaches `history` this job's run, as `cinch serve --import-history` and `cinch sim
    /// predict` do; whether it was learned.
    pub fn import_into(&self, history: &mut cinch_core::History) -> bool {
        history.import_run(
            &self.user,
            self.job_name.as_deref(),
            self.gpus,
            self.time_limit,
            self.run_time,
        )
    }

    /// A job with only what every trace has; readers set the rest they know.
    pub fn new(name: impl Into<String>, submit: i64, gpus: u32, run_time: f64) -> TraceJob {
        TraceJob {
            name: name.into(),
            job_name: None,
            user: String::new(),
            submit,
            gpus,
            gpus_per_node: None,
            run_time,
            time_limit: None,
            app: None,
            local_bsz: None,
            ended: true,
            timed_out: false,
            scaling: None,
            opted_in: None,
        }
    }
}

/// A whole trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub jobs: Vec<TraceJob>,
    /// (reason, count) of valid rows the simulator does not model.
    pub skipped: Vec<(String, usize)>,
}

impl Trace {
    pub(crate) fn skip(&mut self, reason: &str) {
        match self.skipped.iter_mut().find(|(r, _)| r == reason) {
            Some((_, n)) => *n += 1,
            None => self.skipped.push((reason.to_string(), 1)),
        }
    }

    /// Jobs sorted by submit time (stable), times shifted so the first job arrives at 0.
    pub(crate) fn normalise(mut self) -> Self {
        self.jobs.sort_by_key(|j| j.submit);
        if let Some(first) = self.jobs.first().map(|j| j.submit) {
            for job in &mut self.jobs {
                job.submit -= first;
            }
        }
        self
    }
}

/// The trace formats `cinch sim --format` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    Philly,
    Alibaba,
    Pollux,
    Sacct,
    SacctJson,
    Cedar,
    /// The optimizer's record of the recent past (`record.jsonl`).
    CinchRecord,
}

impl FromStr for TraceFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "philly" => TraceFormat::Philly,
            "alibaba" => TraceFormat::Alibaba,
            "pollux" => TraceFormat::Pollux,
            "sacct" => TraceFormat::Sacct,
            "sacct-json" => TraceFormat::SacctJson,
            "cedar" => TraceFormat::Cedar,
            "cinch-record" => TraceFormat::CinchRecord,
            other => {
                return Err(format!(
                    "unknown trace format '{other}' (known: philly, alibaba, pollux, sacct, sacct-json, cedar, cinch-record)"
                ))
            }
        })
    }
}

impl TraceFormat {
    /// Guesses the format from the file's first line (the CSV header, or `{` for JSON).
    pub fn detect(path: &Path) -> Result<TraceFormat, SimError> {
        // Only the first line: the reader reads the whole file afterwards.
        let file = std::fs::File::open(path).map_err(|e| SimError::io(path, e))?;
        let mut first = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(file), &mut first)
            .map_err(|e| SimError::io(path, e))?;
        let first = first.trim();
        let format = if record::is_record_header(first) {
            TraceFormat::CinchRecord
        } else if first.starts_with('{') || first.starts_with('[') {
            TraceFormat::SacctJson
        } else if first.contains("num_gpus") && first.contains("gpu_milli") {
            TraceFormat::Alibaba
        } else if first.contains("job_unique_id") && first.contains("time_limit_sec") {
            TraceFormat::Cedar
        } else if first.contains("num_gpus") && first.contains("duration_s") {
            TraceFormat::Philly
        } else if first.contains("application") && first.contains("num_replicas") {
            TraceFormat::Pollux
        } else if first.contains('|') {
            TraceFormat::Sacct
        } else {
            return Err(SimError::Invalid(format!(
                "{}: cannot tell the trace format from its first line; pass --format \
                 (philly, alibaba, pollux, sacct, sacct-json, cedar, cinch-record)",
                path.display()
            )));
        };
        Ok(format)
    }
}

/// The run time to simulate for a job that ran `run_s` seconds: a job killed at its limit
/// (TIMEOUT) needed more than it had, so it gets a run just past its limit and the simulator kills
/// it there too; any other job ran what it needed.
pub(crate) fn run_of_ended_job(run_s: f64, limit_s: Option<f64>, timed_out: bool) -> f64 {
    match limit_s {
        Some(limit) if timed_out => run_s.max(limit) + 1.0,
        _ => run_s,
    }
}

/// A trace of any format but the Pollux workloads (which need their measurement data), its
/// format detected from its first line.
pub fn read_any(path: &Path) -> Result<Trace, SimError> {
    match TraceFormat::detect(path)? {
        TraceFormat::Philly => read_philly(path),
        TraceFormat::Alibaba => read_alibaba_pods(path),
        TraceFormat::Sacct => read_sacct_parsable(path),
        TraceFormat::SacctJson => read_sacct_json(path),
        TraceFormat::Cedar => read_cedar(path),
        TraceFormat::CinchRecord => read_record(path),
        TraceFormat::Pollux => Err(SimError::Invalid(format!(
            "{}: a Pollux workload needs its measurement data; read it with --format pollux",
            path.display()
        ))),
    }
}

#[cfg(test)]
pub(crate) mod test_files {
    use std::path::PathBuf;

    /// A temporary file in a directory of its own, removed with it when dropped.
    pub(crate) struct TempFile {
        path: PathBuf,
        _dir: cinch_core::testing::ScratchDir,
    }

    impl std::ops::Deref for TempFile {
        type Target = std::path::Path;

        fn deref(&self) -> &std::path::Path {
            &self.path
        }
    }

    /// Writes `contents` to a fresh temporary file, removed when the returned guard drops.
    pub(crate) fn write(name: &str, contents: &str) -> TempFile {
        let dir = cinch_core::testing::ScratchDir::new(&format!(
            "sim-test-{}",
            name.replace(['/', '.'], "_")
        ));
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        TempFile { path, _dir: dir }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_detected_from_the_header() {
        let philly = test_files::write(
            "p.csv",
            "job_id,submit_time,submit_timestamp,duration_s,num_gpus,gpu_time_s,vc,src_row\n",
        );
        assert_eq!(TraceFormat::detect(&philly).unwrap(), TraceFormat::Philly);
        let sacct = test_files::write("s.txt", "JobID|Submit|Start|End|AllocTRES\n");
        assert_eq!(TraceFormat::detect(&sacct).unwrap(), TraceFormat::Sacct);
        let other = test_files::write("o.csv", "x,y\n");
        let err = TraceFormat::detect(&other).unwrap_err().to_string();
        assert!(err.contains("--format"), "{err}");
    }
}
