//! A scriptable stand-in for `cinch serve`, for the plugin's end-to-end tests: it receives the
//! real snapshots the plugin builds from real Slurm and answers whatever a test scripts —
//! delays, priorities, or garbage. (Slurm itself is never faked; only the optimizer is.)

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use cinch_core::Snapshot;

/// `(HTTP status, body)` for the n-th request (0-based) carrying `snapshot`.
pub type Script = dyn Fn(&Snapshot, usize) -> (u16, String) + Send + Sync;

pub struct FakeOptimizer {
    pub url: String,
    pub token: String,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl FakeOptimizer {
    pub fn start(
        script: impl Fn(&Snapshot, usize) -> (u16, String) + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake optimizer");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let token = "fake-plugin-token".to_string();
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        let thread = {
            let (requests, stop, token) = (requests.clone(), stop.clone(), token.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let _ = serve(conn, &token, &requests, &*script);
                        }
                        Err(_) => thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        };
        FakeOptimizer {
            url,
            token,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }

    /// Stops answering: the port closes, as if the optimizer was killed.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for FakeOptimizer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Answers one request: the agent's health check with a fixed policy version and the delta
/// exchange with 404 (they are not scheduling requests, so they neither count nor consume a step
/// of the script), anything else as `POST /v1/schedule` by the script.
fn serve(
    mut conn: TcpStream,
    token: &str,
    requests: &AtomicUsize,
    script: &Script,
) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let (head_end, length) = loop {
        let read = conn.read(&mut buf)?;
        if read == 0 {
            return Ok(());
        }
        raw.extend_from_slice(&buf[..read]);
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..i]).to_string();
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            break (i, length);
        }
    };
    while raw.len() < head_end + 4 + length {
        let read = conn.read(&mut buf)?;
        if read == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..read]);
    }
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let (status, body) = if head.starts_with("POST /v1/schedule/delta ") {
        // A stand-in for an optimizer from before the delta exchange: the agent falls back to
        // whole snapshots, which the scripts answer (not a scheduling request either).
        (404, String::new())
    } else if head.starts_with("GET /healthz ") {
        (
            200,
            "{\"status\":\"ok\",\"version\":\"fake\",\"policy_version\":1}".to_string(),
        )
    } else if !head.contains(&format!("Authorization: Bearer {token}")) {
        (
            401,
            "{\"error\":\"unauthorized\",\"message\":\"wrong token\"}".to_string(),
        )
    } else {
        match serde_json::from_slice::<Snapshot>(&raw[head_end + 4..]) {
            Ok(snapshot) => script(&snapshot, requests.fetch_add(1, Ordering::Relaxed)),
            Err(e) => (
                422,
                format!("{{\"error\":\"unprocessable\",\"message\":\"{e}\"}}"),
            ),
        }
    };
    let response = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(response.as_bytes())
}

/// A well-formed answer in enforce mode with these decisions (JSON values).
pub fn decisions(snapshot: &Snapshot, decisions: Vec<serde_json::Value>) -> (u16, String) {
    let body = serde_json::json!({
        "schema_version": 1,
        "policy": "scripted",
        "mode": "enforce",
        "time": snapshot.time,
        "decisions": decisions,
    });
    (200, body.to_string())
}
