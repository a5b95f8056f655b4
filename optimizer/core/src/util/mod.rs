//! Small tools every stage may use: a seeded random generator, the one percentile rule,
//! numbers in words for reasons, and a string key that is never compared empty.

pub mod rng;
pub mod stats;
pub mod words;

/// `s` as a map key, `None` when empty: what the hot per-job lookups key by. Two empty strings
/// compare slowly on AVX-512 CPUs: both point at Rust's dangling address and glibc's vector
/// `memcmp` loads them masked, a load the CPU fault-suppresses with a microcode assist (155-167
/// ns a compare on the AMD EPYC measured, against about 2 ns for two short strings;
/// docs/benchmarks.md, "Two empty strings compared cost a cache miss").
pub fn non_empty(s: &str) -> Option<&str> {
    Some(s).filter(|s| !s.is_empty())
}
