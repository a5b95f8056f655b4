//! A small, read-only safe view over the `job_desc_msg_t` that slurmctld hands to `job_submit`.

use std::ffi::CStr;
use std::os::raw::c_char;

use cinch_slurm_ffi::{job_desc_msg_t, INFINITE, NO_VAL, NO_VAL16};

use crate::agent::reconcile::Fields;
use crate::record::JobRequest;
use cinch_core::slurm::gres::GpuRequest;

pub struct JobDesc<'a> {
    raw: &'a job_desc_msg_t,
}

impl<'a> JobDesc<'a> {
    /// # Safety
    /// `ptr` is NULL or points to a job descriptor that stays valid and unchanged for `'a`, whose
    /// string fields are NULL or NUL-terminated — what slurmctld guarantees during `job_submit`.
    pub unsafe fn from_ptr(ptr: *const job_desc_msg_t) -> Option<Self> {
        // SAFETY: the caller's contract above.
        unsafe { ptr.as_ref() }.map(|raw| JobDesc { raw })
    }

    pub fn request(&self) -> JobRequest {
        let gpus = GpuRequest::parse(
            self.string(self.raw.tres_per_job).as_deref(),
            self.string(self.raw.tres_per_node).as_deref(),
            self.string(self.raw.tres_per_task).as_deref(),
            self.string(self.raw.tres_per_socket).as_deref(),
        );
        JobRequest {
            name: self.string(self.raw.name),
            user_id: set(self.raw.user_id),
            partition: self.string(self.raw.partition),
            account: self.string(self.raw.account),
            qos: self.string(self.raw.qos),
            min_nodes: set(self.raw.min_nodes),
            max_nodes: set(self.raw.max_nodes),
            num_tasks: set(self.raw.num_tasks),
            time_limit_min: set(self.raw.time_limit),
            gpus,
            requeue: (u32::from(self.raw.requeue) != NO_VAL16).then_some(self.raw.requeue != 0),
        }
    }

    /// The user's `--begin` (0: not set).
    pub fn begin_time(&self) -> i64 {
        self.raw.begin_time
    }

    pub fn job_id(&self) -> u32 {
        cinch_slurm_ffi::job_desc_job_id(self.raw)
    }

    /// The scheduling settings an update message changes (job_modify's view).
    pub fn touched_fields(&self) -> Fields {
        let mut fields = Fields::default();
        if !self.raw.req_nodes.is_null() || self.raw.min_nodes != NO_VAL {
            fields = fields.union(Fields::NODES);
        }
        if self.raw.begin_time != 0 {
            fields = fields.union(Fields::BEGIN);
        }
        if self.raw.priority != NO_VAL {
            fields = fields.union(Fields::PRIORITY);
        }
        if self.raw.nice != NO_VAL {
            fields = fields.union(Fields::NICE);
        }
        fields
    }

    /// The user's `--comment`, where cinch hints live.
    pub fn comment(&self) -> Option<String> {
        self.string(self.raw.comment)
    }

    /// The job's SPANK environment (`NAME=value`), where Slurm puts SPANK options such as the
    /// `--cinch-*` ones.
    pub fn spank_env(&self) -> Vec<String> {
        if self.raw.spank_job_env.is_null() {
            return Vec::new();
        }
        // SAFETY: slurmctld passes `spank_job_env_size` entries, each NULL or NUL-terminated.
        let entries = unsafe {
            std::slice::from_raw_parts(self.raw.spank_job_env, self.raw.spank_job_env_size as usize)
        };
        entries.iter().filter_map(|&e| self.string(e)).collect()
    }

    /// Whether this is a batch job (`sbatch`: a script, and the environment it runs in).
    pub fn is_batch(&self) -> bool {
        !self.raw.script.is_null() && !self.raw.environment.is_null()
    }

    /// The user's `--nodelist`.
    pub fn req_nodes(&self) -> Option<String> {
        self.string(self.raw.req_nodes).filter(|s| !s.is_empty())
    }

