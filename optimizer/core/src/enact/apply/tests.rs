use super::*;

#[test]
fn the_requeue_budget_is_a_rolling_hour() {
    let mut limiter = RequeueLimiter::new(3);
    assert_eq!(limiter.budget(0), 3);
    limiter.record(0, 2);
    assert_eq!(limiter.budget(10), 1);
    limiter.record(1_800, 1);
    assert_eq!(limiter.budget(3_599), 0);
    // The first two leave the window an hour after they happened, the third later.
    assert_eq!(limiter.budget(3_600), 2);
    assert_eq!(limiter.budget(5_400), 3);
}

fn running(job_id: u32, requeues: u32) -> RunningState {
    RunningState {
        job_id,
        requeue: true,
        checkpoints: true,
        requeues,
        ..RunningState::default()
    }
}

fn requeue(job_id: u32) -> Decision {
    Decision {
        requeue: Some(true),
        ..Decision::explain(job_id, "make room", 300)
    }
}

/// An idle running job (job 1) whose admin's `IdleAction` is `action`.
fn idle_job(action: IdleAction) -> RunningState {
    RunningState {
        idle_action: action,
        ..running(1, 0)
    }
}

/// The optimizer's idle decision for job 1: idle since `since`, with a cancel or requeue.
fn idle_decision(since: i64, cancel: bool, requeue: bool) -> Decision {
    Decision {
        idle: Some(IdleDecision { since, cancel }),
        requeue: requeue.then_some(true),
        ..Decision::explain(1, "idle", 60)
    }
}

/// The plan for one running job and one decision, with a 600 s grace and a 300 s warning.
fn idle_plan(job: RunningState, d: Decision, now: i64, mode: Mode) -> Plan {
    plan(
        &[],
        &[job],
        &Input {
            now,
            mode,
            decisions: Some(&[d]),
            nodes: &HashSet::new(),
            requeue_limits: RequeueLimits {
                max_per_job: 3,
                budget: 10,
            },
            idle: IdleRules {
                gpu_percent: 5,
                grace_s: 600,
                warn_s: 300,
            },
            renew_within_s: 0,
            words: true,
        },
    )
}

/// Idle decisions: a warning is logged in any mode; a cancel or an idle requeue is carried
/// out only where the admin's `IdleAction` for the job says so, only after cinch.conf's
/// grace and warning (whatever the optimizer claims), and never for a job kept off.
#[test]
fn idle_cancels_and_requeues_follow_the_admins_idle_action_and_wait_out_the_warning() {
    let (with, idle, run) = (idle_job, idle_decision, idle_plan);
    let now = 10_000;
    let since = now - 900;
    // A warning: logged, nothing done.
    let p = run(
        with(IdleAction::Cancel),
        idle(since + 1, false, false),
        now,
        Mode::Enforce,
    );
    assert_eq!(p.idle_warnings, vec![(1, "idle".to_string())]);
    assert!(p.cancels.is_empty() && p.requeues.is_empty() && p.refused.is_empty());
    // Due: cancelled, requeued, where the admin said so; shadow mode only logs the cancel.
    let p = run(
        with(IdleAction::Cancel),
        idle(since, true, false),
        now,
        Mode::Enforce,
    );
    assert_eq!(p.cancels, vec![(1, "idle".to_string())]);
    let p = run(
        with(IdleAction::Cancel),
        idle(since, true, false),
        now,
        Mode::Shadow,
    );
    assert!(p.cancels.is_empty());
    assert_eq!(p.shadow, vec![(1, "cancel: idle".to_string())]);
    let p = run(
        with(IdleAction::Requeue),
        idle(since, false, true),
        now,
        Mode::Enforce,
    );
    assert_eq!(p.requeues, vec![(1, "idle".to_string())]);
}

