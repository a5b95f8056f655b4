//! `strict`: strict consolidation, the survey's baseline. A multi-GPU job starts only on its best
//! shape: the fewest nodes its GPUs fit on, inside one rack whenever some rack is big enough. As
//! soon as that shape is free the job is pinned there. The first job (in Slurm's order) whose
//! shape is not free gets a reservation, as a strict scheduler keeps one for the job at the head
//! of its queue: it is pinned to the nodes its best shape is expected to free on first (by the
//! running jobs' time limits, what Slurm's backfill plans with) and put first in Slurm's order,
//! so backfill keeps later jobs that would still run then off those nodes' GPUs. The jobs behind
//! it whose shape is not free are held (priority 0, released by cinch, undone if cinch stands
//! aside). Jobs are planned in Slurm's order, and the GPUs of jobs Slurm places itself (1-GPU
//! jobs) are taken in the plan where Slurm's best fit puts them, so a pin is not planned on GPUs
//! Slurm is about to give away.

use super::param_table::ParamError;
use super::placement::Cluster;
use super::shapes::{Releases, Sizes};
use super::{pin_in_slurm_order, Policy};
use crate::learn::history::{fewest_nodes, History};
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::reason::Clause;
use crate::wire::snapshot::{PendingJob, Snapshot};

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    #[derive(Eq)]
    pub struct StrictParams {
        /// Jobs asking for at least this many GPUs wait for their best shape.
        min_gpus: u32 = 2, range(2, 1_000_000, " (a 1-GPU job is always on one node)");
        /// Lifetime of each decision in seconds.
        ttl_s: u32 = 300, range(1, 86_400);
    }
}

impl StrictParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        self.check_ranges()
    }
}

pub struct Strict(pub StrictParams);

/// The Slurm priority of the job strict consolidation reserves for: above every job Slurm
/// orders by itself (cinch sets no other priority under this policy). priority/basic starts
/// jobs at 0xFFFF0000 and counts down, so the reservation sits above that; multifactor's
/// priorities (the sum of the site's weights) are far below. The apply path takes priorities up
/// to 0xFFFFFFFD (above is Slurm's "recompute").
pub const RESERVED_PRIORITY: u32 = 0xFFFF_FFF0;

impl Policy for Strict {
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        _rng: &mut SeededRng,
        _history: &History,
    ) -> Vec<Decision> {
        let ttl = self.0.ttl_s;
        // The best shape: the fewest nodes, inside one rack whenever some rack can hold it.
        let best_nodes = |cluster: &Cluster, job: &PendingJob| match job.gpus_per_node {
            Some(p) => job.min_nodes.max(job.gpus.div_ceil(p)),
            None => fewest_nodes(job.gpus, cluster.node_size()).max(job.min_nodes),
        };
        let one_rack = |cluster: &Cluster, job: &PendingJob| {
            u64::from(job.gpus) <= cluster.largest_rack_gpus()
        };
        let mut reserved = false;
        pin_in_slurm_order(
            snapshot,
            now,
            self.0.min_gpus,
            true,
            ttl,
            |cluster, job, placement| {
                placement.gpus_on.len() as u32 <= best_nodes(cluster, job)
                    && (placement.racks <= 1 || !one_rack(cluster, job))
            },
            |cluster, job| {
                let nodes = best_nodes(cluster, job);
                if !reserved && job.gpus_per_node.is_none() {
                    if let Some(d) = reserve(snapshot, cluster, job, nodes, now, ttl) {
                        reserved = true;
                        return d;
                    }
                }
                Decision {
                    hold: Some(true),
                    ..Decision::explain(
                        job.job_id,
                        Clause::StrictHeld {
                            gpus: job.gpus,
                            nodes,
                            one_rack: one_rack(cluster, job),
                        },
                        ttl,
                    )
                }
            },
        )
    }
}

