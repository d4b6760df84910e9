//! `--metrics-addr HOST:PORT`: the process's figures in Prometheus's text format on `/metrics`, beside
//! `/healthz` (the process answers) and `/readyz` (its database answers, its schema is current and, for
//! the services that register, its registry row is live), on one HTTP listener. The library records
//! through the `metrics` facade; this installs the recorder.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use jobq::CancellationToken;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use sqlx::MySqlPool;
use tracing::info;

/// Buckets of the `_seconds` histograms: from a millisecond (a claim, a no-op job) to ten minutes (a
/// long job).
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 600.0,
];

/// Buckets of the row-count histograms (rows per claim, per batched finish): up to the largest batch.
const ROW_BUCKETS: &[f64] = &[
    0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];

/// How often histograms are folded into what `/metrics` renders.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// How long `/readyz` waits for the database.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves the metrics and health endpoints of a service that registers (worker, reaper, scheduler) on
/// `addr` until `shutdown`, checking readiness against `pool` and the process's registrations. Returns
/// the address bound (a port 0 becomes the port the system chose).
///
/// # Errors
/// When the recorder cannot be installed or the address cannot be bound (in use, not local).
pub async fn serve(
    addr: SocketAddr,
    pool: MySqlPool,
    shutdown: CancellationToken,
) -> Result<SocketAddr> {
    listen(addr, pool, shutdown, None, Registers::Yes).await
}

/// [`serve`] for a process that does not register (the dashboard): ready when its database answers
/// and its schema is current.
pub async fn serve_unregistered(
    addr: SocketAddr,
    pool: MySqlPool,
    shutdown: CancellationToken,
) -> Result<SocketAddr> {
    listen(addr, pool, shutdown, None, Registers::No).await
}

/// [`serve`], with the figures of the supervised workers that announce themselves in `children` merged
/// into `/metrics` (see [`crate::scrape`]).
pub async fn serve_with_children(
    addr: SocketAddr,
    pool: MySqlPool,
    shutdown: CancellationToken,
    children: Option<PathBuf>,
) -> Result<SocketAddr> {
    listen(addr, pool, shutdown, children, Registers::Yes).await
}

/// Whether the process registers services, and so whether `/readyz` asks for a live registration.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Registers {
    Yes,
    No,
}

async fn listen(
    addr: SocketAddr,
    pool: MySqlPool,
    shutdown: CancellationToken,
    children: Option<PathBuf>,
    registers: Registers,
) -> Result<SocketAddr> {
    let handle = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .context("metrics buckets")?
        .set_buckets_for_metric(Matcher::Suffix("_rows".into()), ROW_BUCKETS)
        .context("metrics buckets")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    jobq::telemetry::describe_metrics();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--metrics-addr {addr}: cannot listen"))?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(Shared {
            handle: handle.clone(),
            pool,
            children,
            registers,
        });
    let upkeep = shutdown.clone();
    tokio::spawn(async move {
        while !sleep_or_stop(UPKEEP_EVERY, &upkeep).await {
            handle.run_upkeep();
        }
    });
    tokio::spawn(async move {
        let stop = shutdown.cancelled_owned();
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::error!(error = %e, "the metrics listener failed");
        }
    });
    info!(addr = %bound, "metrics on http://{bound}/metrics");
    if let Err(e) = crate::scrape::announce(bound) {
        tracing::warn!(error = %e, "could not tell the supervisor where this worker's metrics are");
    }
    Ok(bound)
}

/// What the handlers share.
#[derive(Clone)]
struct Shared {
    handle: PrometheusHandle,
    pool: MySqlPool,
    /// Where supervised workers announce their metrics listeners.
    children: Option<PathBuf>,
    registers: Registers,
}

async fn render(State(s): State<Shared>) -> impl IntoResponse {
    let own = s.handle.render();
    let text = match &s.children {
        Some(dir) => crate::scrape::merge(&own, &crate::scrape::children(dir).await),
        None => own,
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// 200 when the database answers, the schema is what this build needs and, in a process that registers,
/// every registration's row is live; 503 with the reason if not.
async fn ready(State(s): State<Shared>) -> impl IntoResponse {
    let not_ready = |why: String| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
    };
    match tokio::time::timeout(READY_TIMEOUT, jobq::ensure_migrated(&s.pool)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return not_ready(e.to_string()),
        Err(_) => return not_ready("the database did not answer within 2 s".into()),
    }
    if s.registers == Registers::Yes
        && let Some(why) = unregistered(&jobq::stats::registrations())
    {
        return not_ready(why);
    }
    (StatusCode::OK, "ready\n".to_string())
}

/// Why a process that registers is not ready, judging by its registrations; `None` when it is.
fn unregistered(registrations: &[jobq::stats::RegistrationHealth]) -> Option<String> {
    if registrations.is_empty() {
        return Some("not registered (yet, or any more) in the process registry".into());
    }
    let stale: Vec<&str> = registrations
        .iter()
        .filter(|r| !r.live)
        .map(|r| r.role)
        .collect();
    (!stale.is_empty()).then(|| {
        format!(
            "the heartbeat of this process's {} has not confirmed its registry row within its fence \
             bound",
            stale.join(", ")
        )
    })
}

/// Sleeps `d`; true when `stop` came first.
async fn sleep_or_stop(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = stop.cancelled() => true,
        () = tokio::time::sleep(d) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobq::stats::RegistrationHealth;

    #[test]
    fn ready_only_when_registered_and_every_row_is_live() {
        let live = |role, live| RegistrationHealth { role, live };
        assert!(unregistered(&[]).unwrap().contains("not registered"));
        assert_eq!(unregistered(&[live("worker", true)]), None);
        let why = unregistered(&[live("supervisor", true), live("reaper", false)]).unwrap();
        assert!(
            why.contains("reaper") && !why.contains("supervisor"),
            "{why}"
        );
    }
}
