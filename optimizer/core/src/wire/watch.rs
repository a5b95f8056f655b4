//! What a job's watcher on its node reports (`POST /v1/jobs/{job_id}/progress`, docs/api.md):
//! numbers only.

use serde::{Deserialize, Serialize};

use crate::wire::snapshot::JobProgress;

/// One report: the job's progress as its output shows it, and how busy its GPUs were over the
/// watcher's last interval; either may be absent (no progress printed, no driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WatchReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<JobProgress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuUse>,
}

/// The job's GPUs over one interval, as the driver (NVML) reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GpuUse {
    /// GPUs sampled.
    pub gpus: u32,
    /// Mean share of the interval a kernel ran, over the GPUs and the samples, 0-100.
    pub busy_percent: u32,
    /// GPU memory in use at the last sample, over the GPUs, MiB.
    pub memory_mib: u64,
}
