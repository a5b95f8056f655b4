//! The one percentile rule cinch reports with (simulator metrics, built-in workload tables,
//! benchmarks): nearest rank on sorted values.

/// The value at fraction `q` (0 to 1) of `sorted` values, nearest rank; 0 for no values.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64) + 0.5) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 0.99), 5.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