/// The refusals: an idle cancel or requeue before the warning ran out, against the admin's
/// `IdleAction`, for a job kept off or not running, or with the wrong fields.
#[test]
fn idle_cancels_and_requeues_are_refused_against_the_admins_rules() {
    let (with, idle, run) = (idle_job, idle_decision, idle_plan);
    let now = 10_000;
    let since = now - 900;
    // Refused: before the warning ran out, against the admin's action, for a job kept off,
    // a job not running, a cancel with a requeue, an idle requeue without the opt-in.
    let refused = |job: RunningState, d: Decision, what: &str| {
        let p = run(job, d, now, Mode::Enforce);
        assert!(p.cancels.is_empty() && p.requeues.is_empty(), "{what}");
        assert_eq!(p.refused.len(), 1, "{what}: {:?}", p.refused);
        assert!(p.refused[0].contains(what), "{what}: {}", p.refused[0]);
    };
    refused(
        with(IdleAction::Cancel),
        idle(since + 1, true, false),
        "before its grace",
    );
    refused(
        with(IdleAction::Requeue),
        idle(since, true, false),
        "IdleAction is requeue",
    );
    refused(
        with(IdleAction::Report),
        idle(since, false, true),
        "IdleAction is report",
    );
    refused(
        RunningState {
            hands_off: Some("partition debug is excluded".into()),
            ..with(IdleAction::Cancel)
        },
        idle(since, true, false),
        "leaves alone",
    );
    refused(
        RunningState {
            job_id: 2,
            ..with(IdleAction::Cancel)
        },
        idle(since, true, false),
        "not running",
    );
    refused(
        with(IdleAction::Cancel),
        idle(since, true, true),
        "must not carry a requeue",
    );
    refused(
        with(IdleAction::Cancel),
        idle(now + 5, false, false),
        "not a time past",
    );
    refused(
        RunningState {
            checkpoints: false,
            ..with(IdleAction::Requeue)
        },
        idle(since, false, true),
        "checkpoints",
    );
    let mut pinned = idle(since, true, false);
    pinned.nice = Some(5);
    refused(with(IdleAction::Cancel), pinned, "other actions");
}

#[test]
fn requeues_stop_at_the_per_job_cap_and_the_round_budget() {
    let jobs = [running(1, 0), running(2, 3), running(3, 1), running(4, 0)];
    let decisions = [requeue(1), requeue(2), requeue(3), requeue(4), requeue(1)];
    let nodes = HashSet::new();
    let plan = plan(
        &[],
        &jobs,
        &Input {
            idle: Default::default(),
            now: 0,
            mode: Mode::Enforce,
            decisions: Some(&decisions),
            nodes: &nodes,
            requeue_limits: RequeueLimits {
                max_per_job: 3,
                budget: 2,
            },
            renew_within_s: 0,
            words: true,
        },
    );
    let ids: Vec<u32> = plan.requeues.iter().map(|(j, _)| *j).collect();
    assert_eq!(
        ids,
        vec![1, 3],
        "job 2 is at its cap, job 4 over the budget"
    );
    assert_eq!(plan.refused.len(), 3, "{:?}", plan.refused);
    assert!(plan.refused[0].contains("requeued 3 times already"));
    assert!(plan.refused[1].contains("rate limit"));
    assert!(plan.refused[2].contains("requeued twice"));
}

/// A job the admin keeps cinch off: decisions for it are refused (pending or running), and
/// what cinch applied before the admin did so is undone.
#[test]
fn jobs_the_admin_keeps_cinch_off_are_refused_and_undone() {
    let off = Some("a CPU-only job (OrderCpuJobs=no)".to_string());
    let pending = [
        PendingState {
            job_id: 1,
            min_nodes: 1,
            priority: 5_000,
            applied: Applied {
                prio: Some(5_000),
                until: 1_000,
                why: "ordered before".into(),
                ..Applied::default()
            },
            hands_off: off.clone(),
            ..PendingState::default()
        },
        PendingState {
            job_id: 2,
            min_nodes: 1,
            priority: 7,
            ..PendingState::default()
        },
    ];
    let kept_off_running = RunningState {
        hands_off: off.clone(),
        ..running(3, 0)
    };
    let prio = |job_id| Decision {
        priority: Some(9_000),
        ..Decision::explain(job_id, "shorter first", 300)
    };
    let decisions = [prio(1), prio(2), requeue(3)];
    let nodes = HashSet::new();
    let plan = plan(
        &pending,
        &[kept_off_running],
        &Input {
            idle: Default::default(),
            now: 100,
            mode: Mode::Enforce,
            decisions: Some(&decisions),
            nodes: &nodes,
            requeue_limits: RequeueLimits {
                max_per_job: 3,
                budget: 5,
            },
            renew_within_s: 0,
            words: true,
        },
    );
    assert!(plan.requeues.is_empty(), "{plan:?}");
    assert_eq!(plan.refused.len(), 2, "{:?}", plan.refused);
    for (refused, job) in plan.refused.iter().zip(["job 1:", "job 3:"]) {
        assert!(refused.starts_with(job), "{refused}");
        assert!(refused.contains("CPU-only job (OrderCpuJobs=no), which cinch leaves alone"));
    }
    let change = |id| plan.changes.iter().find(|c| c.job_id == id);
    let undone = change(1).expect("job 1's earlier priority is undone");
    assert_eq!(undone.priority, Some(PRIORITY_AUTOMATIC));
    assert!(undone.record.is_empty(), "{undone:?}");
    assert_eq!(change(2).and_then(|c| c.priority), Some(9_000));
}

