//! The optimizer's record of the recent past (`record.jsonl` in its state directory,
//! cinch_core::learn::record) as a trace: a site's own days become a what-if input.
//!
//! A job's run time is the sum of its runs (a requeued job that checkpoints resumes, so its
//! work adds up); one still running when the record ends gives only a lower bound (`ended` is
//! false, as for a trace cut short). A job whose last run reached its time limit was killed
//! there (TIMEOUT). Its application is its `app` hint, its place in the preemptible set what its
//! user said (`--requeue` with `ckpt=yes`). Jobs that never ran (cancelled, or still waiting when
//! the record ends) are skipped and counted. Times are shifted to the first submission.

use std::path::Path;

use cinch_core::learn::record::{Record, RecordHeader, RecordLimits, RecordedJob, RecordedNode};

use super::{Trace, TraceJob};
use crate::{ClusterSpec, SimError};

/// Whether `first_line` is a record's header.
pub(crate) fn is_record_header(first_line: &str) -> bool {
    first_line.starts_with("{\"cinch_record\"")
}

pub fn read_record(path: &Path) -> Result<Trace, SimError> {
    let file = std::fs::File::open(path).map_err(|e| SimError::io(path, e))?;
    // Everything the file holds: the window it was kept under does not cut it again.
    let limits = RecordLimits::UNBOUNDED;
    let record = Record::read(std::io::BufReader::new(file), limits).map_err(|e| match e {
        cinch_core::learn::record::RecordError::Invalid { line, reason } => {
            SimError::parse(path, line, reason)
        }
        cinch_core::learn::record::RecordError::Io(e) => SimError::io(path, e),
    })?;
    let end = record.span().map_or(0, |(_, to)| to);
    let mut trace = Trace::default();
    for job in record.jobs() {
        match trace_job(job, end) {
            Ok(job) => trace.jobs.push(job),
            Err(reason) => trace.skip(reason),
        }
    }
    Ok(trace.normalise())
}

/// The cluster a record was kept on, as the simulator's nodes (all alike: the GPU count most
/// nodes have; one rack per leaf switch the snapshots named), with notes on what is left out;
/// none for a file that is not a record or names no node with GPUs.
pub fn record_cluster(path: &Path) -> Result<Option<(ClusterSpec, Vec<String>)>, SimError> {
    let file = std::fs::File::open(path).map_err(|e| SimError::io(path, e))?;
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(file), &mut first)
        .map_err(|e| SimError::io(path, e))?;
    if !is_record_header(&first) {
        return Ok(None);
    }
    let header: RecordHeader = serde_json::from_str(first.trim())
        .map_err(|e| SimError::parse(path, 1, format!("not a cinch record header: {e}")))?;
    Ok(cluster_of_nodes(&header.nodes).map(|(spec, notes, _)| (spec, notes)))
}

/// The simulator's cluster for a record's nodes: the nodes with the GPU count most have (the
/// simulator's nodes are alike), one rack per leaf switch they name; with notes on what is left
/// out and the names of the nodes kept, in the simulator's node order. None without GPUs.
pub fn cluster_of_nodes(
    recorded: &[RecordedNode],
) -> Option<(ClusterSpec, Vec<String>, Vec<String>)> {
    // (GPUs per node, nodes)
    let mut groups: Vec<(u32, u32)> = Vec::new();
    for node in recorded.iter().filter(|n| n.gpus > 0) {
        match groups.iter_mut().find(|(g, _)| *g == node.gpus) {
            Some((_, n)) => *n += 1,
            None => groups.push((node.gpus, 1)),
        }
    }
    groups.sort_by_key(|&(g, n)| (std::cmp::Reverse(n), std::cmp::Reverse(g)));
    let &(gpus_per_node, nodes) = groups.first()?;
    let mut notes: Vec<String> = groups[1..]
        .iter()
        .map(|(g, n)| {
            format!("{n} nodes with {g} GPUs left out (the simulator's nodes are alike; {nodes} nodes have {gpus_per_node})")
        })
        .collect();
    // Kept nodes rack by rack (the simulator's racks are runs of consecutive nodes).
    let mut kept: Vec<&RecordedNode> = recorded
        .iter()
        .filter(|n| n.gpus == gpus_per_node)
        .collect();
    kept.sort_by(|a, b| a.rack.cmp(&b.rack));
    let racks: std::collections::BTreeSet<&str> =
        kept.iter().filter_map(|n| n.rack.as_deref()).collect();
    if racks.is_empty() {
        notes.push("no racks in the record: one rack".into());
    }
    let spec = ClusterSpec {
        nodes,
        gpus_per_node,
        racks: (racks.len() as u32).clamp(1, nodes),
    };
    spec.validate().ok()?;
    Some((spec, notes, kept.iter().map(|n| n.name.clone()).collect()))
}

