//! Scheduling policies: one trait, one file each. A policy is a pure function of
//! (snapshot, now, seeded rng) returning a decision with a reason per job it has an opinion on,
//! so the service, the simulator and the tests all run the very same code.

mod cinch;
mod consolidate;
mod dally;
mod edf;
mod equal_share;
mod passthrough;
mod placement;
mod qssf;
mod strict;
mod switches;
mod tiresias;

use serde::{Deserialize, Serialize};

pub use cinch::{Cinch, CinchParams, RESERVED_PRIORITY as CINCH_RESERVED_PRIORITY};
pub use consolidate::{Consolidate, ConsolidateParams};
pub use dally::{app_slowdown, Dally, DallyParams, Sensitivity, APP_SLOWDOWN};
pub use edf::{Edf, EdfParams};
pub use equal_share::{EqualShare, EqualShareParams};
pub use passthrough::{Passthrough, PassthroughParams};
use placement::Cluster;
pub use placement::{Placement, PlanOutcome};
pub use qssf::{Qssf, QssfParams};
pub use strict::{Strict, StrictParams, RESERVED_PRIORITY as STRICT_RESERVED_PRIORITY};
pub use switches::{Switches, SwitchesParams};
pub use tiresias::{Tiresias, TiresiasParams};

use crate::decision::Decision;
// The one reading of `ckpt=`, for the policies that requeue.
use crate::hints::checkpoints;
use crate::history::History;
use crate::rng::SeededRng;
use crate::snapshot::{PendingJob, Snapshot};

/// Pending jobs in the order Slurm considers them: priority, then submit time, then id.
fn slurm_order(pending: &[PendingJob]) -> Vec<&PendingJob> {
    slurm_order_indices(pending)
        .into_iter()
        .map(|i| &pending[i])
        .collect()
}

/// [`slurm_order`] as positions in `pending`.
fn slurm_order_indices(pending: &[PendingJob]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..pending.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&pending[a], &pending[b]);
        b.priority
            .cmp(&a.priority)
            .then(a.submit_time.cmp(&b.submit_time))
            .then(a.job_id.cmp(&b.job_id))
    });
    order
}

/// Why cinch leaves a job's placement as the user submitted it, if it does: a node list, a
/// constraint, or a `--begin` still ahead are the user's.
fn left_as_submitted(job: &PendingJob, now: i64) -> Option<String> {
    if let Some(begin) = job.begin_time.filter(|&t| t > now) {
        return Some(format!(
            "cannot start before {} (--begin); left to Slurm",
            crate::slurm_time::format_time(begin)
        ));
    }
    if !job.required_nodes.is_empty() {
        return Some("the user required specific nodes; left as submitted".into());
    }
    if job.constraint.is_some() {
        return Some("the job has a --constraint; left to Slurm".into());
    }
    None
}

/// Pin `job` to its planned nodes (sorted), changing its node count when the plan needs to.
fn pin_decision(job: &PendingJob, placement: Placement, reason: String, ttl_s: u32) -> Decision {
    let mut nodes: Vec<String> = placement.gpus_on.into_iter().map(|(n, _)| n).collect();
    nodes.sort();
    let count = nodes.len() as u32;
    Decision {
        node_count: (count != job.min_nodes).then_some(count),
        pin_nodes: Some(nodes),
        ..Decision::explain(job.job_id, reason, ttl_s)
    }
}

pub use crate::mode::Mode;

/// A placing policy's one round: multi-GPU jobs (at least `min_gpus`) in Slurm's order are
/// pinned to the placement `Cluster::place` finds when `accept` takes it, and get `otherwise`'s
/// decision when it does not (or there is none); smaller jobs take their GPUs in the plan where
/// Slurm's best fit will put them, so no pin is planned on GPUs Slurm is about to give away.
/// Jobs with a user's node list, constraint or future `--begin` are only explained.
fn pin_in_slurm_order(
    snapshot: &Snapshot,
    now: i64,
    min_gpus: u32,
    cross_rack: bool,
    ttl_s: u32,
    accept: impl Fn(&Cluster, &PendingJob, &Placement) -> bool,
    mut otherwise: impl FnMut(&Cluster, &PendingJob) -> Decision,
) -> Vec<Decision> {
    let mut cluster = Cluster::new(snapshot);
    let mut decisions = Vec::new();
    for job in slurm_order(&snapshot.pending) {
        if job.gpus < min_gpus {
            cluster.take_best_fit_node(job);
            continue;
        }
        if let Some(why) = left_as_submitted(job, now) {
            decisions.push(Decision::explain(job.job_id, why, ttl_s));
            continue;
        }
        let saved = cluster.save();
        match cluster.place(job, now, cross_rack) {
            Ok((placement, reason)) if accept(&cluster, job, &placement) => {
                decisions.push(pin_decision(job, placement, reason, ttl_s));
            }
            _ => {
                cluster.restore(saved);
                decisions.push(otherwise(&cluster, job));
            }
        }
    }
    decisions
}

