//! What the agent reads from Slurm, as plain Rust data (copied out of Slurm's messages before
//! they are freed), and the optimizer snapshot built from it.

use std::collections::HashMap;

use cinch_core::wire::snapshot::{NodeState, PendingJob, RunningJob};

use cinch_core::enact::apply::Applied;
use cinch_core::models::hints::Hints;
use cinch_core::slurm::slurm_time;

use super::owned::{applied_of, requeue_opted_in, submit_hold};
use crate::hostlist;
use cinch_core::slurm::gres::GpuRequest;

/// The job states the agent distinguishes (Slurm's `job_states` base values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Running,
    /// Suspended, completing, finished, ...: nothing cinch acts on.
    Other,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    pub job_id: u32,
    pub state: JobState,
    /// Slurm's state word as read (base state and flags): what a delta read compares with
    /// Slurm's list of job states to see which jobs to load again.
    pub slurm_state: u32,
    pub user: String,
    /// The user's uid (what job_submit knows of a user without a directory lookup).
    pub user_id: u32,
    pub account: Option<String>,
    pub partition: Option<String>,
    /// The job's Slurm QOS.
    pub qos: Option<String>,
    pub name: Option<String>,
    pub tres_per_job: Option<String>,
    pub tres_per_node: Option<String>,
    pub tres_per_task: Option<String>,
    pub tres_per_socket: Option<String>,
    /// `num_nodes` (the minimum until the job runs).
    pub min_nodes: u32,
    pub max_nodes: Option<u32>,
    pub num_tasks: Option<u32>,
    pub time_limit_min: Option<u32>,
    pub submit_time: i64,
    pub start_time: i64,
    pub eligible_time: i64,
    pub priority: u32,
    /// In user terms (0 = default), not NICE_OFFSET-encoded.
    pub nice: i64,
    pub deadline: Option<i64>,
    pub req_nodes: Option<String>,
    pub exc_nodes: Option<String>,
    pub features: Option<String>,
    /// Allocated nodes (hostlist) of a running job.
    pub nodes: Option<String>,
    pub admin_comment: Option<String>,
    pub comment: Option<String>,
    /// Array meta-records and heterogeneous jobs are left to Slurm.
    pub is_array_or_het: bool,
    /// A running job's GRES on each of its nodes, in node order (`shard:3(IDX:0)`,
    /// `gpu:2(IDX:0-1)`): where its shards are.
    pub gres_detail: Vec<String>,
    pub held: bool,
    /// Whether Slurm may requeue the job (`--requeue`).
    pub requeue: bool,
    /// How often the job was requeued.
    pub restart_cnt: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    pub name: String,
    /// `gpu:8`, `gpu:a100:8(S:0-1)`, ...
    pub gres: Option<String>,
    /// `gpu:4(IDX:0-3)`, `gpu:(null):0`, ...
    pub gres_used: Option<String>,
    pub state: NodeState,
    pub features: Option<String>,
    pub partitions: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SwitchView {
    pub name: String,
    pub level: u16,
    pub nodes: Option<String>,
}

/// The network topologies a round sees: the cluster's default one, and (Slurm 25.05+) the one
/// each partition names with `Topology=` in slurm.conf (topology.yaml's named topologies).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopologyView {
    pub default: Vec<SwitchView>,
    pub of_partition: HashMap<String, Vec<SwitchView>>,
}

impl TopologyView {
    /// The rack (leaf switch or block) of each node: from the topology of the first of its
    /// partitions that names one and places it; else from the default topology if one of its
    /// partitions uses that; else none (its partitions' topologies do not place it, as on a flat
    /// one). A node in partitions of different topologies is seen through one of them: cinch
    /// keeps one rack per node (docs/install.md, "Slurm versions").
    pub fn rack_of(&self, nodes: &[NodeView]) -> HashMap<String, String> {
        let mut rack_of = racks(&self.default);
        if self.of_partition.is_empty() {
            return rack_of;
        }
        let of_partition: HashMap<&str, HashMap<String, String>> = self
            .of_partition
            .iter()
            .map(|(partition, switches)| (partition.as_str(), racks(switches)))
            .collect();
        for node in nodes {
            let partitions = node.partitions.as_deref().unwrap_or("");
            let named = partitions
                .split(',')
                .filter_map(|p| of_partition.get(p))
                .find_map(|racks| racks.get(&node.name));
            if let Some(rack) = named {
                rack_of.insert(node.name.clone(), rack.clone());
            } else if partitions.split(',').all(|p| of_partition.contains_key(p)) {
                rack_of.remove(&node.name);
            }
        }
        rack_of
    }
}

