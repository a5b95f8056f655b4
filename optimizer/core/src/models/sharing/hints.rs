//! What a job says for sharing: its opt-in, its memory and busy estimates, and their checks.

/// The shared job's environment variable that carries its GPU memory cap, MiB, from job_submit
/// to cinch's SPANK plugin, which asks the driver to enforce it on the job's cgroup.
pub const DRIVER_CAP_VAR: &str = "CINCH_GPU_MEM_CAP_MIB";

/// The opt-in: `share=yes`.
pub const HINT_SHARE: &str = "share";
/// The user's estimate of the job's peak GPU memory: `gpu_mem=10G` (`M`, `G`, `T`; a bare
/// number is GiB).
pub const HINT_GPU_MEM: &str = "gpu_mem";
/// The peak the job measured of itself (written by the helper while it runs): what similar later
/// jobs are predicted from.
pub const HINT_GPU_MEM_PEAK: &str = "gpu_mem_peak";
/// The share of time the job keeps its GPU busy when it runs alone (`gpu_busy=0.62` or `62%`):
/// measured by the helper (NVML's utilisation) on a job holding a whole GPU, or stated.
pub const HINT_GPU_BUSY: &str = "gpu_busy";
/// The application hint (`app=bert`), as for run-time prediction.
pub const HINT_APP: &str = "app";
/// The model and batch size a table entry is looked up by (`app=` is the application hint).
pub const HINT_BATCH: &str = "batch";

/// Largest memory size cinch reads (GiB): anything larger is a typo.
pub(super) const MAX_GIB: f64 = 4096.0;

/// Parses a memory size in GiB: `10`, `10G`, `10GiB`, `10GB`, `800M`, `1.5T`.
pub fn parse_gib(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (number, unit) = lower.split_at(digits_end);
    let scale = match unit.trim() {
        "" | "g" | "gb" | "gib" => 1.0,
        "m" | "mb" | "mib" => 1.0 / 1024.0,
        "t" | "tb" | "tib" => 1024.0,
        _ => return Err(format!("'{t}' is not a memory size (e.g. 10G or 800M)")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{t}' is not a memory size (e.g. 10G or 800M)"))?;
    let gib = value * scale;
    if !(gib > 0.0 && gib <= MAX_GIB) {
        return Err(format!("'{t}' is outside 1M-{MAX_GIB:.0}G of GPU memory"));
    }
    Ok(gib)
}

/// Parses a busy fraction: `0.62`, `62%` (from 1% to 100%).
pub fn parse_busy(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (number, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 0.01),
        None => (t, 1.0),
    };
    let busy = number
        .parse::<f64>()
        .map(|v| v * scale)
        .map_err(|_| format!("'{t}' is not a busy fraction (e.g. 0.62 or 62%)"))?;
    if !(0.01..=1.0).contains(&busy) {
        return Err(format!("'{t}' is outside 1%-100%"));
    }
    Ok(busy)
}

/// Whether the user opted in (`share=yes`); a value other than yes/no is an error.
pub fn opted_in(hints: &crate::slurm::job_hints::Hints) -> Result<bool, String> {
    match hints.get(HINT_SHARE).map(|v| v.to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) if v == "yes" => Ok(true),
        Some(v) if v == "no" => Ok(false),
        Some(v) => Err(format!("cinch hint share: '{v}' is not yes or no")),
    }
}

/// Checks the sharing hints a user wrote (at submit time): the opt-in's value, the sizes, and
/// that the job asks for exactly one GPU on one node when it opts in.
pub fn check_hints(
    hints: &crate::slurm::job_hints::Hints,
    one_gpu: bool,
) -> Result<bool, crate::wire::refusal::Refusal> {
    use crate::wire::refusal::Refusal;
    let share = opted_in(hints).map_err(Refusal::Hint)?;
    for key in [HINT_GPU_MEM, HINT_GPU_MEM_PEAK] {
        if let Some(value) = hints.get(key) {
            parse_gib(value).map_err(|e| Refusal::Hint(format!("cinch hint {key}: {e}")))?;
        }
    }
    if let Some(value) = hints.get(HINT_GPU_BUSY) {
        parse_busy(value).map_err(|e| Refusal::Hint(format!("cinch hint {HINT_GPU_BUSY}: {e}")))?;
    }
    if let Some(batch) = hints.get(HINT_BATCH) {
        batch
            .parse::<u32>()
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                Refusal::Hint(format!(
                    "cinch hint batch: '{batch}' is not a positive whole number"
                ))
            })?;
    }
    if share && !one_gpu {
        return Err(Refusal::GpuRequest(
            "cinch hint share: only a job of one GPU on one node can share a GPU \
             (--gpus=1 or --gres=gpu:1)"
                .into(),
        ));
    }
    if share && hints.contains_key(crate::models::elastic::HINT_ELASTIC) {
        return Err(Refusal::Hint(
            "cinch hint share: an elastic job cannot also share a GPU".into(),
        ));
    }
    Ok(share)
}
