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