#[test]
fn decisions_meet_their_jobs_in_any_order_and_the_first_of_two_is_kept() {
    let waiting = |job_id| PendingState {
        job_id,
        min_nodes: 1,
        priority: 7,
        ..PendingState::default()
    };
    // Slurm's order is not the jobs' ids'; neither is the optimizer's.
    let pending = [waiting(30), waiting(10), waiting(20)];
    let prio = |job_id, priority| Decision {
        priority: Some(priority),
        ..Decision::explain(job_id, "ordered", 300)
    };
    let decisions = [
        prio(20, 900),
        prio(99, 1),
        prio(10, 500),
        prio(20, 100),
        prio(5, 1),
    ];
    let nodes = HashSet::new();
    let plan = plan(&pending, &[], &enforce(Some(&decisions), &nodes));
    let changed: Vec<(u32, Option<u32>)> = plan
        .changes
        .iter()
        .map(|c| (c.job_id, c.priority))
        .collect();
    assert_eq!(changed, [(10, Some(500)), (20, Some(900))], "in job order");
    assert_eq!(
        plan.refused,
        [
            "job 99: not a pending job",
            "job 20: decided twice; first kept",
            "job 5: not a pending job",
        ],
        "in the decisions' order"
    );
    // In shadow mode the same decisions are only described, each once.
    let shadow = super::plan(
        &pending,
        &[],
        &Input {
            mode: Mode::Shadow,
            ..enforce(Some(&decisions), &nodes)
        },
    );
    assert!(shadow.changes.is_empty(), "{:?}", shadow.changes);
    let described: Vec<u32> = shadow.shadow.iter().map(|(id, _)| *id).collect();
    assert_eq!(described, [10, 20]);
}

/// Without words (the simulator's rounds, when nobody reads its agent log), each change
/// tells Slurm the same and keeps the same record but for its reason, and says nothing: a
/// pin, the same pin again, a priority on top, the undo.
#[test]
fn a_change_without_words_tells_slurm_the_same_and_says_nothing() {
    let nodes: HashSet<String> = ["n1", "n2"].iter().map(|s| s.to_string()).collect();
    let pin = Decision {
        pin_nodes: Some(vec!["n1".into()]),
        ..Decision::explain(1, "consolidated", 300)
    };
    let rounds = [
        pin.clone(),
        pin.clone(),
        Decision {
            priority: Some(700),
            ..pin
        },
        Decision::explain(1, "Slurm places it", 300),
    ];
    let mut applied = [Applied::default(), Applied::default()];
    for (k, decision) in rounds.iter().enumerate() {
        let [worded, silent] = [true, false].map(|words| {
            let job = PendingState {
                job_id: 1,
                min_nodes: 1,
                eligible_time: 1_000,
                applied: applied[usize::from(!words)].clone(),
                ..PendingState::default()
            };
            plan(
                &[job],
                &[],
                &Input {
                    now: 1_000 + 10 * k as i64,
                    words,
                    ..enforce(Some(std::slice::from_ref(decision)), &nodes)
                },
            )
            .changes
        });
        assert_eq!(worded.len(), silent.len(), "round {k}");
        assert_eq!(
            worded.is_empty(),
            k == 1,
            "round {k}: the same pin again changes nothing"
        );
        for (w, s) in worded.iter().zip(&silent) {
            assert!(!w.summary.is_empty() && !w.record.why.is_empty(), "{w:?}");
            assert!(s.summary.is_empty() && s.record.why.is_empty(), "{s:?}");
            let unworded = |c: &JobChange| JobChange {
                summary: String::new(),
                record: Applied {
                    why: "".into(),
                    ..c.record.clone()
                },
                ..c.clone()
            };
            assert_eq!(unworded(w), unworded(s), "round {k}");
            applied = [w.record.clone(), s.record.clone()];
        }
    }
    assert!(applied[1].is_empty(), "undone");
}

