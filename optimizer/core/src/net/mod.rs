//! How the plugin and the service reach each other: the optimizer's address, TLS, token files.

pub mod endpoint;
#[cfg(feature = "tls")]
pub mod tls;
pub mod token;

/// The payload of the MUNGE credential a job's watcher proves itself with when it reports the
/// job's progress (`POST /v1/jobs/{job_id}/progress`, docs/api.md): it names the job, so a
/// credential seen on the way is good for nothing else.
pub fn progress_payload(job_id: u32) -> String {
    format!("cinch-progress {job_id}")
}
