//! From what Slurm reports and what the optimizer decided, the job updates to make. The rules
//! (apply new decisions, leave unchanged ones alone, undo cinch's own changes when their TTL runs
//! out, when the optimizer is lost, or in any mode but `enforce`) are the core's one apply path,
//! [`cinch_core::enact::apply::plan`], which the simulator runs too; this module only translates Slurm's
//! view of each job into it and its changes into `slurm_update_job` calls with cinch's
//! AdminComment record. Pure: the agent thread feeds it and carries out its updates.
//!
//! What cinch applied to a job is written into the job's AdminComment as a `cinch-decision:`
//! segment (see docs/operations.md). That makes it visible to users in `scontrol show job`, and
//! durable: after a slurmctld restart the agent knows what it owns and can undo it.
//!
//! cinch never touches what a user or admin set: jobs with their own node list, `--begin`,
//! priority or nice keep them, and a field someone else changes after cinch is theirs from then on
//! (`job_modify` reports such changes as [`Fields`]).

use std::sync::Arc;

use cinch_core::enact::apply::{self, PendingState, RunningState};
pub use cinch_core::enact::apply::{Fields, PRIORITY_AUTOMATIC};
use cinch_core::enact::round::Reading;
use cinch_core::wire::idle::IdleAction;
use cinch_core::wire::snapshot::NodeState;

use super::job_memo::JobMemo;
use super::owned::{format_applied, parse_applied, DECISION_PREFIX, HOLD_KEY};
use super::view::{tres_per_job_for, JobFacts, JobState, JobView, NodeView};
use crate::record::{replace_segment, segment, RECORD_PREFIX};
use cinch_core::enact::admin_comment::{
    format_applied_since, format_past, parse_since, Past, PAST_PREFIX,
};

/// One `slurm_update_job` call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobUpdate {
    pub job_id: u32,
    /// `Some("")` clears the node list.
    pub req_nodes: Option<String>,
    pub min_nodes: Option<u32>,
    /// 0: no maximum.
    pub max_nodes: Option<u32>,
    pub begin_time: Option<i64>,
    /// 0 holds; [`PRIORITY_AUTOMATIC`] releases / recomputes.
    pub priority: Option<u32>,
    /// In user terms.
    pub nice: Option<i64>,
    /// A new GPU request (`TresPerJob`), for an elastic job's size.
    pub tres_per_job: Option<String>,
    pub admin_comment: Option<String>,
    /// For the log: what and why.
    pub summary: String,
}

/// A pending job as the core's apply path sees it (the round fills in what it remembers: fields
/// users changed, renewed TTLs).
pub fn pending_state(job: &JobView, facts: &JobFacts, hands_off: Option<String>) -> PendingState {
    PendingState {
        job_id: job.job_id,
        has_node_list: job.req_nodes.is_some(),
        min_nodes: job.min_nodes,
        max_nodes: job.max_nodes.unwrap_or(0),
        eligible_time: job.eligible_time,
        priority: job.priority,
        held: job.held,
        nice: job.nice,
        applied: facts.applied.clone(),
        submit_hold: facts.submit_hold,
        foreign: Fields::default(),
        renewed_until: None,
        gpus: facts.elastic.map_or(0, |(_, gpus)| gpus),
        elastic: facts.elastic.map(|(range, _)| range),
        hands_off,
    }
}

/// A running job as the core's apply path sees it.
pub fn running_state(
    job: &JobView,
    facts: &JobFacts,
    hands_off: Option<String>,
    idle_action: IdleAction,
) -> RunningState {
    RunningState {
        idle_action,
        job_id: job.job_id,
        // Slurm's flag and the user's own --requeue, as job_submit recorded it.
        requeue: job.requeue && facts.requeue_opted_in,
        checkpoints: facts.checkpoints,
        requeues: job.restart_cnt,
        elastic: facts.elastic.map(|(range, _)| range),
        hands_off,
        gpus: facts.elastic.map_or(0, |(_, gpus)| gpus),
        applied: facts.applied.clone(),
        idle_warned: facts.idle_warned,
    }
}

