//! Running the service: state from config, a listener, graceful shutdown on SIGTERM/Ctrl-C.

use std::sync::Arc;

use cinch_core::learn::history::History;
use tokio::net::TcpListener;

use super::config::{load_token, ConfigError, ServeConfig};
use super::metrics::Metrics;
use super::record_file::RecordStore;
use super::store::{PolicyStore, StoreError};
use super::{app, unix_now, AppState, DecisionLog, Limits, Tokens};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {cause}")]
    Listen {
        addr: std::net::SocketAddr,
        cause: std::io::Error,
    },
    #[error("cannot listen on unix:{path}: {cause}")]
    ListenUnix {
        path: std::path::PathBuf,
        cause: std::io::Error,
    },
    #[error("server failed: {0}")]
    Serve(std::io::Error),
    #[error("TLS: {0}")]
    Tls(String),
    #[error(transparent)]
    Record(#[from] super::record_file::RecordFileError),
    #[error(transparent)]
    Portfolio(#[from] super::portfolio::PortfolioFileError),
}

/// Loads tokens and the policy store; everything the handlers need.
pub fn build_state(config: &ServeConfig) -> Result<Arc<AppState>, ServeError> {
    build_state_with(config, History::default())
}

/// [`build_state`] with what the service knows of past jobs already (an imported history).
pub fn build_state_with(
    config: &ServeConfig,
    history: History,
) -> Result<Arc<AppState>, ServeError> {
    let store = PolicyStore::open(&config.state_dir, unix_now(), config.policy_history)?;
    let mut tokens = Vec::new();
    for file in [&config.admin_token_file, &config.plugin_token_file] {
        let (token, created) = load_token(file)?;
        if created {
            tracing::info!(path = %file.path.display(), "created a new token file (mode 0600)");
        }
        tokens.push(token);
    }
    let plugin = tokens.pop().expect("two tokens");
    let admin = tokens.pop().expect("two tokens");
    if admin == plugin {
        return Err(ConfigError::Invalid(
            "the admin and plugin tokens must differ (the plugin must not be able to change policy)"
                .into(),
        )
        .into());
    }
    // Beside the policy: the decisions of the service's earlier runs.
    let log_path = config.state_dir.join("decisions.jsonl");
    let (decisions, skipped) = DecisionLog::open(log_path.clone(), config.decision_log_capacity)
        .map_err(|e| {
            ConfigError::Invalid(format!(
                "cannot read the decision log {}: {e}",
                log_path.display()
            ))
        })?;
    if skipped > 0 {
        tracing::warn!(path = %log_path.display(), skipped, "decision log lines that do not parse were skipped");
    }
    let record = match config.record {
        Some(limits) => Some(RecordStore::open(&config.state_dir, limits)?),
        None => None,
    };
    Ok(Arc::new(AppState {
        store,
        tokens: Tokens { admin, plugin },
        decisions,
        metrics: Metrics::default(),
        limits: Limits {
            max_body_bytes: config.max_body_bytes,
            request_timeout: config.request_timeout,
        },
        seed: config.seed,
        history: std::sync::Mutex::new(history),
        record,
        portfolio: std::sync::Mutex::new(super::portfolio::PortfolioState::open(
            &config.state_dir,
        )?),
        munge: super::job_decision::MungeCheck::new(
            config.unmunge.clone(),
            config.munge_socket.clone(),
        ),
        exchanges: std::sync::Mutex::new(cinch_core::wire::exchange::Receiver::new(
            super::first_exchange_id(),
        )),
        progress: std::sync::Mutex::new(super::progress::ProgressStore::with_mail_command(
            config.idle_mail_command.clone(),
        )),
    }))
}

pub async fn run(config: ServeConfig) -> Result<(), ServeError> {
    run_with(config, History::default()).await
}

/// [`run`], starting from `history` (what an imported `sacct` history taught).
pub async fn run_with(config: ServeConfig, history: History) -> Result<(), ServeError> {
    let tls = match &config.tls {
        Some((cert, key)) => Some(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(
            cinch_core::net::tls::server_config(cert, key).map_err(ServeError::Tls)?,
        ))),
        None => None,
    };
    let state = build_state_with(&config, history)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|cause| ServeError::Listen {
            addr: config.listen,
            cause,
        })?;
    let current = state.store.current();
    tracing::info!(
        listen = %config.listen,
        tls = tls.is_some(),
        state = %state.store.path().display(),
        policy = current.settings.policy.name(),
        mode = %current.settings.mode,
        version = current.version,
        "cinch optimizer listening"
    );
    // One shutdown signal for every listener: each finishes its requests in flight.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let saving = tokio::spawn(save_record_every(state.clone(), config.record_save));
    let evaluating = tokio::spawn(evaluate_portfolio(state.clone()));
    let router = app(state.clone());
    let unix = match &config.listen_unix {
        Some(path) => {
            let listener = bind_unix(path)?;
            tracing::info!(socket = %path.display(), "also listening on a Unix socket (mode 0660)");
            let server = axum::serve(listener, router.clone())
                .with_graceful_shutdown(stopped(stop_rx.clone()));
            Some(tokio::spawn(async move { server.await }))
        }
        None => None,
    };
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    match tls {
        Some(acceptor) => serve_tls(listener, acceptor, router, stopped(stop_rx)).await,
        None => axum::serve(listener, router)
            .with_graceful_shutdown(stopped(stop_rx))
            .await
            .map_err(ServeError::Serve)?,
    }
    if let Some(unix) = unix {
        unix.await
            .map_err(|e| ServeError::Serve(std::io::Error::other(e)))?
            .map_err(ServeError::Serve)?;
    }
    if let Some(path) = &config.listen_unix {
        let _ = std::fs::remove_file(path);
    }
    saving.abort();
    evaluating.abort();
    save_record(&state).await;
    tracing::info!("stopped");
    Ok(())
}

