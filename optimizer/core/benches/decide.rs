//! How long a policy takes to decide a round on a busy cluster: `cinch` (and `consolidate`,
//! the policy it replaces as the default) for 10,000 pending jobs on 1,000 nodes x 8 GPUs and
//! 100,000 pending on 10,000 nodes. Criterion reports its estimates; this file also prints the
//! median and p99 of every timed call, which docs/benchmarks.md records.
//!
//! Run: `cargo bench -p cinch-core --bench decide`

use std::time::{Duration, Instant};

/// The `cinch` binary's allocator, so that this measures what `cinch serve` runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, Criterion};

use cinch_core::policy::PolicyConfig;
use cinch_core::testing::busy_snapshot;
use cinch_core::util::stats::percentile;
use cinch_core::{History, SeededRng};

fn bench_decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for (nodes, jobs) in [(1_000u32, 10_000u32), (10_000, 100_000)] {
        let snap = busy_snapshot(nodes, 8, nodes / 32, jobs, 42);
        let history = History::default();
        for name in ["cinch", "consolidate"] {
            let policy = PolicyConfig::defaults_for(name).expect("known");
            let mut samples = Vec::new();
            let mut decided = 0;
            group.bench_function(format!("{name}_{jobs}_pending_{nodes}_nodes"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let d = policy.decide(&snap, snap.time, &mut SeededRng::new(1), &history);
                        let elapsed = start.elapsed();
                        decided = d.len();
                        samples.push(elapsed.as_secs_f64());
                        total += elapsed;
                    }
                    total
                })
            });
            if samples.is_empty() {
                // Filtered out on the command line.
                continue;
            }
            samples.sort_by(f64::total_cmp);
            println!(
                "{name}: {jobs} pending on {nodes}x8 GPUs ({decided} decisions): median {:.1} ms, \
                 p99 {:.1} ms over {} calls",
                percentile(&samples, 0.5) * 1e3,
                percentile(&samples, 0.99) * 1e3,
                samples.len()
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench_decide);
criterion_main!(benches);
