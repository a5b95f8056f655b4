//! Slurm accounting exports, so an admin can replay their own cluster's history under each
//! policy. Two forms:
//!
//! - `sacct -P` (pipe-separated, header line), made with
//!   `sacct -a -X -P -S <start> -E <end> --format=JobID,JobName,User,Submit,Start,End,Timelimit,AllocTRES,State`
//!   ([`SACCT_FIELDS`]; the columns may come in any order, JobName/User/Timelimit/State may be
//!   left out);
//! - `sacct --json` (Slurm 22.05's `{"jobs": [...]}` with `time.submission/start/end/limit`
//!   and `tres.allocated`; numbers may also be `{"number": N}` objects as newer Slurm writes).
//!
//! A job's GPUs are the `gres/gpu` of its allocated TRES (typed `gres/gpu:<type>` counts are
//! summed when the untyped total is absent); its run time is End - Start. Jobs that never
//! started, are still running, or had no GPUs are skipped and counted. Times are read as UTC.

use cinch_core::slurm::slurm_time;
use std::path::Path;

use serde_json::Value;

use super::{CsvTable, Trace, TraceJob};
use crate::SimError;

/// The `--format` list the `sacct -P` reader is documented for.
pub const SACCT_FIELDS: &str = "JobID,JobName,User,Submit,Start,End,Timelimit,AllocTRES,State";

pub fn read_sacct_parsable(path: &Path) -> Result<Trace, SimError> {
    let table = CsvTable::read_with(path, b'|')?;
    let id = table.column("JobID")?;
    let (submit, start, end, tres) = (
        table.column("Submit")?,
        table.column("Start")?,
        table.column("End")?,
        table.column("AllocTRES")?,
    );
    let name = table.optional_column("JobName");
    let user = table.optional_column("User");
    let limit = table.optional_column("Timelimit");
    let state = table.optional_column("State");
    let mut trace = Trace::default();
    for row in table.rows() {
        let job_id = row.get(id);
        if job_id.contains('.') {
            trace.skip("job step (export with -X)");
            continue;
        }
        let submit = parse_time(row.get(submit))
            .map_err(|e| row.error(format!("column 'Submit': {e}")))?
            .ok_or_else(|| row.error("column 'Submit' is empty or Unknown"))?;
        let Some(start) =
            parse_time(row.get(start)).map_err(|e| row.error(format!("column 'Start': {e}")))?
        else {
            trace.skip("never started");
            continue;
        };
        let Some(end) =
            parse_time(row.get(end)).map_err(|e| row.error(format!("column 'End': {e}")))?
        else {
            trace.skip("still running (no End)");
            continue;
        };
        let gpus = cinch_core::slurm::gres::tres_gpus(row.get(tres))
            .map_err(|e| row.error(format!("column 'AllocTRES': {e}")))?;
        if gpus == 0 {
            trace.skip("no GPUs");
            continue;
        }
        if end < start {
            return Err(row.error(format!("End {end} is before Start {start}")));
        }
        let time_limit = match limit {
            Some(c) => parse_duration(row.get(c))
                .map_err(|e| row.error(format!("column 'Timelimit': {e}")))?,
            None => None,
        };
        let job_name = name
            .map(|c| row.get(c).to_string())
            .filter(|n| !n.is_empty());
        let name = match &job_name {
            Some(n) => format!("{job_id} {n}"),
            None => job_id.to_string(),
        };
        // `TIMEOUT`, or `CANCELLED by 0` and the like: the first word is the state.
        let timed_out = state.is_some_and(|c| {
            row.get(c)
                .split_whitespace()
                .next()
                .is_some_and(|s| s.eq_ignore_ascii_case("TIMEOUT"))
        });
        let run_time =
            super::run_of_ended_job(((end - start) as f64).max(1.0), time_limit, timed_out);
        trace.jobs.push(TraceJob {
            user: user.map(|c| row.get(c).to_string()).unwrap_or_default(),
            job_name,
            time_limit,
            timed_out: timed_out && time_limit.is_some(),
            ..TraceJob::new(name, submit, gpus, run_time)
        });
    }
    Ok(trace.normalise())
}

