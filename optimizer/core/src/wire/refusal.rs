//! Why cinch refuses a submission, by cause: what `job_submit` turns into Slurm's error code.

/// Why a submission is refused, so that the error code Slurm prints beside cinch's message
/// names the same cause (docs/users.md, "When sbatch refuses a job").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A time or duration (a QoS target): Slurm's "Invalid time specified".
    Time(String),
    /// The GPU request itself does not fit what the hints ask for: Slurm's "Invalid generic
    /// resource (gres) specification".
    GpuRequest(String),
    /// A hint's value or a consent it needs (ckpt=yes, --requeue): no Slurm code names that,
    /// so Slurm's generic error, with cinch's message saying what is wrong.
    Hint(String),
}

impl Refusal {
    pub fn message(&self) -> &str {
        match self {
            Refusal::Time(m) | Refusal::GpuRequest(m) | Refusal::Hint(m) => m,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}