/// The `min_gpus` range every consolidating policy accepts.
/// A parameter that must lie in `range`, or the message saying so.
fn check_range(name: &str, value: f64, range: std::ops::RangeInclusive<f64>) -> Result<(), String> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{name} must be from {} to {}, not {value}",
            range.start(),
            range.end()
        ))
    }
}

fn check_min_gpus(min_gpus: u32) -> Result<(), String> {
    if (2..=1_000_000).contains(&min_gpus) {
        Ok(())
    } else {
        Err(format!(
            "min_gpus must be from 2 to 1000000 (a 1-GPU job is always on one node), not {min_gpus}"
        ))
    }
}

/// The decision lifetime range every policy accepts.
fn check_ttl(ttl_s: u32) -> Result<(), String> {
    if (1..=86_400).contains(&ttl_s) {
        Ok(())
    } else {
        Err(format!("ttl_s must be from 1 to 86400, not {ttl_s}"))
    }
}

pub trait Policy {
    /// The decisions for the snapshot's jobs. Must only name jobs and nodes of the snapshot,
    /// never plan more GPUs on a node than are free, and be deterministic given `rng` and
    /// `history` (what earlier snapshots showed).
    fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        rng: &mut SeededRng,
        history: &History,
    ) -> Vec<Decision>;
}

/// A policy and its parameters, as admins set it: `{"name": "consolidate", "params": {...}}`.
/// Omitted parameters take their defaults; unknown names, unknown parameters and out-of-range
/// values are refused with a message saying which.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawPolicyConfig", into = "RawPolicyConfig")]
pub enum PolicyConfig {
    Passthrough(PassthroughParams),
    Cinch(CinchParams),
    Consolidate(ConsolidateParams),
    Dally(DallyParams),
    Strict(StrictParams),
    Switches(SwitchesParams),
    Tiresias(TiresiasParams),
    Qssf(QssfParams),
    Edf(EdfParams),
    EqualShare(EqualShareParams),
}

/// The policy names admins can choose: cinch's own, then the research and Slurm baselines.
pub const POLICY_NAMES: [&str; 10] = [
    "cinch",
    "passthrough",
    "consolidate",
    "dally",
    "strict",
    "switches",
    "tiresias",
    "qssf",
    "edf",
    "equal-share",
];

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig::Cinch(CinchParams::default())
    }
}

