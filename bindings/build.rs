//! Generates raw bindings from the *installed* `<slurm/slurm.h>` and publishes the Slurm version
//! it was built against, so the plugin can export the matching `plugin_version` and `job_modify`
//! signature.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// Where a Slurm install keeps its headers; `SLURM_INCLUDE_DIR` overrides for non-standard builds.
fn include_dir() -> PathBuf {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    match env::var_os("SLURM_INCLUDE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from("/usr/include"),
    }
}

/// Reads `SLURM_VERSION_NUMBER` (e.g. `0x160508` for 22.05.8) from slurm_version.h.
fn version_number(include: &Path) -> u32 {
    let header = include.join("slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let text = fs::read_to_string(&header).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}. Install Slurm's development headers \
             (Debian: apt-get install libslurm-dev) or set SLURM_INCLUDE_DIR.",
            header.display()
        )
    });
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("#define SLURM_VERSION_NUMBER"))
        .find_map(|value| {
            let value = value.trim();
            let hex = value.strip_prefix("0x").unwrap_or(value);
            u32::from_str_radix(hex, 16).ok()
        })
        .unwrap_or_else(|| panic!("no SLURM_VERSION_NUMBER in {}", header.display()))
}

/// The newest release whose ABI this crate knows. 25.05 changed the topology RPC
/// (`slurm_load_topo` takes a topology name and its answer no longer has `topo_array`), and 25.11
/// replaced `job_desc_msg_t.job_id`; building against them needs the bindings extended first
/// (docs/install.md, "Slurm versions").
const NEWEST_KNOWN: u32 = 0x18_0b_ff;

fn main() {
    let include = include_dir();
    let version = version_number(&include);
    if version > NEWEST_KNOWN {
        panic!(
            "Slurm {}.{:02}.{} (headers in {}) is newer than the releases cinch's bindings know \
             (22.05 to 24.11): 25.05 changed the topology RPC and 25.11 job_desc_msg_t. See \
             docs/install.md, \"Slurm versions\", to add a release.",
            version >> 16,
            (version >> 8) & 0xff,
            version & 0xff,
            include.display()
        );
    }
    // Slurm 24.11 dropped slurm_get_errno() (its API sets errno itself).
    println!("cargo::rustc-check-cfg=cfg(slurm_has_get_errno)");
    let slurm_h = fs::read_to_string(include.join("slurm/slurm.h")).unwrap_or_default();
    if slurm_h.contains("slurm_get_errno") {
        println!("cargo:rustc-cfg=slurm_has_get_errno");
    }
    // From 23.11 the topology RPC carries the topology plugin's own records (tree switches or
    // blocks) behind `topo_info`; `topo_array` stays empty.
    println!("cargo::rustc-check-cfg=cfg(slurm_topo_plugin_data)");
    if slurm_h.contains("dynamic_plugin_data_t *topo_info;") {
        println!("cargo:rustc-cfg=slurm_topo_plugin_data");
    }
    // From 23.11: slurmctld's `slurmctld_primary` is a bool (an int before), and GRES in TRES
    // strings are spelled `gres/gpu:2` (`gres:gpu:2` before), which slurmctld requires of a job
    // a job_submit plugin or an update changes.
    println!("cargo::rustc-check-cfg=cfg(slurm_2311)");
    if version >= 0x17_0b_00 {
        println!("cargo:rustc-cfg=slurm_2311");
    }
    // From 24.11 a block record of topology/block carries `aggregated` and `size` (23.11 and
    // 24.05: index, name and nodes only), which changes its layout and the array's stride.
    println!("cargo::rustc-check-cfg=cfg(slurm_2411)");
    if version >= 0x18_0b_00 {
        println!("cargo:rustc-cfg=slurm_2411");
    }
    // Read by dependents' build scripts as DEP_SLURM_VERSION_NUMBER.
    println!("cargo:version_number={version}");
    println!("cargo:rerun-if-changed=wrapper.h");

    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_type("job_desc_msg_t")
        .allowlist_type("job_info_msg_t")
        .allowlist_type("node_info_msg_t")
        .allowlist_type("slurm_job_info_t")
        .allowlist_type("node_info_t")
        .allowlist_type("job_states")
        .allowlist_type("node_states")
        .allowlist_type("slurm_err_t")
        .allowlist_type("topo_info_response_msg_t")
        .allowlist_type("topo_info_t")
        .allowlist_type("dynamic_plugin_data_t")
        .allowlist_type("topology_plugin_type")
        .allowlist_function("slurm_load_jobs")
        .allowlist_function("slurm_load_job")
        .allowlist_function("slurm_load_node")
        .allowlist_function("slurm_load_topo")
        .allowlist_function("slurm_load_partitions")
        .allowlist_function("slurm_free_partition_info_msg")
        .allowlist_function("slurm_populate_node_partitions")
        .allowlist_function("slurm_update_job")
        .allowlist_function("slurm_requeue")
        .allowlist_function("slurm_init_job_desc_msg")
        .allowlist_function("slurm_free_job_info_msg")
        .allowlist_function("slurm_free_node_info_msg")
        .allowlist_function("slurm_free_topo_info_msg")
        .allowlist_function("slurm_get_errno")
        .allowlist_function("slurm_strerror")
        // The SPANK plugin (`--cinch-*` options for sbatch/salloc/srun).
        .allowlist_type("spank_option")
        .allowlist_function("spank_option_register")
        .allowlist_function("spank_context")
        .allowlist_var("SLURM_VERSION_NUMBER")
        .allowlist_var("SLURM_SUCCESS")
        .allowlist_var("SLURM_ERROR")
        .allowlist_var("NO_VAL.*")
        .allowlist_var("INFINITE.*")
        .allowlist_var("NICE_OFFSET")
        .allowlist_var("SHOW_.*")
        .allowlist_var("JOB_STATE_BASE")
        .allowlist_var("NODE_STATE_BASE")
        .allowlist_var("NODE_STATE_FLAGS")
        .allowlist_var("ESLURM_.*")
        .default_enum_style(bindgen::EnumVariation::ModuleConsts)
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .expect("bindgen failed on <slurm/slurm.h>; is libclang-dev installed?");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("slurm_bindings.rs"))
        .expect("cannot write bindings");
}
