//! `/v1/schedule` latency while admins store policy changes: schedule requests timed alone, then
//! again while two clients PUT the policy as fast as the service answers them (each PUT is
//! fsynced before its answer), in one run so the ratio is what counts on this machine. Also the
//! cost of one PUT with 1 and with `policy_history` versions stored.
//!
//! Run: `cargo bench -p cinch-service --bench policy_storm`

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use tower::ServiceExt;

use cinch_core::testing::{cluster, pending, snapshot};
use cinch_core::util::stats::percentile;
use cinch_service::app;
use cinch_service::config::{ServeConfig, ServeOptions};
use cinch_service::server::build_state;

const SAMPLES: usize = 400;

struct Service {
    router: Router,
    plugin: String,
    admin: String,
    dir: std::path::PathBuf,
}

fn service(name: &str, history: usize) -> Service {
    let dir = std::env::temp_dir().join(format!("cinch-storm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = ServeConfig::resolve(ServeOptions {
        state_dir: Some(dir.clone()),
        policy_history: Some(history),
        ..ServeOptions::default()
    })
    .unwrap();
    let state = build_state(&config).unwrap();
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .unwrap()
            .trim()
            .to_string()
    };
    Service {
        router: app(state),
        plugin: read("plugin.token"),
        admin: read("admin.token"),
        dir,
    }
}

async fn call(router: &Router, request: Request<Body>) {
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let _ = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
}

fn schedule_request(s: &Service, body: &[u8]) -> Request<Body> {
    Request::post("/v1/schedule")
        .header(header::AUTHORIZATION, format!("Bearer {}", s.plugin))
        .body(Body::from(body.to_vec()))
        .unwrap()
}

fn put_request(s: &Service, ttl: u32) -> Request<Body> {
    let settings = format!(
        r#"{{"mode":"enforce","policy":{{"name":"consolidate","params":{{"ttl_s":{ttl}}}}}}}"#
    );
    Request::put("/v1/policy")
        .header(header::AUTHORIZATION, format!("Bearer {}", s.admin))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(settings))
        .unwrap()
}

/// Times `SAMPLES` schedule requests one after another: (p50, p99) in ms.
async fn schedule_latency(s: &Service, body: &[u8]) -> (f64, f64) {
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let request = schedule_request(s, body);
        let start = Instant::now();
        call(&s.router, request).await;
        samples.push(start.elapsed().as_secs_f64() * 1e3);
    }
    samples.sort_by(f64::total_cmp);
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

/// Median time (ms) of `n` PUTs in a row.
async fn put_cost(s: &Service, n: usize) -> f64 {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let request = put_request(s, 60 + (i % 100) as u32);
        let start = Instant::now();
        call(&s.router, request).await;
        samples.push(start.elapsed().as_secs_f64() * 1e3);
    }
    samples.sort_by(f64::total_cmp);
    percentile(&samples, 0.5)
}

fn main() {
    // As `cinch serve` runs: tokio's multi-thread runtime, one worker per core.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let s = Arc::new(service("latency", 1_000));
        let body = serde_json::to_vec(&snapshot(
            cluster(64, 8, 4),
            (1..=200).map(|id| pending(id, 1 + id % 8)).collect(),
        ))
        .unwrap();
        let (alone_p50, alone_p99) = schedule_latency(&s, &body).await;

        let stop = Arc::new(AtomicBool::new(false));
        let puts = Arc::new(AtomicUsize::new(0));
        let storm: Vec<_> = (0..2)
            .map(|_| {
                let (s, stop, puts) = (s.clone(), stop.clone(), puts.clone());
                tokio::spawn(async move {
                    let mut ttl = 60;
                    while !stop.load(Ordering::Relaxed) {
                        ttl = ttl % 1_000 + 1;
                        call(&s.router, put_request(&s, ttl)).await;
                        puts.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        let (storm_p50, storm_p99) = schedule_latency(&s, &body).await;
        let storm_s = started.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        for task in storm {
            task.await.unwrap();
        }
        let put_rate = puts.load(Ordering::Relaxed) as f64 / storm_s;
        println!(
            "schedule (200 pending, 64x8 GPUs), {SAMPLES} requests each: alone p50 {alone_p50:.2} ms \
             p99 {alone_p99:.2} ms; during a PUT storm ({put_rate:.0} PUTs/s from 2 clients) p50 \
             {storm_p50:.2} ms p99 {storm_p99:.2} ms; p99 ratio {:.2}",
            storm_p99 / alone_p99
        );

        let fresh = service("fresh", 1_000);
        let one = put_cost(&fresh, 20).await;
        put_cost(&fresh, 1_000).await; // fill the history to its bound
        let full = put_cost(&fresh, 20).await;
        println!(
            "one PUT (fsynced): median {one:.2} ms with 1 version stored, {full:.2} ms with the \
             history at its bound of 1000 versions"
        );
        for dir in [&s.dir, &fresh.dir] {
            let _ = std::fs::remove_dir_all(dir);
        }
    });
}