/// Leaf switch (rack) of each node, from the topology's level-0 switches.
pub fn racks(switches: &[SwitchView]) -> HashMap<String, String> {
    let mut rack_of = HashMap::new();
    for switch in switches.iter().filter(|s| s.level == 0) {
        let nodes = switch.nodes.as_deref().unwrap_or("");
        for node in hostlist::expand(nodes).unwrap_or_default() {
            rack_of.insert(node, switch.name.clone());
        }
    }
    rack_of
}

/// cinch hints from the job's comment: `cinch:app=bert,ckpt=yes` anywhere in `--comment`. A
/// `due=` time written without an offset is the user's local time, which only this side (the
/// site's controller) knows: it is sent as Unix seconds.
pub fn hints(comment: Option<&str>) -> Hints {
    let mut hints = Hints::from_comment(comment);
    if let Some(due) = hints.get_mut(cinch_core::models::qos::HINT_DUE) {
        if let Some(unix) = slurm_time::local_fields(due).and_then(crate::local_time::to_unix) {
            *due = unix.to_string();
        }
    }
    hints
}

/// The job's GPU request, as Slurm shows it.
pub fn gpu_request(job: &JobView) -> GpuRequest {
    GpuRequest::parse(
        job.tres_per_job.as_deref(),
        job.tres_per_node.as_deref(),
        job.tres_per_task.as_deref(),
        job.tres_per_socket.as_deref(),
    )
    .unwrap_or_default()
}

/// Why cinch.conf keeps cinch off this job, if it does (a CPU-only job, an excluded partition or
/// QOS): such a job is left out of the optimizer's snapshot while it waits, and the apply path
/// refuses any decision for it.
pub fn hands_off(
    config: &crate::config::Config,
    job: &JobView,
    request: &GpuRequest,
) -> Option<String> {
    // A count not known before Slurm places the job (per socket, per task without a task
    // count) still asks for GPUs.
    let gpus = request
        .total(Some(job.min_nodes.max(1)), job.num_tasks)
        .unwrap_or(u64::from(!request.is_empty()));
    config.hands_off(gpus, job.partition.as_deref(), job.qos.as_deref())
}

/// The range an elastic job's user declared (`elastic=MIN-MAX`), with its total GPU count:
/// only for a request of total GPUs alone (`--gpus=N`, no per-node, per-task or per-socket GPUs
/// and at most one GPU type), the one form cinch resizes.
fn elastic_of(
    job: &JobView,
    request: &GpuRequest,
) -> Option<(cinch_core::models::elastic::Range, u32)> {
    // Most jobs have no such hint, which a substring search tells without parsing the comment.
    let comment = job.comment.as_deref()?;
    if !comment.contains(cinch_core::models::elastic::HINT_ELASTIC) {
        return None;
    }
    let range = cinch_core::models::elastic::range(&Hints::from_comment(Some(comment)))?;
    let per_job = request.per_job.as_ref()?;
    let only_total =
        request.per_node.is_none() && request.per_task.is_none() && request.per_socket.is_none();
    (only_total && per_job.types.len() <= 1 && per_job.count > 0)
        .then(|| (range, per_job.count.min(u64::from(u32::MAX)) as u32))
}

/// The `tres_per_job` string that asks for `gpus` GPUs of the job's type, if it names one.
pub fn tres_per_job_for(job: &JobView, gpus: u32) -> String {
    match gpu_request(job)
        .per_job
        .and_then(|s| s.types.into_iter().next())
    {
        Some(kind) => format!("{}gpu:{kind}:{gpus}", cinch_slurm_ffi::GRES_TRES_PREFIX),
        None => format!("{}gpu:{gpus}", cinch_slurm_ffi::GRES_TRES_PREFIX),
    }
}

