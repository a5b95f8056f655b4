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

/// Asks the CPU to fetch the cache lines `value` lies on before it is read: a hint, with no
/// effect on what the program computes. A pass over a queue in cinch's order reads each job's
/// record at a new place in memory (the records lie in Slurm's order), and waiting for each
/// one is most of that pass (docs/benchmarks.md). Every line, not the first only: a job's
/// record spans several lines, and rustc lays its fields out in an order of its own, so the
/// fields a pass reads first may lie on any of them.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        const LINE: usize = 64;
        let start = (value as *const T).cast::<i8>();
        let end = start as usize + std::mem::size_of::<T>().max(1);
        let mut line = start.wrapping_sub(start as usize % LINE);
        while (line as usize) < end {
            // SAFETY: a prefetch reads nothing the program sees and never faults, whatever the
            // address (`wrapping_add` claims no address is in the value); `sse` is in every
            // x86_64 target.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line) };
            line = line.wrapping_add(LINE);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// How many items ahead [`fetch_ahead`] asks for an item's value.
pub(crate) const FETCH_AHEAD: usize = 8;

/// The items of `items` in order, the value each leads to (`value_of`) asked for
/// ([`prefetch`]) a few items before the item is reached: for a pass over a list whose values
/// lie elsewhere in another order (a queue in cinch's order, the simulator's jobs by
/// position), which would otherwise wait for each value in turn.
pub fn fetch_ahead<'a, I, T: 'a>(
    items: &'a [I],
    value_of: impl Fn(&'a I) -> Option<&'a T> + 'a,
) -> impl Iterator<Item = &'a I> + 'a {
    items.iter().enumerate().map(move |(k, item)| {
        if let Some(ahead) = items.get(k + FETCH_AHEAD).and_then(&value_of) {
            prefetch(ahead);
        }
        item
    })
}
