//! What the agent saw: the jobs of the recent past as successive snapshots showed them (their
//! submission, request, limit, hints, user, whether they may be requeued, every run with its
//! placement, and when each run and the job ended) and the cluster's nodes. The self-simulation
//! replays it, and `cinch sim --trace` reads it as a site's own what-if input.
//!
//! Honest by construction: a run's end is set only when a snapshot showed the run over, so the
//! record holds no run time of a job that has not ended; what a job will still need is for
//! whoever reads the record to draw (from the run model), not for the record to know.
//!
//! Times are as exact as the snapshots: a run that ended between two snapshots ends at the first
//! that no longer shows it (an upper bound within one agent interval, as [`super::history`]
//! counts it). A job first seen running has its submission from Slurm (`submit_time`), or its
//! start when the snapshot does not say.
//!
//! Bounded: jobs that left more than `window_s` before the latest snapshot are dropped, and at
//! most `max_jobs` are kept (the earliest to leave go first). Stored as JSON lines: a header,
//! then one job per line ([`Record::write`], [`Record::read`]).

use std::collections::VecDeque;
use std::io::{BufRead, Write};

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::slurm::job_hints::Hints;
use crate::wire::snapshot::{PendingJob, RunningJob, Snapshot};

/// The layout of a stored record, in its header.
pub const RECORD_FORMAT: u32 = 1;

/// How much of the past a record keeps, and how many jobs at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLimits {
    /// Seconds before the latest snapshot; jobs that left earlier are dropped.
    pub window_s: i64,
    pub max_jobs: usize,
}

impl RecordLimits {
    /// Everything: for a record read or kept whole (a file's contents, a simulated run).
    pub const UNBOUNDED: RecordLimits = RecordLimits {
        window_s: i64::MAX / 4,
        max_jobs: usize::MAX,
    };
}

impl Default for RecordLimits {
    /// Three days (the longest window the self-simulation replays), up to 200,000 jobs.
    fn default() -> Self {
        RecordLimits {
            window_s: 72 * 3600,
            max_jobs: 200_000,
        }
    }
}

/// A node as the latest snapshot showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedNode {
    pub name: String,
    pub gpus: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
}

/// One run of a job: from its start to the first snapshot that no longer showed it running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedRun {
    /// Unix seconds.
    pub start: i64,
    pub nodes: Vec<String>,
    pub gpus: u32,
    /// Unix seconds; none while the run goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
    /// Whether the run ended with the job back in the queue (a requeue).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeued: bool,
}

/// A job as the snapshots showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedJob {
    pub job_id: u32,
    pub user: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Unix seconds.
    pub submit: i64,
    /// GPUs asked for (as last seen pending; a job only ever seen running, what it holds).
    pub gpus: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_min: Option<u32>,
    #[serde(default, skip_serializing_if = "no_hints")]
    pub hints: Hints,
    /// Whether Slurm may requeue it (`--requeue`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeue: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RecordedRun>,
    /// Unix seconds: the first snapshot that showed it neither pending nor running; none while
    /// it is in the queue or runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<i64>,
}

fn no_hints(hints: &Hints) -> bool {
    hints.is_empty()
}

impl RecordedJob {
    /// Whether its user opted in to requeues (`--requeue` and `ckpt=yes`): the preemptible set
    /// every policy shares.
    pub fn opted_in(&self) -> bool {
        self.requeue && self.hints.checkpoints()
    }

    fn open_run(&mut self) -> Option<&mut RecordedRun> {
        self.runs.last_mut().filter(|r| r.end.is_none())
    }

    fn seen_pending(job: &PendingJob) -> RecordedJob {
        RecordedJob {
            job_id: job.job_id,
            user: job.user.clone(),
            name: job.name.clone(),
            account: job.account.clone(),
            partition: job.partition.clone(),
            submit: job.submit_time,
            gpus: job.gpus,
            gpus_per_node: job.gpus_per_node,
            time_limit_min: job.time_limit_min,
            hints: job.hints.clone(),
            // Read from the pending job's request at its first run.
            requeue: false,
            runs: Vec::new(),
            left: None,
        }
    }

