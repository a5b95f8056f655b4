//! The agent's calls into Slurm's public API, from its own thread and holding no slurmctld lock:
//! load jobs, nodes and the topology (copied into Rust data before Slurm's messages are freed),
//! and update one job — exactly what `scontrol update` does, so Slurm validates every change.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::sync::atomic::Ordering;

use cinch_core::enact::round::ClusterError;
use cinch_core::wire::snapshot::NodeState;
use cinch_slurm_ffi as ffi;

use super::reconcile::JobUpdate;
use super::view::{JobState, JobView, NodeView, SwitchView, TopologyView};
use crate::state::{NO_JOB, SHARED};

/// `SLURM_BIT(9)` / `SLURM_BIT(13)`: bindgen does not expand the SLURM_BIT macro.
const NODE_STATE_DRAIN: u32 = 1 << 9;
const NODE_STATE_FAIL: u32 = 1 << 13;

/// The last Slurm API error, in Slurm's words.
pub fn last_error() -> String {
    // SAFETY: reads the calling thread's Slurm errno and Slurm's static message table.
    unsafe {
        let errno = ffi::last_slurm_errno();
        let text = ffi::slurm_strerror(errno);
        if text.is_null() {
            format!("Slurm error {errno}")
        } else {
            CStr::from_ptr(text).to_string_lossy().into_owned()
        }
    }
}

/// The last Slurm API error about `job_id`, by kind: slurmctld not answering, the job no
/// longer as read (ended, started, gone), or a refusal, in Slurm's words.
pub fn last_cluster_error(job_id: u32) -> ClusterError {
    use ffi::slurm_err_t as E;
    // SAFETY: reads the calling thread's Slurm errno.
    let errno = unsafe { ffi::last_slurm_errno() };
    let is = |e: E::Type| errno == e as i32;
    let unreachable = [
        E::SLURM_COMMUNICATIONS_CONNECTION_ERROR,
        E::SLURM_COMMUNICATIONS_SEND_ERROR,
        E::SLURM_COMMUNICATIONS_RECEIVE_ERROR,
        E::SLURM_COMMUNICATIONS_SHUTDOWN_ERROR,
        E::SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT,
    ];
    // slurmctld's own communication errors (1800-1899: connection, send, receive, shutdown,
    // and since 23.11 back-off and hard drop).
    let controller = E::SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR as i32;
    if unreachable.into_iter().any(is) || (controller..controller + 100).contains(&errno) {
        ClusterError::Unreachable(last_error())
    } else if [
        E::ESLURM_INVALID_JOB_ID,
        E::ESLURM_ALREADY_DONE,
        E::ESLURM_JOB_NOT_PENDING,
    ]
    .into_iter()
    .any(is)
    {
        ClusterError::Gone(job_id)
    } else {
        ClusterError::Refused(last_error())
    }
}

fn text(ptr: *const c_char) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: Slurm's message strings are NUL-terminated and live until the message is freed,
    // which happens only after the views are built.
    Some(
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned(),
    )
}

fn set(value: u32) -> Option<u32> {
    (value != ffi::NO_VAL && value != ffi::INFINITE).then_some(value)
}

/// Whether this slurmctld is the primary controller (the agent is dormant on a backup).
pub fn is_primary() -> bool {
    // SAFETY: the agent runs inside slurmctld.
    unsafe { ffi::slurmctld_is_primary() }
}

/// What a load since an update time found.
pub enum Loaded<T> {
    /// Slurm says nothing changed since that time (and sends nothing).
    Unchanged,
    /// The records, and Slurm's time of their last change (for the next load).
    Fresh(T, i64),
}

/// Slurm's "no change since your update time" (SLURM_NO_CHANGE_IN_DATA).
fn no_change() -> bool {
    // SAFETY: reads the calling thread's Slurm errno.
    unsafe { ffi::last_slurm_errno() == ffi::slurm_err_t::SLURM_NO_CHANGE_IN_DATA as i32 }
}