/// Writes the record to the state directory every `every` (the first time one period after
/// start).
async fn save_record_every(state: Arc<AppState>, every: std::time::Duration) {
    if state.record.is_none() {
        return;
    }
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        save_record(&state).await;
    }
}

/// Looks every minute whether the `portfolio` policy is due an evaluation, and runs it off the
/// async workers (one at a time).
async fn evaluate_portfolio(state: Arc<AppState>) {
    let mut ticks = tokio::time::interval(std::time::Duration::from_secs(60));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let worker = state.clone();
        let done = tokio::task::spawn_blocking(move || {
            super::portfolio::evaluate_if_due(&worker, super::unix_now(), false)
        })
        .await;
        match done {
            Ok(Err(why)) => tracing::warn!(%why, "portfolio: no evaluation"),
            Err(e) => tracing::warn!(error = %e, "portfolio: evaluation task failed"),
            Ok(Ok(_)) => {}
        }
    }
}

/// Writes the record now, off the async workers; a failure is logged and the record kept in
/// memory for the next try.
async fn save_record(state: &Arc<AppState>) {
    if state.record.is_none() {
        return;
    }
    let state = state.clone();
    let saved = tokio::task::spawn_blocking(move || {
        let store = state.record.as_ref().expect("checked above");
        (store.save(), store.path.clone())
    })
    .await;
    match saved {
        Ok((Ok(jobs), path)) => {
            tracing::debug!(path = %path.display(), jobs, "record of the recent past written")
        }
        Ok((Err(e), path)) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the record of the recent past")
        }
        Err(e) => tracing::warn!(error = %e, "record writer failed"),
    }
}

/// How long a client has to finish the TLS handshake, and connections in flight to finish after
/// a shutdown signal.
const TLS_HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);
const DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves `router` over TLS on `listener` until `stop` resolves: each connection's handshake
/// bounded by [`TLS_HANDSHAKE`], then HTTP/1.1 on it; connections in flight get [`DRAIN`] to end.
async fn serve_tls(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: axum::Router,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        connections.spawn(async move {
            let tls = match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let io = hyper_util::rt::TokioIo::new(tls);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
        // Reap finished connections as we go.
        while connections.try_join_next().is_some() {}
    }
    let _ = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

/// Binds the Unix socket, replacing a stale socket file (never any other kind of file), with
/// mode 0660: its owner and group may connect (put slurmctld's user in the service's group).
fn bind_unix(path: &std::path::Path) -> Result<tokio::net::UnixListener, ServeError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let err = |cause| ServeError::ListenUnix {
        path: path.to_path_buf(),
        cause,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(err(std::io::Error::other(
                "a file that is not a socket is in the way; refusing to remove it",
            )));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(err)?;
    Ok(listener)
}

/// Resolves on SIGTERM (systemd, kill) or SIGINT (Ctrl-C); in-flight requests then finish.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
    }
}
