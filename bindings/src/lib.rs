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

use std::os::raw::{c_char, c_void};

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

/// One block of topology/block (23.11+): `topoinfo_bblock_t` of the block plugin (not in the
/// public headers; `src/plugins/topology/block/topology_block.c` at each release's tag: 24.11
/// added `aggregated` and `size`, read from 24.11.5, 25.05.0 and 25.11.0; 23.11 and 24.05 have
/// the other three only).
#[cfg(slurm_2411)]
#[repr(C)]
pub struct topoinfo_bblock_t {
    aggregated: bool,
    pub block_index: u16,
    pub name: *mut c_char,
    pub nodes: *mut c_char,
    pub size: u32,
}

/// One block of topology/block in 23.11 and 24.05 (see the 24.11 layout above).
#[cfg(not(slurm_2411))]
#[repr(C)]
pub struct topoinfo_bblock_t {
    pub block_index: u16,
    pub name: *mut c_char,
    pub nodes: *mut c_char,
}

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

/// The records behind `topo_info` (23.11+): `topoinfo_tree_t` (of `topo_info_t` switches) and
/// `topoinfo_block_t` (of blocks) share this shape.
#[repr(C)]
struct topoinfo_records_t<T> {
    record_count: u32,
    topo_array: *mut T,
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
        let switches = slice(msg.topo_array, msg.record_count);
        #[cfg(slurm_topo_plugin_data)]
        if let Some(info) = msg.topo_info.as_ref() {
            if !info.data.is_null() {
                if info.plugin_id == topology_plugin_type::TOPOLOGY_PLUGIN_TREE {
                    let tree = &*(info.data as *const topoinfo_records_t<topo_info_t>);
                    return (slice(tree.topo_array, tree.record_count), &[]);
                }
                if info.plugin_id == topology_plugin_type::TOPOLOGY_PLUGIN_BLOCK {
                    let blocks = &*(info.data as *const topoinfo_records_t<topoinfo_bblock_t>);
                    return (switches, slice(blocks.topo_array, blocks.record_count));
                }
            }
        }
        (switches, &[])
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

extern "C" {
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
}