/// The reservation for `job`: pinned to the nodes its best shape (`nodes` nodes) is expected to
/// free on first, by the running jobs' time limits, and first in Slurm's order; `None` when no
/// running job's end frees one.
fn reserve(
    snapshot: &Snapshot,
    cluster: &Cluster,
    job: &PendingJob,
    nodes: u32,
    now: i64,
    ttl: u32,
) -> Option<Decision> {
    let sizes = Sizes {
        node_gpus: cluster.node_size(),
        rack_gpus: cluster.largest_rack_gpus(),
    };
    let mut ideal = sizes.ideal(job.gpus);
    ideal.nodes = nodes;
    let releases = Releases::with_ends(snapshot, cluster, cluster.free().to_vec(), |_, r| {
        // What Slurm expects: start plus the time limit (a job past it is about to be killed).
        let limit = r.time_limit_min.map_or(i64::MAX / 4, |m| i64::from(m) * 60);
        (r.start_time.saturating_add(limit)).max(now + 1)
    });
    let (at, positions) = releases.first_best_shape(now, job.gpus, ideal)?;
    let mut names: Vec<String> = positions
        .iter()
        .map(|&i| cluster.name(i).to_string())
        .collect();
    names.sort();
    let count = names.len() as u32;
    let reason = Clause::StrictReserved {
        gpus: job.gpus,
        on: names.clone(),
        at,
    };
    Some(Decision {
        node_count: (count != job.min_nodes).then_some(count),
        pin_nodes: Some(names),
        priority: Some(RESERVED_PRIORITY),
        ..Decision::explain(job.job_id, reason, ttl)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cluster, node, pending, snapshot};

    fn decide(snap: &Snapshot) -> Vec<Decision> {
        Strict(StrictParams::default()).decide(
            snap,
            snap.time,
            &mut SeededRng::new(1),
            &History::default(),
        )
    }

    #[test]
    fn pins_the_best_shape_and_holds_a_job_whose_shape_is_not_free() {
        // n1 half busy, n2 and n3 idle in rack r1/r2: an 8-GPU job's best shape is one node.
        let mut nodes = cluster(4, 8, 2);
        nodes[0] = node("n1", 8, 4, "r1");
        nodes[1] = node("n2", 8, 4, "r1");
        nodes[2] = node("n3", 8, 4, "r2");
        let snap = snapshot(nodes, vec![pending(1, 8), pending(2, 8)]);
        let d = decide(&snap);
        assert_eq!(d[0].pin_nodes.as_deref(), Some(&["n4".to_string()][..]));
        // Job 2 would need 2 half-free nodes: not its best shape; held.
        assert_eq!(d[1].hold, Some(true), "{:?}", d[1]);
        let held = Clause::StrictHeld {
            gpus: 8,
            nodes: 1,
            one_rack: true,
        };
        assert_eq!(d[1].reason.clauses(), [held]);
    }

    #[test]
    fn the_first_held_job_is_pinned_where_its_shape_frees_first_and_goes_first() {
        // n1 runs an 8-GPU job until its limit at t+600, n2 one until t+6000: the first waiting
        // 8-GPU job is reserved n1 (pinned, first in Slurm's order); the next one is held.
        let mut nodes = cluster(2, 8, 1);
        for n in &mut nodes {
            n.gpus_alloc = 8;
        }
        let mut snap = snapshot(nodes, vec![pending(1, 8), pending(2, 8)]);
        let now = snap.time;
        for (id, node, limit_min) in [(10, "n1", 10), (11, "n2", 100)] {
            snap.running.push(crate::wire::snapshot::RunningJob {
                job_id: id,
                nodes: vec![node.into()],
                gpus: 8,
                start_time: now,
                time_limit_min: Some(limit_min),
                ..crate::wire::snapshot::RunningJob::default()
            });
        }
        let d = decide(&snap);
        assert_eq!(
            d[0].pin_nodes.as_deref(),
            Some(&["n1".to_string()][..]),
            "{d:?}"
        );
        assert_eq!(d[0].priority, Some(RESERVED_PRIORITY));
        // First in Slurm's order under priority/basic too, whose first job gets 0xFFFF0000,
        // and within what the apply path accepts.
        let reserved = d[0].priority.unwrap();
        assert!(reserved > 0xFFFF_0000 && reserved < crate::enact::apply::PRIORITY_AUTOMATIC - 1);
        assert!(
            matches!(d[0].reason.clauses(), [Clause::StrictReserved { .. }]),
            "{}",
            d[0].reason
        );
        assert_eq!(d[1].hold, Some(true), "{:?}", d[1]);
    }

    #[test]
    fn one_gpu_jobs_ahead_take_their_gpus_where_slurm_will() {
        // n1 has 1 free GPU, n2 8: the 1-GPU job ahead goes to n1 (best fit), so the 8-GPU job
        // can still have n2.
        let nodes = vec![node("n1", 8, 7, "r1"), node("n2", 8, 0, "r1")];
        let mut small = pending(1, 1);
        small.submit_time = 0;
        let snap = snapshot(nodes, vec![small, pending(2, 8)]);
        let d = decide(&snap);
        assert_eq!(d.len(), 1, "the 1-GPU job is Slurm's: {d:?}");
        assert_eq!(d[0].pin_nodes.as_deref(), Some(&["n2".to_string()][..]));
    }
}
