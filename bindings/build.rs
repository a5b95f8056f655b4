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

/// The newest release whose ABI this crate knows (26.05.x). A newer release may move what cinch
/// reads outside the public headers (the topology records), so the build stops rather than guess;
/// docs/install.md, "Slurm versions", says how to add one.
const NEWEST_KNOWN: u32 = 0x1a_05_ff;

/// Emits `cfg` `name` when the release is at least `since` (a SLURM_VERSION_NUMBER).
fn cfg_from(name: &str, version: u32, since: u32) {
    println!("cargo::rustc-check-cfg=cfg({name})");
    if version >= since {
        println!("cargo:rustc-cfg={name}");
    }
}

fn main() {
    let include = include_dir();
    let version = version_number(&include);
    if version > NEWEST_KNOWN {
        panic!(
            "Slurm {}.{:02}.{} (headers in {}) is newer than the releases cinch's bindings know \
             (22.05 to 26.05). See docs/install.md, \"Slurm versions\", to add a release.",
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
    cfg_from("slurm_2311", version, 0x17_0b_00);
    // From 24.11 a block record of topology/block carries `aggregated` and `size` (23.11 and
    // 24.05: index, name and nodes only), which changes its layout and the array's stride.
    cfg_from("slurm_2411", version, 0x18_0b_00);
    // From 25.05 `slurm_load_topo` takes a topology's name (topology.yaml may define several)
    // and its answer holds only the plugin's records (`topo_info`).
    cfg_from("slurm_2505", version, 0x19_05_00);
    // From 25.11 `job_desc_msg_t.job_id` is `step_id.job_id`, and the answer's `topo_info` is a
    // `void *` (still a `dynamic_plugin_data_t`, which left the public headers).
    cfg_from("slurm_2511", version, 0x19_0b_00);
    // From 26.05 the job calls (`slurm_requeue`, `slurm_load_job`, ...) take a `slurm_step_id_t`,
    // and `slurm_free_ctl_conf` is `slurm_free_conf`.
    cfg_from("slurm_2605", version, 0x1a_05_00);
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
        .allowlist_type("slurm_step_id_t")
        // The topology plugins' records, restated in wrapper.h.
        .allowlist_type("cinch_.*")
        .allowlist_function("slurm_load_jobs")
        .allowlist_function("slurm_load_job")
        // From 23.02: every job's id and state in one small answer (the agent's delta reads).
        .allowlist_type("job_state_response_msg_t")
        .allowlist_function("slurm_load_job_state")
        .allowlist_function("slurm_free_job_state_response_msg")
        .allowlist_function("slurm_load_node")
        .allowlist_function("slurm_load_topo")
        .allowlist_function("slurm_load_partitions")
        .allowlist_function("slurm_free_partition_info_msg")
        .allowlist_function("slurm_populate_node_partitions")
        .allowlist_function("slurm_update_job")
        .allowlist_function("slurm_requeue")
        .allowlist_function("slurm_kill_job")
        .allowlist_function("slurm_init_job_desc_msg")
        .allowlist_function("slurm_free_job_info_msg")
        .allowlist_function("slurm_free_node_info_msg")
        .allowlist_function("slurm_free_topo_info_msg")
        // slurmctld's configuration: AuthInfo's credential lifetime sets the requeue delay.
        .allowlist_function("slurm_load_ctl_conf")
        .allowlist_function("slurm_free_ctl_conf")
        .allowlist_function("slurm_free_conf")
        .allowlist_function("slurm_get_errno")
        .allowlist_function("slurm_strerror")
        // The SPANK plugin (`--cinch-*` options for sbatch/salloc/srun).
        .allowlist_type("spank_option")
        .allowlist_function("spank_option_register")
        .allowlist_function("spank_context")
        // In slurmstepd: which job, step and task a task is (the watcher starts with the batch
        // script's task).
        .allowlist_function("spank_remote")
        .allowlist_function("spank_get_item")
        .allowlist_function("spank_getenv")
        .allowlist_type("spank_item_t")
        .allowlist_var("SLURM_BATCH_SCRIPT")
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
        .layout_tests(true)
        .generate_comments(false)
        .generate()
        .expect("bindgen failed on <slurm/slurm.h>; is libclang-dev installed?");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("slurm_bindings.rs"))
        .expect("cannot write bindings");
}
