//! A minimal blocking HTTP/1.1 client over std's TcpStream (plain or in rustls's TLS) or
//! UnixStream, for the agent thread inside slurmctld and the job watcher on the nodes
//! (`cinch-watch`), which must not slow the job it watches. The URL is parsed by
//! [`cinch_core::net::endpoint`], as `cinch policy` parses it.
//!
//! Why not an HTTP crate: the optimizer's hyper/tokio stack would start a runtime inside
//! slurmctld; ureq, the blocking candidate, has no Unix-socket transport outside its unstable
//! API, and the Unix socket is the default transport of the sidecar. The plugin needs exactly one
//! request shape — POST JSON, read a Content-Length or close-delimited answer — with hard
//! resolve/connect/read/write deadlines, which this file gives in a page; TLS is rustls's.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use cinch_core::net::endpoint::Endpoint;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("bad optimizer URL '{0}'")]
    Url(String),
    #[error("cannot connect to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("I/O with {0}: {1}")]
    Io(String, std::io::Error),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("malformed HTTP response: {0}")]
    Malformed(String),
    #[error("response larger than {0} bytes")]
    TooLarge(usize),
    #[error("TLS: {0}")]
    Tls(String),
}

/// The TLS client settings for a CA file, kept while the file is unchanged (the agent asks
/// every round; reading a bundle of 150 certificates each time would cost milliseconds).
fn tls_config(ca_file: Option<&str>) -> Result<Arc<ClientConfig>, HttpError> {
    type Cached = (String, Option<std::time::SystemTime>, Arc<ClientConfig>);
    static CACHE: Mutex<Option<Cached>> = Mutex::new(None);
    let path = ca_file.unwrap_or(cinch_core::net::tls::SYSTEM_CA_BUNDLE);
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((p, m, config)) = cache.as_ref() {
        if p == path && *m == modified {
            return Ok(config.clone());
        }
    }
    let config = Arc::new(
        cinch_core::net::tls::client_config(Some(std::path::Path::new(path)))
            .map_err(HttpError::Tls)?,
    );
    *cache = Some((path.to_string(), modified, config.clone()));
    Ok(config)
}

pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Bounds on one exchange.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bounds name resolution plus the connection (and never more than `total`).
    pub connect: Duration,
    /// One deadline for the whole exchange: resolve, connect, every write and every read.
    pub total: Duration,
    /// Largest response body read; a larger one is [`HttpError::TooLarge`].
    pub max_body: usize,
}

/// POSTs `body` as JSON to `base_url` + `path` with a bearer token, within `limits`.
pub fn post_json(
    base_url: &str,
    path: &str,
    token: &str,
    body: &[u8],
    limits: Limits,
    ca_file: Option<&str>,
) -> Result<Response, HttpError> {
    let authorization = format!("Bearer {token}");
    exchange(
        "POST",
        base_url,
        path,
        Some(&authorization),
        body,
        limits,
        ca_file,
    )
}

/// POSTs `body` as JSON with `authorization` as the Authorization header's value (a MUNGE
/// credential: `Munge <credential>`), within `limits`.
pub fn post_json_authorized(
    base_url: &str,
    path: &str,
    authorization: &str,
    body: &[u8],
    limits: Limits,
    ca_file: Option<&str>,
) -> Result<Response, HttpError> {
    exchange(
        "POST",
        base_url,
        path,
        Some(authorization),
        body,
        limits,
        ca_file,
    )
}

/// GETs `base_url` + `path` without credentials, within `limits`.
pub fn get(
    base_url: &str,
    path: &str,
    limits: Limits,
    ca_file: Option<&str>,
) -> Result<Response, HttpError> {
    exchange("GET", base_url, path, None, &[], limits, ca_file)
}

