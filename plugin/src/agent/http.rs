//! A minimal blocking HTTP/1.1 client over std's TcpStream or UnixStream, for the agent thread
//! inside slurmctld. The URL is parsed by [`cinch_core::endpoint`], as `cinch policy` parses it.
//!
//! Why not an HTTP crate: the optimizer's hyper/tokio stack would start a runtime inside
//! slurmctld, and a second blocking client would be a second HTTP stack in the build. The plugin
//! needs exactly one request shape — POST JSON, read a Content-Length or close-delimited answer —
//! with hard connect/read/write deadlines, which this file gives in a page.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;

use cinch_core::endpoint::Endpoint;
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
) -> Result<Response, HttpError> {
    exchange("POST", base_url, path, Some(token), body, limits)
}

/// GETs `base_url` + `path` without credentials, within `limits`.
pub fn get(base_url: &str, path: &str, limits: Limits) -> Result<Response, HttpError> {
    exchange("GET", base_url, path, None, &[], limits)
}

fn exchange(
    method: &str,
    base_url: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
    limits: Limits,
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
        Endpoint::Http { authority, .. } => {
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
            Stream::Tcp(tcp)
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
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
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

/// A connected stream of either kind; both have per-call read and write timeouts.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
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
        let response = post_json(&url, "/v1/schedule", "tok", b"{\"a\":1}", LIMITS).unwrap();
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
    fn reads_close_delimited_bodies_and_error_statuses() {
        let (url, _server) = serve_once(b"HTTP/1.1 401 Unauthorized\r\n\r\nno", Duration::ZERO);
        let response = post_json(&url, "/x", "t", b"{}", LIMITS).unwrap();
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
            post_json(&url, "/x", "t", b"{}", LIMITS),
            Err(HttpError::Malformed(_))
        ));
        let (url, _server) = serve_once(
            b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort",
            Duration::ZERO,
        );
        assert!(matches!(
            post_json(&url, "/x", "t", b"{}", LIMITS),
            Err(HttpError::Malformed(_))
        ));
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(matches!(
            post_json(&format!("http://{free}"), "/x", "t", b"{}", LIMITS),
            Err(HttpError::Connect(..))
        ));
        assert!(matches!(
            post_json("https://x", "/x", "t", b"{}", LIMITS),
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
            post_json(&url, "/x", "t", b"{}", small),
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
            post_json(&url, "/x", "t", b"{}", small),
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
        let response = get(&url, "/healthz", LIMITS).unwrap();
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
            get(&url, "/healthz", LIMITS),
            Err(HttpError::Connect(..))
        ));
    }
}
