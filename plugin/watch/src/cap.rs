//! The driver's per-cgroup GPU memory limit (NVML's `nvmlDeviceSetMemoryLimits_v1`, CUDA 13.4
//! drivers and later, cgroup v2, root only, not on MIG): a shared job's cap on the GPUs it was
//! given, set on the cgroup its task runs in, so that an allocation beyond it fails with CUDA's
//! out-of-memory error in that job alone. Run as root by cinch's SPANK plugin in slurmstepd
//! after each task of a shared job is placed in its cgroup and before it starts
//! (docs/policies/sharing.md, "Memory caps by the driver").
//!
//! The symbol is looked up at run time: a driver without it gets no cap, said in one line.

use std::ffi::{c_char, c_int, c_ulonglong, c_void, CString, OsStr};
use std::path::{Path, PathBuf};

use nvml_wrapper::Nvml;

/// `nvmlSetMemoryLimits_v1_t`: the cgroup directory (its full sysfs path) and the limits, bytes.
#[repr(C)]
struct SetMemoryLimitsV1 {
    name_space: *const c_char,
    soft_limit: c_ulonglong,
    hard_limit: c_ulonglong,
}

/// `nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t, nvmlSetMemoryLimits_v1_t *)`; the device is
/// NVML's opaque handle.
type SetMemoryLimits = unsafe extern "C" fn(*mut c_void, *mut SetMemoryLimitsV1) -> c_int;

/// NVML's "not found": the cgroup has no limit files of its own (the driver's dmem backend,
/// where the cgroup's parent did not enable the controller for it).
const NVML_ERROR_NOT_FOUND: c_int = 6;

/// Where the cap was set, or why not.
#[derive(Debug, PartialEq, Eq)]
pub enum CapOutcome {
    /// The cgroup directory the limit was set on, for each of the job's GPUs.
    Set(Vec<(u32, PathBuf)>),
    NotSet(String),
}

/// Sets `cap_mib` as both limits (soft = hard: the job's share is its own, never borrowed, and
/// never evicted for another's) on `cgroup`, the task's cgroup directory, for each GPU whose
/// minor number is in `minors` (every GPU of the node if none). Where the driver keeps limits only on an ancestor (its dmem
/// backend without the controller enabled below), on the nearest ancestor that takes them, up to
/// `job_dir` (the job's own cgroup) and never above it.
pub fn set_caps(
    lib: Option<&OsStr>,
    minors: &[u32],
    cgroup: &Path,
    job_dir: &Path,
    cap_mib: u64,
) -> CapOutcome {
    if !cgroup.starts_with(job_dir) {
        return CapOutcome::NotSet(format!(
            "{} is not inside the job's cgroup {}",
            cgroup.display(),
            job_dir.display()
        ));
    }
    let mut builder = Nvml::builder();
    if let Some(lib) = lib {
        builder.lib_path(lib);
    }
    let nvml = match builder.init() {
        Ok(n) => n,
        Err(e) => return CapOutcome::NotSet(format!("no NVML on this node ({e})")),
    };
    let driver = nvml
        .sys_driver_version()
        .unwrap_or_else(|_| "of unknown version".into());
    let path = lib.unwrap_or(OsStr::new("libnvidia-ml.so.1"));
    // SAFETY: loading the same NVML library NVML was initialised from; its initialisers are
    // NVML's own and already ran.
    let library = match unsafe { libloading::Library::new(path) } {
        Ok(l) => l,
        Err(e) => return CapOutcome::NotSet(format!("cannot load NVML again ({e})")),
    };
    // SAFETY: the symbol's C signature is NVML's (nvml.h, CUDA 13.4):
    // nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t, nvmlSetMemoryLimits_v1_t *).
    let set: libloading::Symbol<SetMemoryLimits> =
        match unsafe { library.get(b"nvmlDeviceSetMemoryLimits_v1\0") } {
            Ok(s) => s,
            Err(_) => {
                return CapOutcome::NotSet(format!(
                    "driver {driver} has no per-cgroup GPU memory limits \
                     (nvmlDeviceSetMemoryLimits_v1: CUDA 13.4 drivers and later)"
                ))
            }
        };
    let count = nvml.device_count().unwrap_or(0);
    let bytes = cap_mib.saturating_mul(1 << 20);
    let mut set_on = Vec::new();
    // No GPU named (a job on shards: Slurm names none in the step's environment): every GPU
    // of the node. Those the job cannot open (Slurm's device constraint) it never allocates on.
    let every: Vec<u32>;
    let minors = if minors.is_empty() {
        every = (0..count)
            .filter_map(|i| nvml.device_by_index(i).ok()?.minor_number().ok())
            .collect();
        &every
    } else {
        minors
    };
    for &minor in minors {
        let Some(device) = (0..count)
            .filter_map(|i| nvml.device_by_index(i).ok())
            .find(|d| d.minor_number().is_ok_and(|m| m == minor))
        else {
            return CapOutcome::NotSet(format!("NVML shows no GPU /dev/nvidia{minor}"));
        };
        let mut dir = cgroup;
        loop {
            let Ok(name) = CString::new(dir.as_os_str().as_encoded_bytes()) else {
                return CapOutcome::NotSet(format!("{} is not a C string", dir.display()));
            };
            let mut limits = SetMemoryLimitsV1 {
                name_space: name.as_ptr(),
                soft_limit: bytes,
                hard_limit: bytes,
            };
            // SAFETY: the device handle is NVML's, alive while `nvml` is; `limits` and the
            // string it points to outlive the call.
            let rc = unsafe { set(device.handle() as *mut c_void, &mut limits) };
            match rc {
                0 => {
                    set_on.push((minor, dir.to_path_buf()));
                    break;
                }
                NVML_ERROR_NOT_FOUND if dir != job_dir => {
                    dir = dir.parent().unwrap_or(job_dir);
                }
                rc => {
                    return CapOutcome::NotSet(format!(
                        "NVML refused the limit on GPU /dev/nvidia{minor} for {} ({})",
                        dir.display(),
                        nvml_error(rc)
                    ))
                }
            }
        }
    }
    if set_on.is_empty() {
        return CapOutcome::NotSet("the job has no GPU".into());
    }
    CapOutcome::Set(set_on)
}

/// NVML's return codes that this call gives, in words.
fn nvml_error(rc: c_int) -> String {
    match rc {
        2 => "invalid argument: a MIG device, or limits the GPU cannot hold".into(),
        3 => {
            "not supported on this GPU or driver (MIG, or no cgroup v2 memory partitioning)".into()
        }
        4 => "no permission: it must run as root".into(),
        6 => "no cgroup with limit files up to the job's own".into(),
        rc => format!("NVML error {rc}"),
    }
}

/// The line for the job's standard error: what the cap is and what an allocation beyond it
/// does, so that a job that fails on it says why.
pub fn notice(job: u32, cap_mib: u64, minors: &[u32]) -> String {
    let gpus: Vec<String> = minors.iter().map(u32::to_string).collect();
    format!(
        "cinch: job {job} shares its GPU: the driver holds it to {cap_mib} MiB of GPU memory \
         (GPU {}); an allocation beyond that fails with CUDA out of memory in this job alone. \
         To get more, state a larger peak (--cinch-gpu-mem) or run without --cinch-share.",
        gpus.join(",")
    )
}