/// One recorded job as the simulator's, or why it is left out.
fn trace_job(job: &RecordedJob, record_end: i64) -> Result<TraceJob, &'static str> {
    let Some(last) = job.runs.last() else {
        return Err(if job.left.is_some() {
            "never started (cancelled in the queue)"
        } else {
            "still waiting when the record ends"
        });
    };
    if job.gpus == 0 {
        return Err("no GPUs (a job sharing a GPU)");
    }
    let run_s: i64 = job
        .runs
        .iter()
        .map(|r| (r.end.unwrap_or(record_end) - r.start).max(0))
        .sum();
    let ended = last.end.is_some() && !last.requeued;
    let limit_s = job.time_limit_min.map(|m| f64::from(m) * 60.0);
    let last_run = (last.end.unwrap_or(record_end) - last.start) as f64;
    // Snapshots see the end up to one interval late: within a minute of the limit is the limit.
    let timed_out = ended && limit_s.is_some_and(|l| last_run >= l - 60.0);
    let run_time = super::run_of_ended_job((run_s as f64).max(1.0), limit_s, timed_out);
    let name = match &job.name {
        Some(n) => format!("{} {n}", job.job_id),
        None => job.job_id.to_string(),
    };
    Ok(TraceJob {
        job_name: job.name.clone(),
        user: job.user.clone(),
        gpus_per_node: job.gpus_per_node,
        time_limit: limit_s,
        app: job.hints.get("app").and_then(|a| a.parse().ok()),
        ended,
        timed_out,
        opted_in: Some(job.opted_in()),
        ..TraceJob::new(name, job.submit, job.gpus, run_time)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::test_files;
    use cinch_core::testing::{cluster, hints, pending, snapshot};
    use cinch_core::wire::snapshot::RunningJob;

    #[test]
    fn a_record_reads_as_a_trace_of_the_jobs_that_ran() {
        let mut record = Record::new(RecordLimits::default());
        let mut first = snapshot(cluster(2, 8, 1), vec![pending(1, 8), pending(2, 1)]);
        first.time = 1000;
        first.pending[0].submit_time = 900;
        first.pending[0].time_limit_min = Some(10);
        first.pending[0].hints = hints(&[("app", "bert"), ("ckpt", "yes")]);
        first.pending[1].submit_time = 990;
        record.observe(&first);
        let run = |id: u32, start: i64, gpus: u32| RunningJob {
            job_id: id,
            nodes: vec!["n1".into()],
            gpus,
            start_time: start,
            requeue: true,
            time_limit_min: Some(10),
            ..RunningJob::default()
        };
        let mut second = first.clone();
        second.time = 1010;
        second.pending.clear();
        second.running = vec![run(1, 1005, 8), run(3, 1008, 1)];
        record.observe(&second);
        // Job 1 is killed at its limit; job 3 still runs when the record ends; job 2 was cancelled.
        let mut third = second.clone();
        third.time = 1610;
        third.running.remove(0);
        record.observe(&third);
        let file = test_files::write("record.jsonl", &{
            let mut text = Vec::new();
            record.write(&mut text).unwrap();
            String::from_utf8(text).unwrap()
        });
        assert_eq!(
            super::super::TraceFormat::detect(&file).unwrap(),
            super::super::TraceFormat::CinchRecord
        );
        let (cluster, notes) = record_cluster(&file).unwrap().unwrap();
        assert_eq!(
            (cluster.nodes, cluster.gpus_per_node, cluster.racks),
            (2, 8, 1)
        );
        assert!(notes.is_empty(), "{notes:?}");
        let trace = read_record(&file).unwrap();
        assert_eq!(
            trace.skipped,
            vec![("never started (cancelled in the queue)".to_string(), 1)]
        );
        let one = &trace.jobs[0];
        assert_eq!((one.submit, one.gpus, one.time_limit), (0, 8, Some(600.0)));
        assert!(one.ended && one.timed_out, "{one:?}");
        assert_eq!(
            one.run_time, 606.0,
            "just past its limit, as the simulator kills it"
        );
        assert_eq!(one.opted_in, Some(true));
        assert_eq!(one.app.map(|a| a.name()), Some("bert"));
        let three = &trace.jobs[1];
        // First seen running: submitted at its start, as far as the record knows.
        assert_eq!(
            (three.submit, three.run_time, three.ended),
            (108, 602.0, false)
        );
        assert_eq!(three.opted_in, Some(false), "--requeue without ckpt=yes");
    }
}