/// Jobs, unless nothing changed since `update_time` (0: always all of them).
pub fn load_jobs(update_time: i64) -> Result<Loaded<Vec<JobView>>, String> {
    let mut msg: *mut ffi::job_info_msg_t = std::ptr::null_mut();
    // SAFETY: Slurm fills `msg` on success; we free it below with the matching function.
    // SHOW_DETAIL: the per-node GRES detail says which GPU a job's shards are on.
    let rc = unsafe {
        ffi::slurm_load_jobs(
            update_time,
            &mut msg,
            ffi::SHOW_ALL_FLAG | ffi::SHOW_DETAIL_FLAG,
        )
    };
    if rc != 0 && update_time != 0 && no_change() {
        return Ok(Loaded::Unchanged);
    }
    if rc != 0 || msg.is_null() {
        return Err(format!("slurm_load_jobs: {}", last_error()));
    }
    // SAFETY: a successful load's message, used nowhere else.
    let (jobs, last_update) = unsafe { into_views(msg) };
    Ok(Loaded::Fresh(jobs, last_update))
}

/// The job records of a successful load, copied into views, and Slurm's time of their last
/// change; frees the message.
///
/// # Safety
/// `msg` is a non-NULL message a job load filled, not freed and not used after this call.
unsafe fn into_views(msg: *mut ffi::job_info_msg_t) -> (Vec<JobView>, i64) {
    // SAFETY: the caller's contract: `msg` points to `record_count` job records.
    let (jobs, last_update) = unsafe {
        let m = &*msg;
        let jobs = records(m.job_array, m.record_count)
            .iter()
            .map(job_view)
            .collect();
        (jobs, m.last_update)
    };
    // SAFETY: frees what the load allocated, once.
    unsafe { ffi::slurm_free_job_info_msg(msg) };
    (jobs, last_update)
}

/// slurmctld's time of the last change to any job (Unix seconds), read in place: no RPC.
pub fn last_job_update() -> i64 {
    // SAFETY: the agent runs inside slurmctld.
    unsafe { ffi::slurmctld_last_job_update() }
}

/// Every job's id and state word (base state and flags): Slurm's small answer that the agent's
/// delta reads compare with what they hold (Slurm 23.02 and later).
#[cfg(slurm_job_states)]
pub fn load_job_states() -> Result<Vec<(u32, u32)>, String> {
    let mut msg: *mut ffi::job_state_response_msg_t = std::ptr::null_mut();
    // SAFETY: no job ids asked for means every job; Slurm fills `msg` on success and we free it
    // below with the matching function.
    let rc = unsafe { ffi::slurm_load_job_state(0, std::ptr::null_mut(), &mut msg) };
    if rc != 0 || msg.is_null() {
        return Err(format!("slurm_load_job_state: {}", last_error()));
    }
    // SAFETY: on success `msg` points to `jobs_count` records.
    let states = unsafe {
        let m = &*msg;
        records(m.jobs, m.jobs_count)
            .iter()
            .map(|j| (j.job_id, j.state))
            .collect()
    };
    // SAFETY: frees what slurm_load_job_state allocated, once.
    unsafe { ffi::slurm_free_job_state_response_msg(msg) };
    Ok(states)
}

/// One job's records (all of an array's or heterogeneous job's when `job_id` is its first);
/// empty when Slurm no longer knows the job.
pub fn load_job(job_id: u32) -> Result<Vec<JobView>, String> {
    let mut msg: *mut ffi::job_info_msg_t = std::ptr::null_mut();
    // SAFETY: Slurm fills `msg` on success; we free it below with the matching function.
    let rc = unsafe {
        ffi::load_job_by_id(&mut msg, job_id, ffi::SHOW_ALL_FLAG | ffi::SHOW_DETAIL_FLAG)
    };
    if rc != 0 || msg.is_null() {
        // SAFETY: reads the calling thread's Slurm errno.
        let errno = unsafe { ffi::last_slurm_errno() };
        if errno == ffi::slurm_err_t::ESLURM_INVALID_JOB_ID as i32 {
            return Ok(Vec::new());
        }
        return Err(format!("slurm_load_job {job_id}: {}", last_error()));
    }
    // SAFETY: a successful load's message, used nowhere else.
    Ok(unsafe { into_views(msg) }.0)
}

