//! Small tools every stage may use: a seeded random generator, the one percentile rule, and
//! numbers in words for reasons.

pub mod rng;
pub mod stats;
pub mod words;
