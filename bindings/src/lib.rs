//! Raw FFI to Slurm for cinch: generated from the installed `<slurm/slurm.h>`, plus declarations
//! for the few libslurmfull functions that slurmctld plugins use but the public headers omit.
//!
//! No logic lives here. Nothing is linked: in a plugin these symbols resolve from the
//! libslurmfull.so that slurmctld has already loaded.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code
)]
#![allow(clippy::all, clippy::undocumented_unsafe_blocks)]

use std::os::raw::{c_char, c_int, c_void};

include!(concat!(env!("OUT_DIR"), "/slurm_bindings.rs"));

/// The Slurm release these bindings were generated for, as `major.minor.micro`.
pub const SLURM_VERSION: (u32, u32, u32) = (
    (SLURM_VERSION_NUMBER >> 16) & 0xff,
    (SLURM_VERSION_NUMBER >> 8) & 0xff,
    SLURM_VERSION_NUMBER & 0xff,
);

/// How a GRES is named in a TRES string (`tres_per_node` and the like) in this release:
/// `gres:gpu:2` up to 23.02, `gres/gpu:2` from 23.11 (which refuses the old spelling in a job a
/// plugin or an update changes: "Invalid Trackable RESource (TRES) specification").
#[cfg(not(slurm_2311))]
pub const GRES_TRES_PREFIX: &str = "gres:";
#[cfg(slurm_2311)]
pub const GRES_TRES_PREFIX: &str = "gres/";

/// `SHOW_ALL` / `SHOW_DETAIL` for the load calls: plain numbers in 22.05's headers,
/// `SLURM_BIT(0)`/`SLURM_BIT(1)` (which bindgen does not expand) from 23.x on; the same values.
pub const SHOW_ALL_FLAG: u16 = 1;
pub const SHOW_DETAIL_FLAG: u16 = 2;

/// The error of the calling thread's last Slurm API call: `slurm_get_errno()` where the headers
/// still have it (up to 24.05), `errno` itself from 24.11 on (what that function returned).
///
/// # Safety
/// Reads thread-local state only; call right after the Slurm call whose error is wanted.
pub unsafe fn last_slurm_errno() -> std::os::raw::c_int {
    #[cfg(slurm_has_get_errno)]
    {
        // SAFETY: reads the calling thread's Slurm errno.
        unsafe { slurm_get_errno() }
    }
    #[cfg(not(slurm_has_get_errno))]
    {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }
}

/// One block of topology/block (23.11+): `cinch_topoinfo_bblock_t` in wrapper.h.
pub type topoinfo_bblock_t = cinch_topoinfo_bblock_t;

impl topoinfo_bblock_t {
    /// Whether this is an aggregated block (a group of base blocks, 24.11+).
    #[cfg(slurm_2411)]
    pub fn is_aggregated(&self) -> bool {
        self.aggregated
    }

    /// Whether this is an aggregated block: there are none before 24.11.
    #[cfg(not(slurm_2411))]
    pub fn is_aggregated(&self) -> bool {
        false
    }
}

/// What a topology RPC answer holds, in any release: tree switches and blocks.
///
/// # Safety
/// `msg` must be a live answer of `slurm_load_topo`; the slices live as long as it.
pub unsafe fn topology_records(
    msg: &topo_info_response_msg_t,
) -> (&[topo_info_t], &[topoinfo_bblock_t]) {
    // SAFETY: arrays of `record_count` records, as Slurm packs them (checked for NULL).
    unsafe fn slice<'a, T>(ptr: *const T, count: u32) -> &'a [T] {
        if ptr.is_null() || count == 0 {
            &[]
        } else {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts(ptr, count as usize) }
        }
    }
    // SAFETY: the caller's contract; the plugin id says which records `data` holds.
    unsafe {
        // Up to 24.11 the answer also carries tree switches of its own (empty from 23.11).
        #[cfg(not(slurm_2505))]
        let switches = slice(msg.topo_array, msg.record_count);
        #[cfg(slurm_2505)]
        let switches: &[topo_info_t] = &[];
        #[cfg(slurm_topo_plugin_data)]
        let plugin = msg
            .topo_info
            .as_ref()
            .map(|info| (info.data as *const c_void, info.plugin_id));
        #[cfg(slurm_2511)]
        let plugin = (msg.topo_info as *const cinch_plugin_data_t)
            .as_ref()
            .map(|info| (info.data as *const c_void, info.plugin_id));
        #[cfg(any(slurm_topo_plugin_data, slurm_2511))]
        if let Some((data, plugin_id)) = plugin {
            if !data.is_null() {
                if plugin_id == topology_plugin_type::TOPOLOGY_PLUGIN_TREE {
                    let tree = &*(data as *const cinch_topoinfo_tree_t);
                    return (slice(tree.topo_array, tree.record_count), &[]);
                }
                if plugin_id == topology_plugin_type::TOPOLOGY_PLUGIN_BLOCK {
                    let blocks = &*(data as *const cinch_topoinfo_block_t);
                    return (switches, slice(blocks.topo_array, blocks.record_count));
                }
            }
        }
        (switches, &[])
    }
}