fn job_view(j: &ffi::slurm_job_info_t) -> JobView {
    let state = match j.job_state & ffi::JOB_STATE_BASE {
        s if s == ffi::job_states::JOB_PENDING => JobState::Pending,
        s if s == ffi::job_states::JOB_RUNNING => JobState::Running,
        _ => JobState::Other,
    };
    JobView {
        job_id: j.job_id,
        state,
        slurm_state: j.job_state,
        user: text(j.user_name)
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| crate::users::user_name(j.user_id)),
        user_id: j.user_id,
        account: text(j.account),
        partition: text(j.partition),
        qos: text(j.qos).filter(|s| !s.is_empty()),
        name: text(j.name),
        tres_per_job: text(j.tres_per_job),
        tres_per_node: text(j.tres_per_node),
        tres_per_task: text(j.tres_per_task),
        tres_per_socket: text(j.tres_per_socket),
        min_nodes: set(j.num_nodes).unwrap_or(1),
        max_nodes: set(j.max_nodes).filter(|&m| m > 0),
        num_tasks: set(j.num_tasks),
        time_limit_min: set(j.time_limit),
        submit_time: j.submit_time,
        start_time: j.start_time,
        eligible_time: j.eligible_time,
        priority: j.priority,
        nice: i64::from(j.nice) - i64::from(ffi::NICE_OFFSET),
        deadline: (j.deadline > 0).then_some(j.deadline),
        req_nodes: text(j.req_nodes).filter(|s| !s.is_empty()),
        exc_nodes: text(j.exc_nodes).filter(|s| !s.is_empty()),
        features: text(j.features).filter(|s| !s.is_empty()),
        nodes: text(j.nodes).filter(|s| !s.is_empty()),
        admin_comment: text(j.admin_comment),
        comment: text(j.comment),
        is_array_or_het: j.array_job_id != 0 || j.het_job_id != 0,
        // SAFETY: with SHOW_DETAIL, Slurm sends `gres_detail_cnt` strings (one per node).
        gres_detail: unsafe { records(j.gres_detail_str, j.gres_detail_cnt) }
            .iter()
            .map(|&s| text(s).unwrap_or_default())
            .collect(),
        held: state == JobState::Pending && j.priority == 0,
        requeue: j.requeue != 0,
        restart_cnt: u32::from(j.restart_cnt),
    }
}

/// Nodes, unless nothing changed since `update_time` (0: always all of them).
pub fn load_nodes(update_time: i64) -> Result<Loaded<Vec<NodeView>>, String> {
    let mut msg: *mut ffi::node_info_msg_t = std::ptr::null_mut();
    // SHOW_DETAIL: without it slurmctld leaves `gres_used` out (sinfo asks for it the same way).
    // SAFETY: as in load_jobs.
    let rc = unsafe {
        ffi::slurm_load_node(
            update_time,
            &mut msg,
            ffi::SHOW_ALL_FLAG | ffi::SHOW_DETAIL_FLAG,
        )
    };
    if rc != 0 && update_time != 0 && no_change() {
        return Ok(Loaded::Unchanged);
    }
    if rc != 0 || msg.is_null() {
        return Err(format!("slurm_load_node: {}", last_error()));
    }
    // slurmctld does not send a node's partitions (scontrol fills them in from the partition
    // list, as here); without them every node would look like it is in every partition.
    let mut parts: *mut ffi::partition_info_msg_t = std::ptr::null_mut();
    // SAFETY: Slurm fills `parts` on success; it is freed below with the matching function.
    if unsafe { ffi::slurm_load_partitions(0, &mut parts, ffi::SHOW_ALL_FLAG) } == 0
        && !parts.is_null()
    {
        // SAFETY: both messages are valid; Slurm writes each node's `partitions` string, freed
        // with the node message.
        unsafe {
            ffi::slurm_populate_node_partitions(msg, parts);
            ffi::slurm_free_partition_info_msg(parts);
        }
    }
    // SAFETY: on success `msg` points to `record_count` node records (names NULL for holes).
    let nodes = unsafe {
        let m = &*msg;
        let records = records(m.node_array, m.record_count);
        records
            .iter()
            .filter(|n| !n.name.is_null())
            .map(|n| NodeView {
                name: text(n.name).unwrap_or_default(),
                gres: text(n.gres),
                gres_used: text(n.gres_used),
                state: node_state(n.node_state),
                features: text(n.features_act).or_else(|| text(n.features)),
                partitions: text(n.partitions),
            })
            .collect()
    };
    // SAFETY: `msg` is valid until freed just below.
    let last_update = unsafe { (*msg).last_update };
    // SAFETY: frees what slurm_load_node allocated, once.
    unsafe { ffi::slurm_free_node_info_msg(msg) };
    Ok(Loaded::Fresh(nodes, last_update))
}

