//! The stress grid of `cinch sim suite --stress` (issue 60, docs/simulator.md): generated
//! workloads of shapes the suite's traces lack, so that a rule that pays on the traces in view and
//! collapses elsewhere shows here. Every shape is a flood of small jobs around big ones
//! (`workload::stress`), spanning: the share of one-GPU jobs, the share of the GPU-time the big
//! jobs hold, the big jobs' size and length, Poisson or bursty arrivals, and the share of jobs that
//! may be requeued. None of it was chosen by looking at a result: the values are the ends and
//! middles of the ranges issue 60 names.

use std::fmt::Write as _;

use cinch_sim::workload::{Preemptible, StressShape, DEFAULT_HINTED};

/// Jobs per shape and the cluster; each shape's arrivals are compressed until it congests the
/// cluster, by the rule every trace of the suite follows (Slurm's own mean queueing at half the
/// ideal mean JCT).
pub(crate) const JOBS: usize = 3000;
pub(crate) const CLUSTER: &str = "32x8";

/// The bar: cinch's average JCT at most this times the best baseline's, in every shape.
pub(crate) const MAX_RATIO: f64 = 1.05;

/// One shape of the grid and who may be requeued in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StressCase {
    pub shape: StressShape,
    /// Share of the jobs that may be requeued: below 1, the jobs whose users opted in (the
    /// hinted ones, this share of them); 1, every job.
    pub preemptible_share: f64,
}

impl StressCase {
    /// Who may be requeued, and the share of jobs that give hints.
    pub(crate) fn preemptible(&self) -> (Preemptible, f64) {
        if self.preemptible_share >= 1.0 {
            (Preemptible::All, DEFAULT_HINTED)
        } else {
            (Preemptible::OptedIn, self.preemptible_share)
        }
    }

    /// The case's name in the suite's output (and for `--only`), with the offered load that
    /// congests it once known.
    pub(crate) fn name(&self, index: usize, load: Option<f64>) -> String {
        let s = &self.shape;
        format!(
            "stress {index:02}: {:.0}% one-GPU, {:.0}% of GPU-time in jobs of {}-{} GPUs running \
             {:.0}-{:.0} h, {} arrivals, {:.0}% preemptible; {JOBS} jobs{}, {CLUSTER} GPUs, 2 \
             racks, congestion 1",
            100.0 * s.one_gpu_share,
            100.0 * s.big_share,
            s.big_gpus[0],
            s.big_gpus[1],
            s.big_hours.0,
            s.big_hours.1,
            if s.bursty { "bursty" } else { "Poisson" },
            100.0 * self.preemptible_share,
            load.map_or(String::new(), |l| format!(", load {l:.2}")),
        )
    }
}

/// The 24 shapes: one-GPU share {50%, 99%} x big jobs' share of GPU-time {20%, 50%, 85%} x big
/// jobs {8-16 GPUs for 10-100 h, 16-32 GPUs for 50-500 h} x arrivals {Poisson, bursty}; the
/// preemptible share goes round 25%, 50%, 100% over them. Small jobs keep the flood's tail (3%
/// of them run 10-100 h).
pub(crate) fn grid() -> Vec<StressCase> {
    let mut cases = Vec::new();
    for one_gpu_share in [0.5, 0.99] {
        for big_share in [0.2, 0.5, 0.85] {
            for (big_gpus, big_hours) in [([8, 16], (10.0, 100.0)), ([16, 32], (50.0, 500.0))] {
                for bursty in [false, true] {
                    let preemptible_share = [0.25, 0.5, 1.0][cases.len() % 3];
                    cases.push(StressCase {
                        shape: StressShape {
                            one_gpu_share,
                            big_gpus,
                            big_hours,
                            big_share,
                            small_tail: StressShape::FLOOD.small_tail,
                            bursty,
                        },
                        preemptible_share,
                    });
                }
            }
        }
    }
    cases
}

/// One shape's result: the best baseline's average JCT (hours) and cinch's, and their p99s.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StressResult {
    pub name: String,
    pub best: String,
    pub best_avg: f64,
    pub cinch_avg: f64,
    pub best_p99: f64,
    pub cinch_p99: f64,
    pub slurm_avg: Option<f64>,
    /// The other policies that are not baselines (e.g. `portfolio`), with their average JCT.
    pub others: Vec<(String, f64)>,
}

impl StressResult {
    pub(crate) fn ratio(&self) -> f64 {
        self.cinch_avg / self.best_avg.max(1e-9)
    }
}

