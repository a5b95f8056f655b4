//! `passthrough`: decides nothing, so Slurm schedules exactly as without cinch. The baseline,
//! and the policy to run while checking the plumbing.

use serde::{Deserialize, Serialize};

use super::Policy;
use crate::learn::history::History;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::snapshot::Snapshot;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PassthroughParams {}

impl PassthroughParams {
    /// Nothing to check: it has no parameters.
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

pub struct Passthrough(pub PassthroughParams);

impl Policy for Passthrough {
    fn decide(
        &self,
        _snapshot: &Snapshot,
        _now: i64,
        _rng: &mut SeededRng,
        _history: &History,
    ) -> Vec<Decision> {
        Vec::new()
    }
}