/// The `count` records Slurm's answer holds at `ptr` (none when it sent none).
///
/// # Safety
/// `ptr` is NULL or points to `count` records that outlive the slice.
unsafe fn records<'a, T>(ptr: *const T, count: u32) -> &'a [T] {
    if ptr.is_null() || count == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(ptr, count as usize) }
    }
}

fn node_state(raw: u32) -> NodeState {
    if raw & (NODE_STATE_DRAIN | NODE_STATE_FAIL) != 0 {
        return NodeState::Drained;
    }
    match raw & ffi::NODE_STATE_BASE {
        s if s == ffi::node_states::NODE_STATE_IDLE => NodeState::Idle,
        s if s == ffi::node_states::NODE_STATE_MIXED => NodeState::Mixed,
        s if s == ffi::node_states::NODE_STATE_ALLOCATED => NodeState::Allocated,
        s if s == ffi::node_states::NODE_STATE_UNKNOWN => NodeState::Unknown,
        // DOWN, ERROR, FUTURE (a node configured for later): no work starts there.
        _ => NodeState::Down,
    }
}

/// Seconds slurmctld keeps a requeued job from starting again: its credential lifetime, from the
/// `AuthInfo` of the configuration it runs with, + 1.
pub fn load_requeue_delay() -> Result<u32, String> {
    let mut conf: *mut ffi::slurm_conf_t = std::ptr::null_mut();
    // SAFETY: Slurm fills `conf` on success; we free it below with the matching function.
    if unsafe { ffi::slurm_load_ctl_conf(0, &mut conf) } != 0 || conf.is_null() {
        return Err(format!("slurm_load_ctl_conf: {}", last_error()));
    }
    // SAFETY: a successful load's configuration, read before it is freed.
    let auth_info = text(unsafe { (*conf).authinfo });
    // SAFETY: frees what slurm_load_ctl_conf allocated, once.
    unsafe { ffi::free_conf(conf) };
    Ok(cinch_core::slurm::scontrol::requeue_delay_s(
        auth_info.as_deref(),
    ))
}

/// The cluster's network topology: the default topology's switches and, from Slurm 25.05, those
/// of each topology a partition names (`Topology=`, topology.yaml); empty parts where there is
/// no topology plugin or a topology cannot be read.
pub fn load_topology() -> TopologyView {
    let mut topology = TopologyView {
        default: load_switches(None),
        ..TopologyView::default()
    };
    let mut loaded: HashMap<String, Vec<SwitchView>> = HashMap::new();
    for (partition, name) in partition_topologies() {
        let switches = loaded
            .entry(name)
            .or_insert_with_key(|name| load_switches(Some(name)))
            .clone();
        topology.of_partition.insert(partition, switches);
    }
    topology
}

/// The partitions that name a topology of their own, with its name (none before Slurm 25.05).
fn partition_topologies() -> Vec<(String, String)> {
    if !ffi::NAMED_TOPOLOGIES {
        return Vec::new();
    }
    let mut parts: *mut ffi::partition_info_msg_t = std::ptr::null_mut();
    // SAFETY: Slurm fills `parts` on success; it is freed below with the matching function.
    if unsafe { ffi::slurm_load_partitions(0, &mut parts, ffi::SHOW_ALL_FLAG) } != 0
        || parts.is_null()
    {
        return Vec::new();
    }
    // SAFETY: on success `parts` holds `record_count` partition records until freed below.
    let named = unsafe {
        let m = &*parts;
        let records = records(m.partition_array, m.record_count);
        records
            .iter()
            .filter_map(|p| Some((text(p.name)?, text(ffi::partition_topology(p))?)))
            .collect()
    };
    // SAFETY: frees what slurm_load_partitions allocated, once.
    unsafe { ffi::slurm_free_partition_info_msg(parts) };
    named
}