    pub fn admin_comment(&self) -> Option<String> {
        self.string(self.raw.admin_comment)
    }

    fn string(&self, ptr: *const c_char) -> Option<String> {
        if ptr.is_null() {
            return None;
        }
        // SAFETY: non-NULL string fields of the descriptor are NUL-terminated (from_ptr contract).
        let text = unsafe { CStr::from_ptr(ptr) };
        Some(text.to_string_lossy().into_owned())
    }
}

/// Slurm marks unset numbers NO_VAL and "no limit" INFINITE; neither is a real value.
fn set(value: u32) -> Option<u32> {
    (value != NO_VAL && value != INFINITE).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn reads_the_fields_cinch_records() {
        let name = CString::new("train").unwrap();
        let per_node = CString::new("gres:gpu:4").unwrap();
        let comment = CString::new("ticket 7").unwrap();
        let raw = job_desc_msg_t {
            name: name.as_ptr() as *mut c_char,
            tres_per_node: per_node.as_ptr() as *mut c_char,
            admin_comment: comment.as_ptr() as *mut c_char,
            user_id: 1000,
            min_nodes: 2,
            max_nodes: NO_VAL,
            num_tasks: NO_VAL,
            time_limit: INFINITE,
            ..Default::default()
        };
        // SAFETY: `raw` and the CStrings it points to outlive `view`.
        let view = unsafe { JobDesc::from_ptr(&raw) }.unwrap();
        let request = view.request();
        assert_eq!(request.name.as_deref(), Some("train"));
        assert_eq!(request.user_id, Some(1000));
        assert_eq!(request.min_nodes, Some(2));
        assert_eq!(request.max_nodes, None);
        assert_eq!(request.time_limit_min, None);
        assert_eq!(request.gpus.as_ref().unwrap().total(Some(2), None), Some(8));
        assert_eq!(view.admin_comment().as_deref(), Some("ticket 7"));
        assert_eq!(request.requeue, Some(false), "0 is --no-requeue");
        let unset = job_desc_msg_t {
            requeue: NO_VAL16 as u16,
            ..Default::default()
        };
        // SAFETY: `unset` outlives the view.
        let view = unsafe { JobDesc::from_ptr(&unset) }.unwrap();
        assert_eq!(
            view.request().requeue,
            None,
            "not given: the cluster default decides"
        );
        let asked = job_desc_msg_t {
            requeue: 1,
            ..Default::default()
        };
        // SAFETY: `asked` outlives the view.
        let view = unsafe { JobDesc::from_ptr(&asked) }.unwrap();
        assert_eq!(view.request().requeue, Some(true));
    }

    #[test]
    fn an_update_message_says_which_settings_it_touches() {
        let nodes = CString::new("n1").unwrap();
        let raw = job_desc_msg_t {
            req_nodes: nodes.as_ptr() as *mut c_char,
            min_nodes: NO_VAL,
            priority: 5,
            nice: NO_VAL,
            ..Default::default()
        };
        // SAFETY: `raw` and `nodes` outlive the view.
        let view = unsafe { JobDesc::from_ptr(&raw) }.unwrap();
        let touched = view.touched_fields();
        assert!(touched.contains(Fields::NODES) && touched.contains(Fields::PRIORITY));
        assert!(!touched.contains(Fields::BEGIN) && !touched.contains(Fields::NICE));
    }

    #[test]
    fn null_descriptor_and_null_strings_are_none() {
        // SAFETY: NULL is allowed by from_ptr's contract.
        assert!(unsafe { JobDesc::from_ptr(std::ptr::null()) }.is_none());
        let raw = job_desc_msg_t::default();
        // SAFETY: a default descriptor has only NULL pointers.
        let view = unsafe { JobDesc::from_ptr(&raw) }.unwrap();
        assert_eq!(view.request().name, None);
        assert!(view.request().gpus.unwrap().is_empty());
    }
}
