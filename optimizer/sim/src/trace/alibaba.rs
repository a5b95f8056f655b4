//! The Alibaba GPU v2023 pod list (`../shared/traces/alibaba_gpu_v2023_pods.csv`): columns
//! `job_id, submit_time, duration_s, num_gpus, gpu_milli`, and when present `qos`, `cpu_milli`,
//! `memory_mib` (the request's shape stands for the job name the trace does not give: pods of
//! one deployment ask alike) and `pod_phase` (`Running` pods were cut by the trace's end).
//! Pods that never ran (no `duration_s`) and CPU-only pods are skipped and counted; a pod
//! asking for a fraction of a GPU runs on one whole GPU (the simulator does not share GPUs).

use std::path::Path;

use super::{CsvTable, Trace, TraceJob};
use crate::SimError;

pub fn read_alibaba_pods(path: &Path) -> Result<Trace, SimError> {
    let table = CsvTable::read(path)?;
    let (id, submit, duration, gpus, milli) = (
        table.column("job_id")?,
        table.column("submit_time")?,
        table.column("duration_s")?,
        table.column("num_gpus")?,
        table.column("gpu_milli")?,
    );
    let (qos, cpu, memory, phase) = (
        table.optional_column("qos"),
        table.optional_column("cpu_milli"),
        table.optional_column("memory_mib"),
        table.optional_column("pod_phase"),
    );
    let mut trace = Trace::default();
    for row in table.rows() {
        let submit: i64 = row.parse(submit)?;
        let run_time: Option<f64> = row.parse_optional(duration)?;
        let gpus: u32 = row.parse(gpus)?;
        let milli: u32 = row.parse_optional(milli)?.unwrap_or(1000);
        if submit < 0 {
            return Err(row.error(format!("submit_time {submit} is negative")));
        }
        let Some(run_time) = run_time else {
            trace.skip("never scheduled (no duration_s), skipped");
            continue;
        };
        if !(run_time.is_finite() && run_time >= 0.0) {
            return Err(row.error(format!("duration_s {run_time} is not a run time")));
        }
        if gpus == 0 {
            trace.skip("CPU-only pods, skipped");
            continue;
        }
        if milli < 1000 {
            trace.skip("fractional-GPU pods, kept, each on a whole GPU");
        }
        let field = |c: Option<usize>| c.map_or("", |c| row.get(c));
        let shape = format!(
            "{}/{gpus}x{milli}m/{}cpu/{}MiB",
            field(qos),
            field(cpu),
            field(memory)
        );
        let ended = !matches!(field(phase), "Running" | "Pending");
        trace.jobs.push(TraceJob {
            // Pods are single-node: all their GPUs on one node.
            gpus_per_node: Some(gpus),
            job_name: Some(shape),
            ended,
            ..TraceJob::new(row.get(id), submit, gpus, run_time.max(1.0))
        });
    }
    Ok(trace.normalise())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::test_files;

    const HEADER: &str = "job_id,submit_time,start_time,end_time,duration_s,wait_s,num_gpus,gpu_milli,gpu_spec,cpu_milli,memory_mib,qos,pod_phase,src_row\n";

    #[test]
    fn pods_become_single_node_jobs_and_the_rest_is_counted() {
        let path = test_files::write(
            "pods.csv",
            &format!(
                "{HEADER}p0,10,10,70,60,0,2,1000,,1,1,LS,Running,2\n\
                 p1,20,,,,,1,1000,,1,1,LS,Pending,3\n\
                 p2,30,30,40,10,0,0,0,,1,1,BE,Succeeded,4\n\
                 p3,40,40,50,10,0,1,460,,1,1,BE,Succeeded,5\n"
            ),
        );
        let trace = read_alibaba_pods(&path).unwrap();
        let jobs: Vec<(&str, i64, u32, Option<u32>)> = trace
            .jobs
            .iter()
            .map(|j| (j.name.as_str(), j.submit, j.gpus, j.gpus_per_node))
            .collect();
        assert_eq!(jobs, vec![("p0", 0, 2, Some(2)), ("p3", 30, 1, Some(1))]);
        assert_eq!(trace.skipped.len(), 3, "{:?}", trace.skipped);
    }

    #[test]
    fn a_bad_gpu_count_names_its_line() {
        let path = test_files::write(
            "badpods.csv",
            &format!("{HEADER}p0,10,10,70,60,0,two,1000,,1,1,LS,Running,2\n"),
        );
        let err = read_alibaba_pods(&path).unwrap_err().to_string();
        assert!(
            err.contains("badpods.csv:2:") && err.contains("num_gpus"),
            "{err}"
        );
    }
}
