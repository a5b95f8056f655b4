//! The admin CLI's HTTP client (`cinch policy ...`), on the hyper that axum already uses.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::{TcpStream, UnixStream};

use cinch_core::net::endpoint::Endpoint;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    BadUrl(String),
    #[error("cannot reach cinch serve at {url}: {cause} (is it running? see --url)")]
    Connect { url: String, cause: std::io::Error },
    #[error("no answer from {0} in time")]
    Timeout(String),
    #[error("HTTP error talking to {url}: {message}")]
    Http { url: String, message: String },
    #[error("{status}: {message}")]
    Api { status: u16, message: String },
    #[error("TLS: {0}")]
    Tls(String),
}

pub struct AdminClient {
    endpoint: Endpoint,
    /// The `Authorization` header's value: the admin's bearer token, or a user's MUNGE credential.
    authorization: String,
    timeout: Duration,
    /// For `https://`: what the service's certificate must chain to.
    tls: Option<tokio_rustls::TlsConnector>,
}

impl AdminClient {
    /// `url` as the plugin's OptimizerUrl reads it (`https://` or `http://host[:port][/path]`,
    /// or `unix:/path`); `ca_file`: for https, the CA(s) to trust (else the system's).
    pub fn new(
        url: &str,
        token: String,
        ca_file: Option<&std::path::Path>,
    ) -> Result<AdminClient, ClientError> {
        let endpoint = Endpoint::parse(url).map_err(|e| ClientError::BadUrl(e.to_string()))?;
        let tls = match &endpoint {
            Endpoint::Http { tls: true, .. } => {
                Some(tokio_rustls::TlsConnector::from(std::sync::Arc::new(
                    cinch_core::net::tls::client_config(ca_file).map_err(ClientError::Tls)?,
                )))
            }
            _ => None,
        };
        Ok(AdminClient {
            endpoint,
            authorization: format!("Bearer {token}"),
            timeout: Duration::from_secs(10),
            tls,
        })
    }

    /// A client that proves a user with a MUNGE credential instead of the admin token
    /// (`GET /v1/jobs/{id}/decision`).
    pub fn with_munge(mut self, credential: &str) -> AdminClient {
        self.authorization = format!("Munge {}", credential.trim());
        self
    }

    /// Sends one request; a non-2xx answer becomes [`ClientError::Api`] with the server's message.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let url = match &self.endpoint {
            Endpoint::Unix { path: socket } => format!("unix:{}{path}", socket.display()),
            Endpoint::Http {
                authority,
                base_path,
                tls,
                ..
            } => {
                let scheme = if *tls { "https" } else { "http" };
                format!("{scheme}://{authority}{base_path}{path}")
            }
        };
        tokio::time::timeout(self.timeout, self.exchange(&url, method, path, body))
            .await
            .map_err(|_| ClientError::Timeout(url.clone()))?
    }

    async fn exchange(
        &self,
        url: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let http = |e: &dyn std::fmt::Display| ClientError::Http {
            url: url.to_string(),
            message: e.to_string(),
        };
        let connect_err = |cause| ClientError::Connect {
            url: url.to_string(),
            cause,
        };
        let mut sender = match &self.endpoint {
            Endpoint::Unix { path } => {
                handshake(UnixStream::connect(path).await.map_err(connect_err)?).await
            }
            Endpoint::Http {
                authority, host, ..
            } => {
                let tcp = TcpStream::connect(authority).await.map_err(connect_err)?;
                match &self.tls {
                    Some(connector) => {
                        let name = rustls::pki_types::ServerName::try_from(host.clone())
                            .map_err(|e| ClientError::Tls(format!("server name '{host}': {e}")))?;
                        let stream = connector
                            .connect(name, tcp)
                            .await
                            .map_err(|e| ClientError::Tls(format!("{url}: {e}")))?;
                        handshake(stream).await
                    }
                    None => handshake(tcp).await,
                }
            }
        }
        .map_err(|e| http(&e))?;
        let bytes = body.map(|b| serde_json::to_vec(b).expect("JSON values serialise"));
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.endpoint.base_path()))
            .header("host", self.endpoint.host_header())
            .header("authorization", &self.authorization)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(bytes.unwrap_or_default())))
            .map_err(|e| http(&e))?;
        let response = sender.send_request(request).await.map_err(|e| http(&e))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| http(&e))?
            .to_bytes();
        let value: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        if status.is_success() {
            Ok(value)
        } else {
            let message = value
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| value.to_string(), str::to_string);
            Err(ClientError::Api {
                status: status.as_u16(),
                message,
            })
        }
    }
}

/// An HTTP/1 connection over `stream`, driven on its own task.
async fn handshake<S>(
    stream: S,
) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, hyper::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}