#[test]
fn a_pin_bounds_the_node_count_to_the_pinned_nodes_and_its_undo_restores_the_users() {
    // Slurm takes a node list as nodes a job must include: without a maximum it would add
    // other nodes to a pinned job and start it spread (measured by the live replay).
    let nodes: HashSet<String> = ["n1", "n2", "n3"].iter().map(|s| s.to_string()).collect();
    let waiting = |applied: Applied| PendingState {
        job_id: 1,
        min_nodes: 1,
        max_nodes: 0,
        eligible_time: 1_000,
        applied,
        ..PendingState::default()
    };
    let pin = Decision {
        pin_nodes: Some(vec!["n1".into()]),
        ..Decision::explain(1, "consolidated", 300)
    };
    let at = |job: &PendingState, decisions: &[Decision]| {
        plan(
            std::slice::from_ref(job),
            &[],
            &Input {
                now: 1_000,
                ..enforce(Some(decisions), &nodes)
            },
        )
    };
    let pinned = at(&waiting(Applied::default()), std::slice::from_ref(&pin));
    let change = &pinned.changes[0];
    assert_eq!(change.req_nodes, Some(vec!["n1".to_string()]));
    assert_eq!((change.min_nodes, change.max_nodes), (Some(1), Some(1)));
    assert_eq!(
        (change.record.nodes_was, change.record.max_nodes_was),
        (Some(1), Some(0)),
        "the user's counts, kept for the undo"
    );
    // The same pin next round: nothing to tell Slurm.
    let job = waiting(change.record.clone());
    let again = at(&job, std::slice::from_ref(&pin));
    assert!(again.changes.is_empty(), "{:?}", again.changes);
    // Undone (a decision that asks for nothing): the node list cleared, both counts back
    // to the user's (0: no maximum).
    let undone = at(&job, &[Decision::explain(1, "Slurm places it", 300)]);
    let change = &undone.changes[0];
    assert_eq!(change.req_nodes, Some(Vec::new()));
    assert_eq!((change.min_nodes, change.max_nodes), (Some(1), Some(0)));
    // A pin recorded before cinch bounded pins (no max_nodes_was) is bounded now.
    let old = waiting(Applied {
        max_nodes_was: None,
        ..job.applied.clone()
    });
    let bounded = at(&old, std::slice::from_ref(&pin));
    assert_eq!(bounded.changes[0].max_nodes, Some(1));
    assert_eq!(bounded.changes[0].record.max_nodes_was, Some(0));
}

#[test]
fn a_delay_in_force_is_renewed_near_its_end_not_every_round() {
    // Job 1 was delayed by cinch until 1_060 (a round at 1_000 with "look again in 60 s").
    let delayed = |begin: i64, priority| PendingState {
        job_id: 1,
        min_nodes: 1,
        eligible_time: begin,
        applied: Applied {
            begin: Some(begin),
            prio: priority,
            until: 1_300,
            ..Applied::default()
        },
        ..PendingState::default()
    };
    let delay = |until, priority| Decision {
        delay_until: Some(until),
        priority,
        ..Decision::explain(1, "waits for its shape", 300)
    };
    let nodes = HashSet::new();
    let at = |now, job: &PendingState, decision: &Decision| {
        plan(
            std::slice::from_ref(job),
            &[],
            &Input {
                now,
                renew_within_s: renewal_margin_s(5),
                words: true,
                ..enforce(Some(std::slice::from_ref(decision)), &nodes)
            },
        )
    };
    let job = delayed(1_060, None);
    // Later rounds want it later still: the delay in force stands, Slurm is told nothing,
    // the decision is renewed in memory.
    for now in [1_005, 1_020, 1_044] {
        let plan = at(now, &job, &delay(now + 60, None));
        assert!(plan.changes.is_empty(), "at {now}: {:?}", plan.changes);
        assert_eq!(plan.renewed, [(1, now + 300)], "at {now}");
    }
    // Within three intervals (15 s) of its end it is moved to the decision's time.
    let plan = at(1_045, &job, &delay(1_105, None));
    assert_eq!(plan.changes.len(), 1, "{:?}", plan);
    assert_eq!(plan.changes[0].begin_time, Some(1_105));
    assert_eq!(plan.changes[0].record.begin, Some(1_105));
    // A decision that wants it sooner moves it at once.
    let plan = at(1_005, &job, &delay(1_030, None));
    assert_eq!(plan.changes[0].begin_time, Some(1_030));
    // Another field that changes rewrites the record with the delay still in force.
    let plan = at(1_005, &job, &delay(1_065, Some(400)));
    let change = &plan.changes[0];
    assert_eq!((change.begin_time, change.priority), (None, Some(400)));
    assert_eq!(
        change.record.begin,
        Some(1_060),
        "Slurm's begin time, not the wanted one"
    );
    // A job whose delay is not cinch's (a submit hold) is not left to lapse: it gets cinch's.
    let held = PendingState {
        submit_hold: Some(1_010),
        applied: Applied::default(),
        ..delayed(1_010, None)
    };
    let plan = at(1_005, &held, &delay(1_065, None));
    assert_eq!(plan.changes[0].begin_time, Some(1_065));
    // With no margin (rounds at every pass, as a simulation without an interval runs),
    // a delay stands until it ends.
    let plan = super::plan(
        std::slice::from_ref(&job),
        &[],
        &enforce(Some(&[delay(1_070, None)]), &nodes),
    );
    assert!(plan.changes.is_empty(), "{:?}", plan.changes);
}

