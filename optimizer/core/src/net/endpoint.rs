//! Where the optimizer listens, as the plugin's `OptimizerUrl` and `cinch policy --url` write it:
//! parsed here once, so both read the same URL the same way.
//!
//! - `unix:/run/cinch/optimizer.sock` — a Unix-domain socket on this host (the sidecar's
//!   recommended transport: nothing leaves the host, and file permissions decide who connects);
//! - `https://host[:port][/base/path]` — HTTP over TLS (port 443 when omitted), the transport
//!   for an optimizer on another host;
//! - `http://host[:port][/base/path]` — plain HTTP (port 80 when omitted).
//!
//! [`Endpoint::in_clear`] tells whether the bearer token would leave this host unencrypted;
//! callers refuse that unless the admin allowed it explicitly.

use std::net::IpAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Http {
        /// `host:port` to connect to (brackets kept for IPv6).
        authority: String,
        host: String,
        /// Prefix of every request path, without a trailing slash ("" for none).
        base_path: String,
        /// `https://`: the connection is TLS, the server's certificate checked for `host`.
        tls: bool,
    },
    Unix {
        path: PathBuf,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{url}' {why}")]
pub struct EndpointError {
    pub url: String,
    pub why: &'static str,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, EndpointError> {
        let err = |why| EndpointError {
            url: url.to_string(),
            why,
        };
        if let Some(path) = url.strip_prefix("unix:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if !path.starts_with('/') || path.len() < 2 {
                return Err(err(
                    "needs an absolute socket path, e.g. unix:/run/cinch/optimizer.sock",
                ));
            }
            if path.len() > 107 {
                return Err(err(
                    "has a socket path longer than 107 bytes (the kernel's limit)",
                ));
            }
            return Ok(Endpoint::Unix {
                path: PathBuf::from(path),
            });
        }
        let (rest, tls) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
            (Some(rest), _) => (rest, true),
            (None, Some(rest)) => (rest, false),
            (None, None) => return Err(err("must start with https://, http:// or unix:")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
            let (host, after) = inner
                .split_once(']')
                .ok_or_else(|| err("has no valid host"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '@') {
            return Err(err("has no valid host"));
        }
        let port = match port {
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(err("has a bad port")),
            },
            None if tls => 443,
            None => 80,
        };
        let bracketed = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        Ok(Endpoint::Http {
            authority: format!("{bracketed}:{port}"),
            host: host.to_string(),
            base_path: path.to_string(),
            tls,
        })
    }

    /// Whether requests would leave this host unencrypted: plain HTTP to a host that is not
    /// this one.
    pub fn in_clear(&self) -> bool {
        matches!(self, Endpoint::Http { tls: false, .. }) && !self.is_local()
    }

    /// Whether a request stays on this host: a Unix socket, `localhost`, or a loopback address.
    pub fn is_local(&self) -> bool {
        match self {
            Endpoint::Unix { .. } => true,
            Endpoint::Http { host, .. } => {
                host.eq_ignore_ascii_case("localhost")
                    || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
            }
        }
    }

    /// The `Host` header to send.
    pub fn host_header(&self) -> &str {
        match self {
            Endpoint::Unix { .. } => "localhost",
            Endpoint::Http { authority, .. } => authority,
        }
    }

    /// The prefix of every request path.
    pub fn base_path(&self) -> &str {
        match self {
            Endpoint::Unix { .. } => "",
            Endpoint::Http { base_path, .. } => base_path,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_and_unix_endpoints_parse_alike_everywhere() {
        let e = Endpoint::parse("http://127.0.0.1:6830/").unwrap();
        assert_eq!(e.host_header(), "127.0.0.1:6830");
        assert_eq!(e.base_path(), "");
        assert!(e.is_local());
        let e = Endpoint::parse("http://[::1]:7000/base/").unwrap();
        assert_eq!(e.host_header(), "[::1]:7000");
        assert_eq!(e.base_path(), "/base");
        assert!(e.is_local());
        let e = Endpoint::parse("http://optimizer.example").unwrap();
        assert_eq!(e.host_header(), "optimizer.example:80");
        assert!(!e.is_local());
        assert!(!Endpoint::parse("http://10.0.0.5:6830").unwrap().is_local());
        assert!(Endpoint::parse("http://localhost:6830").unwrap().is_local());
        // TLS: port 443 by default; never in clear, wherever it goes.
        let e = Endpoint::parse("https://optimizer.example/cinch").unwrap();
        assert_eq!(e.host_header(), "optimizer.example:443");
        assert_eq!(e.base_path(), "/cinch");
        assert!(!e.is_local() && !e.in_clear());
        assert!(Endpoint::parse("http://10.0.0.5:6830").unwrap().in_clear());
        assert!(!Endpoint::parse("http://127.0.0.1:6830").unwrap().in_clear());
        let e = Endpoint::parse("unix:/run/cinch/optimizer.sock").unwrap();
        assert_eq!(
            e,
            Endpoint::Unix {
                path: "/run/cinch/optimizer.sock".into()
            }
        );
        assert!(e.is_local());
        assert_eq!(
            Endpoint::parse("unix:///run/x.sock").unwrap(),
            Endpoint::Unix {
                path: "/run/x.sock".into()
            }
        );
    }

    #[test]
    fn bad_endpoints_say_why() {
        for (url, why) in [
            ("ftp://x", "must start with"),
            ("http://", "no valid host"),
            ("http://h:0", "bad port"),
            ("http://h:99999", "bad port"),
            ("http://user@h", "no valid host"),
            ("unix:relative.sock", "absolute"),
            ("unix:/", "absolute"),
        ] {
            let e = Endpoint::parse(url).unwrap_err();
            assert!(e.to_string().contains(why), "{url}: {e}");
        }
        let long = format!("unix:/{}", "x".repeat(120));
        assert!(Endpoint::parse(&long)
            .unwrap_err()
            .to_string()
            .contains("107"));
    }
}