/// Whether a partition can name its own topology (`Topology=` in slurm.conf, topology.yaml's
/// named topologies): from 25.05.
pub const NAMED_TOPOLOGIES: bool = cfg!(slurm_2505);

/// `slurm_load_topo` for one topology: a NULL `name` is the cluster's default one (topology.yaml's
/// `cluster_default`, or topology.conf's); up to 24.11 there is only that one, and a name is
/// refused with `SLURM_ERROR`.
///
/// # Safety
/// As `slurm_load_topo`: `msg` receives an answer to free with `slurm_free_topo_info_msg`;
/// `name` is NULL or a NUL-terminated string that outlives the call.
pub unsafe fn load_topology(msg: *mut *mut topo_info_response_msg_t, name: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        #[cfg(not(slurm_2505))]
        let rc = if name.is_null() {
            slurm_load_topo(msg)
        } else {
            SLURM_ERROR
        };
        #[cfg(slurm_2505)]
        let rc = slurm_load_topo(msg, name.cast_mut());
        rc
    }
}

/// The topology a partition names (`Topology=`, 25.05+); NULL when it uses the default one (and
/// always before 25.05).
pub fn partition_topology(partition: &partition_info_t) -> *const c_char {
    #[cfg(slurm_2505)]
    let name = partition.topology_name.cast_const();
    #[cfg(not(slurm_2505))]
    let name = {
        let _ = partition;
        std::ptr::null()
    };
    name
}

/// `slurm_requeue` of a whole job by its id: a plain id up to 25.11, a `slurm_step_id_t` (as
/// the headers' `SLURM_STEP_ID_INITIALIZER` with the job id set) from 26.05.
///
/// # Safety
/// A plain RPC; call from a thread allowed to talk to slurmctld.
pub unsafe fn requeue_job(job_id: u32, flags: u32) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        #[cfg(not(slurm_2605))]
        let rc = slurm_requeue(job_id, flags);
        #[cfg(slurm_2605)]
        let rc = slurm_requeue(whole_job(job_id), flags);
        rc
    }
}

/// `slurm_kill_job` of a whole job by its id (`scancel`): a plain id up to 25.11, a
/// `slurm_step_id_t` from 26.05.
///
/// # Safety
/// A plain RPC; call from a thread allowed to talk to slurmctld.
pub unsafe fn kill_job(job_id: u32, signal: u16) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        #[cfg(not(slurm_2605))]
        let rc = slurm_kill_job(job_id, signal, 0);
        #[cfg(slurm_2605)]
        let rc = slurm_kill_job(whole_job(job_id), signal, 0);
        rc
    }
}

/// `slurm_load_job` of one job by its id (all of an array's or heterogeneous job's records when
/// the id is its first): a plain id up to 25.11, a `slurm_step_id_t` from 26.05.
///
/// # Safety
/// A plain RPC; call from a thread allowed to talk to slurmctld. On success `*resp` is Slurm's
/// to free with `slurm_free_job_info_msg`.
pub unsafe fn load_job_by_id(
    resp: *mut *mut job_info_msg_t,
    job_id: u32,
    show_flags: u16,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        #[cfg(not(slurm_2605))]
        let rc = slurm_load_job(resp, job_id, show_flags);
        #[cfg(slurm_2605)]
        let rc = slurm_load_job(resp, whole_job(job_id), show_flags);
        rc
    }
}

/// Frees the configuration `slurm_load_ctl_conf` loaded: `slurm_free_ctl_conf` up to 25.11,
/// `slurm_free_conf` from 26.05.
///
/// # Safety
/// `conf` was loaded by `slurm_load_ctl_conf`, is not freed yet and is not used after.
pub unsafe fn free_conf(conf: *mut slurm_conf_t) {
    // SAFETY: the caller's contract.
    unsafe {
        #[cfg(not(slurm_2605))]
        slurm_free_ctl_conf(conf);
        #[cfg(slurm_2605)]
        slurm_free_conf(conf);
    }
}