    fn seen_running(job: &RunningJob) -> RecordedJob {
        RecordedJob {
            job_id: job.job_id,
            user: job.user.clone(),
            name: job.name.clone(),
            account: None,
            partition: None,
            submit: job.submit_time.unwrap_or(job.start_time),
            gpus: job.gpus,
            gpus_per_node: None,
            time_limit_min: job.time_limit_min,
            hints: job.hints.clone(),
            requeue: job.requeue,
            runs: Vec::new(),
            left: None,
        }
    }
}

/// The first line of a stored record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordHeader {
    /// [`RECORD_FORMAT`]; its name tells a record from other traces.
    pub cinch_record: u32,
    /// Unix seconds: the earliest the record still covers, and its latest snapshot.
    pub from: i64,
    pub to: i64,
    pub window_s: i64,
    /// Jobs in the lines that follow.
    pub jobs: usize,
    pub nodes: Vec<RecordedNode>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("line {line}: {reason}")]
    Invalid { line: usize, reason: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What the agent saw over the recent past ([module docs](self)).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record {
    limits: RecordLimits,
    nodes: Vec<RecordedNode>,
    /// Jobs in the queue or running at the latest snapshot.
    open: FxHashMap<u32, RecordedJob>,
    /// Jobs that left, in the order they left.
    done: VecDeque<RecordedJob>,
    /// The first snapshot's time and the latest's; none before any.
    from: Option<i64>,
    to: Option<i64>,
}

impl Record {
    pub fn new(limits: RecordLimits) -> Record {
        Record {
            limits,
            ..Record::default()
        }
    }

    pub fn limits(&self) -> RecordLimits {
        self.limits
    }

    pub fn nodes(&self) -> &[RecordedNode] {
        &self.nodes
    }

    /// The earliest time the record covers and its latest snapshot's, if it saw any.
    pub fn span(&self) -> Option<(i64, i64)> {
        Some((self.from?, self.to?))
    }

    /// Jobs held: those that left (in leaving order), then those still in the queue or running
    /// (by submission, then id).
    pub fn jobs(&self) -> Vec<&RecordedJob> {
        let mut open: Vec<&RecordedJob> = self.open.values().collect();
        open.sort_by_key(|j| (j.submit, j.job_id));
        self.done.iter().chain(open).collect()
    }

    pub fn len(&self) -> usize {
        self.open.len() + self.done.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Learns what `snapshot` shows. Snapshots must come in time order; an older one than the
    /// latest seen is ignored (a replayed or reordered exchange teaches nothing).
    pub fn observe(&mut self, snapshot: &Snapshot) {
        let now = snapshot.time;
        if self.to.is_some_and(|to| now < to) {
            return;
        }
        self.from.get_or_insert(now);
        self.to = Some(now);
        self.note_nodes(snapshot);
        for job in &snapshot.pending {
            let entry = self
                .open
                .entry(job.job_id)
                .or_insert_with(|| RecordedJob::seen_pending(job));
            // Back in the queue while a run was open: requeued.
            if let Some(run) = entry.open_run() {
                run.end = Some(now);
                run.requeued = true;
            }
            // What it asks for now (an update, or an elastic resize, may change it).
            entry.gpus = job.gpus;
            entry.gpus_per_node = job.gpus_per_node;
            entry.time_limit_min = job.time_limit_min;
            if entry.hints != job.hints {
                entry.hints = job.hints.clone();
            }
        }
        for job in &snapshot.running {
            let entry = self
                .open
                .entry(job.job_id)
                .or_insert_with(|| RecordedJob::seen_running(job));
            entry.requeue = job.requeue;
            entry.time_limit_min = job.time_limit_min;
            match entry.open_run() {
                Some(run) if run.start == job.start_time => continue,
                // Requeued and started again between two snapshots: that run ended when this
                // one started.
                Some(run) => {
                    run.end = Some(job.start_time.max(run.start));
                    run.requeued = true;
                }
                None => {}
            }
            entry.runs.push(RecordedRun {
                start: job.start_time,
                nodes: job.nodes.clone(),
                gpus: job.gpus,
                end: None,
                requeued: false,
            });
        }
        // Every job of the snapshot is open now: any more open jobs are gone from it. (Most
        // rounds none, told without hashing every id.)
        let shown = snapshot.pending.len() + snapshot.running.len();
        let mut gone: Vec<u32> = if self.open.len() > shown {
            let ids: rustc_hash::FxHashSet<u32> = snapshot
                .pending
                .iter()
                .map(|j| j.job_id)
                .chain(snapshot.running.iter().map(|j| j.job_id))
                .collect();
            self.open
                .keys()
                .filter(|id| !ids.contains(id))
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        gone.sort_unstable();
        for id in gone {
            let Some(mut job) = self.open.remove(&id) else {
                continue;
            };
            if let Some(run) = job.open_run() {
                run.end = Some(now);
            }
            job.left = Some(now);
            self.done.push_back(job);
        }
        self.prune(now);
    }

    fn note_nodes(&mut self, snapshot: &Snapshot) {
        let same = self.nodes.len() == snapshot.nodes.len()
            && self
                .nodes
                .iter()
                .zip(&snapshot.nodes)
                .all(|(a, b)| a.name == b.name && a.gpus == b.gpus_total && a.rack == b.rack);
        if !same {
            self.nodes = snapshot
                .nodes
                .iter()
                .map(|n| RecordedNode {
                    name: n.name.clone(),
                    gpus: n.gpus_total,
                    rack: n.rack.clone(),
                })
                .collect();
        }
    }

    /// Drops the jobs that left before the window, then the earliest to leave while over
    /// `max_jobs`.
    fn prune(&mut self, now: i64) {
        let cutoff = now - self.limits.window_s;
        while self
            .done
            .front()
            .is_some_and(|j| j.left.is_some_and(|left| left < cutoff))
        {
            self.done.pop_front();
        }
        while self.len() > self.limits.max_jobs && self.done.pop_front().is_some() {}
        if let Some(from) = &mut self.from {
            *from = (*from).max(cutoff);
        }
    }

    /// Writes the record as JSON lines: a [`RecordHeader`], then one [`RecordedJob`] a line in
    /// [`Record::jobs`] order.
    pub fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        let jobs = self.jobs();
        let (from, to) = self.span().unwrap_or((0, 0));
        let header = RecordHeader {
            cinch_record: RECORD_FORMAT,
            from,
            to,
            window_s: self.limits.window_s,
            jobs: jobs.len(),
            nodes: self.nodes.clone(),
        };
        serde_json::to_writer(&mut *out, &header)?;
        out.write_all(b"\n")?;
        for job in jobs {
            serde_json::to_writer(&mut *out, job)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Reads what [`Record::write`] wrote, keeping it within `limits`. Any line that is not
    /// what it should be is an error naming it; nothing is skipped.
    pub fn read(input: impl BufRead, limits: RecordLimits) -> Result<Record, RecordError> {
        let mut lines = input.lines();
        let invalid = |line: usize, reason: String| RecordError::Invalid { line, reason };
        let first = lines
            .next()
            .ok_or_else(|| invalid(1, "empty: no record header".into()))??;
        let header: RecordHeader = serde_json::from_str(&first)
            .map_err(|e| invalid(1, format!("not a cinch record header: {e}")))?;
        if header.cinch_record != RECORD_FORMAT {
            return Err(invalid(
                1,
                format!(
                    "record format {} is not the one this cinch reads ({RECORD_FORMAT})",
                    header.cinch_record
                ),
            ));
        }
        if header.from > header.to {
            return Err(invalid(
                1,
                format!("from {} is after to {}", header.from, header.to),
            ));
        }
        let mut record = Record {
            limits,
            nodes: header.nodes,
            from: Some(header.from),
            to: Some(header.to),
            ..Record::default()
        };
        let mut count = 0;
        for (index, line) in lines.enumerate() {
            let number = index + 2;
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let job: RecordedJob = serde_json::from_str(&line)
                .map_err(|e| invalid(number, format!("not a recorded job: {e}")))?;
            check_job(&job, header.to).map_err(|reason| invalid(number, reason))?;
            count += 1;
            if job.left.is_some() {
                record.done.push_back(job);
            } else if let Some(earlier) = record.open.insert(job.job_id, job) {
                return Err(invalid(
                    number,
                    format!("job {} is listed twice as still open", earlier.job_id),
                ));
            }
        }
        if count != header.jobs {
            return Err(invalid(
                count + 2,
                format!(
                    "the header says {} jobs but {count} follow (a cut file?)",
                    header.jobs
                ),
            ));
        }
        record
            .done
            .make_contiguous()
            .sort_by_key(|j| j.left.unwrap_or(i64::MAX));
        let to = header.to;
        record.prune(to);
        Ok(record)
    }
}

/// What a recorded job must be to make sense: runs in order, each ended but the last, nothing
/// after the record's latest snapshot.
fn check_job(job: &RecordedJob, to: i64) -> Result<(), String> {
    let id = job.job_id;
    for (k, run) in job.runs.iter().enumerate() {
        if let Some(end) = run.end {
            if end < run.start {
                return Err(format!("job {id}: run {k} ends before it starts"));
            }
        } else if k + 1 != job.runs.len() || job.left.is_some() {
            return Err(format!("job {id}: run {k} has no end but is not its last"));
        }
        if k > 0 && run.start < job.runs[k - 1].start {
            return Err(format!("job {id}: runs out of order"));
        }
    }
    let latest = job
        .left
        .into_iter()
        .chain(job.runs.iter().filter_map(|r| r.end))
        .max();
    if latest.is_some_and(|t| t > to) {
        return Err(format!(
            "job {id}: ends after the record's latest snapshot ({to})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pending};

    fn running(id: u32, start: i64, nodes: &[&str], gpus: u32) -> RunningJob {
        RunningJob {
            job_id: id,
            user: "alice".into(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            gpus,
            start_time: start,
            submit_time: Some(start - 30),
            ..RunningJob::default()
        }
    }

    fn snapshot(time: i64, pending: Vec<PendingJob>, running: Vec<RunningJob>) -> Snapshot {
        Snapshot {
            time,
            running,
            ..crate::testing::snapshot(
                vec![node("n1", 8, 0, "r1"), node("n2", 8, 0, "r1")],
                pending,
            )
        }
    }

    fn job(id: u32, submit: i64) -> PendingJob {
        PendingJob {
            submit_time: submit,
            ..pending(id, 2)
        }
    }

    #[test]
    fn a_job_is_recorded_from_submission_through_a_requeue_to_its_end() {
        let mut record = Record::new(RecordLimits::default());
        record.observe(&snapshot(100, vec![job(7, 90)], vec![]));
        record.observe(&snapshot(105, vec![], vec![running(7, 103, &["n1"], 2)]));
        record.observe(&snapshot(110, vec![], vec![running(7, 103, &["n1"], 2)]));
        // Requeued: back in the queue.
        record.observe(&snapshot(115, vec![job(7, 90)], vec![]));
        record.observe(&snapshot(120, vec![], vec![running(7, 118, &["n2"], 2)]));
        record.observe(&snapshot(130, vec![], vec![]));
        let jobs = record.jobs();
        assert_eq!(jobs.len(), 1);
        let j = jobs[0];
        assert_eq!((j.submit, j.gpus, j.left), (90, 2, Some(130)));
        let runs: Vec<(i64, Option<i64>, bool, &str)> = j
            .runs
            .iter()
            .map(|r| (r.start, r.end, r.requeued, r.nodes[0].as_str()))
            .collect();
        assert_eq!(
            runs,
            vec![(103, Some(115), true, "n1"), (118, Some(130), false, "n2")]
        );
        assert_eq!(record.span(), Some((100, 130)));
        assert_eq!(record.nodes().len(), 2);
    }

    #[test]
    fn a_running_job_has_no_end_and_a_job_first_seen_running_keeps_its_submission() {
        let mut record = Record::new(RecordLimits::default());
        record.observe(&snapshot(100, vec![], vec![running(3, 95, &["n1"], 1)]));
        let j = record.jobs()[0];
        assert_eq!(j.submit, 65);
        assert_eq!(
            j.runs[0].end, None,
            "no run time of a job that has not ended"
        );
        assert_eq!(j.left, None);
        // Requeued and restarted between two snapshots: the first run ends at the second start.
        record.observe(&snapshot(200, vec![], vec![running(3, 190, &["n2"], 1)]));
        let j = record.jobs()[0];
        assert_eq!(j.runs[0].end, Some(190));
        assert!(j.runs[0].requeued);
        assert_eq!(j.runs[1].end, None);
    }

    #[test]
    fn a_job_cancelled_in_the_queue_leaves_without_a_run() {
        let mut record = Record::new(RecordLimits::default());
        record.observe(&snapshot(100, vec![job(1, 90), job(2, 95)], vec![]));
        record.observe(&snapshot(105, vec![job(2, 95)], vec![]));
        let jobs = record.jobs();
        assert_eq!(jobs[0].job_id, 1);
        assert_eq!((jobs[0].left, jobs[0].runs.len()), (Some(105), 0));
        assert_eq!((jobs[1].job_id, jobs[1].left), (2, None));
    }

    #[test]
    fn jobs_that_left_before_the_window_or_past_the_cap_are_dropped() {
        let limits = RecordLimits {
            window_s: 100,
            max_jobs: 3,
        };
        let mut record = Record::new(limits);
        record.observe(&snapshot(0, vec![job(1, 0), job(2, 0)], vec![]));
        record.observe(&snapshot(10, vec![job(2, 0)], vec![]));
        assert_eq!(record.len(), 2);
        // Job 1 left at 10: gone once the window has moved past it.
        record.observe(&snapshot(111, vec![job(2, 0)], vec![]));
        assert_eq!(
            record.jobs().iter().map(|j| j.job_id).collect::<Vec<_>>(),
            vec![2]
        );
        assert_eq!(record.span(), Some((11, 111)));
        // Over the cap: the earliest to leave go first, never a job still open.
        let queue = |ids: &[u32]| ids.iter().map(|&i| job(i, 100)).collect();
        record.observe(&snapshot(112, queue(&[2, 3, 4, 5]), vec![]));
        record.observe(&snapshot(113, queue(&[4, 5]), vec![]));
        let ids: Vec<u32> = record.jobs().iter().map(|j| j.job_id).collect();
        assert_eq!(ids, vec![3, 4, 5], "job 2 left first and went first");
        // An older snapshot than the latest teaches nothing.
        let before = record.clone();
        record.observe(&snapshot(50, vec![], vec![]));
        assert_eq!(record, before);
    }

    #[test]
    fn a_record_reads_back_as_it_was_written() {
        let mut record = Record::new(RecordLimits::default());
        let mut hinted = job(4, 80);
        hinted.hints = Hints::from_comment(Some("cinch:app=bert,ckpt=yes"));
        record.observe(&snapshot(100, vec![job(1, 90), hinted], vec![]));
        let mut started = running(4, 101, &["n1", "n2"], 2);
        started.requeue = true;
        record.observe(&snapshot(105, vec![], vec![started]));
        let mut text = Vec::new();
        record.write(&mut text).unwrap();
        let read = Record::read(&text[..], RecordLimits::default()).unwrap();
        assert_eq!(read, record);
        let four = read.jobs().into_iter().find(|j| j.job_id == 4).unwrap();
        assert!(four.opted_in());
        let header = String::from_utf8(text.clone()).unwrap();
        assert!(header.starts_with("{\"cinch_record\":1,"), "{header}");
    }

    #[test]
    fn a_bad_record_is_an_error_naming_its_line() {
        let read = |text: &str| {
            Record::read(text.as_bytes(), RecordLimits::default())
                .unwrap_err()
                .to_string()
        };
        assert!(read("").contains("line 1: empty"));
        assert!(read("{\"jobs\": []}").contains("line 1: not a cinch record header"));
        let header = |jobs: usize| {
            format!("{{\"cinch_record\":1,\"from\":0,\"to\":100,\"window_s\":100,\"jobs\":{jobs},\"nodes\":[]}}\n")
        };
        let job = "{\"job_id\":1,\"user\":\"a\",\"submit\":0,\"gpus\":1,\"runs\":[{\"start\":10,\"nodes\":[\"n1\"],\"gpus\":1,\"end\":5}],\"left\":20}";
        let err = read(&format!("{}{job}\n", header(1)));
        assert!(
            err.contains("line 2: job 1: run 0 ends before it starts"),
            "{err}"
        );
        let ok = job.replace("\"end\":5", "\"end\":15");
        let err = read(&format!("{}{ok}\n", header(2)));
        assert!(err.contains("the header says 2 jobs but 1 follow"), "{err}");
        let err = read(&format!(
            "{}{}\n",
            header(1),
            ok.replace("\"left\":20", "\"left\":200")
        ));
        assert!(err.contains("after the record's latest snapshot"), "{err}");
        let err = read(&format!(
            "{}{}\n",
            header(1),
            ok.replace("\"user\"", "\"usr\"")
        ));
        assert!(err.contains("line 2: not a recorded job"), "{err}");
        assert!(Record::read(
            format!("{}{ok}\n", header(1)).as_bytes(),
            RecordLimits::default()
        )
        .is_ok());
    }
}
