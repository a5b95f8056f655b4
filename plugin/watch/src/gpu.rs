//! How busy the job's GPUs are, through the driver's NVML (loaded at run time: where there is
//! no driver the watcher reads progress alone). Sampled every few seconds and averaged over the
//! report's interval: NVML's utilisation is the share of its last sample period (1/6 s to 1 s)
//! a kernel ran.

use std::ffi::OsStr;

use cinch_core::wire::watch::GpuUse;
use nvml_wrapper::Nvml;

pub struct GpuSampler {
    nvml: Nvml,
    /// The job's GPUs as NVML's devices (by index), found by their minor numbers.
    devices: Vec<u32>,
    busy_sum: u64,
    samples: u64,
    memory_mib: u64,
}

impl GpuSampler {
    /// NVML from `lib` (default: the driver's `libnvidia-ml.so.1`), watching the GPUs whose
    /// device files are `/dev/nvidia<minor>` for each of `minors` (Slurm's `SLURM_JOB_GPUS`).
    pub fn open(lib: Option<&OsStr>, minors: &[u32]) -> Result<GpuSampler, String> {
        let mut builder = Nvml::builder();
        if let Some(lib) = lib {
            builder.lib_path(lib);
        }
        let nvml = builder.init().map_err(|e| format!("NVML: {e}"))?;
        let count = nvml.device_count().map_err(|e| format!("NVML: {e}"))?;
        let devices: Vec<u32> = (0..count)
            .filter(|&i| {
                nvml.device_by_index(i)
                    .and_then(|d| d.minor_number())
                    .is_ok_and(|m| minors.contains(&m))
            })
            .collect();
        if devices.is_empty() {
            return Err(format!(
                "NVML shows none of the job's GPUs {minors:?} among its {count}"
            ));
        }
        Ok(GpuSampler {
            nvml,
            devices,
            busy_sum: 0,
            samples: 0,
            memory_mib: 0,
        })
    }

    /// One sample of every GPU of the job.
    pub fn sample(&mut self) {
        let mut memory = 0;
        for &i in &self.devices {
            let Ok(device) = self.nvml.device_by_index(i) else {
                continue;
            };
            if let Ok(u) = device.utilization_rates() {
                self.busy_sum += u64::from(u.gpu.min(100));
                self.samples += 1;
            }
            if let Ok(m) = device.memory_info() {
                memory += m.used / (1 << 20);
            }
        }
        self.memory_mib = memory;
    }

    /// The interval's use, and a new interval begins; `None` without a sample.
    pub fn take(&mut self) -> Option<GpuUse> {
        let samples = std::mem::take(&mut self.samples);
        let busy = std::mem::take(&mut self.busy_sum);
        (samples > 0).then(|| GpuUse {
            gpus: self.devices.len() as u32,
            busy_percent: (busy / samples) as u32,
            memory_mib: self.memory_mib,
        })
    }
}
