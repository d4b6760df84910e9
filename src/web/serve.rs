//! Serving the dashboard over TCP so that slow or idle clients cannot hold it: a deadline for each
//! request's headers and a cap on open connections. (The body's deadline is the router's, in the
//! guard: [`super::WebConfig::body_timeout`].)
//!
//! `axum::serve` sets neither (hyper's header timeout needs a timer it does not give it), so a client
//! that sends half a request line keeps its connection, and its task, for as long as it likes. This
//! loop is `axum::serve` with those two: each connection is hyper's HTTP/1 with
//! `header_read_timeout`, which also bounds how long an idle keep-alive connection waits for its next
//! request, and a connection is accepted only while fewer than `max_connections` are open. Beyond the
//! cap, connections wait in the kernel's listen queue and are taken in arrival order as others close,
//! rather than being refused: a client that arrives while slow ones hold every slot is served within a
//! header timeout, instead of being turned away for as long as the attack lasts.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::hosts::LocalAddr;

/// How [`serve`] treats connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeConfig {
    /// How long a client has to send a request's headers, from the first byte it is waited for (on a
    /// kept-alive connection, from the end of the previous response); then the connection is closed.
    pub header_timeout: Duration,
    /// Most connections open at once; more wait to be accepted.
    pub max_connections: usize,
}

impl ServeConfig {
    /// Browsers send a request's headers in one packet; ten seconds is room for a slow link and
    /// little for an attacker (nginx allows 60 s, Go's servers nothing unless set; hyper's own default,
    /// 30 s, applies only with a timer).
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    /// A browser opens about six connections to a host; 128 is twenty operators' worth, each
    /// connection a task and a few kB of buffers.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 128;
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `app` (a [`super::router`]) on `listener` until `shutdown` completes, then lets the requests
/// in flight finish. Each request carries the client's address as
/// [`ConnectInfo<SocketAddr>`](ConnectInfo) (failed logins are counted by it) and the address it
/// arrived on as [`LocalAddr`] (a `Host` naming it is accepted).
///
/// # Errors
/// Never for a client's fault; a failure to accept that persists is logged and retried.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    cfg: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(cfg.max_connections.max(1)));
    let connections = TaskTracker::new();
    let stopping = CancellationToken::new();
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (stream, remote) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning (as axum::serve).
                    tracing::warn!(error = %e, "dashboard: accepting a connection failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let local = match stream.local_addr() {
            Ok(a) => a,
            Err(_) => continue,
        };
        let app = app.clone();
        let stopping = stopping.clone();
        connections.spawn(async move {
            connection(stream, remote, local, app, cfg.header_timeout, stopping).await;
            drop(slot);
        });
    }
    stopping.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// One connection, until the client closes it, a deadline passes, or the server stops.
async fn connection(
    stream: tokio::net::TcpStream,
    remote: SocketAddr,
    local: SocketAddr,
    app: Router,
    header_timeout: Duration,
    stopping: CancellationToken,
) {
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut().insert(ConnectInfo(remote));
        req.extensions_mut().insert(LocalAddr(local));
        let mut app = app.clone();
        async move { tower_service::Service::call(&mut app, req).await }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, client = %remote, "dashboard connection ended");
            }
            return;
        }
        () = stopping.cancelled() => conn.as_mut().graceful_shutdown(),
    }
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, client = %remote, "dashboard connection ended");
    }
}
