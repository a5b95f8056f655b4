//! Users' login names from their uids, for what cinch shows admins (`cinch decisions`) and
//! learns per user: slurmctld's job records carry only the uid.

use std::ffi::CStr;

/// A uid's login name, as the system's user database has it (slurmctld's job records carry only
/// the uid), remembered for the agent's life; the uid itself if the database has no name.
/// On the agent's thread only: the lookup may ask a directory service.
pub fn user_name(uid: u32) -> String {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static NAMES: Mutex<Option<HashMap<u32, String>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = names.get_or_insert_with(HashMap::new);
    if let Some(name) = names.get(&uid) {
        return name.clone();
    }
    let name = lookup_user_name(uid).unwrap_or_else(|| uid.to_string());
    // Bounded: a site's users, not its jobs.
    if names.len() < 100_000 {
        names.insert(uid, name.clone());
    }
    name
}

fn lookup_user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: getpwuid_r writes only into `pwd` and `buf`, which we own and size; `result`
    // points at `pwd` or is null.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        Some(CStr::from_ptr(pwd.pw_name).to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_become_login_names_and_unknown_ones_stay_numbers() {
        assert_eq!(user_name(0), "root");
        assert_eq!(user_name(4_294_000_000), "4294000000");
        assert_eq!(user_name(0), "root", "remembered");
    }
}