pub fn read_sacct_json(path: &Path) -> Result<Trace, SimError> {
    let text = std::fs::read_to_string(path).map_err(|e| SimError::io(path, e))?;
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| SimError::parse(path, e.line(), format!("not JSON: {e}")))?;
    let jobs = doc
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| SimError::parse(path, 1, "no \"jobs\" array (expected sacct --json)"))?;
    let mut trace = Trace::default();
    for (index, job) in jobs.iter().enumerate() {
        let job_id = job.get("job_id").and_then(number).unwrap_or(-1.0);
        let bad = |what: String| {
            SimError::Invalid(format!(
                "{}: jobs[{index}] (job_id {job_id}): {what}",
                path.display()
            ))
        };
        let time = job
            .get("time")
            .ok_or_else(|| bad("no \"time\" object".into()))?;
        let field = |name: &str| time.get(name).and_then(number).filter(|&t| t > 0.0);
        let submit = field("submission").ok_or_else(|| bad("no time.submission".into()))?;
        let Some(start) = field("start") else {
            trace.skip("never started");
            continue;
        };
        let Some(end) = field("end") else {
            trace.skip("still running (no End)");
            continue;
        };
        if end < start {
            return Err(bad(format!("time.end {end} is before time.start {start}")));
        }
        let allocated = job
            .get("tres")
            .and_then(|t| t.get("allocated"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        // Each entry as its TRES name (`gres/gpu`, `gres/gpu:a100`), read by the core's rule.
        let entries: Vec<(String, f64)> = allocated
            .iter()
            .map(|tres| {
                let kind = tres.get("type").and_then(Value::as_str).unwrap_or("");
                let name = tres.get("name").and_then(Value::as_str).unwrap_or("");
                let count = tres.get("count").and_then(number).unwrap_or(0.0);
                (format!("{kind}/{name}"), count)
            })
            .collect();
        let gpus =
            cinch_core::slurm::gres::allocated_gpus(entries.iter().map(|(n, c)| (n.as_str(), *c)));
        if !(gpus >= 0.0 && gpus.fract() == 0.0) {
            return Err(bad(format!("GPU count {gpus} is not a whole number")));
        }
        if gpus == 0.0 {
            trace.skip("no GPUs");
            continue;
        }
        // time.limit is minutes; Slurm writes a huge or unset value for "no limit".
        let time_limit = time
            .get("limit")
            .and_then(number)
            .filter(|&m| m > 0.0 && m < f64::from(u32::MAX))
            .map(|m| m * 60.0);
        let text = |key: &str| job.get(key).and_then(Value::as_str).unwrap_or("");
        // 22.05: "state": {"current": "TIMEOUT"}; newer releases: "current": ["TIMEOUT"].
        let current = job.get("state").and_then(|s| s.get("current"));
        let timed_out = match current {
            Some(Value::String(s)) => s.eq_ignore_ascii_case("TIMEOUT"),
            Some(Value::Array(a)) => a.iter().any(|s| {
                s.as_str()
                    .is_some_and(|s| s.eq_ignore_ascii_case("TIMEOUT"))
            }),
            _ => false,
        };
        trace.jobs.push(TraceJob {
            user: text("user").to_string(),
            job_name: Some(text("name").to_string()).filter(|n| !n.is_empty()),
            time_limit,
            timed_out: timed_out && time_limit.is_some(),
            ..TraceJob::new(
                format!("{job_id} {}", text("name")),
                submit as i64,
                gpus as u32,
                super::run_of_ended_job((end - start).max(1.0), time_limit, timed_out),
            )
        });
    }
    Ok(trace.normalise())
}

/// A JSON number, or Slurm's `{"set": true, "number": N}` form.
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Object(o) => {
            if o.get("set").and_then(Value::as_bool) == Some(false)
                || o.get("infinite").and_then(Value::as_bool) == Some(true)
            {
                return None;
            }
            o.get("number").and_then(Value::as_f64)
        }
        _ => None,
    }
}

/// `YYYY-MM-DDTHH:MM:SS` as Unix seconds (read as UTC); `None` for `Unknown`, `None` or empty.
fn parse_time(s: &str) -> Result<Option<i64>, String> {
    if s.is_empty() || s.eq_ignore_ascii_case("unknown") || s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    slurm_time::parse_time(s).map(Some)
}

