//! `POST /v1/schedule` end to end — JSON body in, routing, auth, parsing, validation, the
//! default policy (`cinch`), the decision log, JSON out, and the client parsing the answer — for 1k
//! and 10k pending jobs on 1k nodes x 8 GPUs. Criterion reports its estimates; this file also
//! prints the median and p99 of every timed request, which docs/benchmarks.md records.
//!
//! Run: `cargo bench -p cinch-optimizer --bench schedule`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use criterion::{criterion_group, criterion_main, Criterion};
use http_body_util::BodyExt;
use tower::ServiceExt;

use cinch_core::testing::busy_snapshot;
use cinch_core::util::stats::percentile;
use cinch_core::wire::snapshot::Snapshot;
use cinch_core::Decisions;
use cinch_service::app;
use cinch_service::config::{ServeConfig, ServeOptions};
use cinch_service::server::build_state;

const NODES: u32 = 1_000;
const GPUS_PER_NODE: u32 = 8;
const RACKS: u32 = 32;

/// A busy cluster: about half the GPUs in use, and `jobs` pending jobs (the core's benchmark
/// snapshot).
fn workload(jobs: u32, seed: u64) -> Snapshot {
    busy_snapshot(NODES, GPUS_PER_NODE, RACKS, jobs, seed)
}

fn bench_schedule(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("cinch-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = ServeConfig::resolve(ServeOptions {
        state_dir: Some(dir.clone()),
        decision_log_capacity: Some(100_000),
        ..ServeOptions::default()
    })
    .unwrap();
    let state = build_state(&config).unwrap();
    let token = std::fs::read_to_string(dir.join("plugin.token")).unwrap();
    let router = app(state);

    let mut group = c.benchmark_group("schedule_1k_nodes");
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(15));
    for jobs in [1_000u32, 10_000] {
        let body = serde_json::to_vec(&workload(jobs, 42)).unwrap();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let request = || {
            Request::post("/v1/schedule")
                .header(header::AUTHORIZATION, format!("Bearer {}", token.trim()))
                .body(Body::from(body.clone()))
                .unwrap()
        };
        let call = |request: Request<Body>| {
            let router = router.clone();
            async move {
                let response = router.oneshot(request).await.unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                let bytes = response.into_body().collect().await.unwrap().to_bytes();
                let decisions: Decisions = serde_json::from_slice(&bytes).unwrap();
                decisions.decisions.len()
            }
        };
        let decided = runtime.block_on(call(request()));
        group.bench_function(format!("{jobs}_pending"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let req = request(); // building the request (copying the body) is not timed
                    let start = Instant::now();
                    std::hint::black_box(runtime.block_on(call(req)));
                    let elapsed = start.elapsed();
                    samples.lock().unwrap().push(elapsed);
                    total += elapsed;
                }
                total
            })
        });
        let mut all: Vec<f64> = samples
            .lock()
            .unwrap()
            .iter()
            .map(Duration::as_secs_f64)
            .collect();
        all.sort_by(f64::total_cmp);
        println!(
            "schedule {jobs} pending jobs on {NODES}x{GPUS_PER_NODE} GPUs ({} bytes in, {decided} \
             decisions): median {:.2} ms, p99 {:.2} ms over {} requests",
            body.len(),
            percentile(&all, 0.5) * 1e3,
            percentile(&all, 0.99) * 1e3,
            all.len()
        );
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench_schedule);
criterion_main!(benches);
