//! `consolidate`: pin each pending multi-GPU job to the fewest nodes that have its GPUs free now,
//! inside one rack when some rack can hold it, so its GPUs talk over the fewest links.
//!
//! Jobs are taken in Slurm's order (priority, then submit time, then id) and each placement
//! reserves its GPUs, so later jobs never plan on GPUs an earlier one took. A job that cannot be
//! consolidated now is left to Slurm with a reason. Jobs whose user required nodes or gave a
//! `--constraint` are left alone: cinch never overrides what a user set. The planner itself is the
//! shared placement engine (`placement.rs`).

use super::param_table::ParamError;
use super::placement::{Cluster, PlanOutcome};
use super::Policy;
use crate::learn::history::History;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::reason::Clause;
use crate::wire::snapshot::{PendingJob, Snapshot};

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    #[derive(Eq)]
    pub struct ConsolidateParams {
        /// Jobs asking for at least this many GPUs are consolidated.
        min_gpus: u32 = 2, range(2, 1_000_000, " (a 1-GPU job is always on one node)");
        /// Also pin jobs that no single rack can hold, to the fewest nodes across racks.
        cross_rack: bool = true;
        /// Lifetime of each decision in seconds.
        ttl_s: u32 = 300, range(1, 86_400);
    }
}

impl ConsolidateParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        self.check_ranges()
    }
}

pub struct Consolidate(pub ConsolidateParams);

impl Policy for Consolidate {
    fn decide(
        &self,
        snapshot: &Snapshot,
        _now: i64,
        _rng: &mut SeededRng,
        _history: &History,
    ) -> Vec<Decision> {
        let ttl = self.0.ttl_s;
        self.plan(snapshot)
            .into_iter()
            .map(|(job, outcome)| match outcome {
                Ok((placement, reason)) => {
                    super::pin_decision(job, placement, Clause::Placed(reason), ttl)
                }
                Err(reason) => Decision::explain(job.job_id, Clause::Unplaced(reason), ttl),
            })
            .collect()
    }
}