/// The job's own `--begin` (the snapshot shows it while it is ahead): not cinch's submit hold
/// or delay, which the optimizer is deciding about anyway.
fn users_begin(job: &JobView, applied: &Applied, submit_hold: Option<i64>) -> Option<i64> {
    let begin = job.eligible_time;
    let ours = submit_hold == Some(begin) || applied.begin == Some(begin);
    // Slurm itself delays a requeued job: submit time = the requeue, begin = that + the job
    // credential lifetime (AuthInfo cred_expire, 120 s by default) + 1. Not the user's.
    let requeue_delay =
        job.restart_cnt > 0 && begin > job.submit_time && begin - job.submit_time <= 1_201;
    (!ours && !requeue_delay).then_some(begin)
}

/// The user's node list and node counts (least, most): cinch's own pin (and the node counts it
/// set with it) are the optimizer's to confirm or change, not the user's request.
fn user_nodes(job: &JobView, applied: &Applied) -> (Vec<String>, u32, Option<u32>) {
    let required = hostlist::expand(job.req_nodes.as_deref().unwrap_or("")).unwrap_or_default();
    match &applied.pin {
        Some(pin) if **pin == *required => (
            Vec::new(),
            applied.nodes_was.unwrap_or(job.min_nodes),
            applied
                .max_nodes_was
                .map_or(job.max_nodes, |m| Some(m).filter(|&m| m > 0)),
        ),
        _ => (required, job.min_nodes, job.max_nodes),
    }
}

/// What a round derives from a job's view alone, with neither the clock nor cinch.conf: kept
/// between rounds by [`super::job_memo::JobMemo`] while the view is unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFacts {
    /// What cinch applied to the job, from its AdminComment record (empty when nothing).
    pub applied: Applied,
    /// The submit-time hold job_submit placed, while the job still carries it.
    pub submit_hold: Option<i64>,
    /// Whether the user gave `--requeue` themselves, as job_submit recorded it.
    pub requeue_opted_in: bool,
    /// Whether its record carries cinch's idle-GPU warning (`cinch-idle:`).
    pub idle_warned: bool,
    /// The GPU request, as Slurm shows it.
    pub request: GpuRequest,
    /// An elastic job's declared range and total GPU count.
    pub elastic: Option<(cinch_core::models::elastic::Range, u32)>,
    /// Whether the job's hints say it checkpoints.
    pub checkpoints: bool,
    /// The user's own `--begin`, whether or not it is still ahead.
    pub users_begin: Option<i64>,
    /// The job as the optimizer's snapshot shows it.
    pub shown: Shown,
}

/// A job as the optimizer's snapshot shows it, if it does.
#[derive(Debug, Clone, PartialEq)]
pub enum Shown {
    /// A waiting job, with the user's own `--begin` whether or not it is still ahead (the
    /// snapshot shows it only while it is).
    Pending(PendingJob),
    Running(RunningJob),
    /// Not the optimizer's: array meta-records and heterogeneous jobs, jobs in other states.
    Not,
    /// A waiting job's entry, lent to the round's snapshot (moved there, not copied: copying
    /// 10,000 of them costs more than all else a round derives); the memo takes it back once
    /// the optimizer was asked, or derives it again.
    Lent,
}

