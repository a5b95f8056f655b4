//! Scheduling policies: one trait, one file each. A policy is a pure function of
//! (snapshot, now, seeded rng) returning a decision with a reason per job it has an opinion on,
//! so the service, the simulator and the tests all run the very same code.

mod consolidate;
mod dally;
mod passthrough;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use consolidate::{Consolidate, ConsolidateParams, Placement, PlanOutcome};
pub use dally::{app_slowdown, Dally, DallyParams, Sensitivity, APP_SLOWDOWN};
pub use passthrough::{Passthrough, PassthroughParams};

use crate::decision::Decision;
use crate::history::History;
use crate::rng::SeededRng;
use crate::snapshot::Snapshot;

/// What cinch may do to jobs (the same three modes as cinch.conf's `Mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Decide nothing.
    Off,
    /// Decide and report, apply nothing.
    #[default]
    Shadow,
    /// Decide and apply.
    Enforce,
}

impl std::str::FromStr for Mode {
    type Err = ();
    /// `off`, `shadow`, `enforce`, in any case (as cinch.conf writes them).
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(Mode::Off),
            "shadow" => Ok(Mode::Shadow),
            "enforce" => Ok(Mode::Enforce),
            _ => Err(()),
        }
    }
}

impl Mode {
    /// The stricter of two modes (off < shadow < enforce): what holds when cinch.conf and the
    /// optimizer disagree.
    pub fn stricter(self, other: Mode) -> Mode {
        let rank = |m: Mode| match m {
            Mode::Off => 0,
            Mode::Shadow => 1,
            Mode::Enforce => 2,
        };
        if rank(self) <= rank(other) {
            self
        } else {
            other
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Off => "off",
            Mode::Shadow => "shadow",
            Mode::Enforce => "enforce",
        })
    }
}

/// The `min_gpus` range every consolidating policy accepts.
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
    Consolidate(ConsolidateParams),
    Dally(DallyParams),
}

/// The policy names admins can choose.
pub const POLICY_NAMES: [&str; 3] = ["passthrough", "consolidate", "dally"];

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig::Consolidate(ConsolidateParams::default())
    }
}

impl PolicyConfig {
    pub fn name(&self) -> &'static str {
        match self {
            PolicyConfig::Passthrough(_) => "passthrough",
            PolicyConfig::Consolidate(_) => "consolidate",
            PolicyConfig::Dally(_) => "dally",
        }
    }

    /// The named policy with default parameters.
    pub fn defaults_for(name: &str) -> Result<PolicyConfig, String> {
        match name {
            "passthrough" => Ok(PolicyConfig::Passthrough(PassthroughParams::default())),
            "consolidate" => Ok(PolicyConfig::Consolidate(ConsolidateParams::default())),
            "dally" => Ok(PolicyConfig::Dally(DallyParams::default())),
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
            PolicyConfig::Consolidate(p) => {
                Consolidate(p.clone()).decide(snapshot, now, rng, history)
            }
            PolicyConfig::Dally(p) => Dally(p.clone()).decide(snapshot, now, rng, history),
        }
    }
}

/// The wire form of [`PolicyConfig`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RawPolicyConfig {
    /// One of `passthrough`, `consolidate`, `dally`.
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
            "consolidate" => {
                let p: ConsolidateParams = serde_json::from_value(params).map_err(invalid)?;
                p.validate()
                    .map_err(|e| format!("policy 'consolidate' params: {e}"))?;
                PolicyConfig::Consolidate(p)
            }
            "dally" => {
                let p: DallyParams = serde_json::from_value(params).map_err(invalid)?;
                p.validate()
                    .map_err(|e| format!("policy 'dally' params: {e}"))?;
                PolicyConfig::Dally(p)
            }
            other => return PolicyConfig::defaults_for(other),
        };
        Ok(config)
    }
}

impl From<PolicyConfig> for RawPolicyConfig {
    fn from(config: PolicyConfig) -> Self {
        let params = match &config {
            PolicyConfig::Passthrough(p) => serde_json::to_value(p),
            PolicyConfig::Consolidate(p) => serde_json::to_value(p),
            PolicyConfig::Dally(p) => serde_json::to_value(p),
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