impl Consolidate {
    /// The placement (or the reason there is none) for every job this policy considers, in the
    /// order they were planned. Exposed so tests can check the GPU accounting itself.
    pub fn plan<'s>(&self, snapshot: &'s Snapshot) -> Vec<(&'s PendingJob, PlanOutcome<'s>)> {
        let mut cluster = Cluster::new(snapshot);
        super::slurm_order(&snapshot.pending)
            .into_iter()
            .filter(|j| j.gpus >= self.0.min_gpus)
            .map(|job| (job, cluster.place(job, snapshot.time, self.0.cross_rack)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cluster, node, pending, pending_per_node, snapshot};
    use crate::wire::reason::{Placed, Submitted, Unplaced};

    fn decide(snap: &Snapshot) -> Vec<Decision> {
        Consolidate(ConsolidateParams::default()).decide(
            snap,
            snap.time,
            &mut SeededRng::new(0),
            &History::default(),
        )
    }

    fn pins(d: &Decision) -> Vec<&str> {
        d.pin_nodes
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(String::as_str)
            .collect()
    }

    #[test]
    fn a_16_gpu_job_goes_to_two_whole_nodes_in_one_rack() {
        // r1: n1 has 4 free, n2 8, n3 8; r2: n4 8 (n4 alone is not enough with n1).
        let nodes = vec![
            node("n1", 8, 4, "r1"),
            node("n2", 8, 0, "r1"),
            node("n3", 8, 0, "r1"),
            node("n4", 8, 0, "r2"),
        ];
        let d = decide(&snapshot(nodes, vec![pending(1, 16)]));
        assert_eq!(pins(&d[0]), vec!["n2", "n3"]);
        assert_eq!(d[0].node_count, Some(2));
        let placed = Placed::Consolidated {
            gpus: 16,
            nodes: 2,
            rack: Some("r1".into()),
        };
        assert_eq!(d[0].reason.clauses(), [placed.into()]);
    }

    #[test]
    fn prefers_the_rack_where_the_job_fits_on_fewer_nodes() {
        // r1 needs 2 nodes (4+4) for 8 GPUs; r2 has one whole free node.
        let nodes = vec![
            node("n1", 8, 4, "r1"),
            node("n2", 8, 4, "r1"),
            node("n3", 8, 0, "r2"),
        ];
        let d = decide(&snapshot(nodes, vec![pending(1, 8)]));
        assert_eq!(pins(&d[0]), vec!["n3"]);
        assert_eq!(d[0].node_count, None, "one node is what the job asked for");
    }

    #[test]
    fn per_node_requests_take_the_tightest_nodes_that_fit() {
        // 2 nodes x 4 GPUs: n2 and n3 have exactly 4 free; n1 is whole and stays whole.
        let nodes = vec![
            node("n1", 8, 0, "r1"),
            node("n2", 8, 4, "r1"),
            node("n3", 8, 4, "r1"),
        ];
        let d = decide(&snapshot(nodes, vec![pending_per_node(1, 4, 2)]));
        assert_eq!(pins(&d[0]), vec!["n2", "n3"]);
        assert_eq!(d[0].node_count, None);
    }

    #[test]
    fn earlier_jobs_reserve_gpus_so_later_ones_plan_around_them() {
        let mut first = pending(1, 8);
        first.priority = 2000;
        let d = decide(&snapshot(cluster(2, 8, 1), vec![pending(2, 8), first]));
        // Highest priority first: job 1 gets n1, job 2 the remaining n2.
        assert_eq!(d[0].job_id, 1);
        assert_eq!(pins(&d[0]), vec!["n1"]);
        assert_eq!(pins(&d[1]), vec!["n2"]);
    }

    #[test]
    fn spans_racks_only_when_no_rack_can_hold_the_job() {
        let d = decide(&snapshot(cluster(4, 8, 2), vec![pending(1, 24)]));
        assert_eq!(pins(&d[0]).len(), 3);
        let placed = Placed::AcrossRacks {
            gpus: 24,
            nodes: 3,
            racks: 2,
        };
        assert_eq!(d[0].reason.clauses(), [placed.into()]);

        let params = ConsolidateParams {
            cross_rack: false,
            ..ConsolidateParams::default()
        };
        let snap = snapshot(cluster(4, 8, 2), vec![pending(1, 24)]);
        let d = Consolidate(params).decide(&snap, 0, &mut SeededRng::new(0), &History::default());
        assert!(!d[0].is_action());
        let unplaced = Unplaced::CrossRackOff { gpus: 24 };
        assert_eq!(d[0].reason.clauses(), [unplaced.into()]);
    }

    #[test]
    fn explains_jobs_it_leaves_to_slurm() {
        let mut user_pinned = pending(2, 4);
        user_pinned.required_nodes = vec!["n1".into()];
        let mut constrained = pending(3, 4);
        constrained.constraint = Some("a100".into());
        let d = decide(&snapshot(
            cluster(2, 8, 1),
            vec![pending(1, 32), user_pinned, constrained, pending(4, 1)],
        ));
        assert_eq!(d.len(), 3, "1-GPU jobs get no decision at all");
        assert!(d.iter().all(|d| !d.is_action()));
        assert!(
            d[0].reason.clauses() == [Unplaced::NoRoom { gpus: 32, free: 16 }.into()],
            "{}",
            d[0].reason
        );
        let submitted = |s| vec![Clause::Unplaced(Unplaced::Submitted(s))];
        assert_eq!(d[1].reason.clauses(), submitted(Submitted::RequiredNodes));
        assert_eq!(d[2].reason.clauses(), submitted(Submitted::Constraint));
    }

    #[test]
    fn respects_partitions_exclusions_and_node_state() {
        let mut nodes = cluster(3, 8, 1);
        nodes[0].partitions = vec!["debug".into()];
        nodes[1].state = crate::wire::snapshot::NodeState::Drained;
        let mut job = pending(1, 8);
        job.partition = Some("gpu".into());
        let d = decide(&snapshot(nodes.clone(), vec![job.clone()]));
        assert_eq!(pins(&d[0]), vec!["n3"]);
        job.excluded_nodes = vec!["n3".into()];
        let d = decide(&snapshot(nodes, vec![job]));
        assert!(!d[0].is_action(), "{:?}", d[0]);
    }

    #[test]
    fn min_and_max_nodes_are_honoured() {
        let mut spread = pending(1, 8);
        spread.min_nodes = 2;
        let d = decide(&snapshot(cluster(2, 8, 1), vec![spread]));
        assert_eq!(
            pins(&d[0]),
            vec!["n1", "n2"],
            "-N2 --gpus=8 needs two nodes"
        );
        assert_eq!(d[0].node_count, None);

        let mut narrow = pending(2, 8);
        narrow.max_nodes = Some(1);
        let nodes = vec![node("n1", 8, 4, "r1"), node("n2", 8, 4, "r1")];
        let d = decide(&snapshot(nodes, vec![narrow]));
        assert!(!d[0].is_action());
        assert!(
            d[0].reason.clauses()
                == [Unplaced::TooSpread {
                    gpus: 8,
                    max_nodes: 1
                }
                .into()],
            "{}",
            d[0].reason
        );
    }

    #[test]
    fn jobs_that_cannot_start_yet_are_not_pinned_and_reserve_nothing() {
        let mut later = pending(1, 8);
        later.priority = 2000;
        later.begin_time = Some(1_000_000 + 3600);
        let d = decide(&snapshot(cluster(1, 8, 1), vec![later, pending(2, 8)]));
        assert!(!d[0].is_action());
        assert!(
            matches!(
                d[0].reason.clauses(),
                [Clause::Unplaced(Unplaced::Submitted(Submitted::Begin(_)))]
            ),
            "{}",
            d[0].reason
        );
        assert_eq!(
            pins(&d[1]),
            vec!["n1"],
            "the GPUs went to the job that can run"
        );
    }

    #[test]
    fn parameters_are_validated() {
        assert!(ConsolidateParams::default().validate().is_ok());
        let bad = ConsolidateParams {
            min_gpus: 1,
            ..ConsolidateParams::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(ParamError::OutOfRange { name: "min_gpus", value, .. }) if value == 1.0
        ));
    }
}