/// Slurm's `[D-]HH:MM:SS`, `MM:SS` or `MM` as seconds; `None` for UNLIMITED/Partition_Limit.
fn parse_duration(s: &str) -> Result<Option<f64>, String> {
    if s.is_empty()
        || s.eq_ignore_ascii_case("unlimited")
        || s.eq_ignore_ascii_case("partition_limit")
        || s.eq_ignore_ascii_case("invalid")
    {
        return Ok(None);
    }
    slurm_time::parse_duration(s).map(|seconds| Some(seconds as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::test_files;

    #[test]
    fn parsable_export_reads_gpus_times_and_limits() {
        let path = test_files::write(
            "sacct.txt",
            "JobID|JobName|User|Submit|Start|End|Timelimit|AllocTRES|State\n\
             101|bert|ann|2024-03-01T10:00:00|2024-03-01T10:05:00|2024-03-01T12:05:00|1-00:00:00|billing=16,cpu=16,gres/gpu=8,node=1|COMPLETED\n\
             101.batch|batch||2024-03-01T10:00:00|2024-03-01T10:05:00|2024-03-01T12:05:00||cpu=16|COMPLETED\n\
             102|prep|bob|2024-03-01T10:01:00|2024-03-01T10:01:00|2024-03-01T10:02:00|10:00|cpu=2,node=1|COMPLETED\n\
             103|resnet|bob|2024-03-01T09:59:00|Unknown|Unknown|UNLIMITED|gres/gpu:a100=2,gres/gpu:v100=1|PENDING\n\
             104|gpt|ann|2024-03-01T11:00:00|2024-03-01T11:00:30|2024-03-01T11:30:30|30:00|gres/gpu:a100=4|TIMEOUT\n",
        );
        let trace = read_sacct_parsable(&path).unwrap();
        type Row<'a> = (&'a str, &'a str, i64, u32, f64, Option<f64>, bool);
        let jobs: Vec<Row> = trace
            .jobs
            .iter()
            .map(|j| {
                (
                    j.name.as_str(),
                    j.user.as_str(),
                    j.submit,
                    j.gpus,
                    j.run_time,
                    j.time_limit,
                    j.timed_out,
                )
            })
            .collect();
        // Job 104 was killed at its limit (TIMEOUT): it needed more, so it runs just past it.
        assert_eq!(
            jobs,
            vec![
                ("101 bert", "ann", 0, 8, 7200.0, Some(86_400.0), false),
                ("104 gpt", "ann", 3600, 4, 1801.0, Some(1800.0), true),
            ]
        );
        assert_eq!(trace.skipped.len(), 3, "{:?}", trace.skipped);
    }

    #[test]
    fn a_bad_date_names_line_and_column() {
        let path = test_files::write(
            "sacct-bad.txt",
            "JobID|Submit|Start|End|AllocTRES\n1|2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T11:00:00|gres/gpu=1\n2|yesterday|2024-03-01T10:00:00|2024-03-01T11:00:00|gres/gpu=1\n",
        );
        let err = read_sacct_parsable(&path).unwrap_err().to_string();
        assert!(
            err.contains("sacct-bad.txt:3:") && err.contains("Submit") && err.contains("yesterday"),
            "{err}"
        );
        let path = test_files::write("sacct-nocol.txt", "JobID|Submit|Start|End\n");
        let err = read_sacct_parsable(&path).unwrap_err().to_string();
        assert!(err.contains("AllocTRES"), "{err}");
    }

    #[test]
    fn json_export_reads_both_number_forms() {
        let path = test_files::write(
            "sacct.json",
            r#"{"jobs": [
              {"job_id": 7, "name": "bert", "user": "ann",
               "time": {"submission": 1709287200, "start": 1709287500, "end": 1709294700, "limit": 1440},
               "tres": {"allocated": [{"type": "cpu", "name": "", "count": 16},
                                      {"type": "gres", "name": "gpu", "count": 8}]}},
              {"job_id": 8, "name": "wait", "user": "bob",
               "time": {"submission": 1709287300, "start": 0, "end": 0, "limit": 60},
               "tres": {"allocated": []}},
              {"job_id": 9, "name": "gpt", "user": "bob",
               "time": {"submission": {"set": true, "number": 1709290800},
                        "start": {"set": true, "number": 1709290800},
                        "end": {"set": true, "number": 1709292600},
                        "limit": {"set": false, "infinite": true, "number": 0}},
               "tres": {"allocated": [{"type": "gres", "name": "gpu:a100", "count": 2}]}}
            ]}"#,
        );
        let trace = read_sacct_json(&path).unwrap();
        let jobs: Vec<(i64, u32, f64, Option<f64>)> = trace
            .jobs
            .iter()
            .map(|j| (j.submit, j.gpus, j.run_time, j.time_limit))
            .collect();
        assert_eq!(
            jobs,
            vec![(0, 8, 7200.0, Some(86_400.0)), (3600, 2, 1800.0, None)]
        );
        let bad = test_files::write("sacct-bad.json", "{\"jobs\": [\n{\"job_id\": 1,}\n]}");
        let err = read_sacct_json(&bad).unwrap_err().to_string();
        assert!(err.contains("sacct-bad.json:2:"), "{err}");
    }

    #[test]
    fn dates_and_durations_parse_as_slurm_writes_them() {
        assert_eq!(parse_time("1970-01-01T00:00:00"), Ok(Some(0)));
        assert_eq!(parse_time("2024-03-01T10:00:00"), Ok(Some(1_709_287_200)));
        assert_eq!(parse_time("Unknown"), Ok(None));
        assert!(parse_time("2024-13-01T10:00:00").is_err());
        assert_eq!(parse_duration("2-03:04:05"), Ok(Some(183_845.0)));
        assert_eq!(parse_duration("45"), Ok(Some(2700.0)));
        assert_eq!(parse_duration("UNLIMITED"), Ok(None));
        assert!(parse_duration("soon").is_err());
    }
}
