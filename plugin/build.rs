//! Picks the `job_modify` signature for the Slurm version the bindings were generated from:
//! 22.05 passes three arguments, 23.02 and later add `char **err_msg`; and whether the agent can
//! read jobs by delta (`slurm_load_job_state`, from 23.02). Tells the release-build
//! test whether Slurm's headers per release are beside this clone (`../shared/slurm/headers`, or
//! `$CINCH_SHARED/slurm/headers`): it is reported as ignored, with the reason, when they are not.

/// 23.02.0 as SLURM_VERSION_NUMBER encodes it.
const SLURM_23_02: u32 = 0x17_02_00;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(shared_slurm_headers)");
    println!("cargo:rerun-if-env-changed=CINCH_SHARED");
    println!("cargo:rerun-if-changed=build.rs");
    let shared = std::env::var_os("CINCH_SHARED")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"))
                .join("../../shared")
        });
    if shared.join("slurm/headers").is_dir() {
        println!("cargo:rustc-cfg=shared_slurm_headers");
    }
    println!("cargo::rustc-check-cfg=cfg(slurm_job_modify_err_msg)");
    println!("cargo:rerun-if-env-changed=DEP_SLURM_VERSION_NUMBER");
    let version: u32 = std::env::var("DEP_SLURM_VERSION_NUMBER")
        .expect("cinch-slurm-ffi publishes DEP_SLURM_VERSION_NUMBER")
        .parse()
        .expect("DEP_SLURM_VERSION_NUMBER is a number");
    if version >= SLURM_23_02 {
        println!("cargo:rustc-cfg=slurm_job_modify_err_msg");
    }
    // From 23.02 `slurm_load_job_state` lists every job's id and state: the agent's delta reads.
    println!("cargo::rustc-check-cfg=cfg(slurm_job_states)");
    if version >= SLURM_23_02 {
        println!("cargo:rustc-cfg=slurm_job_states");
    }
}