impl PolicyConfig {
    pub fn name(&self) -> &'static str {
        match self {
            PolicyConfig::Passthrough(_) => "passthrough",
            PolicyConfig::Cinch(_) => "cinch",
            PolicyConfig::Consolidate(_) => "consolidate",
            PolicyConfig::Dally(_) => "dally",
            PolicyConfig::Strict(_) => "strict",
            PolicyConfig::Switches(_) => "switches",
            PolicyConfig::Tiresias(_) => "tiresias",
            PolicyConfig::Qssf(_) => "qssf",
            PolicyConfig::Edf(_) => "edf",
            PolicyConfig::EqualShare(_) => "equal-share",
        }
    }

    /// Whether this is one of the baselines cinch is measured against rather than its own.
    pub fn is_baseline(&self) -> bool {
        matches!(
            self,
            PolicyConfig::Strict(_)
                | PolicyConfig::Switches(_)
                | PolicyConfig::Tiresias(_)
                | PolicyConfig::Qssf(_)
                | PolicyConfig::Edf(_)
                | PolicyConfig::EqualShare(_)
        )
    }

    /// The named policy with default parameters.
    pub fn defaults_for(name: &str) -> Result<PolicyConfig, String> {
        match name {
            "passthrough" => Ok(PolicyConfig::Passthrough(PassthroughParams::default())),
            "cinch" => Ok(PolicyConfig::Cinch(CinchParams::default())),
            "consolidate" => Ok(PolicyConfig::Consolidate(ConsolidateParams::default())),
            "dally" => Ok(PolicyConfig::Dally(DallyParams::default())),
            "strict" => Ok(PolicyConfig::Strict(StrictParams::default())),
            "switches" => Ok(PolicyConfig::Switches(SwitchesParams::default())),
            "tiresias" => Ok(PolicyConfig::Tiresias(TiresiasParams::default())),
            "qssf" => Ok(PolicyConfig::Qssf(QssfParams::default())),
            "edf" => Ok(PolicyConfig::Edf(EdfParams::default())),
            "equal-share" => Ok(PolicyConfig::EqualShare(EqualShareParams::default())),
            other => Err(format!(
                "unknown policy '{other}' (known: {})",
                POLICY_NAMES.join(", ")
            )),
        }
    }

    pub fn decide(
        &self,
        snapshot: &Snapshot,
        now: i64,
        rng: &mut SeededRng,
        history: &History,
    ) -> Vec<Decision> {
        match self {
            PolicyConfig::Passthrough(p) => {
                Passthrough(p.clone()).decide(snapshot, now, rng, history)
            }
            PolicyConfig::Cinch(p) => Cinch(p.clone()).decide(snapshot, now, rng, history),
            PolicyConfig::Consolidate(p) => {
                Consolidate(p.clone()).decide(snapshot, now, rng, history)
            }
            PolicyConfig::Dally(p) => Dally(p.clone()).decide(snapshot, now, rng, history),
            PolicyConfig::Strict(p) => Strict(p.clone()).decide(snapshot, now, rng, history),
            PolicyConfig::Switches(p) => Switches(p.clone()).decide(snapshot, now, rng, history),
            PolicyConfig::Tiresias(p) => Tiresias(p.clone()).decide(snapshot, now, rng, history),
            PolicyConfig::Qssf(p) => Qssf(p.clone()).decide(snapshot, now, rng, history),
            PolicyConfig::Edf(p) => Edf(p.clone()).decide(snapshot, now, rng, history),
            PolicyConfig::EqualShare(p) => {
                EqualShare(p.clone()).decide(snapshot, now, rng, history)
            }
        }
    }
}

/// The wire form of [`PolicyConfig`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RawPolicyConfig {
    /// One of `cinch`, `passthrough`, `consolidate`, `dally`, `strict`, `switches`, `tiresias`, `qssf`, `edf`, `equal-share`.
    pub name: String,
    /// The policy's parameters (docs/api.md); omitted ones take their defaults.
    #[serde(default)]
    pub params: Option<serde_json::Value>,
}

impl TryFrom<RawPolicyConfig> for PolicyConfig {
    type Error = String;

    fn try_from(raw: RawPolicyConfig) -> Result<Self, String> {
        let params = raw.params.unwrap_or_else(|| serde_json::json!({}));
        let invalid = |e: serde_json::Error| format!("policy '{}' params: {e}", raw.name);
        let config = match raw.name.as_str() {
            "passthrough" => {
                PolicyConfig::Passthrough(serde_json::from_value(params).map_err(invalid)?)
            }
            "cinch" => {
                PolicyConfig::Cinch(checked(&raw.name, params, |p: &CinchParams| p.validate())?)
            }
            "consolidate" => {
                PolicyConfig::Consolidate(checked(&raw.name, params, |p: &ConsolidateParams| {
                    p.validate()
                })?)
            }
            "dally" => {
                PolicyConfig::Dally(checked(&raw.name, params, |p: &DallyParams| p.validate())?)
            }
            "strict" => {
                PolicyConfig::Strict(checked(&raw.name, params, |p: &StrictParams| p.validate())?)
            }
            "switches" => {
                PolicyConfig::Switches(checked(&raw.name, params, |p: &SwitchesParams| {
                    p.validate()
                })?)
            }
            "tiresias" => {
                PolicyConfig::Tiresias(checked(&raw.name, params, |p: &TiresiasParams| {
                    p.validate()
                })?)
            }
            "qssf" => {
                PolicyConfig::Qssf(checked(&raw.name, params, |p: &QssfParams| p.validate())?)
            }
            "edf" => PolicyConfig::Edf(checked(&raw.name, params, |p: &EdfParams| p.validate())?),
            "equal-share" => {
                PolicyConfig::EqualShare(checked(&raw.name, params, |p: &EqualShareParams| {
                    p.validate()
                })?)
            }
            other => return PolicyConfig::defaults_for(other),
        };
        Ok(config)
    }
}