fn elastic_pending(job_id: u32, gpus: u32) -> PendingState {
    PendingState {
        job_id,
        min_nodes: 1,
        gpus,
        elastic: Some(crate::models::elastic::Range { min: 2, max: 16 }),
        ..PendingState::default()
    }
}

fn sized(job_id: u32, gpus: u32) -> Decision {
    Decision {
        gpus: Some(gpus),
        ..Decision::explain(job_id, "sized", 300)
    }
}

fn enforce<'a>(decisions: Option<&'a [Decision]>, nodes: &'a HashSet<String>) -> Input<'a> {
    Input {
        idle: Default::default(),
        now: 1_000,
        mode: Mode::Enforce,
        decisions,
        nodes,
        requeue_limits: RequeueLimits {
            max_per_job: 10,
            budget: 10,
        },
        renew_within_s: 0,
        words: true,
    }
}

#[test]
fn an_elastic_size_applies_only_within_the_declared_range_and_is_undone_with_the_rest() {
    let nodes = HashSet::new();
    let plain = PendingState {
        elastic: None,
        ..elastic_pending(3, 4)
    };
    let jobs = [elastic_pending(1, 4), elastic_pending(2, 4), plain];
    let decisions = [sized(1, 8), sized(2, 32), sized(3, 8)];
    let plan = plan(&jobs, &[], &enforce(Some(&decisions), &nodes));
    assert_eq!(plan.changes.len(), 1, "{:?}", plan.refused);
    assert_eq!(plan.changes[0].gpus, Some(8));
    assert_eq!(plan.changes[0].record.gpus, Some((4, 8)));
    assert!(plan.refused[0].contains("outside the range its user declared (elastic=2-16)"));
    assert!(plan.refused[1].contains("not elastic"));

    // The optimizer is lost: the size the user asked for comes back.
    let resized = PendingState {
        applied: plan.changes[0].record.clone(),
        ..elastic_pending(1, 8)
    };
    let undo = super::plan(&[resized], &[], &enforce(None, &nodes));
    assert_eq!(undo.changes[0].gpus, Some(4), "{:?}", undo.changes);
    assert!(undo.changes[0].record.is_empty());
}

#[test]
fn a_running_elastic_job_is_resized_only_by_a_requeue_it_opted_in_to() {
    let nodes = HashSet::new();
    let elastic = RunningState {
        elastic: Some(crate::models::elastic::Range { min: 2, max: 16 }),
        ..running(1, 0)
    };
    let not_elastic = running(2, 0);
    let resize = |id, gpus| Decision {
        requeue: Some(true),
        gpus: Some(gpus),
        ..Decision::explain(id, "grow", 300)
    };
    let decisions = [resize(1, 16), resize(2, 8)];
    let plan = plan(
        &[],
        &[elastic.clone(), not_elastic],
        &enforce(Some(&decisions), &nodes),
    );
    let resized: Vec<(u32, Option<u32>)> = plan
        .after_requeue
        .iter()
        .map(|c| (c.job_id, c.gpus))
        .collect();
    assert_eq!(resized, [(1, Some(16))]);
    assert_eq!(plan.requeues.len(), 1);
    assert!(
        plan.refused[0].contains("not elastic"),
        "{:?}",
        plan.refused
    );
    // Without a requeue a running job's size is not a pending job's change.
    let plan2 = super::plan(&[], &[elastic], &enforce(Some(&[sized(1, 8)]), &nodes));
    assert!(plan2.refused[0].contains("not a pending job"));
}