/// Slurm's jobs and nodes as the core's round reads a cluster; `hands_off` says why cinch.conf
/// keeps cinch off a job, if it does, `idle_action` what it says of a running job's idle GPUs.
pub fn reading(
    jobs: &JobMemo,
    nodes: &[NodeView],
    hands_off: impl Fn(&JobView, &JobFacts) -> Option<String>,
    idle_action: impl Fn(&JobView) -> IdleAction,
) -> Reading {
    Reading {
        pending: jobs
            .jobs()
            .filter(|(j, _)| j.state == JobState::Pending && !j.is_array_or_het)
            .map(|(j, facts)| pending_state(j, facts, hands_off(j, facts)))
            .collect(),
        running: jobs
            .jobs()
            .filter(|(j, _)| j.state == JobState::Running)
            .map(|(j, facts)| running_state(j, facts, hands_off(j, facts), idle_action(j)))
            .collect(),
        nodes: Arc::new(nodes.iter().map(|n| n.name.clone()).collect()),
        unregistered: nodes
            .iter()
            .filter(|n| n.state == NodeState::Unknown)
            .count(),
    }
}

/// The `slurm_update_job` call that carries out `change` on `job`, with cinch's AdminComment
/// record.
pub fn update_of(job: &JobView, change: &apply::JobChange) -> JobUpdate {
    JobUpdate {
        job_id: change.job_id,
        req_nodes: change.req_nodes.as_ref().map(|nodes| nodes.join(",")),
        min_nodes: change.min_nodes,
        max_nodes: change.max_nodes,
        begin_time: change.begin_time,
        priority: change.priority,
        nice: change.nice,
        tres_per_job: change.gpus.map(|n| tres_per_job_for(job, n)),
        admin_comment: Some(record_after(job, change)),
        summary: change.summary.clone(),
    }
}

