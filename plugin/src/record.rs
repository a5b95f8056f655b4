//! What cinch saw of a job at submission, and how it is recorded in the job's AdminComment
//! without clobbering anything an admin put there.
//!
//! AdminComment is used because users cannot set it (slurmctld refuses it from non-admins before
//! job_submit runs), admins can read it with `scontrol show job` / `sacct -o AdminComment`, and
//! slurmctld copies it from the job descriptor into the job record.

pub use cinch_core::enact::admin_comment::{
    replace_segment, segment, RECORD_PREFIX, REQUEUE_OPT_IN, SEPARATOR,
};

use cinch_core::slurm::gres::{GpuRequest, TresError};

/// The request as Slurm handed it to `job_submit`; unset numeric fields are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    pub name: Option<String>,
    pub user_id: Option<u32>,
    pub partition: Option<String>,
    pub account: Option<String>,
    /// `--qos`, if given (not recorded: the agent reads the job's QOS from Slurm).
    pub qos: Option<String>,
    pub min_nodes: Option<u32>,
    pub max_nodes: Option<u32>,
    pub num_tasks: Option<u32>,
    pub time_limit_min: Option<u32>,
    pub gpus: Result<GpuRequest, TresError>,
    /// The user's own `--requeue` (`Some(true)`) or `--no-requeue`; `None` when not given, so
    /// that the cluster's `JobRequeue` default, which also sets Slurm's Requeue flag, is never
    /// taken for the user's consent.
    pub requeue: Option<bool>,
}

impl JobRequest {
    /// One line, `key=value` pairs, stable for tools to parse:
    /// `cinch: gpus=8 gpu_spec=per_node:4 nodes=2 time_limit=60`.
    pub fn record(&self) -> String {
        let mut out = String::from(RECORD_PREFIX);
        match &self.gpus {
            Ok(gpus) => {
                match gpus.total(self.min_nodes, self.num_tasks) {
                    Some(total) => out.push_str(&format!(" gpus={total}")),
                    None => out.push_str(" gpus=unknown"),
                }
                out.push_str(&format!(" gpu_spec={gpus}"));
                let types = gpus.types();
                if !types.is_empty() {
                    out.push_str(&format!(" gpu_types={}", types.join(",")));
                }
            }
            Err(e) => out.push_str(&format!(" gpus=unparsed ({e})")),
        }
        match (self.min_nodes, self.max_nodes) {
            (Some(min), Some(max)) if max != min => out.push_str(&format!(" nodes={min}-{max}")),
            (Some(min), _) => out.push_str(&format!(" nodes={min}")),
            (None, _) => {}
        }
        if let Some(tasks) = self.num_tasks {
            out.push_str(&format!(" tasks={tasks}"));
        }
        if let Some(minutes) = self.time_limit_min {
            out.push_str(&format!(" time_limit={minutes}"));
        }
        if self.requeue == Some(true) {
            out.push(' ');
            out.push_str(REQUEUE_OPT_IN);
        }
        out
    }
}

/// The AdminComment to store: an admin's text is kept as it is and cinch's record goes after it;
/// an earlier cinch record is replaced rather than repeated.
pub fn merge_admin_comment(existing: Option<&str>, record: &str) -> String {
    replace_segment(existing, RECORD_PREFIX, Some(record))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(gpus: Result<GpuRequest, TresError>) -> JobRequest {
        JobRequest {
            name: Some("train".into()),
            user_id: Some(1000),
            partition: None,
            account: None,
            qos: None,
            min_nodes: Some(2),
            max_nodes: Some(2),
            num_tasks: None,
            time_limit_min: Some(60),
            gpus,
            requeue: None,
        }
    }

    #[test]
    fn only_the_users_own_requeue_is_recorded() {
        let gpus = || GpuRequest::parse(None, Some("gres:gpu:1"), None, None);
        for (requeue, recorded) in [(Some(true), true), (Some(false), false), (None, false)] {
            let record = JobRequest {
                requeue,
                ..request(gpus())
            }
            .record();
            assert_eq!(
                record.ends_with(" requeue=yes"),
                recorded,
                "{requeue:?}: {record}"
            );
        }
    }

    #[test]
    fn record_lists_what_was_requested() {
        let gpus = GpuRequest::parse(None, Some("gres:gpu:a100:4"), None, None);
        assert_eq!(
            request(gpus).record(),
            "cinch: gpus=8 gpu_spec=per_node:4 gpu_types=a100 nodes=2 time_limit=60"
        );
    }

    #[test]
    fn record_shows_node_ranges_tasks_and_unknown_totals() {
        let mut req = request(GpuRequest::parse(None, None, Some("gres:gpu:1"), None));
        req.max_nodes = Some(4);
        req.time_limit_min = None;
        assert_eq!(
            req.record(),
            "cinch: gpus=unknown gpu_spec=per_task:1 nodes=2-4"
        );
        req.num_tasks = Some(3);
        assert_eq!(
            req.record(),
            "cinch: gpus=3 gpu_spec=per_task:1 nodes=2-4 tasks=3"
        );
    }

    #[test]
    fn record_says_when_the_gpu_request_could_not_be_parsed() {
        let req = request(GpuRequest::parse(Some("gres:gpu:x:y:z"), None, None, None));
        assert!(req
            .record()
            .starts_with("cinch: gpus=unparsed (GPU entry 'gres:gpu:x:y:z'"));
    }

    #[test]
    fn merge_keeps_the_admins_text() {
        assert_eq!(merge_admin_comment(None, "cinch: gpus=1"), "cinch: gpus=1");
        assert_eq!(
            merge_admin_comment(Some("  "), "cinch: gpus=1"),
            "cinch: gpus=1"
        );
        assert_eq!(
            merge_admin_comment(Some("ticket 42"), "cinch: gpus=1"),
            "ticket 42 | cinch: gpus=1"
        );
    }

    #[test]
    fn merge_replaces_an_earlier_cinch_record_only() {
        assert_eq!(
            merge_admin_comment(Some("ticket 42 | cinch: gpus=1 | other"), "cinch: gpus=2"),
            "ticket 42 | cinch: gpus=2 | other"
        );
        assert_eq!(
            merge_admin_comment(Some("cinch: gpus=1"), "cinch: gpus=2"),
            "cinch: gpus=2"
        );
    }
}
