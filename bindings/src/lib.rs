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
    pub static slurmctld_primary: std::os::raw::c_int;
    /// `get_extra_conf_path()`: the path of a config file beside slurm.conf (xmalloc'd; xfree it).
    pub fn slurm_get_extra_conf_path(conf_name: *const c_char) -> *mut c_char;
}