/// A whole job as the job calls of 26.05 name it (`SLURM_STEP_ID_INITIALIZER`, job id set).
#[cfg(slurm_2605)]
fn whole_job(job_id: u32) -> slurm_step_id_t {
    slurm_step_id_t {
        sluid: 0,
        job_id,
        step_het_comp: NO_VAL,
        step_id: NO_VAL,
    }
}

/// The job a descriptor names (`NO_VAL` when none): `job_id` up to 25.05, `step_id.job_id`
/// from 25.11.
pub fn job_desc_job_id(desc: &job_desc_msg_t) -> u32 {
    #[cfg(not(slurm_2511))]
    let job_id = desc.job_id;
    #[cfg(slurm_2511)]
    let job_id = desc.step_id.job_id;
    job_id
}

/// Names the job an update descriptor changes: `job_id` up to 25.05, `step_id.job_id` from 25.11.
pub fn set_update_job_id(desc: &mut job_desc_msg_t, job_id: u32) {
    #[cfg(not(slurm_2511))]
    {
        desc.job_id = job_id;
    }
    #[cfg(slurm_2511)]
    {
        desc.step_id.job_id = job_id;
    }
}

/// slurmctld's `slurmctld_primary`, read with the type of the Slurm release built against.
///
/// # Safety
/// Only inside slurmctld, which defines the variable for its whole life (a racy read of a value
/// that only changes at startup is harmless).
pub unsafe fn slurmctld_is_primary() -> bool {
    // SAFETY: the caller runs inside slurmctld; the type matches the headers' release.
    unsafe {
        #[cfg(not(slurm_2311))]
        let primary = std::ptr::read_volatile(std::ptr::addr_of!(slurmctld_primary)) == 1;
        #[cfg(slurm_2311)]
        let primary = std::ptr::read_volatile(std::ptr::addr_of!(slurmctld_primary));
        primary
    }
}

/// slurmctld's `last_job_update`: the time (Unix seconds) of the last change to any job record,
/// what a job load "since" is answered against.
///
/// # Safety
/// Only inside slurmctld. The read is racy by design: an aligned 8-byte load sees either the old
/// or the new time, and a caller that needs certainty loads the jobs.
pub unsafe fn slurmctld_last_job_update() -> i64 {
    // SAFETY: the caller runs inside slurmctld, which defines the variable for its whole life.
    unsafe { i64::from(std::ptr::read_volatile(std::ptr::addr_of!(last_job_update))) }
}

extern "C" {
    /// slurmctld's own (job_mgr.c): when any job record last changed; read it with
    /// [`slurmctld_last_job_update`].
    static last_job_update: std::os::raw::c_long;
    /// `xstrdup()`: a copy in Slurm's allocator, for any string Slurm will later `xfree`.
    pub fn slurm_xstrdup(s: *const c_char) -> *mut c_char;
    /// `xfree(p)`: frees `*p` (if not NULL) and sets it to NULL.
    pub fn slurm_xfree(p: *mut *mut c_void);
    /// Slurm's logger (printf-style; always pass a constant `"%s"` format).
    pub fn slurm_error(fmt: *const c_char, ...);
    pub fn slurm_info(fmt: *const c_char, ...);
    pub fn slurm_verbose(fmt: *const c_char, ...);
    pub fn slurm_debug(fmt: *const c_char, ...);
    /// slurmctld's own: 1 on the primary controller, 0 on a backup (even one that took over).
    /// An `int` up to Slurm 23.02, a `bool` from 23.11: read it with [`slurmctld_is_primary`].
    #[cfg(not(slurm_2311))]
    static slurmctld_primary: std::os::raw::c_int;
    #[cfg(slurm_2311)]
    static slurmctld_primary: bool;
    /// `get_extra_conf_path()`: the path of a config file beside slurm.conf (xmalloc'd; xfree it).
    pub fn slurm_get_extra_conf_path(conf_name: *const c_char) -> *mut c_char;
    /// `env_array_overwrite()`: sets `name=value` in a NULL-terminated, xmalloc'd environment
    /// array (growing it with Slurm's allocator); returns 1 on success, 0 on failure.
    pub fn slurm_env_array_overwrite(
        array_ptr: *mut *mut *mut c_char,
        name: *const c_char,
        value: *const c_char,
    ) -> std::os::raw::c_int;
}
