//! Elastic jobs: their sizes at start and as they run.

use super::*;

fn elastic_hints(range: &str) -> crate::slurm::job_hints::Hints {
    [("app", "cifar10"), ("elastic", range), ("ckpt", "yes")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn an_elastic_job_starts_on_the_free_gpus_and_a_rigid_one_waits_for_its_own() {
    // n1 full, n2 half busy: 4 GPUs free. Both jobs ask for 8.
    let mut snap = snapshot(
        vec![node("n1", 8, 8, "r1"), node("n2", 8, 4, "r1")],
        vec![
            PendingJob {
                hints: elastic_hints("2-16"),
                ..pending(1, 8)
            },
            pending(2, 8),
        ],
    );
    snap.running = vec![running(9, "n1", 8, 0, 600)];
    let d = decide(absolute(), &snap);
    let elastic = find(&d, 1);
    assert_eq!(elastic.gpus, Some(4), "{elastic:?}");
    assert_eq!(elastic.pin_nodes.as_deref(), Some(&["n2".to_string()][..]));
    assert!(
        matches!(
            elastic.reason.clauses().first(),
            Some(Clause::Elastic(Elastic::Sized {
                min: 2,
                max: 16,
                to: 4,
                ..
            }))
        ),
        "{elastic:?}"
    );
    assert_eq!(
        find(&d, 2).gpus,
        None,
        "a job that did not opt in keeps its request"
    );
    // Off: no sizes at all.
    let d = decide(
        CinchParams {
            elastic: false,
            ..absolute()
        },
        &snap,
    );
    assert!(d.iter().all(|d| d.gpus.is_none()), "{d:?}");
}

#[test]
fn a_running_elastic_job_grows_into_an_idle_cluster_only_after_its_interval() {
    let job = |start: i64| RunningJob {
        requeue: true,
        hints: elastic_hints("2-16"),
        ..running(1, "n1", 4, start, 600)
    };
    let mut snap = snapshot(vec![node("n1", 8, 4, "r1"), node("n2", 8, 0, "r1")], vec![]);
    snap.time = 10_000;
    snap.running = vec![job(10_000 - 600)];
    let d = decide(absolute(), &snap);
    assert!(d.is_empty(), "within its resize interval: {d:?}");
    snap.running = vec![job(10_000 - 1_800)];
    let d = decide(absolute(), &snap);
    let grow = find(&d, 1);
    assert_eq!(
        (grow.requeue, grow.gpus),
        (Some(true), Some(16)),
        "{grow:?}"
    );
    // Without --requeue it is never resized.
    snap.running[0].requeue = false;
    assert!(decide(absolute(), &snap).is_empty());
}
