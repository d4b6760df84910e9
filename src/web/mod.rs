//! The dashboard: server-rendered pages and a JSON API over one database's jobs, schedules and
//! processes, as an axum [`Router`] that `jobq web` serves and an application can nest under its own
//! routes and auth.
//!
//! Everything it needs is in the binary: the stylesheet is embedded, the pages use no script (so the
//! Content-Security-Policy can forbid every script), and charts are inline SVG drawn on the server.
//!
//! # Safety
//! * **Credentials** ([`Credentials`]): HTTP basic auth, a bearer token, or both. `jobq web` refuses
//!   to listen beyond the loopback interface without them.
//! * **CSRF**: every change is a POST that must carry the per-browser token of the `jobq_csrf` cookie
//!   (a hidden form field, or the `X-CSRF-Token` header for scripts), and a browser's
//!   `Sec-Fetch-Site`/`Origin` must say the request came from the dashboard itself. Requests
//!   authenticated by a bearer token are exempt: browsers never attach one on their own.
//! * **Read-only** ([`WebConfig::read_only`]): the action buttons are gone and every POST is refused.
//! * Every change is written to the audit table `jobq_audit`: who, what, on what, how many rows.
//! * **Hosts** ([`AllowedHosts`]): only the `Host` names it is reached by are answered (DNS rebinding).
//! * **Slow clients**: [`serve`] gives each request's headers a deadline and caps open connections;
//!   the router gives each body one ([`WebConfig::body_timeout`]).
//! * **Failed logins** are logged and, repeated from one address, refused for a growing while.
//! * **Notices** after an action are signed: a link cannot write its own text into the banner.
//! * Every answer under `/api` is JSON, errors too.

mod actions;
mod api;
mod guard;
mod hosts;
mod html;
mod json_errors;
mod notice;
mod pages;
mod serve;
mod throttle;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use sqlx::MySqlPool;

use crate::{Jobs, Schedules};

pub use guard::Credentials;
pub use hosts::{AllowedHosts, LocalAddr};
pub use serve::{ServeConfig, serve};

/// How the dashboard is served.
#[derive(Debug, Clone)]
pub struct WebConfig {
    /// The path it is served under behind a proxy (`/jobq`), or empty for the root. Links and the
    /// CSRF cookie use it.
    pub prefix: String,
    /// Show everything, change nothing: no action buttons, every POST refused with 403.
    pub read_only: bool,
    /// Who may use it; [`Credentials::none`] lets everyone in (fine on the loopback interface).
    pub credentials: Credentials,
    /// The `Host` names it answers; others get 421. Default: [`AllowedHosts::loopback`].
    pub hosts: AllowedHosts,
    /// How long a request's body may take to arrive after its headers; then 408.
    pub body_timeout: Duration,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            prefix: String::new(),
            read_only: false,
            credentials: Credentials::none(),
            hosts: AllowedHosts::default(),
            body_timeout: Self::DEFAULT_BODY_TIMEOUT,
        }
    }
}

impl WebConfig {
    /// The dashboard's bodies are forms and small JSON documents (at most 1 MiB); 30 s is room for a
    /// megabyte on a slow link.
    pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

    /// Checks the prefix (see [`check_prefix`]) and the body timeout.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] naming what is wrong.
    pub fn validate(&self) -> crate::Result<()> {
        check_prefix(&self.prefix)?;
        if self.body_timeout.is_zero() {
            return Err(crate::Error::invalid(
                "web body timeout",
                "must be more than 0",
            ));
        }
        Ok(())
    }
}

/// Checks a path prefix: empty, or `/` followed by segments of letters, digits and `- _ . ~`, without
/// a trailing `/`, and no segment `.` or `..`: browsers and proxies resolve those away before a request
/// is sent (`/..` is `/`), so no request would ever reach the pages.
///
/// # Errors
/// [`crate::Error::Invalid`] naming the prefix and what is wrong with it.
pub fn check_prefix(prefix: &str) -> crate::Result<()> {
    let why = if prefix.is_empty() {
        return Ok(());
    } else if !prefix.starts_with('/') {
        "must start with /".to_string()
    } else if prefix.ends_with('/') {
        "must not end with /".to_string()
    } else if let Some(seg) = prefix[1..]
        .split('/')
        .find(|seg| seg.is_empty() || *seg == "." || *seg == "..")
    {
        if seg.is_empty() {
            "has an empty segment (//)".to_string()
        } else {
            format!(
                "has the segment {seg:?}, which browsers and proxies resolve away, so no request \
                 would reach the dashboard"
            )
        }
    } else if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "/-_.~".contains(*c)))
    {
        format!("has {c:?}; only letters, digits and - _ . ~ may name a segment")
    } else {
        return Ok(());
    };
    Err(crate::Error::invalid(
        "web prefix",
        format!("{prefix:?} {why} (use e.g. \"/jobq\" or \"/ops/jobq\")"),
    ))
}