/// The facts of one job's view.
pub fn facts(job: &JobView) -> JobFacts {
    let admin_comment = job.admin_comment.as_deref();
    let applied = applied_of(admin_comment);
    let submit_hold = submit_hold(admin_comment);
    let request = gpu_request(job);
    let hints = hints(job.comment.as_deref());
    let users_begin = users_begin(job, &applied, submit_hold);
    let gpus = |nodes: u32| {
        request
            .total(Some(nodes), job.num_tasks)
            .unwrap_or(0)
            .min(u64::from(u32::MAX)) as u32
    };
    let shown = match job.state {
        JobState::Running => Shown::Running(RunningJob {
            idle_action: Default::default(),
            job_id: job.job_id,
            user: job.user.clone(),
            name: job.name.clone(),
            nodes: hostlist::expand(job.nodes.as_deref().unwrap_or("")).unwrap_or_default(),
            gpus: gpus(job.min_nodes),
            start_time: job.start_time,
            submit_time: Some(job.submit_time),
            time_limit_min: job.time_limit_min,
            requeue: job.requeue,
            restarts: job.restart_cnt,
            hints: hints.clone(),
            // What the job's watcher reads goes to the optimizer, not through the agent.
            progress: None,
        }),
        JobState::Pending if !job.is_array_or_het => {
            let (required_nodes, min_nodes, max_nodes) = user_nodes(job, &applied);
            Shown::Pending(PendingJob {
                job_id: job.job_id,
                user: job.user.clone(),
                account: job.account.clone(),
                partition: job.partition.clone(),
                qos: job.qos.clone(),
                name: job.name.clone(),
                gpus: gpus(min_nodes),
                gpus_per_node: request
                    .per_node
                    .as_ref()
                    .map(|s| s.count as u32)
                    .filter(|&c| c > 0),
                min_nodes: min_nodes.max(1),
                max_nodes: max_nodes.filter(|&m| m >= min_nodes.max(1)),
                time_limit_min: job.time_limit_min,
                submit_time: job.submit_time,
                priority: job.priority,
                // Slurm subtracts nice from what the site's priority plugin computed. A held
                // job (priority 0: the submit hold, or cinch's) has none yet: unknown, and the
                // round keeps cinch's own order (as the simulator's agent does).
                site_priority: (job.priority > 0).then(|| {
                    (i64::from(job.priority) + job.nice).clamp(0, i64::from(u32::MAX)) as u32
                }),
                deadline: job.deadline,
                begin_time: users_begin,
                required_nodes,
                excluded_nodes: hostlist::expand(job.exc_nodes.as_deref().unwrap_or(""))
                    .unwrap_or_default(),
                constraint: job.features.clone(),
                hints: hints.clone(),
            })
        }
        _ => Shown::Not,
    };
    JobFacts {
        requeue_opted_in: requeue_opted_in(admin_comment),
        idle_warned: cinch_core::enact::admin_comment::segment(
            admin_comment,
            cinch_core::enact::admin_comment::IDLE_PREFIX,
        )
        .is_some(),
        elastic: elastic_of(job, &request),
        checkpoints: hints.checkpoints(),
        users_begin,
        applied,
        submit_hold,
        request,
        shown,
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    pub fn job(id: u32, state: JobState) -> JobView {
        JobView {
            job_id: id,
            state,
            slurm_state: match state {
                JobState::Pending => 0,
                JobState::Running => 1,
                JobState::Other => 3,
            },
            user: "ann".into(),
            user_id: 1000,
            account: None,
            partition: Some("gpu".into()),
            qos: None,
            name: Some(format!("job{id}")),
            tres_per_job: None,
            tres_per_node: Some("gres:gpu:4".into()),
            tres_per_task: None,
            tres_per_socket: None,
            min_nodes: 2,
            max_nodes: Some(2),
            num_tasks: None,
            time_limit_min: Some(60),
            submit_time: 100,
            start_time: 0,
            eligible_time: 100,
            priority: 1000,
            nice: 0,
            deadline: None,
            req_nodes: None,
            exc_nodes: None,
            features: None,
            nodes: None,
            admin_comment: None,
            comment: None,
            is_array_or_het: false,
            gres_detail: Vec::new(),
            held: false,
            requeue: false,
            restart_cnt: 0,
        }
    }

    /// A job of the simulator's, as the tests that compare it with the plugin use: user ann,
    /// named `job{id}`, a bert run of an hour with a two-hour limit; hinted jobs also say they
    /// checkpoint and may be requeued.
    pub fn sim_job(id: u32, submit: i64, gpus: u32, hinted: bool) -> cinch_sim::JobSpec {
        cinch_sim::JobSpec {
            idle_from: None,
            id,
            name: format!("job{id}"),
            job_name: Some(format!("job{id}")),
            user: "ann".into(),
            submit,
            gpus,
            gpus_per_node: None,
            app: cinch_sim::perf::App::Bert,
            local_bsz: 8.0,
            run_time: 3_600.0,
            time_limit: 7_200.0,
            hinted,
            preemptible: hinted,
            due: None,
            elastic: None,
            share: None,
            progress: None,
        }
    }

    pub fn node(name: &str, used: &str) -> NodeView {
        NodeView {
            name: name.into(),
            gres: Some("gpu:8".into()),
            gres_used: Some(used.into()),
            state: NodeState::Allocated,
            features: None,
            partitions: Some("gpu".into()),
        }
    }

    #[test]
    fn slurms_requeue_delay_is_not_reported_as_the_users_begin() {
        let mut j = job(5, JobState::Pending);
        j.submit_time = 1000;
        j.eligible_time = 1121; // requeued at 1000: cred_expire 120 s + 1
        j.restart_cnt = 1;
        assert_eq!(users_begin(&j, &Applied::default(), None), None);
        j.restart_cnt = 0; // never requeued: a future begin is the user's
        assert_eq!(users_begin(&j, &Applied::default(), None), Some(1121));
    }

    #[test]
    fn reads_hints_from_the_comment() {
        let h = hints(Some("my run cinch:app=bert,ckpt=yes"));
        assert_eq!(h.get("app").map(String::as_str), Some("bert"));
        assert_eq!(h.get("ckpt").map(String::as_str), Some("yes"));
        assert!(hints(Some("no hints here")).is_empty());
        // A local time becomes Unix seconds; one with an offset is left as written.
        let h = hints(Some("cinch:due=2026-11-24T18:00"));
        let unix: i64 = h["due"].parse().expect("Unix seconds");
        assert!((unix - 1_795_543_200).abs() <= 14 * 3600, "{unix}");
        let h = hints(Some("cinch:due=2026-11-24T18:00:00Z"));
        assert_eq!(h["due"], "2026-11-24T18:00:00Z");
    }

    /// A partition that names its own topology (Slurm 25.05+) places its nodes by that one; the
    /// others keep the default topology's racks.
    #[test]
    fn a_partitions_own_topology_decides_its_nodes_racks() {
        let leaf = |name: &str, nodes: &str| SwitchView {
            name: name.into(),
            level: 0,
            nodes: Some(nodes.into()),
        };
        let in_partition = |name: &str, partitions: &str| NodeView {
            partitions: Some(partitions.into()),
            ..node(name, "gpu:0")
        };
        let topology = TopologyView {
            default: vec![leaf("ib1", "n[1-2]"), leaf("ib2", "n[3-6]")],
            of_partition: HashMap::from([
                ("nvl".to_string(), vec![leaf("nvl1", "n[3-4]")]),
                ("flat".to_string(), vec![]),
            ]),
        };
        let nodes = [
            in_partition("n1", "gpu"),
            in_partition("n2", "gpu,nvl"),
            in_partition("n3", "gpu,nvl"),
            in_partition("n4", "nvl"),
            in_partition("n5", "flat"),
            in_partition("n6", "gpu"),
        ];
        let rack_of = topology.rack_of(&nodes);
        let rack = |n: &str| rack_of.get(n).map(String::as_str);
        assert_eq!(rack("n1"), Some("ib1"));
        // nvl's topology does not place it, gpu uses the default one.
        assert_eq!(rack("n2"), Some("ib1"));
        assert_eq!(rack("n3"), Some("nvl1"));
        assert_eq!(rack("n4"), Some("nvl1"));
        assert_eq!(rack("n5"), None);
        assert_eq!(rack("n6"), Some("ib2"));
        // Without named topologies the default decides, as before 25.05.
        let plain = TopologyView {
            default: topology.default.clone(),
            ..TopologyView::default()
        };
        assert_eq!(
            plain.rack_of(&nodes).get("n3").map(String::as_str),
            Some("ib2")
        );
    }

    #[test]
    fn a_job_is_cpu_only_only_when_it_asks_for_no_gpus_in_any_scope() {
        let config = crate::config::Config::default();
        let cpu = JobView {
            tres_per_node: None,
            ..job(1, JobState::Pending)
        };
        assert!(hands_off(&config, &cpu, &gpu_request(&cpu)).is_some());
        let two = job(2, JobState::Pending);
        assert!(hands_off(&config, &two, &gpu_request(&two)).is_none());
        // Per socket, or per task without a task count: unknown how many, but GPUs.
        for (per_task, per_socket) in [(Some("gres/gpu:1"), None), (None, Some("gres/gpu:1"))] {
            let gpu = JobView {
                tres_per_node: None,
                tres_per_task: per_task.map(str::to_string),
                tres_per_socket: per_socket.map(str::to_string),
                num_tasks: None,
                ..job(3, JobState::Pending)
            };
            assert!(
                hands_off(&config, &gpu, &gpu_request(&gpu)).is_none(),
                "{gpu:?}"
            );
        }
    }
}
