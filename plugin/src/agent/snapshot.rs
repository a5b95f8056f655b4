//! The snapshot the optimizer gets, built from the jobs' facts the memo keeps: what Slurm
//! shows of each job and node, in Slurm's own terms.

use cinch_core::slurm::gres::{node_count, node_gpus};
use cinch_core::wire::snapshot::{
    Node, NodeState, PendingJob, RunningJob, Snapshot, MAX_SNAPSHOT_PENDING, SCHEMA_VERSION,
};

use super::job_memo::JobMemo;
#[cfg(test)]
use super::view::JobView;
use super::view::{NodeView, Shown, TopologyView};

/// The snapshot the optimizer gets: schedulable information only, in Slurm's own terms. Its
/// pending jobs are lent by the memo: hand them back with [`JobMemo::give_back`].
pub fn snapshot_of(
    time: i64,
    jobs: &mut JobMemo,
    nodes: &[NodeView],
    topology: &TopologyView,
    requeue_delay_s: u32,
) -> Snapshot {
    let rack_of = topology.rack_of(nodes);
    let split = |s: &Option<String>| -> Vec<String> {
        s.as_deref()
            .map(|s| {
                s.split(',')
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let nodes_out: Vec<Node> = nodes
        .iter()
        .map(|n| {
            let total = node_gpus(n.gres.as_deref().unwrap_or(""));
            // A node offering shards is for shard jobs (docs/policies/sharing.md): cinch never
            // gives its GPUs whole, so it shows them as taken.
            let alloc = if node_count(n.gres.as_deref().unwrap_or(""), "shard") > 0 {
                total
            } else {
                node_gpus(n.gres_used.as_deref().unwrap_or("")).min(total)
            };
            Node {
                name: n.name.clone(),
                gpus_total: total,
                gpus_alloc: alloc,
                // Slurm reports a partly used node as ALLOCATED; clients derive "mixed" (as sinfo
                // does). A node with GPUs left is still schedulable.
                state: match n.state {
                    NodeState::Allocated if alloc < total => NodeState::Mixed,
                    other => other,
                },
                features: split(&n.features),
                partitions: split(&n.partitions),
                rack: rack_of.get(&n.name).cloned(),
            }
        })
        .collect();
    let mut running: Vec<RunningJob> = jobs
        .jobs()
        .filter_map(|(_, facts)| match &facts.shown {
            Shown::Running(job) => Some(job.clone()),
            _ => None,
        })
        .collect();
    // The first pending jobs in Slurm's order, up to the cap the simulator uses too, lent by
    // the memo.
    let mut pending = jobs.lend_pending(MAX_SNAPSHOT_PENDING, PendingJob::slurm_order_key);
    // (In place: each entry is a few hundred bytes, 10,000 of them.)
    for job in &mut pending {
        job.begin_time = job.begin_time.filter(|&begin| begin > time);
    }
    // Running jobs on nodes Slurm no longer lists would make the snapshot invalid: drop their
    // unknown nodes rather than the whole round.
    let known: std::collections::HashSet<&str> =
        nodes_out.iter().map(|n| n.name.as_str()).collect();
    for job in &mut running {
        job.nodes.retain(|n| known.contains(n.as_str()));
    }
    Snapshot {
        idle: Default::default(),
        schema_version: SCHEMA_VERSION,
        time,
        nodes: nodes_out,
        running,
        pending,
        requeue_delay_s,
        agent: None,
    }
}

/// The snapshot of `jobs`, every fact derived afresh.
#[cfg(test)]
pub fn snapshot(
    time: i64,
    jobs: &[JobView],
    nodes: &[NodeView],
    topology: &TopologyView,
) -> Snapshot {
    snapshot_of(
        time,
        &mut JobMemo::of(jobs),
        nodes,
        topology,
        cinch_core::slurm::scontrol::DEFAULT_REQUEUE_DELAY_S,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::view::tests::{job, node, sim_job};
    use crate::agent::view::{JobState, SwitchView};

    #[test]
    fn builds_a_valid_snapshot_with_racks() {
        let mut running = job(1, JobState::Running);
        running.nodes = Some("n[1-2],gone".into());
        let mut array = job(3, JobState::Pending);
        array.is_array_or_het = true;
        let switches = vec![
            SwitchView {
                name: "rack1".into(),
                level: 0,
                nodes: Some("n[1-2]".into()),
            },
            SwitchView {
                name: "root".into(),
                level: 1,
                nodes: Some("n[1-3]".into()),
            },
        ];
        let snap = snapshot(
            500,
            &[
                running,
                job(2, JobState::Pending),
                array,
                job(4, JobState::Other),
            ],
            &[
                node("n1", "gpu:4(IDX:0-3)"),
                node("n2", "gpu:4(IDX:0-3)"),
                node("n3", "gpu:0"),
            ],
            &TopologyView {
                default: switches,
                ..TopologyView::default()
            },
        );
        assert_eq!(snap.validate(), Ok(()));
        assert_eq!(snap.nodes[0].rack.as_deref(), Some("rack1"));
        assert_eq!(snap.nodes[2].rack, None);
        assert_eq!(snap.nodes[0].gpus_alloc, 4);
        assert_eq!(
            snap.nodes[0].state,
            NodeState::Mixed,
            "ALLOCATED with GPUs left is mixed"
        );
        assert_eq!(snap.running[0].nodes, vec!["n1", "n2"]);
        assert_eq!(snap.running[0].gpus, 8);
        assert_eq!(
            snap.pending.len(),
            1,
            "array meta-jobs and finished jobs are left out"
        );
        assert_eq!(snap.pending[0].gpus, 8);
        assert_eq!(snap.pending[0].gpus_per_node, Some(4));
        assert_eq!(snap.pending[0].begin_time, None);
    }

    #[test]
    fn cinchs_own_pin_is_not_reported_as_the_users_node_list() {
        // cinch pinned a --gpus=8 job (1 node) to n1; Slurm shows ReqNodeList=n1.
        let mut pinned = job(1, JobState::Pending);
        pinned.tres_per_node = None;
        pinned.tres_per_job = Some("gres:gpu:12".into());
        pinned.req_nodes = Some("n1,n2".into());
        pinned.min_nodes = 2;
        pinned.max_nodes = Some(2);
        pinned.admin_comment = Some(
            "cinch: gpus=12 | cinch-decision: pin=n1,n2 nodes_was=1 max_nodes_was=0 until=900 why=x"
                .into(),
        );
        // The user's own --nodelist stays the user's.
        let mut users = job(2, JobState::Pending);
        users.req_nodes = Some("n[3-4]".into());
        let snap = snapshot(500, &[pinned, users], &[], &TopologyView::default());
        assert!(snap.pending[0].required_nodes.is_empty());
        assert_eq!(
            snap.pending[0].min_nodes, 1,
            "the node count from before the pin"
        );
        assert_eq!(
            snap.pending[0].max_nodes, None,
            "no maximum, as before the pin bounded it"
        );
        assert_eq!(snap.pending[1].required_nodes, vec!["n3", "n4"]);
    }

    #[test]
    fn only_the_users_own_begin_time_is_reported() {
        let mut users = job(1, JobState::Pending);
        users.eligible_time = 9_000;
        let mut held = job(2, JobState::Pending);
        held.eligible_time = 600;
        held.admin_comment = Some("cinch: gpus=8 hold_until=600".into());
        let mut delayed = job(3, JobState::Pending);
        delayed.eligible_time = 700;
        delayed.admin_comment =
            Some("cinch: gpus=8 | cinch-decision: begin=700 until=900 why=x".into());
        let mut past = job(4, JobState::Pending);
        past.eligible_time = 100;
        let snap = snapshot(
            500,
            &[users, held, delayed, past],
            &[],
            &TopologyView::default(),
        );
        let begins: Vec<Option<i64>> = snap.pending.iter().map(|j| j.begin_time).collect();
        assert_eq!(begins, vec![Some(9_000), None, None, None]);
    }

    /// Snapshot parity: one cluster state, as the simulator holds it and as Slurm shows it to the
    /// plugin, gives the same snapshot field by field, except where the simulator knows less
    /// than Slurm shows, each difference said and why below (docs/simulator.md, "What the
    /// simulated agent reports").
    #[test]
    fn the_plugins_snapshot_and_the_simulators_agree_field_by_field() {
        use cinch_sim::engine::{SimConfig, State};
        use cinch_sim::{ClusterSpec, JobSpec};

        let spec = sim_job;
        let config = SimConfig {
            cluster: ClusterSpec::parse("4x4", 2).unwrap(),
            ..SimConfig::default()
        };
        const NOW: i64 = 1_000;
        let state = State::scenario(
            config,
            vec![
                spec(1, 100, 8, true),
                JobSpec {
                    gpus_per_node: Some(4),
                    ..spec(2, 150, 4, false)
                },
                JobSpec {
                    due: Some(5_000.0),
                    ..spec(5, 200, 2, false)
                },
            ],
            vec![
                (spec(3, 50, 2, true), vec![(0, 2)]),
                (spec(4, 60, 4, false), vec![(1, 4)]),
            ],
        );
        let simulated = cinch_sim::sched::agent_snapshot(&state, NOW as f64);

        // The same state as Slurm shows it: sbatch --gpus=N (or --gres=gpu:4 -N1), the time
        // limit in minutes, priority/basic's priorities (earlier submissions higher), the one
        // partition, the hints in the comment.
        let slurm_job = |id: u32, state: JobState, submit: i64, gpus: &str, hints: &str| {
            let mut j = job(id, state);
            j.tres_per_job = Some(format!("gres/gpu:{gpus}"));
            j.tres_per_node = None;
            j.min_nodes = 1;
            j.max_nodes = None;
            j.time_limit_min = Some(120);
            j.submit_time = submit;
            j.eligible_time = submit;
            j.priority = 4_294_901_760 - id;
            j.comment = (!hints.is_empty()).then(|| format!("cinch:{hints}"));
            j.requeue = hints.contains("ckpt=yes");
            j
        };
        let mut job2 = slurm_job(2, JobState::Pending, 150, "0", "");
        job2.tres_per_job = None;
        job2.tres_per_node = Some("gres/gpu:4".into());
        let mut running3 = slurm_job(3, JobState::Running, 50, "2", "app=bert,ckpt=yes");
        running3.nodes = Some("n1".into());
        running3.start_time = 50;
        let mut running4 = slurm_job(4, JobState::Running, 60, "4", "");
        running4.nodes = Some("n2".into());
        running4.start_time = 60;
        let jobs = vec![
            slurm_job(1, JobState::Pending, 100, "8", "app=bert,ckpt=yes"),
            job2,
            slurm_job(5, JobState::Pending, 200, "2", "due=5000"),
            running3,
            running4,
        ];
        let slurm_node = |name: &str, used: &str, state: NodeState| NodeView {
            gres: Some("gpu:4".into()),
            state,
            ..node(name, used)
        };
        let nodes = vec![
            slurm_node("n1", "gpu:2(IDX:0-1)", NodeState::Allocated),
            slurm_node("n2", "gpu:4(IDX:0-3)", NodeState::Allocated),
            slurm_node("n3", "gpu:0", NodeState::Idle),
            slurm_node("n4", "gpu:0", NodeState::Idle),
        ];
        let switch = |name: &str, nodes: &str| SwitchView {
            name: name.into(),
            level: 0,
            nodes: Some(nodes.into()),
        };
        let topology = TopologyView {
            default: vec![switch("rack1", "n[1-2]"), switch("rack2", "n[3-4]")],
            ..TopologyView::default()
        };
        let mut live = snapshot(NOW, &jobs, &nodes, &topology);

        // What differs, and why:
        for (p, s) in live.pending.iter_mut().zip(&simulated.pending) {
            // The simulated cluster has one partition and its traces no accounts or QOS: the
            // simulated agent reports none, and policies read none as "any".
            assert_eq!(p.partition.as_deref(), Some("gpu"));
            p.partition = None;
            p.account = None;
            p.qos = None;
            // priority/basic: Slurm shows a number that falls with each submission, the
            // simulator 0 for all (it orders them by submission, the same order). Without
            // multifactor the simulated agent reports no site priority, so cinch keeps its own
            // order there; live it is planned in Slurm's order less cinch's nice (the replay's
            // residual gap, docs/simulator.md).
            assert_eq!(s.priority, 0);
            assert_eq!(s.site_priority, None);
            assert!(p.site_priority.is_some());
            p.priority = 0;
            p.site_priority = None;
        }
        for n in &mut live.nodes {
            // One partition: the simulated nodes list none.
            assert_eq!(n.partitions, ["gpu"]);
            n.partitions.clear();
        }
        assert_eq!(
            (live.nodes.len(), live.running.len(), live.pending.len()),
            (4, 2, 3)
        );
        assert_eq!(
            live.pending[0].hints.get("ckpt").map(String::as_str),
            Some("yes")
        );
        assert_eq!(
            live.pending[2].hints.get("due").map(String::as_str),
            Some("5000")
        );
        assert_eq!(live.nodes[0].gpus_alloc, 2);
        assert_eq!(live.nodes[0].rack.as_deref(), Some("rack1"));
        assert_eq!(live.nodes, simulated.nodes, "nodes");
        assert_eq!(live.running, simulated.running, "running");
        assert_eq!(live.pending, simulated.pending, "pending");
        assert_eq!(live, simulated);
    }
}
