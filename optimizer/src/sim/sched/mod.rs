//! The schedulers the simulator compares, one file each: Slurm's own behaviours (the
//! baselines every admin already has), research baselines, and cinch's policies driven
//! through the same Snapshot/Decisions path as the live service.

mod cinch;
mod placement;
mod qssf;
mod slurm;
mod strict;
mod switches;
mod tiresias;

use std::fmt;
use std::str::FromStr;

pub use cinch::CinchPolicy;
pub use placement::{consolidated, first_fit, pinned};
pub use qssf::Qssf;
pub use slurm::SlurmDefault;
pub use strict::StrictConsolidation;
pub use switches::SlurmSwitches;
pub use tiresias::Tiresias;

use super::engine::{Action, State};
use crate::policy::{DallyParams, PolicyConfig};

/// A scheduler as the simulated Slurm consults it.
pub trait Scheduler {
    /// The name reports use.
    fn name(&self) -> String;

    /// Changes wanted before a pass (cinch's decisions, preemptions).
    fn prepare(&mut self, _state: &State, _now: f64) -> Vec<Action> {
        Vec::new()
    }

    /// Queue position of a pending job: lower goes first (ties: submit time, then id).
    fn order_key(&self, state: &State, job: usize, now: f64) -> f64;

    /// Where the job starts now, as (node, GPUs) pairs; `None` to leave it waiting.
    fn place(&self, state: &State, job: usize, now: f64) -> Option<Vec<(u32, u32)>>;

    /// Whether the first job that cannot start gets an EASY backfill reservation.
    fn reserves(&self) -> bool {
        true
    }

    /// Whether passes must also run while jobs run and none waits (for preemption).
    fn wants_ticks(&self) -> bool {
        false
    }

    /// A job finished (for schedulers that learn from history).
    fn on_finish(&mut self, _state: &State, _job: usize) {}

    /// The median delay timer applied to jobs (from submission to the end of the delay), for
    /// policies that delay jobs.
    fn median_delay_s(&self) -> Option<f64> {
        None
    }
}

/// The schedulers `cinch sim --policies` can name.
#[derive(Debug, Clone, PartialEq)]
pub enum SchedulerKind {
    Slurm,
    SlurmSwitches { max_wait_s: f64 },
    Strict,
    Tiresias,
    Qssf,
    Cinch(PolicyConfig),
}

/// All of them, in report order, with default parameters.
pub fn all_kinds() -> Vec<SchedulerKind> {
    vec![
        SchedulerKind::Slurm,
        SchedulerKind::SlurmSwitches { max_wait_s: 300.0 },
        SchedulerKind::Strict,
        SchedulerKind::Tiresias,
        SchedulerKind::Qssf,
        SchedulerKind::Cinch(PolicyConfig::defaults_for("consolidate").expect("known")),
        SchedulerKind::Cinch(PolicyConfig::defaults_for("dally").expect("known")),
    ]
}

impl SchedulerKind {
    pub fn build(&self) -> Box<dyn Scheduler> {
        match self {
            SchedulerKind::Slurm => Box::new(SlurmDefault),
            SchedulerKind::SlurmSwitches { max_wait_s } => Box::new(SlurmSwitches {
                max_wait_s: *max_wait_s,
            }),
            SchedulerKind::Strict => Box::new(StrictConsolidation),
            SchedulerKind::Tiresias => Box::new(Tiresias::default()),
            SchedulerKind::Qssf => Box::new(Qssf::default()),
            SchedulerKind::Cinch(config) => Box::new(CinchPolicy::new(config.clone())),
        }
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedulerKind::Slurm => f.write_str("slurm"),
            SchedulerKind::SlurmSwitches { max_wait_s } => {
                write!(f, "slurm-switches")?;
                if *max_wait_s != 300.0 {
                    write!(f, "@{max_wait_s}")?;
                }
                Ok(())
            }
            SchedulerKind::Strict => f.write_str("strict"),
            SchedulerKind::Tiresias => f.write_str("tiresias"),
            SchedulerKind::Qssf => f.write_str("qssf"),
            SchedulerKind::Cinch(PolicyConfig::Dally(DallyParams {
                node_timer_s: Some(t),
                rack_timer_s: Some(r),
                ..
            })) if t == r => write!(f, "cinch-dally@{t}"),
            SchedulerKind::Cinch(config) => write!(f, "cinch-{}", config.name()),
        }
    }
}

impl FromStr for SchedulerKind {
    type Err = String;
    /// `slurm`, `slurm-switches[@SECONDS]`, `strict`, `tiresias`, `qssf`, `consolidate`
    /// (or `cinch-consolidate`), `dally` (auto-tuned timers) or `dally@SECONDS` (both timers
    /// fixed), `passthrough`.
    fn from_str(s: &str) -> Result<Self, String> {
        let name = s.trim();
        if let Some(wait) = name.strip_prefix("slurm-switches") {
            let max_wait_s = match wait.strip_prefix('@') {
                Some(w) => w
                    .parse::<f64>()
                    .ok()
                    .filter(|w| w.is_finite() && *w >= 0.0)
                    .ok_or_else(|| format!("'{s}': the wait must be seconds >= 0"))?,
                None if wait.is_empty() => 300.0,
                None => return Err(unknown(s)),
            };
            return Ok(SchedulerKind::SlurmSwitches { max_wait_s });
        }
        match name {
            "slurm" => Ok(SchedulerKind::Slurm),
            "strict" => Ok(SchedulerKind::Strict),
            "tiresias" => Ok(SchedulerKind::Tiresias),
            "qssf" => Ok(SchedulerKind::Qssf),
            other => {
                let policy = other.strip_prefix("cinch-").unwrap_or(other);
                if let Some(timer) = policy.strip_prefix("dally@") {
                    let t: u32 = timer
                        .parse()
                        .ok()
                        .filter(|&t| t <= 604_800)
                        .ok_or_else(|| format!("'{s}': the timer must be 0 to 604800 seconds"))?;
                    return Ok(SchedulerKind::Cinch(PolicyConfig::Dally(DallyParams {
                        node_timer_s: Some(t),
                        rack_timer_s: Some(t),
                        ..DallyParams::default()
                    })));
                }
                PolicyConfig::defaults_for(policy)
                    .map(SchedulerKind::Cinch)
                    .map_err(|_| unknown(s))
            }
        }
    }
}

fn unknown(s: &str) -> String {
    format!(
        "unknown policy '{s}' (known: slurm, slurm-switches[@SECONDS], strict, tiresias, qssf, \
         consolidate, dally[@SECONDS], passthrough)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip_and_bad_ones_are_refused() {
        for kind in all_kinds() {
            assert_eq!(kind.to_string().parse::<SchedulerKind>().unwrap(), kind);
        }
        assert_eq!(
            "slurm-switches@60".parse::<SchedulerKind>().unwrap(),
            SchedulerKind::SlurmSwitches { max_wait_s: 60.0 }
        );
        assert!("slurm-switches@-1".parse::<SchedulerKind>().is_err());
        let err = "fastest".parse::<SchedulerKind>().unwrap_err();
        assert!(err.contains("unknown policy 'fastest'"), "{err}");
    }
}
