//! A round rewrites only the nices whose job changed place in Slurm's order.

use super::*;
use crate::util::rng::SeededRng;

/// Decisions with the given new nices, and each job's (site priority, priority now).
fn case(jobs: &[(u32, i32, u32, u32)]) -> (Vec<Decision>, FxHashMap<u32, (u32, u32)>) {
    let decisions = jobs
        .iter()
        .map(|&(id, nice, ..)| Decision {
            nice: Some(nice),
            ..Decision::explain(id, Reason::default(), 300)
        })
        .collect();
    let site = jobs
        .iter()
        .map(|&(id, _, site, now)| (id, (site, now)))
        .collect();
    (decisions, site)
}

fn nices(decisions: &[Decision]) -> Vec<i32> {
    decisions.iter().map(|d| d.nice.unwrap()).collect()
}

#[test]
fn a_nice_a_few_units_off_is_kept_while_the_order_stands() {
    // Three jobs at site priority 10,000, now at nices -300, -200 and -100 (priorities 10,300,
    // 10,200, 10,100); the new round moves each by a few units, in the same order.
    let (mut d, site) = case(&[
        (1, -302, 10_000, 10_300),
        (2, -199, 10_000, 10_200),
        (3, -104, 10_000, 10_100),
    ]);
    keep_nices_in_order(&mut d, &site, 10_000);
    assert_eq!(nices(&d), [-300, -200, -100], "nothing rewritten");
}

#[test]
fn only_the_job_that_changed_place_is_rewritten() {
    // Job 3 moves from last to first; 1 and 2 keep their order between themselves.
    let (mut d, site) = case(&[
        (1, -302, 10_000, 10_300),
        (2, -199, 10_000, 10_200),
        (3, -400, 10_000, 10_100),
    ]);
    keep_nices_in_order(&mut d, &site, 10_000);
    assert_eq!(nices(&d), [-300, -200, -400]);
    // Job 2 moves below job 3, which stays: 2 takes its new nice, and so does 3 where its
    // nice now would put it above 2's new place only if that is still below 1.
    let (mut d, site) = case(&[
        (1, -302, 10_000, 10_300),
        (2, -50, 10_000, 10_200),
        (3, -104, 10_000, 10_100),
    ]);
    keep_nices_in_order(&mut d, &site, 10_000);
    assert_eq!(nices(&d), [-300, -50, -100]);
}

#[test]
fn ties_and_nices_that_are_not_cinchs_take_the_new_values() {
    // A tie in the new order is left as the new nices make it.
    let (mut d, site) = case(&[
        (1, -200, 10_000, 10_300),
        (2, -200, 10_000, 10_150),
        (3, -100, 10_000, 10_100),
    ]);
    keep_nices_in_order(&mut d, &site, 10_000);
    assert_eq!(nices(&d), [-200, -200, -100]);
    // A job held at priority 0 (nice now 10,000: not cinch's) and one the user reniced.
    let (mut d, site) = case(&[(1, -300, 10_000, 0), (2, -200, 10_000, 9_000)]);
    keep_nices_in_order(&mut d, &site, 10_000);
    assert_eq!(nices(&d), [-300, -200]);
}

#[test]
fn whatever_is_kept_the_order_is_the_new_nices_order() {
    let mut rng = SeededRng::new(59);
    let (mut kept, mut rewritten) = (0, 0);
    for _ in 0..500 {
        let n = 2 + rng.below(30) as u32;
        let jobs: Vec<(u32, i32, u32, u32)> = (0..n)
            .map(|id| {
                let site = 5_000 + rng.below(200) as u32;
                let new = -(rng.below(400) as i32);
                let now = site + rng.below(400) as u32;
                (id, new, site, now)
            })
            .collect();
        let (mut d, site) = case(&jobs);
        let priority = |d: &Decision| i64::from(site[&d.job_id].0) - i64::from(d.nice.unwrap());
        let want: Vec<i64> = d.iter().map(priority).collect();
        keep_nices_in_order(&mut d, &site, 10_000);
        let have: Vec<i64> = d.iter().map(priority).collect();
        for (k, job) in jobs.iter().enumerate() {
            if d[k].nice == Some(job.1) {
                rewritten += 1;
            } else {
                kept += 1;
            }
        }
        for a in 0..d.len() {
            for b in 0..d.len() {
                if want[a] > want[b] {
                    assert!(have[a] > have[b], "{jobs:?}: {a} over {b}");
                }
                if a != b && want[a] == want[b] {
                    assert_eq!(d[a].nice, jobs[a].1.into(), "a tie takes the new nice");
                }
            }
        }
    }
    // Both happen: the check above is not met by rewriting every job, nor by keeping all.
    assert!(
        kept > 100 && rewritten > 100,
        "kept {kept}, rewritten {rewritten}"
    );
}
