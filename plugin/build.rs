//! Picks the `job_modify` signature for the Slurm version the bindings were generated from:
//! 22.05 passes three arguments, 23.02 and later add `char **err_msg`.

/// 23.02.0 as SLURM_VERSION_NUMBER encodes it.
const SLURM_23_02: u32 = 0x17_02_00;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(slurm_job_modify_err_msg)");
    println!("cargo:rerun-if-env-changed=DEP_SLURM_VERSION_NUMBER");
    let version: u32 = std::env::var("DEP_SLURM_VERSION_NUMBER")
        .expect("cinch-slurm-ffi publishes DEP_SLURM_VERSION_NUMBER")
        .parse()
        .expect("DEP_SLURM_VERSION_NUMBER is a number");
    if version >= SLURM_23_02 {
        println!("cargo:rustc-cfg=slurm_job_modify_err_msg");
    }
}
