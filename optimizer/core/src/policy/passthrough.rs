//! `passthrough`: decides nothing, so Slurm schedules exactly as without cinch. The baseline,
//! and the policy to run while checking the plumbing.

use super::param_table::ParamError;
use super::Policy;
use crate::learn::history::History;
use crate::util::rng::SeededRng;
use crate::wire::decision::Decision;
use crate::wire::snapshot::Snapshot;

crate::param_table! {
    /// The parameters (docs/policies/parameters.md).
    #[derive(Eq)]
    pub struct PassthroughParams {
    }
}

impl PassthroughParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        self.check_ranges()
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
