//! The Philly CSV (`../shared/traces/philly_vc6c71a0.csv`, columns in that folder's README):
//! `job_id, submit_time, duration_s, num_gpus` are used. Philly names no model, so the
//! simulator assigns each job an application by the documented seeded rule
//! ([`crate::workload::assign_app`]).

use std::path::Path;

use super::{CsvTable, Trace, TraceJob};
use crate::SimError;

pub fn read_philly(path: &Path) -> Result<Trace, SimError> {
    let table = CsvTable::read(path)?;
    let (id, submit, duration, gpus) = (
        table.column("job_id")?,
        table.column("submit_time")?,
        table.column("duration_s")?,
        table.column("num_gpus")?,
    );
    let mut trace = Trace::default();
    for row in table.rows() {
        let submit: i64 = row.parse(submit)?;
        let run_time: f64 = row.parse(duration)?;
        let gpus: u32 = row.parse(gpus)?;
        if submit < 0 {
            return Err(row.error(format!("submit_time {submit} is negative")));
        }
        if !(run_time.is_finite() && run_time >= 0.0) {
            return Err(row.error(format!("duration_s {run_time} is not a run time")));
        }
        if gpus == 0 {
            trace.skip("no GPUs");
            continue;
        }
        // A job that ran for 0 s still went through the scheduler.
        trace
            .jobs
            .push(TraceJob::new(row.get(id), submit, gpus, run_time.max(1.0)));
    }
    Ok(trace.normalise())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::test_files;

    const HEADER: &str =
        "job_id,submit_time,submit_timestamp,duration_s,num_gpus,gpu_time_s,vc,src_row\n";

    #[test]
    fn rows_become_jobs_sorted_and_shifted_to_zero() {
        let path = test_files::write(
            "philly.csv",
            &format!(
                "{HEADER}b,500,x,60,8,480,vc,3\na,100,x,1200,1,1200,vc,2\nc,700,x,5,0,0,vc,4\n"
            ),
        );
        let trace = read_philly(&path).unwrap();
        let jobs: Vec<(&str, i64, u32, f64)> = trace
            .jobs
            .iter()
            .map(|j| (j.name.as_str(), j.submit, j.gpus, j.run_time))
            .collect();
        assert_eq!(jobs, vec![("a", 0, 1, 1200.0), ("b", 400, 8, 60.0)]);
        assert_eq!(trace.skipped, vec![("no GPUs".to_string(), 1)]);
    }

    #[test]
    fn a_bad_row_is_an_error_with_its_line() {
        let path = test_files::write(
            "bad.csv",
            &format!("{HEADER}a,100,x,1200,1,1200,vc,2\nb,200,x,lots,1,0,vc,3\n"),
        );
        let err = read_philly(&path).unwrap_err().to_string();
        assert!(
            err.contains("bad.csv:3:") && err.contains("duration_s") && err.contains("lots"),
            "{err}"
        );
        let path = test_files::write("neg.csv", &format!("{HEADER}a,-5,x,10,1,10,vc,2\n"));
        let err = read_philly(&path).unwrap_err().to_string();
        assert!(
            err.contains("neg.csv:2:") && err.contains("negative"),
            "{err}"
        );
    }

    #[test]
    #[cfg_attr(
        not(shared_traces),
        ignore = "needs ../shared/traces (public data sets, not in the repository)"
    )]
    fn the_shared_philly_sample_reads_whole() {
        let traces =
            crate::shared_dir("traces").expect("../shared/traces was here when this was built");
        let trace = read_philly(&traces.join("philly_vc6c71a0.csv")).unwrap();
        assert_eq!(trace.jobs.len(), 9_953);
        assert!(trace.skipped.is_empty());
        let multi = trace.jobs.iter().filter(|j| j.gpus > 1).count();
        assert_eq!(multi, 899);
    }
}