/// The job's AdminComment once `change` is applied: cinch's record of what it owns (or none),
/// and the submit hold marker retired.
fn record_after(job: &JobView, change: &apply::JobChange) -> String {
    let old = segment(job.admin_comment.as_deref(), DECISION_PREFIX);
    // Since when cinch has been changing the job: kept from its record, or now for a first
    // change (a record from before cinch kept it says nothing).
    let since = match old {
        Some(old) => parse_since(old),
        None => Some(change.at),
    };
    let decision = (!change.record.is_empty()).then(|| match since {
        Some(since) => format_applied_since(&change.record, since),
        None => format_applied(&change.record),
    });
    let mut comment = replace_segment(
        job.admin_comment.as_deref(),
        DECISION_PREFIX,
        decision.as_deref(),
    );
    // Undone: what cinch did stays on record, with when and why it stopped.
    if let (None, Some(because), Some(old)) = (
        &decision,
        &change.undone_because,
        old.and_then(parse_applied).filter(|a| !a.is_empty()),
    ) {
        let past = format_past(&Past::of(&old, since, change.at, because));
        comment = replace_segment(Some(&comment), PAST_PREFIX, Some(&past));
    }
    if change.retire_submit_hold {
        if let Some(record) = segment(Some(&comment), RECORD_PREFIX) {
            let without: Vec<&str> = record
                .split_whitespace()
                .filter(|w| !w.starts_with(HOLD_KEY))
                .collect();
            comment = replace_segment(Some(&comment), RECORD_PREFIX, Some(&without.join(" ")));
        }
    }
    comment
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::owned::parse_applied;
    use crate::agent::view::tests::job;
    use cinch_core::enact::apply::{Applied, MAX_DELAY_S};
    use cinch_core::{Decision, Mode};
    use std::collections::{HashMap, HashSet};

    /// What one round's apply step is given (the core round's memory included).
    struct Input<'a> {
        now: i64,
        mode: Mode,
        decisions: Option<&'a [Decision]>,
        nodes: &'a HashSet<String>,
        foreign: &'a HashMap<u32, Fields>,
        renewed: &'a HashMap<u32, i64>,
        requeue_limits: apply::RequeueLimits,
        hands_off: &'a HashMap<u32, String>,
    }

    /// The round's plan for these jobs as the plugin carries it out.
    #[derive(Debug, Default)]
    struct Output {
        updates: Vec<JobUpdate>,
        renewed: HashMap<u32, i64>,
        refused: Vec<String>,
        shadow: Vec<(u32, String)>,
        requeues: Vec<(u32, String)>,
        after_requeue: Vec<JobUpdate>,
    }

    /// Slurm's jobs read as the round reads them, planned by the core's apply path, the plan
    /// translated into `slurm_update_job` calls: the round's apply step without its ports.
    fn reconcile(jobs: &[JobView], input: &Input) -> Output {
        let mut read = reading(
            &JobMemo::of(jobs),
            &[],
            |j, _| input.hands_off.get(&j.job_id).cloned(),
            |_| IdleAction::Report,
        );
        for job in &mut read.pending {
            job.foreign = input.foreign.get(&job.job_id).copied().unwrap_or_default();
            job.renewed_until = input.renewed.get(&job.job_id).copied();
        }
        let plan = apply::plan(
            &read.pending,
            &read.running,
            &apply::Input {
                idle: Default::default(),
                now: input.now,
                mode: input.mode,
                decisions: input.decisions,
                nodes: input.nodes,
                requeue_limits: input.requeue_limits,
                // cinch.conf's default IntervalSeconds.
                renew_within_s: apply::renewal_margin_s(5),
                words: true,
            },
        );
        let by_id: HashMap<u32, &JobView> = jobs.iter().map(|j| (j.job_id, j)).collect();
        Output {
            updates: plan
                .changes
                .iter()
                .map(|c| update_of(by_id[&c.job_id], c))
                .collect(),
            renewed: plan.renewed.into_iter().collect(),
            refused: plan.refused,
            shadow: plan.shadow,
            requeues: plan.requeues,
            after_requeue: plan
                .after_requeue
                .iter()
                .map(|c| update_of(by_id[&c.job_id], c))
                .collect(),
        }
    }

    const NOW: i64 = 10_000;

    fn nodes() -> HashSet<String> {
        ["n1", "n2", "n3", "n4"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    fn pin(id: u32, to: &[&str]) -> Decision {
        Decision {
            pin_nodes: Some(to.iter().map(|s| s.to_string()).collect()),
            node_count: Some(to.len() as u32),
            ..Decision::explain(id, "consolidated", 300)
        }
    }

    fn run(jobs: &[JobView], mode: Mode, decisions: Option<&[Decision]>) -> Output {
        run_with(jobs, mode, decisions, &HashMap::new())
    }

    fn run_with(
        jobs: &[JobView],
        mode: Mode,
        decisions: Option<&[Decision]>,
        foreign: &HashMap<u32, Fields>,
    ) -> Output {
        let nodes = nodes();
        let renewed = HashMap::new();
        reconcile(
            jobs,
            &Input {
                now: NOW,
                mode,
                decisions,
                nodes: &nodes,
                foreign,
                renewed: &renewed,
                requeue_limits: LIMITS,
                hands_off: &HashMap::new(),
            },
        )
    }

    /// cinch.conf's defaults, with the whole hour's budget left.
    const LIMITS: apply::RequeueLimits = apply::RequeueLimits {
        max_per_job: apply::RequeueLimits::DEFAULT_MAX_PER_JOB,
        budget: apply::RequeueLimits::DEFAULT_MAX_PER_HOUR,
    };

    /// An elastic job (`--gpus=4`, `elastic=2-16`) that opted in to requeue.
    fn elastic(id: u32, state: JobState) -> JobView {
        JobView {
            tres_per_job: Some("gres:gpu:a100:4".into()),
            tres_per_node: None,
            min_nodes: 1,
            max_nodes: None,
            requeue: true,
            admin_comment: Some(
                "cinch: gpus=4 requeue=yes | cinch-decision: pin=n1 nodes_was=1 until=1 why=x"
                    .into(),
            ),
            comment: Some("cinch:app=bert,elastic=2-16,ckpt=yes".into()),
            ..job(id, state)
        }
    }

    #[test]
    fn an_elastic_size_becomes_tres_per_job_and_a_requeue_resize_clears_cinchs_old_pin() {
        let pending_job = elastic(1, JobState::Pending);
        let running_job = elastic(2, JobState::Running);
        let plain = job(3, JobState::Pending);
        let decisions = [
            Decision {
                gpus: Some(8),
                ..pin(1, &["n1", "n2"])
            },
            Decision {
                requeue: Some(true),
                gpus: Some(16),
                ..Decision::explain(2, "grow", 300)
            },
            Decision {
                gpus: Some(8),
                ..Decision::explain(3, "not elastic", 300)
            },
        ];
        let out = run(
            &[pending_job, running_job, plain],
            Mode::Enforce,
            Some(&decisions),
        );
        let sized = out.updates.iter().find(|u| u.job_id == 1).unwrap();
        assert_eq!(sized.tres_per_job.as_deref(), Some("gres:gpu:a100:8"));
        assert!(sized
            .admin_comment
            .as_deref()
            .unwrap()
            .contains("gpus_was=4 gpus=8"));
        assert!(out
            .refused
            .iter()
            .any(|r| r.contains("job 3") && r.contains("not elastic")));
        assert_eq!(out.requeues.len(), 1);
        let after = &out.after_requeue[0];
        assert_eq!(after.job_id, 2);
        assert_eq!(after.tres_per_job.as_deref(), Some("gres:gpu:a100:16"));
        assert_eq!(
            after.req_nodes.as_deref(),
            Some(""),
            "cinch's pin from its last start"
        );
        assert_eq!(after.min_nodes, Some(1));
        let record = after.admin_comment.as_deref().unwrap();
        assert!(
            record.starts_with("cinch: gpus=4 requeue=yes | cinch-decision: gpus_was=4 gpus=16")
        );
    }

    fn pending(id: u32) -> JobView {
        let mut j = job(id, JobState::Pending);
        j.min_nodes = 1;
        j.max_nodes = None;
        j.admin_comment = Some("cinch: gpus=12".into());
        j
    }

    /// The job as Slurm shows it after `update` was applied.
    fn after(mut j: JobView, u: &JobUpdate) -> JobView {
        if let Some(nodes) = &u.req_nodes {
            j.req_nodes = (!nodes.is_empty()).then(|| nodes.clone());
        }
        if let Some(n) = u.min_nodes {
            j.min_nodes = n;
        }
        if let Some(n) = u.max_nodes {
            j.max_nodes = Some(n).filter(|&n| n > 0);
        }
        if let Some(t) = u.begin_time {
            j.eligible_time = t;
        }
        if let Some(p) = u.priority {
            j.held = p == 0;
            j.priority = if p == PRIORITY_AUTOMATIC { 1000 } else { p };
        }
        if let Some(n) = u.nice {
            j.nice = n;
        }
        j.admin_comment = u.admin_comment.clone();
        j
    }

    #[test]
    fn the_segment_round_trips() {
        let a = Applied {
            pin: Some(vec!["n1".into(), "n2".into()].into()),
            nodes_was: Some(1),
            max_nodes_was: Some(0),
            begin: Some(123),
            hold: true,
            prio: Some(5),
            nice: Some((0, 10)),
            gpus: Some((4, 8)),
            until: 999,
            why: "because | reasons".into(),
        };
        let text = format_applied(&a);
        assert_eq!(
            text,
            "cinch-decision: pin=n1,n2 nodes_was=1 max_nodes_was=0 begin=1970-01-01T00:02:03Z hold=1 prio=5 nice_was=0 nice=10 gpus_was=4 gpus=8 until=1970-01-01T00:16:39Z why=because / reasons"
        );
        assert_eq!(
            parse_applied(&text),
            Some(Applied {
                why: "because / reasons".into(),
                ..a
            })
        );
    }

    #[test]
    fn enforce_pins_once_then_renews_without_updating() {
        let j = pending(7);
        let decisions = [pin(7, &["n1", "n2"])];
        let out = run(std::slice::from_ref(&j), Mode::Enforce, Some(&decisions));
        assert_eq!(out.updates.len(), 1);
        let u = &out.updates[0];
        assert_eq!(u.req_nodes.as_deref(), Some("n1,n2"));
        assert_eq!((u.min_nodes, u.max_nodes), (Some(2), Some(2)));
        let comment = u.admin_comment.as_deref().unwrap();
        assert!(comment.starts_with("cinch: gpus=12 | cinch-decision: pin=n1,n2 nodes_was=1 max_nodes_was=0 since=1970-01-01T02:46:40Z until=1970-01-01T02:51:40Z why=consolidated"), "{comment}");

        let j = after(j, u);
        let again = run(&[j], Mode::Enforce, Some(&decisions));
        assert!(again.updates.is_empty(), "{:?}", again.updates);
        assert_eq!(again.renewed.get(&7), Some(&10_300));
    }

    #[test]
    fn losing_the_optimizer_undoes_everything_cinch_did() {
        let j = pending(7);
        let applied = run(
            std::slice::from_ref(&j),
            Mode::Enforce,
            Some(&[pin(7, &["n1", "n2"])]),
        );
        let j = after(j, &applied.updates[0]);
        let out = run(std::slice::from_ref(&j), Mode::Enforce, None);
        let u = &out.updates[0];
        assert_eq!(u.req_nodes.as_deref(), Some(""), "node list cleared");
        assert_eq!(u.min_nodes, Some(1), "node count restored");
        assert_eq!(u.max_nodes, Some(0), "no maximum, as the user asked");
        // What cinch did stays on record, with when and why it stopped.
        assert_eq!(
            u.admin_comment.as_deref(),
            Some(
                "cinch: gpus=12 | cinch-past: did=pin since=1970-01-01T02:46:40Z \
                 stopped=1970-01-01T02:46:40Z because=the optimizer could not be reached, so \
                 Slurm's own settings are back why=consolidated"
            )
        );
        let j = after(j, u);
        assert!(
            run(&[j], Mode::Enforce, None).updates.is_empty(),
            "nothing left to undo"
        );
    }

    #[test]
    fn decisions_stand_until_their_ttl_then_are_undone() {
        let j = pending(7);
        let applied = run(
            std::slice::from_ref(&j),
            Mode::Enforce,
            Some(&[pin(7, &["n1"])]),
        );
        let j = after(j, &applied.updates[0]);
        // The optimizer answers but no longer mentions job 7: keep it while the TTL runs.
        let nodes = nodes();
        let (foreign, renewed) = (HashMap::new(), HashMap::new());
        let at = |now| {
            reconcile(
                std::slice::from_ref(&j),
                &Input {
                    now,
                    mode: Mode::Enforce,
                    decisions: Some(&[]),
                    nodes: &nodes,
                    foreign: &foreign,
                    renewed: &renewed,
                    requeue_limits: LIMITS,
                    hands_off: &HashMap::new(),
                },
            )
        };
        assert!(at(NOW + 299).updates.is_empty());
        let expired = at(NOW + 301);
        assert_eq!(expired.updates[0].req_nodes.as_deref(), Some(""));
    }

    #[test]
    fn an_explicit_explanation_replaces_an_earlier_action() {
        let j = pending(7);
        let applied = run(
            std::slice::from_ref(&j),
            Mode::Enforce,
            Some(&[pin(7, &["n1"])]),
        );
        let j = after(j, &applied.updates[0]);
        let out = run(
            &[j],
            Mode::Enforce,
            Some(&[Decision::explain(7, "waits", 300)]),
        );
        assert_eq!(out.updates[0].req_nodes.as_deref(), Some(""));
    }

    #[test]
    fn shadow_and_off_change_nothing_but_shadow_reports() {
        let j = pending(7);
        let decisions = [pin(7, &["n1", "n2"])];
        let shadow = run(std::slice::from_ref(&j), Mode::Shadow, Some(&decisions));
        assert!(shadow.updates.is_empty());
        assert_eq!(
            shadow.shadow,
            vec![(7, "pin to n1,n2: consolidated".to_string())]
        );
        let off = run(&[j], Mode::Off, Some(&decisions));
        assert!(off.updates.is_empty() && off.shadow.is_empty());
    }

    #[test]
    fn garbage_decisions_are_refused_and_nothing_is_applied() {
        let j = pending(7);
        let mut absurd = vec![
            pin(99, &["n1"]),
            pin(7, &["ghost"]),
            Decision {
                delay_until: Some(NOW + MAX_DELAY_S + 1),
                ..Decision::explain(7, "x", 60)
            },
            Decision {
                priority: Some(0),
                ..Decision::explain(7, "x", 60)
            },
            Decision {
                nice: Some(i32::MIN),
                ..Decision::explain(7, "x", 60)
            },
            Decision {
                ttl_s: 0,
                ..pin(7, &["n1"])
            },
            Decision {
                node_count: Some(3),
                ..pin(7, &["n1"])
            },
            pin(7, &["n1", "n1"]),
        ];
        let out = run(std::slice::from_ref(&j), Mode::Enforce, Some(&absurd));
        assert!(out.updates.is_empty(), "{:?}", out.updates);
        assert_eq!(out.refused.len(), absurd.len(), "{:?}", out.refused);
        assert!(out.refused[0].contains("not a pending job"));
        assert!(out.refused[1].contains("unknown node 'ghost'"));
        // A valid decision next to garbage still applies.
        absurd.push(pin(7, &["n2"]));
        let out = run(&[j], Mode::Enforce, Some(&absurd));
        assert_eq!(out.updates[0].req_nodes.as_deref(), Some("n2"));
    }

    #[test]
    fn delays_priorities_and_nice_apply_and_undo() {
        let j = pending(7);
        let d = Decision {
            delay_until: Some(NOW + 60),
            priority: Some(5_000),
            nice: Some(10),
            ..Decision::explain(7, "later", 120)
        };
        let out = run(std::slice::from_ref(&j), Mode::Enforce, Some(&[d]));
        let u = &out.updates[0];
        assert_eq!(
            (u.begin_time, u.priority, u.nice),
            (Some(NOW + 60), Some(5_000), Some(10))
        );
        let j = after(j, u);
        let undo = run(std::slice::from_ref(&j), Mode::Off, Some(&[]));
        let u = &undo.updates[0];
        assert_eq!(u.begin_time, Some(NOW), "released now");
        assert_eq!(u.priority, Some(PRIORITY_AUTOMATIC));
        assert_eq!(u.nice, Some(0));
        assert_eq!(
            u.admin_comment.as_deref(),
            Some(
                "cinch: gpus=12 | cinch-past: did=delay,priority,nice \
                 since=1970-01-01T02:46:40Z stopped=1970-01-01T02:46:40Z because=cinch's mode \
                 is off now: it changes no job why=later"
            )
        );
        // Applied again later: a new since, and the past kept beside it until the next stop.
        let j = after(j, u);
        let d = Decision::explain(7, "again", 120);
        let again = run(
            std::slice::from_ref(&j),
            Mode::Enforce,
            Some(&[Decision {
                priority: Some(6_000),
                ..d
            }]),
        );
        let comment = again.updates[0].admin_comment.as_deref().unwrap();
        assert!(
            comment.contains("cinch-past: did=delay,priority,nice")
                && comment.contains("cinch-decision: prio=6000 since="),
            "{comment}"
        );
    }

    #[test]
    fn holds_apply_and_release() {
        let j = pending(7);
        let d = Decision {
            hold: Some(true),
            ..Decision::explain(7, "wait", 60)
        };
        let out = run(std::slice::from_ref(&j), Mode::Enforce, Some(&[d]));
        assert_eq!(out.updates[0].priority, Some(0));
        let j = after(j, &out.updates[0]);
        let undo = run(&[j], Mode::Enforce, None);
        assert_eq!(undo.updates[0].priority, Some(PRIORITY_AUTOMATIC));
    }

    #[test]
    fn what_users_and_admins_set_is_never_touched() {
        // The user gave a node list and a nice value at submission.
        let mut j = pending(7);
        j.req_nodes = Some("n3".into());
        j.nice = 5;
        let d = Decision {
            nice: Some(-5),
            ..pin(7, &["n1"])
        };
        assert!(run(&[j], Mode::Enforce, Some(std::slice::from_ref(&d)))
            .updates
            .is_empty());

        // An admin changed the priority after cinch set it: cinch neither resets nor undoes it.
        let j = pending(8);
        let d = Decision {
            priority: Some(5_000),
            ..Decision::explain(8, "tier", 60)
        };
        let applied = run(std::slice::from_ref(&j), Mode::Enforce, Some(&[d]));
        let mut j = after(j, &applied.updates[0]);
        j.priority = 7; // the admin's value
        let foreign = HashMap::from([(8, Fields::PRIORITY)]);
        let out = run_with(&[j], Mode::Enforce, None, &foreign);
        assert!(
            out.updates.iter().all(|u| u.priority.is_none()),
            "{:?}",
            out.updates
        );
    }

    #[test]
    fn requeues_only_running_jobs_that_opted_in_and_only_in_enforce() {
        let mut job = pending(7);
        job.state = JobState::Running;
        let ask = Decision {
            requeue: Some(true),
            ..Decision::explain(7, "consolidate", 60)
        };
        // Enforce mode, the requeue asked: refused with `why`, nothing requeued.
        let refused = |job: &JobView, why: &str| {
            let out = run(
                std::slice::from_ref(job),
                Mode::Enforce,
                Some(std::slice::from_ref(&ask)),
            );
            assert!(out.requeues.is_empty());
            assert!(out.refused[0].contains(why), "{:?}", out.refused);
        };
        refused(&job, "without --requeue");

        // Slurm's Requeue flag alone is the cluster's JobRequeue default, not the user's consent.
        job.requeue = true;
        refused(&job, "without --requeue");

        // The user's own --requeue, as job_submit recorded it.
        job.admin_comment = Some("cinch: gpus=12 requeue=yes".into());
        refused(&job, "did not say it checkpoints");

        job.comment = Some("nightly cinch:app=bert,ckpt=yes".into());
        let out = run(
            std::slice::from_ref(&job),
            Mode::Enforce,
            Some(std::slice::from_ref(&ask)),
        );
        assert_eq!(out.requeues, vec![(7, "consolidate".to_string())]);
        assert!(out.updates.is_empty() && out.refused.is_empty());

        let out = run(
            std::slice::from_ref(&job),
            Mode::Shadow,
            Some(std::slice::from_ref(&ask)),
        );
        assert!(out.requeues.is_empty());
        assert_eq!(out.shadow[0].1, "requeue: consolidate");

        let mixed = Decision {
            priority: Some(5),
            ..ask.clone()
        };
        let out = run(std::slice::from_ref(&job), Mode::Enforce, Some(&[mixed]));
        assert!(out.requeues.is_empty());
        assert!(
            out.refused[0].contains("other actions"),
            "{:?}",
            out.refused
        );

        let out = run(&[pending(7)], Mode::Enforce, Some(&[ask]));
        assert!(out.requeues.is_empty());
        assert!(out.refused[0].contains("not running"), "{:?}", out.refused);
    }

    #[test]
    fn the_submit_hold_is_released_whatever_happens() {
        let mut j = pending(7);
        j.eligible_time = NOW + 5;
        j.admin_comment = Some(format!("ticket 1 | cinch: gpus=12 {HOLD_KEY}{}", NOW + 5));
        for (mode, decisions) in [
            (Mode::Enforce, Some(&[][..])),
            (Mode::Enforce, None),
            (Mode::Shadow, Some(&[][..])),
        ] {
            let out = run(std::slice::from_ref(&j), mode, decisions);
            let u = &out.updates[0];
            assert_eq!(u.begin_time, Some(NOW), "{mode:?}");
            assert_eq!(
                u.admin_comment.as_deref(),
                Some("ticket 1 | cinch: gpus=12"),
                "{mode:?}"
            );
        }
        // With a pin decision, pin and release in one update.
        let out = run(
            std::slice::from_ref(&j),
            Mode::Enforce,
            Some(&[pin(7, &["n1", "n2"])]),
        );
        let u = &out.updates[0];
        assert_eq!(
            (u.req_nodes.as_deref(), u.begin_time),
            (Some("n1,n2"), Some(NOW))
        );
        // The user changed the begin time themselves: theirs.
        let foreign = HashMap::from([(7, Fields::BEGIN)]);
        let out = run_with(&[j], Mode::Enforce, None, &foreign);
        assert!(out.updates.iter().all(|u| u.begin_time.is_none()));
    }

    /// The simulator and the plugin hand the same decisions on the same jobs to the one apply
    /// path and get the same plan: the same pins, delays, priorities, requeues and refusals, and
    /// the same renewals once the changes are in place.
    #[test]
    fn the_simulator_and_the_plugin_plan_alike() {
        use cinch_core::PolicyConfig;
        use cinch_sim::engine::{Action, SimConfig, State};
        use cinch_sim::sched::CinchPolicy;
        use cinch_sim::ClusterSpec;

        let spec = |id: u32, gpus: u32, hinted: bool| {
            crate::agent::view::tests::sim_job(id, 100, gpus, hinted)
        };
        let config = SimConfig {
            cluster: ClusterSpec::parse("4x4", 2).unwrap(),
            ..SimConfig::default()
        };
        let mut state = State::scenario(
            config,
            vec![spec(1, 8, true), spec(2, 4, false), spec(5, 2, false)],
            vec![
                (spec(3, 2, true), vec![(0, 2)]),
                (spec(4, 2, false), vec![(1, 2)]),
            ],
        );
        // The same jobs as the plugin reads them from Slurm.
        let view = |id: u32, state: JobState, hinted: bool| {
            let mut j = job(id, state);
            j.min_nodes = 1;
            j.max_nodes = None;
            j.eligible_time = 100;
            j.priority = 0;
            j.requeue = hinted;
            // What job_submit recorded of a running job's own --requeue.
            j.admin_comment = (hinted && state == JobState::Running)
                .then(|| "cinch: gpus=2 requeue=yes".to_string());
            j.comment = hinted.then(|| "cinch:app=bert,ckpt=yes".to_string());
            j
        };
        let mut jobs = vec![
            view(1, JobState::Pending, true),
            view(2, JobState::Pending, false),
            view(5, JobState::Pending, false),
            view(3, JobState::Running, true),
            view(4, JobState::Running, false),
        ];
        let decisions = vec![
            Decision {
                priority: Some(9_000),
                ..pin(1, &["n3", "n4"])
            },
            Decision {
                delay_until: Some(NOW + 600),
                ..Decision::explain(2, "waits for one rack", 300)
            },
            Decision {
                requeue: Some(true),
                ..Decision::explain(3, "frees a rack", 300)
            },
            Decision {
                requeue: Some(true),
                ..Decision::explain(4, "did not opt in", 300)
            },
            pin(99, &["n1"]),
            pin(5, &["n9"]),
        ];
        let mut sim = CinchPolicy::new(PolicyConfig::default(), "cinch-consolidate".into());

        let simulated = sim.plan(&state, &decisions, NOW);
        let live = run(&jobs, Mode::Enforce, Some(&decisions));
        assert_eq!(live.refused, simulated.refused);
        assert_eq!(live.requeues, simulated.requeues);
        assert_eq!(live.requeues, vec![(3, "frees a rack".to_string())]);
        assert_eq!(live.refused.len(), 3, "{:?}", live.refused);
        let as_updates: Vec<_> = simulated
            .changes
            .iter()
            .map(|c| {
                (
                    c.job_id,
                    c.req_nodes.as_ref().map(|n| n.join(",")),
                    c.min_nodes,
                    c.begin_time,
                    c.priority,
                )
            })
            .collect();
        let live_updates: Vec<_> = live
            .updates
            .iter()
            .map(|u| {
                (
                    u.job_id,
                    u.req_nodes.clone(),
                    u.min_nodes,
                    u.begin_time,
                    u.priority,
                )
            })
            .collect();
        assert_eq!(live_updates, as_updates);
        assert_eq!(live_updates.len(), 2);
        for (update, change) in live.updates.iter().zip(&simulated.changes) {
            assert_eq!(
                update.admin_comment.as_deref(),
                Some(format_applied_since(&change.record, change.at).as_str()),
                "the plugin records what the simulator keeps"
            );
        }

        // Carried out by the simulator's round (the core's, with an optimizer that answers
        // these decisions), the same decisions renew alike and change nothing.
        struct Scripted(Vec<Decision>);
        impl cinch_core::enact::round::Optimizer for Scripted {
            fn ask(
                &mut self,
                s: &cinch_core::Snapshot,
            ) -> Result<cinch_core::Decisions, cinch_core::enact::round::AskError> {
                Ok(cinch_core::Decisions {
                    observed: Default::default(),
                    schema_version: cinch_core::SCHEMA_VERSION,
                    policy: "scripted".into(),
                    mode: Mode::Enforce,
                    time: s.time,
                    stated_targets: None,
                    decisions: self.0.clone(),
                })
            }
            fn policy_version(&mut self) -> Result<u64, cinch_core::enact::round::AskError> {
                Ok(1)
            }
        }
        // (Without the decision about a job it was not shown: one decision per job shown at most.)
        let shown: Vec<Decision> = decisions
            .iter()
            .filter(|d| d.job_id != 99)
            .cloned()
            .collect();
        let actions = sim.round_with(&state, NOW as f64, &mut Scripted(shown));
        let mut preempted = Vec::new();
        for action in actions {
            match action {
                Action::Control(j, control) => state.jobs[j].control = control,
                Action::Preempt(j) => preempted.push(state.jobs[j].spec.id),
                _ => {}
            }
        }
        assert_eq!(preempted, [3], "the round requeues what the plan said");
        for update in &live.updates {
            let i = jobs.iter().position(|j| j.job_id == update.job_id).unwrap();
            jobs[i] = after(jobs[i].clone(), update);
        }
        let live_again = run(&jobs, Mode::Enforce, Some(&decisions));
        assert!(live_again.updates.is_empty(), "{:?}", live_again.updates);
        let sim_again = sim.plan(&state, &decisions, NOW);
        assert!(sim_again.changes.is_empty(), "{:?}", sim_again.changes);
        let sim_renewed: HashMap<u32, i64> = sim_again.renewed.into_iter().collect();
        assert_eq!(sim_renewed, live_again.renewed);
        assert_eq!(sim_renewed.len(), 2);
    }
}