/// The grid's own table: a line per shape, cinch against the best baseline.
pub(crate) fn table(results: &[StressResult]) -> String {
    let others: Vec<&str> = results
        .first()
        .map(|r| r.others.iter().map(|(name, _)| name.as_str()).collect())
        .unwrap_or_default();
    let mut t = String::from(
        "\n### Stress grid (generated shapes the traces lack; one draw each; the jobs that give \
         hints are the preemptible share's, half of them where every job is)\n\n| shape | Slurm h | best \
         baseline h | cinch h | cinch / best | p99 cinch / best p99 |",
    );
    for name in &others {
        let _ = write!(t, " {name} / best |");
    }
    let _ = writeln!(
        t,
        "\n|---|---|---|---|---|---|{}",
        "---|".repeat(others.len())
    );
    for r in results {
        let _ = write!(
            t,
            "| {} | {} | {} {:.2} | {:.2} | {:.3} | {:.2} |",
            r.name,
            r.slurm_avg.map_or("-".into(), |s| format!("{s:.2}")),
            r.best,
            r.best_avg,
            r.cinch_avg,
            r.ratio(),
            r.cinch_p99 / r.best_p99.max(1e-9),
        );
        for (_, avg) in &r.others {
            let _ = write!(t, " {:.3} |", avg / r.best_avg.max(1e-9));
        }
        t.push('\n');
    }
    let worst = results.iter().map(StressResult::ratio).fold(0.0, f64::max);
    let over = results.iter().filter(|r| r.ratio() > MAX_RATIO).count();
    let _ = writeln!(
        t,
        "\ncinch over {MAX_RATIO}x the best baseline in {over} of {} shapes; worst {worst:.3}x\n",
        results.len()
    );
    t
}

/// Each shape against the bar: (met, detail).
pub(crate) fn verdicts(results: &[StressResult]) -> Vec<(String, bool, String)> {
    results
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                r.ratio() <= MAX_RATIO,
                format!(
                    "{:.3} h vs {} {:.3} h = {:.3}x",
                    r.cinch_avg,
                    r.best,
                    r.best_avg,
                    r.ratio()
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_spans_the_ranges_issue_60_names() {
        let grid = grid();
        assert_eq!(grid.len(), 24);
        let span = |f: &dyn Fn(&StressCase) -> f64| {
            let v: Vec<f64> = grid.iter().map(f).collect();
            (
                v.iter().copied().fold(f64::INFINITY, f64::min),
                v.iter().copied().fold(0.0, f64::max),
            )
        };
        assert_eq!(span(&|c| c.shape.one_gpu_share), (0.5, 0.99));
        assert_eq!(span(&|c| c.shape.big_share), (0.2, 0.85));
        assert_eq!(span(&|c| c.preemptible_share), (0.25, 1.0));
        assert_eq!(span(&|c| f64::from(c.shape.big_gpus[0])), (8.0, 16.0));
        assert_eq!(span(&|c| f64::from(c.shape.big_gpus[1])), (16.0, 32.0));
        assert_eq!(span(&|c| c.shape.big_hours.0), (10.0, 50.0));
        assert_eq!(span(&|c| c.shape.big_hours.1), (100.0, 500.0));
        assert_eq!(grid.iter().filter(|c| c.shape.bursty).count(), 12);
        // Every preemptible share meets every one-GPU share and big-job share.
        for share in [0.25, 0.5, 1.0] {
            for one in [0.5, 0.99] {
                assert!(grid
                    .iter()
                    .any(|c| c.preemptible_share == share && c.shape.one_gpu_share == one));
            }
        }
        let names: std::collections::BTreeSet<String> = grid
            .iter()
            .enumerate()
            .map(|(i, c)| c.name(i, None))
            .collect();
        assert_eq!(names.len(), 24, "names tell the shapes apart");
        assert_eq!(
            grid[2].preemptible(),
            (Preemptible::All, DEFAULT_HINTED),
            "{:?}",
            grid[2]
        );
        assert_eq!(grid[0].preemptible(), (Preemptible::OptedIn, 0.25));
    }

    #[test]
    fn a_shape_over_the_bar_is_missed_and_counted() {
        let result = |cinch: f64| StressResult {
            name: format!("s{cinch}"),
            best: "tiresias".into(),
            best_avg: 2.0,
            cinch_avg: cinch,
            best_p99: 10.0,
            cinch_p99: 12.0,
            slurm_avg: None,
            others: vec![("portfolio".into(), 2.0)],
        };
        let results = [result(2.1), result(2.2)];
        let v = verdicts(&results);
        assert_eq!(
            v.iter().map(|(_, met, _)| *met).collect::<Vec<_>>(),
            [true, false]
        );
        let t = table(&results);
        assert!(
            t.contains("| p99 cinch / best p99 | portfolio / best |\n"),
            "{t}"
        );
        assert!(
            t.contains("| s2.2 | - | tiresias 2.00 | 2.20 | 1.100 | 1.20 | 1.000 |\n"),
            "{t}"
        );
        assert!(
            t.contains("over 1.05x the best baseline in 1 of 2 shapes; worst 1.100x"),
            "{t}"
        );
    }
}
