//! Strict consolidation: a multi-GPU job only starts on its best possible shape (the fewest
//! nodes its GPU count needs, in as few racks as the cluster allows: one rack whenever a rack
//! is big enough) and waits as long as that takes.

use super::{consolidated, Scheduler};
use crate::sim::engine::State;

pub struct StrictConsolidation;

impl Scheduler for StrictConsolidation {
    fn name(&self) -> String {
        "strict".into()
    }

    fn order_key(&self, _state: &State, _job: usize, _now: f64) -> f64 {
        0.0
    }

    fn place(&self, state: &State, job: usize, _now: f64) -> Option<Vec<(u32, u32)>> {
        let spec = &state.jobs[job].spec;
        let cluster = state.cluster();
        let ideal = cluster.ideal_shape(spec.gpus);
        let placement = consolidated(state, job)?;
        let racks = {
            let mut r: Vec<u32> = placement.iter().map(|&(n, _)| cluster.rack_of(n)).collect();
            r.sort_unstable();
            r.dedup();
            r.len() as u32
        };
        (placement.len() as u32 <= ideal.nodes && racks <= ideal.racks).then_some(placement)
    }
}