/// What every handler shares.
#[derive(Debug, Clone)]
struct App {
    pool: MySqlPool,
    jobs: Jobs,
    queues: crate::Queues,
    limits: crate::JobLimits,
    schedules: Schedules,
    cfg: Arc<WebConfig>,
    /// Signs the notices of redirects after actions.
    notices: notice::NoticeKey,
    /// Failed logins by address.
    throttle: Arc<throttle::LoginThrottle>,
}

impl App {
    /// `path` under the prefix, for links. Home is the prefix itself (`/jobq`, not `/jobq/`).
    fn link(&self, path: &str) -> String {
        if path == "/" && !self.cfg.prefix.is_empty() {
            return self.cfg.prefix.clone();
        }
        format!("{}{path}", self.cfg.prefix)
    }
}

/// The dashboard's routes (pages, `/api`, the stylesheet), already under `cfg.prefix`, guarded by its
/// host check, credentials and CSRF checks. Serve it with [`serve`] for its defences against slow
/// clients and for client addresses in failed-login logs (another server: insert
/// [`axum::extract::ConnectInfo<std::net::SocketAddr>`] and [`LocalAddr`] into each request).
///
/// # Errors
/// [`crate::Error::Invalid`] for a bad prefix.
pub fn router(pool: MySqlPool, cfg: WebConfig) -> crate::Result<Router> {
    cfg.validate()?;
    let app = App {
        jobs: Jobs::new(pool.clone()),
        queues: crate::Queues::new(pool.clone()),
        limits: crate::JobLimits::new(pool.clone()),
        schedules: Schedules::new(pool.clone()).by("jobq web"),
        pool,
        cfg: Arc::new(cfg),
        notices: notice::NoticeKey::random(),
        throttle: Arc::default(),
    };
    let routes = Router::new()
        .route("/", get(pages::overview))
        .route("/jobs", get(pages::jobs))
        .route("/jobs/{id}", get(pages::job))
        .route("/jobs/{id}/{action}", post(actions::job_form))
        .route("/jobs/bulk", post(actions::bulk_form))
        .route("/schedules", get(pages::schedules))
        .route("/schedules/{name}", get(pages::schedule))
        .route("/schedules/{name}/{action}", post(actions::schedule_form))
        .route("/queues/{name}/{action}", post(actions::queue_form))
        .route("/processes", get(pages::processes))
        .route("/audit", get(pages::audit))
        .route("/assets/app.css", get(html::stylesheet))
        .route("/api/overview", get(api::overview))
        .route("/api/jobs", get(api::jobs))
        .route("/api/jobs/bulk", post(api::bulk))
        .route("/api/jobs/{id}", get(api::job))
        .route("/api/jobs/{id}/{action}", post(api::job_action))
        .route("/api/schedules", get(api::schedules))
        .route("/api/schedules/{name}", get(api::schedule))
        .route("/api/schedules/{name}/{action}", post(api::schedule_action))
        .route("/api/queues/{name}/{action}", post(api::queue_action))
        .route("/api/processes", get(api::processes))
        .route("/api/audit", get(api::audit))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            guard::guard,
        ))
        .with_state(app.clone());
    let prefix = app.cfg.prefix.clone();
    let served = if prefix.is_empty() {
        routes
    } else {
        // `/jobq/` is where people end up by hand; the pages live at `/jobq`.
        let home = prefix.clone();
        Router::new()
            .route(
                &format!("{prefix}/"),
                get(move || async move { axum::response::Redirect::permanent(&home) }),
            )
            .nest(&prefix, routes)
    };
    // Outermost first: errors under /api as JSON, then the host check before anything else runs.
    Ok(served
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(app.cfg.hosts.clone()),
            hosts::check,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::<str>::from(format!("{prefix}/api")),
            json_errors::json_errors,
        )))
}
