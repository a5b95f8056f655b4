//! Compute Canada's Cedar GPU jobs (`../shared/traces/computecanada_cedar_gpu_2021.csv`,
//! columns in that folder's README, section 5): real Slurm jobs with their users (anonymised
//! accounts), the time limits the users asked for and how the jobs ended. Used: `job_unique_id`,
//! `account_id` (the user), `submit_time`, `start_time`, `end_time`, `run_time_sec`,
//! `time_limit_sec`, `state`, `gpus`. The trace names no model, so the simulator assigns each job
//! an application by the documented seeded rule, as for Philly.
//!
//! A job that ended as TIMEOUT was killed at its limit: how long it would have run is not known,
//! only that it was longer, so it gets a run time just past its limit and the simulator kills it
//! there too (when it runs at full speed; slower, it is killed with less done). Every other end
//! state (COMPLETED, FAILED, CANCELLED, OUT_OF_MEMORY, NODE_FAIL) ran the recorded time and
//! ended by itself. Times are local and read as UTC; only differences are used.

use std::path::Path;

use cinch_core::slurm::slurm_time;

use super::{CsvTable, Trace, TraceJob};
use crate::SimError;

pub fn read_cedar(path: &Path) -> Result<Trace, SimError> {
    let table = CsvTable::read(path)?;
    let (id, user, submit, start, run, limit, state, gpus) = (
        table.column("job_unique_id")?,
        table.column("account_id")?,
        table.column("submit_time")?,
        table.column("start_time")?,
        table.column("run_time_sec")?,
        table.column("time_limit_sec")?,
        table.column("state")?,
        table.column("gpus")?,
    );
    let mut trace = Trace::default();
    for row in table.rows() {
        let time = |column: usize, what: &str| {
            let text = row.get(column);
            slurm_time::parse_time(&text.replacen(' ', "T", 1))
                .map_err(|e| row.error(format!("column '{what}': {e}")))
        };
        let submit = time(submit, "submit_time")?;
        if row.get(start).is_empty() {
            trace.skip("never started");
            continue;
        }
        time(start, "start_time")?;
        let run_s: f64 = row.parse(run)?;
        let limit_s: f64 = row.parse(limit)?;
        let gpus: u32 = row.parse(gpus)?;
        if !(run_s.is_finite() && run_s >= 0.0) {
            return Err(row.error(format!("run_time_sec {run_s} is not a run time")));
        }
        if !(limit_s.is_finite() && limit_s > 0.0) {
            return Err(row.error(format!("time_limit_sec {limit_s} is not a limit")));
        }
        if gpus == 0 {
            trace.skip("no GPUs");
            continue;
        }
        let timed_out = row.get(state).eq_ignore_ascii_case("TIMEOUT");
        let run_time = super::run_of_ended_job(run_s.max(1.0), Some(limit_s), timed_out);
        trace.jobs.push(TraceJob {
            user: row.get(user).to_string(),
            time_limit: Some(limit_s),
            timed_out,
            ..TraceJob::new(row.get(id), submit, gpus, run_time)
        });
    }
    Ok(trace.normalise())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::test_files;

    const HEADER: &str = "job_unique_id,account_id,partition_id_x,submit_time,start_time,\
        end_time,run_time_sec,time_limit_sec,state,req_cpus,req_mem_total,alloc_nodes,req_tres,gpus\n";

    #[test]
    fn rows_become_jobs_with_users_limits_and_kills() {
        let path = test_files::write(
            "cedar.csv",
            &format!(
                "{HEADER}\
                 2,u7,48,2021-05-01 01:00:00,2021-05-01 02:00:00,2021-05-01 22:00:00,72010,72000,TIMEOUT,2,3800,1,\"cpu=2,gres/gpu=1\",1\n\
                 1,u3,47,2021-05-01 00:00:00,2021-05-01 00:10:00,2021-05-01 00:40:00,1800,43200,COMPLETED,4,8000,1,\"cpu=4,gres/gpu=4\",4\n\
                 3,u3,47,2021-05-01 03:00:00,,,0,3600,CANCELLED,1,100,0,\"cpu=1,gres/gpu=1\",1\n"
            ),
        );
        let trace = read_cedar(&path).unwrap();
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
        assert_eq!(
            jobs,
            vec![
                ("1", "u3", 0, 4, 1800.0, Some(43200.0), false),
                ("2", "u7", 3600, 1, 72011.0, Some(72000.0), true),
            ]
        );
        assert_eq!(trace.skipped, vec![("never started".to_string(), 1)]);
        assert_eq!(
            crate::trace::TraceFormat::detect(&path).unwrap(),
            crate::trace::TraceFormat::Cedar
        );
    }

    #[test]
    fn a_bad_row_is_an_error_with_its_line() {
        let path = test_files::write(
            "cedar-bad.csv",
            &format!(
                "{HEADER}1,u3,47,2021-05-01 00:00:00,2021-05-01 00:10:00,x,1800,0,COMPLETED,4,8000,1,\"gres/gpu=4\",4\n"
            ),
        );
        let err = read_cedar(&path).unwrap_err().to_string();
        assert!(
            err.contains("cedar-bad.csv:2:") && err.contains("time_limit_sec"),
            "{err}"
        );
    }
}
