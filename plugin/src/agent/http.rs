//! A minimal blocking HTTP/1.1 POST over std's TcpStream, for the agent thread inside slurmctld.
//!
//! Why not an HTTP crate: the optimizer's hyper/tokio stack would start a runtime inside
//! slurmctld, and a second blocking client would be a second HTTP stack in the build. The plugin
//! needs exactly one request shape — POST JSON, read a Content-Length or close-delimited answer —
//! with hard connect/read/write deadlines, which this file gives in a page.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
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

/// Largest answer accepted (decisions for a very large queue stay far below this).
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// POSTs `body` as JSON to `base_url` + `path` with a bearer token. `connect` bounds the
/// connection, `total` the whole exchange.
pub fn post_json(
    base_url: &str,
    path: &str,
    token: &str,
    body: &[u8],
    connect: Duration,
    total: Duration,
) -> Result<Response, HttpError> {
    let start = Instant::now();
    let rest = base_url
        .strip_prefix("http://")
        .ok_or_else(|| HttpError::Url(base_url.into()))?;
    let (authority, base_path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !authority.ends_with(']')
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| HttpError::Connect(authority.into(), e))?
        .next()
        .ok_or_else(|| HttpError::Url(base_url.into()))?;
    let mut stream = TcpStream::connect_timeout(&addr, connect)
        .map_err(|e| HttpError::Connect(authority.into(), e))?;
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
    stream.set_nodelay(true).map_err(io)?;
    stream
        .set_write_timeout(Some(remaining(start)?))
        .map_err(io)?;
    let head = format!(
        "POST {base_path}{path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body).map_err(io)?;

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
    if length.is_some_and(|l| l > MAX_RESPONSE_BYTES) {
        return Err(HttpError::TooLarge(MAX_RESPONSE_BYTES));
    }
    let mut body = raw.split_off(header_end + 4);
    loop {
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
        if body.len() > MAX_RESPONSE_BYTES {
            return Err(HttpError::TooLarge(MAX_RESPONSE_BYTES));
        }
    }
    if let Some(l) = length {
        body.truncate(l);
    }
    Ok(Response { status, body })
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

    #[test]
    fn posts_json_with_the_token_and_reads_the_answer() {
        let (url, server) = serve_once(
            b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\ncontent-type: application/json\r\n\r\n{\"ok\":true}",
            Duration::ZERO,
        );
        let response =
            post_json(&url, "/v1/schedule", "tok", b"{\"a\":1}", SECOND, SECOND).unwrap();
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
        let response = post_json(&url, "/x", "t", b"{}", SECOND, SECOND).unwrap();
        assert_eq!(response.status, 401);
        assert_eq!(response.body, b"no");
    }

    #[test]
    fn a_slow_server_times_out_within_the_deadline() {
        let (url, _server) = serve_once(b"HTTP/1.1 200 OK\r\n\r\n{}", Duration::from_millis(800));
        let start = Instant::now();
        let err = post_json(&url, "/x", "t", b"{}", SECOND, Duration::from_millis(150))
            .err()
            .unwrap();
        assert!(matches!(err, HttpError::Timeout(_)), "{err}");
        assert!(start.elapsed() < Duration::from_millis(600));
    }

    #[test]
    fn garbage_and_refusals_are_errors_not_panics() {
        let (url, _server) = serve_once(b"SSH-2.0-OpenSSH\r\n\r\n", Duration::ZERO);
        assert!(matches!(
            post_json(&url, "/x", "t", b"{}", SECOND, SECOND),
            Err(HttpError::Malformed(_))
        ));
        let (url, _server) = serve_once(
            b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort",
            Duration::ZERO,
        );
        assert!(matches!(
            post_json(&url, "/x", "t", b"{}", SECOND, SECOND),
            Err(HttpError::Malformed(_))
        ));
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(matches!(
            post_json(&format!("http://{free}"), "/x", "t", b"{}", SECOND, SECOND),
            Err(HttpError::Connect(..))
        ));
        assert!(matches!(
            post_json("https://x", "/x", "t", b"{}", SECOND, SECOND),
            Err(HttpError::Url(_))
        ));
    }
}
