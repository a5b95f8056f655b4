//! Small tools every stage may use: a seeded random generator and the one percentile rule.

pub mod rng;
pub mod stats;