/// One request and its answer. `ca_file`: what an `https://` server's certificate must chain
/// to (`None`: [`cinch_core::net::tls::SYSTEM_CA_BUNDLE`]).
fn exchange(
    method: &str,
    base_url: &str,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
    limits: Limits,
    ca_file: Option<&str>,
) -> Result<Response, HttpError> {
    let Limits {
        connect,
        total,
        max_body,
    } = limits;
    let start = Instant::now();
    let endpoint = Endpoint::parse(base_url).map_err(|e| HttpError::Url(e.to_string()))?;
    let authority = endpoint.host_header().to_string();
    let base_path = endpoint.base_path();
    let mut stream = match &endpoint {
        // A local socket connects at once or fails at once (no listener, no permission).
        Endpoint::Unix { path } => Stream::Unix(
            UnixStream::connect(path)
                .map_err(|e| HttpError::Connect(format!("unix:{}", path.display()), e))?,
        ),
        Endpoint::Http {
            authority,
            host,
            tls,
            ..
        } => {
            // What the server's certificate must chain to, read before anything is sent.
            let tls_config = if *tls {
                Some(tls_config(ca_file)?)
            } else {
                None
            };
            let connect = connect.min(total);
            let addr = resolve(authority, connect)
                .map_err(|e| HttpError::Connect(authority.clone(), e))?
                .ok_or_else(|| HttpError::Url(base_url.into()))?;
            let connect_left = connect
                .checked_sub(start.elapsed())
                .filter(|d| !d.is_zero())
                .ok_or(HttpError::Timeout(connect))?;
            let tcp = TcpStream::connect_timeout(&addr, connect_left)
                .map_err(|e| HttpError::Connect(authority.clone(), e))?;
            let _ = tcp.set_nodelay(true);
            if let Some(tls_config) = tls_config {
                // The handshake happens on the first write, under the same deadlines.
                let name = ServerName::try_from(host.clone())
                    .map_err(|e| HttpError::Tls(format!("server name '{host}': {e}")))?;
                let connection = ClientConnection::new(tls_config, name)
                    .map_err(|e| HttpError::Tls(e.to_string()))?;
                Stream::Tls(Box::new(StreamOwned::new(connection, tcp)))
            } else {
                Stream::Tcp(tcp)
            }
        }
    };
    let io = |e: std::io::Error| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            HttpError::Timeout(total)
        } else {
            HttpError::Io(authority.to_string(), e)
        }
    };
    let remaining = |start: Instant| {
        total
            .checked_sub(start.elapsed())
            .filter(|d| !d.is_zero())
            .ok_or(HttpError::Timeout(total))
    };
    let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let content_type = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/json\r\n"
    };
    let head = format!(
        "{method} {base_path}{path} HTTP/1.1\r\nHost: {authority}\r\n{auth}{content_type}\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // In pieces, each with what is left of the deadline: a peer that reads slowly cannot stretch
    // the exchange past it.
    for piece in head
        .as_bytes()
        .chunks(64 * 1024)
        .chain(body.chunks(64 * 1024))
    {
        stream
            .set_write_timeout(Some(remaining(start)?))
            .map_err(io)?;
        stream.write_all(piece).map_err(io)?;
    }
    stream
        .set_write_timeout(Some(remaining(start)?))
        .map_err(io)?;
    stream.flush().map_err(io)?;

    let mut raw = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let header_end = loop {
        stream
            .set_read_timeout(Some(remaining(start)?))
            .map_err(io)?;
        let n = stream.read(&mut chunk).map_err(io)?;
        if n == 0 {
            return Err(HttpError::Malformed(
                "connection closed before the headers ended".into(),
            ));
        }
        raw.extend_from_slice(&chunk[..n]);
        if let Some(i) = find(&raw, b"\r\n\r\n") {
            break i;
        }
        if raw.len() > 64 * 1024 {
            return Err(HttpError::Malformed("headers too long".into()));
        }
    };
    let head = std::str::from_utf8(&raw[..header_end])
        .map_err(|_| HttpError::Malformed("headers are not UTF-8".into()))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|_| status_line.starts_with("HTTP/1."))
        .ok_or_else(|| HttpError::Malformed(format!("status line '{status_line}'")))?;
    let mut length: Option<usize> = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .trim()
                    .parse()
                    .map_err(|_| HttpError::Malformed(format!("Content-Length '{value}'")))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            && !value.trim().eq_ignore_ascii_case("identity")
        {
            return Err(HttpError::Malformed(format!(
                "unsupported Transfer-Encoding '{}'",
                value.trim()
            )));
        }
    }
    if length.is_some_and(|l| l > max_body) {
        return Err(HttpError::TooLarge(max_body));
    }
    let mut body = raw.split_off(header_end + 4);
    loop {
        if body.len() > max_body {
            return Err(HttpError::TooLarge(max_body));
        }
        if length.is_some_and(|l| body.len() >= l) {
            break;
        }
        stream
            .set_read_timeout(Some(remaining(start)?))
            .map_err(io)?;
        let n = stream.read(&mut chunk).map_err(io)?;
        if n == 0 {
            if let Some(l) = length {
                return Err(HttpError::Malformed(format!(
                    "body ended at {} of {l} bytes",
                    body.len()
                )));
            }
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    if let Some(l) = length {
        body.truncate(l);
    }
    Ok(Response { status, body })
}

/// A connected stream of any kind; each has per-call read and write timeouts (TLS: its socket's).
enum Stream {
    Tcp(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
    Unix(UnixStream),
}

impl Stream {
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Tls(s) => s.sock.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Tls(s) => s.sock.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// `host:port` to an address within `patience`. An IP literal needs no lookup; a name is looked up
/// on a helper thread (getaddrinfo has no timeout of its own), which is left to finish alone if
/// the resolver is slower than the deadline.
fn resolve(host_port: &str, patience: Duration) -> std::io::Result<Option<SocketAddr>> {
    if let Ok(addr) = host_port.parse::<SocketAddr>() {
        return Ok(Some(addr));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let name = host_port.to_string();
    std::thread::Builder::new()
        .name("cinch-resolve".into())
        .spawn(move || {
            let _ = tx.send(name.to_socket_addrs().map(|mut a| a.next()));
        })?;
    rx.recv_timeout(patience).unwrap_or_else(|_| {
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("name lookup took longer than {patience:?}"),
        ))
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// Serves one connection with `reply` (raw bytes) after reading the request; returns the URL
    /// and a handle yielding the request it read.
    fn serve_once(reply: &'static [u8], delay: Duration) -> (String, thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let handle = thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = conn.read(&mut buf) {
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request);
                if let Some(i) = text.find("\r\n\r\n") {
                    let length: usize = text
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if request.len() >= i + 4 + length {
                        break;
                    }
                }
            }
            thread::sleep(delay);
            let _ = conn.write_all(reply);
            String::from_utf8_lossy(&request).into_owned()
        });
        (url, handle)
    }

    const SECOND: Duration = Duration::from_secs(1);
    const LIMITS: Limits = Limits {
        connect: SECOND,
        total: SECOND,
        max_body: 1 << 20,
    };

    #[test]
    fn posts_json_with_the_token_and_reads_the_answer() {
        let (url, server) = serve_once(
            b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\ncontent-type: application/json\r\n\r\n{\"ok\":true}",
            Duration::ZERO,
        );
        let response = post_json(&url, "/v1/schedule", "tok", b"{\"a\":1}", LIMITS, None).unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.body, b"{\"ok\":true}");
        let request = server.join().unwrap();
        assert!(
            request.starts_with("POST /v1/schedule HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains("Authorization: Bearer tok\r\n"));
        assert!(request.ends_with("{\"a\":1}"));
    }

    #[test]
    fn posts_with_a_munge_credential_as_the_watcher_does() {
        let (url, server) = serve_once(b"HTTP/1.1 204 No Content\r\n\r\n", Duration::ZERO);
        let response = post_json_authorized(
            &url,
            "/v1/jobs/7/progress",
            "Munge MUNGE:cred:",
            b"{}",
            LIMITS,
            None,
        )
        .unwrap();
        assert_eq!(response.status, 204);
        let request = server.join().unwrap();
        assert!(
            request.contains("Authorization: Munge MUNGE:cred:\r\n"),
            "{request}"
        );
        assert!(!request.contains("Bearer"), "{request}");
    }

    #[test]
    fn reads_close_delimited_bodies_and_error_statuses() {
        let (url, _server) = serve_once(b"HTTP/1.1 401 Unauthorized\r\n\r\nno", Duration::ZERO);
        let response = post_json(&url, "/x", "t", b"{}", LIMITS, None).unwrap();
        assert_eq!(response.status, 401);
        assert_eq!(response.body, b"no");
    }

    #[test]
    fn a_slow_server_times_out_within_the_deadline() {
        let (url, _server) = serve_once(b"HTTP/1.1 200 OK\r\n\r\n{}", Duration::from_millis(800));
        let start = Instant::now();
        let err = post_json(
            &url,
            "/x",
            "t",
            b"{}",
            Limits {
                total: Duration::from_millis(150),
                ..LIMITS
            },
            None,
        )
        .err()
        .unwrap();
        assert!(matches!(err, HttpError::Timeout(_)), "{err}");
        assert!(start.elapsed() < Duration::from_millis(600));
    }

    #[test]
    fn garbage_and_refusals_are_errors_not_panics() {
        let (url, _server) = serve_once(b"SSH-2.0-OpenSSH\r\n\r\n", Duration::ZERO);
        assert!(matches!(
            post_json(&url, "/x", "t", b"{}", LIMITS, None),
            Err(HttpError::Malformed(_))
        ));
        let (url, _server) = serve_once(
            b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort",
            Duration::ZERO,
        );
        assert!(matches!(
            post_json(&url, "/x", "t", b"{}", LIMITS, None),
            Err(HttpError::Malformed(_))
        ));
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(matches!(
            post_json(&format!("http://{free}"), "/x", "t", b"{}", LIMITS, None),
            Err(HttpError::Connect(..))
        ));
        assert!(matches!(
            post_json("ftp://x", "/x", "t", b"{}", LIMITS, None),
            Err(HttpError::Url(_))
        ));
    }

    #[test]
    fn an_answer_over_the_limit_is_refused_whether_announced_or_not() {
        let (url, _server) = serve_once(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n",
            Duration::ZERO,
        );
        let small = Limits {
            max_body: 4096,
            ..LIMITS
        };
        assert!(matches!(
            post_json(&url, "/x", "t", b"{}", small, None),
            Err(HttpError::TooLarge(4096))
        ));
        static BIG: [u8; 10_000] = [b'x'; 10_000];
        let reply: &'static [u8] = Box::leak(
            [b"HTTP/1.1 200 OK\r\n\r\n".as_slice(), BIG.as_slice()]
                .concat()
                .into_boxed_slice(),
        );
        let (url, _server) = serve_once(reply, Duration::ZERO);
        assert!(matches!(
            post_json(&url, "/x", "t", b"{}", small, None),
            Err(HttpError::TooLarge(4096))
        ));
    }

    #[test]
    fn a_peer_that_never_reads_cannot_stretch_the_deadline() {
        // Accepts, then never reads: a 32 MB request fills the socket buffers and blocks.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let _holder = thread::spawn(move || {
            let conn = listener.accept();
            thread::sleep(Duration::from_secs(3));
            drop(conn);
        });
        let body = vec![b' '; 32 << 20];
        let start = Instant::now();
        let err = post_json(
            &url,
            "/x",
            "t",
            &body,
            Limits {
                total: Duration::from_millis(300),
                ..LIMITS
            },
            None,
        )
        .err()
        .unwrap();
        assert!(matches!(err, HttpError::Timeout(_)), "{err}");
        assert!(
            start.elapsed() < Duration::from_millis(1_500),
            "{:?}",
            start.elapsed()
        );
    }

    /// A CA and a certificate for localhost / 127.0.0.1, made by slurm-conf/make-tls-cert.
    fn test_certificates() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("cinch-http-tls-{}", std::process::id()));
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../slurm-conf/make-tls-cert"
        );
        let out = std::process::Command::new(script)
            .arg(&dir)
            .args(["localhost", "127.0.0.1"])
            .output()
            .expect("run make-tls-cert (needs openssl)");
        assert!(out.status.success(), "{out:?}");
        dir
    }

    /// Answers one request over TLS with `reply`; returns the URL and what the server saw.
    fn serve_tls_once(
        dir: &std::path::Path,
        reply: &'static [u8],
    ) -> (String, thread::JoinHandle<Result<String, String>>) {
        let config =
            cinch_core::net::tls::server_config(&dir.join("server.pem"), &dir.join("server.key"))
                .unwrap();
        // Every loopback address reaches it, so that it can be called by a name its
        // certificate does not carry.
        let listener = TcpListener::bind("0.0.0.0:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = thread::spawn(move || {
            let (tcp, _) = listener.accept().map_err(|e| e.to_string())?;
            tcp.set_read_timeout(Some(5 * SECOND)).unwrap();
            let conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
            let mut tls = StreamOwned::new(conn, tcp);
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            // The whole request, body included: closing with unread bytes would make the
            // kernel reset the connection under the client's feet.
            loop {
                if let Some(end) = find(&request, b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap_or(0));
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
                let n = tls.read(&mut chunk).map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&chunk[..n]);
            }
            tls.write_all(reply).map_err(|e| e.to_string())?;
            tls.conn.send_close_notify();
            let _ = tls.flush();
            // Let the client read the answer before the socket goes.
            let _ = tls.sock.shutdown(std::net::Shutdown::Write);
            let _ = tls.sock.read(&mut chunk);
            Ok(String::from_utf8_lossy(&request).into_owned())
        });
        (format!("https://localhost:{port}"), handle)
    }

    #[test]
    fn https_checks_the_servers_certificate_against_the_ca_file() {
        let dir = test_certificates();
        let ca = dir.join("ca.pem");
        let ca = ca.to_str().unwrap();
        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        // Generous deadlines: the handshake's crypto competes with every other test for 2 cores.
        const LIMITS: Limits = Limits {
            connect: Duration::from_secs(5),
            total: Duration::from_secs(5),
            max_body: 1 << 20,
        };
        let (url, server) = serve_tls_once(&dir, reply);
        let response = post_json(&url, "/v1/schedule", "tok", b"{}", LIMITS, Some(ca))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (response.status, response.body.as_slice()),
            (200, b"{}".as_slice())
        );
        let seen = server.join().unwrap().unwrap();
        assert!(seen.contains("Authorization: Bearer tok"), "{seen}");
        // The same server against the system's CAs: refused before anything is sent.
        let (url, server) = serve_tls_once(&dir, reply);
        let err = post_json(&url, "/v1/schedule", "tok", b"{}", LIMITS, None)
            .err()
            .unwrap();
        assert!(err.to_string().contains("certificate"), "{err}");
        assert!(server.join().unwrap().is_err(), "the server saw no request");
        // Reached by a name the certificate does not carry.
        let (url, server) = serve_tls_once(&dir, reply);
        let url = url.replace("localhost", "127.0.0.2");
        let err = post_json(&url, "/x", "tok", b"{}", LIMITS, Some(ca));
        assert!(err.is_err(), "{:?}", err.map(|r| r.status));
        drop(server);
        // A CA file that is missing or holds no certificate is a clear error.
        let err = post_json(&url, "/x", "t", b"{}", LIMITS, Some("/nonexistent/ca.pem"))
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("cannot read CA file /nonexistent/ca.pem"),
            "{err}"
        );
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = post_json(&url, "/x", "t", b"{}", LIMITS, empty.to_str())
            .err()
            .unwrap();
        assert!(err.to_string().contains("no usable certificate"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_are_resolved_within_the_deadline() {
        assert_eq!(
            resolve("127.0.0.1:80", SECOND).unwrap(),
            Some("127.0.0.1:80".parse().unwrap())
        );
        assert!(resolve("localhost:80", SECOND).unwrap().is_some());
    }

    #[test]
    fn speaks_http_over_a_unix_socket() {
        use std::os::unix::net::UnixListener;
        let path = std::env::temp_dir().join(format!("cinch-http-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let server = thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap();
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        let url = format!("unix:{}", path.display());
        let response = get(&url, "/healthz", LIMITS, None).unwrap();
        assert_eq!(
            (response.status, response.body.as_slice()),
            (200, &b"{}"[..])
        );
        let request = server.join().unwrap();
        assert!(
            request.starts_with("GET /healthz HTTP/1.1\r\nHost: localhost\r\n"),
            "{request}"
        );
        assert!(
            !request.contains("Authorization"),
            "no token on a health check"
        );
        let _ = std::fs::remove_file(&path);
        assert!(matches!(
            get(&url, "/healthz", LIMITS, None),
            Err(HttpError::Connect(..))
        ));
    }
}