/// The switches of one topology (the default one for `None`): topology/tree's switches, or
/// topology/block's blocks (23.11+) as leaf switches.
fn load_switches(name: Option<&str>) -> Vec<SwitchView> {
    let name = name.map(c_string);
    let mut msg: *mut ffi::topo_info_response_msg_t = std::ptr::null_mut();
    // SAFETY: as in load_jobs; the name outlives the call.
    let rc = unsafe {
        ffi::load_topology(
            &mut msg,
            name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
        )
    };
    if rc != 0 || msg.is_null() {
        return Vec::new();
    }
    // SAFETY: `msg` is a live answer until freed below.
    let switches = unsafe {
        let (switches, blocks) = ffi::topology_records(&*msg);
        switches
            .iter()
            .map(|s| SwitchView {
                name: text(s.name).unwrap_or_default(),
                level: s.level,
                nodes: text(s.nodes),
            })
            // A block is a leaf (aggregated blocks are larger groups cinch does not use).
            .chain(
                blocks
                    .iter()
                    .filter(|b| !b.is_aggregated())
                    .map(|b| SwitchView {
                        name: text(b.name).unwrap_or_default(),
                        level: 0,
                        nodes: text(b.nodes),
                    }),
            )
            .collect()
    };
    // SAFETY: frees what slurm_load_topo allocated, once.
    unsafe { ffi::slurm_free_topo_info_msg(msg) };
    switches
}

/// Requeues a running batch job (`scontrol requeue`): Slurm stops it and queues it again, to
/// start after its credential lifetime.
pub fn requeue_job(job_id: u32) -> Result<(), ClusterError> {
    // SAFETY: a plain RPC taking the job's id.
    let rc = unsafe { ffi::requeue_job(job_id, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_cluster_error(job_id))
    }
}

/// Cancels a running job as `scancel` does (SIGKILL to all its steps, Slurm's KillWait and
/// epilog as for any cancel).
pub fn cancel_job(job_id: u32) -> Result<(), ClusterError> {
    // SAFETY: a plain RPC taking the job's id.
    let rc = unsafe { ffi::kill_job(job_id, 9) };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_cluster_error(job_id))
    }
}

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).expect("NULs replaced")
}

/// Applies one update through slurmctld's RPC (and so through its validation and our own
/// job_modify, which recognises it as cinch's by `in_flight`).
pub fn update_job(u: &JobUpdate) -> Result<(), ClusterError> {
    // The strings live until slurm_update_job returns; Slurm only packs them into the RPC.
    let req_nodes = u.req_nodes.as_deref().map(c_string);
    let admin_comment = u.admin_comment.as_deref().map(c_string);
    let tres_per_job = u.tres_per_job.as_deref().map(c_string);
    // SAFETY: an all-zero descriptor is what slurm_init_job_desc_msg expects to initialise.
    let mut desc: ffi::job_desc_msg_t = unsafe { std::mem::zeroed() };
    // SAFETY: initialises every field to "not set".
    unsafe { ffi::slurm_init_job_desc_msg(&mut desc) };
    ffi::set_update_job_id(&mut desc, u.job_id);
    if let Some(s) = &req_nodes {
        desc.req_nodes = s.as_ptr() as *mut c_char;
    }
    if let Some(n) = u.min_nodes {
        desc.min_nodes = n;
    }
    if let Some(n) = u.max_nodes {
        desc.max_nodes = n;
    }
    if let Some(t) = u.begin_time {
        desc.begin_time = t;
    }
    if let Some(p) = u.priority {
        desc.priority = p;
    }
    if let Some(n) = u.nice {
        desc.nice = (i64::from(ffi::NICE_OFFSET) + n).clamp(0, i64::from(u32::MAX - 1)) as u32;
    }
    if let Some(s) = &admin_comment {
        desc.admin_comment = s.as_ptr() as *mut c_char;
    }
    if let Some(s) = &tres_per_job {
        desc.tres_per_job = s.as_ptr() as *mut c_char;
    }
    SHARED.in_flight.store(u.job_id, Ordering::SeqCst);
    // SAFETY: a fully initialised descriptor whose strings outlive the call.
    let rc = unsafe { ffi::slurm_update_job(&mut desc) };
    SHARED.in_flight.store(NO_JOB, Ordering::SeqCst);
    if rc == 0 {
        Ok(())
    } else {
        Err(last_cluster_error(u.job_id))
    }
}