/// A policy's parameters from JSON, then checked by the policy's own rules.
fn checked<P: serde::de::DeserializeOwned>(
    name: &str,
    params: serde_json::Value,
    validate: impl Fn(&P) -> Result<(), String>,
) -> Result<P, String> {
    let p: P =
        serde_json::from_value(params).map_err(|e| format!("policy '{name}' params: {e}"))?;
    validate(&p).map_err(|e| format!("policy '{name}' params: {e}"))?;
    Ok(p)
}

impl From<PolicyConfig> for RawPolicyConfig {
    fn from(config: PolicyConfig) -> Self {
        let params = match &config {
            PolicyConfig::Passthrough(p) => serde_json::to_value(p),
            PolicyConfig::Cinch(p) => serde_json::to_value(p),
            PolicyConfig::Consolidate(p) => serde_json::to_value(p),
            PolicyConfig::Dally(p) => serde_json::to_value(p),
            PolicyConfig::Strict(p) => serde_json::to_value(p),
            PolicyConfig::Switches(p) => serde_json::to_value(p),
            PolicyConfig::Tiresias(p) => serde_json::to_value(p),
            PolicyConfig::Qssf(p) => serde_json::to_value(p),
            PolicyConfig::Edf(p) => serde_json::to_value(p),
            PolicyConfig::EqualShare(p) => serde_json::to_value(p),
        }
        .expect("policy parameters serialise");
        RawPolicyConfig {
            name: config.name().to_string(),
            params: Some(params),
        }
    }
}

/// The complete policy setting: what the admin REST API reads and writes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PolicySettings {
    pub mode: Mode,
    #[cfg_attr(feature = "openapi", schema(value_type = RawPolicyConfig))]
    pub policy: PolicyConfig,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<PolicySettings, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn the_stricter_mode_wins_and_modes_parse_in_any_case() {
        assert_eq!(Mode::Enforce.stricter(Mode::Shadow), Mode::Shadow);
        assert_eq!(Mode::Off.stricter(Mode::Enforce), Mode::Off);
        assert_eq!(Mode::Enforce.stricter(Mode::Enforce), Mode::Enforce);
        assert_eq!("ENFORCE".parse(), Ok(Mode::Enforce));
        assert_eq!("shadow".parse(), Ok(Mode::Shadow));
        assert!("on".parse::<Mode>().is_err());
    }

    #[test]
    fn defaults_fill_in_omitted_parameters() {
        let settings = parse(r#"{"mode":"enforce","policy":{"name":"consolidate"}}"#).unwrap();
        assert_eq!(settings.mode, Mode::Enforce);
        assert_eq!(
            settings.policy,
            PolicyConfig::Consolidate(ConsolidateParams::default())
        );
        let settings = parse(r#"{"mode":"off","policy":{"name":"passthrough","params":{}}}"#);
        assert!(settings.is_ok());
    }

    #[test]
    fn round_trips_through_json() {
        let settings = PolicySettings {
            mode: Mode::Shadow,
            policy: PolicyConfig::Consolidate(ConsolidateParams {
                ttl_s: 77,
                ..ConsolidateParams::default()
            }),
        };
        let json = serde_json::to_string(&settings).unwrap();
        assert_eq!(parse(&json).unwrap(), settings);
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let err = parse(r#"{"mode":"on","policy":{"name":"consolidate"}}"#).unwrap_err();
        assert!(err.contains("unknown variant `on`"), "{err}");
        let err = parse(r#"{"mode":"off","policy":{"name":"fastest"}}"#).unwrap_err();
        assert!(err.contains("unknown policy 'fastest'"), "{err}");
        let err = parse(r#"{"mode":"off","policy":{"name":"consolidate","params":{"ttl_s":-5}}}"#)
            .unwrap_err();
        assert!(err.contains("ttl_s") || err.contains("-5"), "{err}");
        let err = parse(r#"{"mode":"off","policy":{"name":"consolidate","params":{"ttl_s":0}}}"#)
            .unwrap_err();
        assert!(err.contains("ttl_s must be"), "{err}");
        let err = parse(r#"{"mode":"off","policy":{"name":"consolidate","params":{"speed":1}}}"#)
            .unwrap_err();
        assert!(err.contains("unknown field `speed`"), "{err}");
        let err = parse(r#"{"mode":"off","policy":{"name":"passthrough","params":{"x":1}}}"#)
            .unwrap_err();
        assert!(err.contains("unknown field `x`"), "{err}");
    }
}
