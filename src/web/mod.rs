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

mod actions;
mod api;
mod guard;
mod html;
mod minutes;
mod pages;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use sqlx::MySqlPool;

use crate::{Jobs, Schedules};

pub use guard::Credentials;

/// How the dashboard is served.
#[derive(Debug, Clone, Default)]
pub struct WebConfig {
    /// The path it is served under behind a proxy (`/jobq`), or empty for the root. Links and the
    /// CSRF cookie use it.
    pub prefix: String,
    /// Show everything, change nothing: no action buttons, every POST refused with 403.
    pub read_only: bool,
    /// Who may use it; [`Credentials::none`] lets everyone in (fine on the loopback interface).
    pub credentials: Credentials,
}

impl WebConfig {
    /// Checks the prefix: empty, or `/` followed by path segments, without a trailing `/`.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] naming the bad prefix.
    pub fn validate(&self) -> crate::Result<()> {
        let p = &self.prefix;
        let ok = p.is_empty()
            || (p.starts_with('/')
                && !p.ends_with('/')
                && p[1..].split('/').all(|seg| {
                    !seg.is_empty()
                        && seg
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "-_.~".contains(c))
                }));
        if ok {
            Ok(())
        } else {
            Err(crate::Error::invalid(
                "web prefix",
                format!(
                    "{p:?} must be empty or like \"/jobq\" (a leading /, no trailing /, letters, \
                     digits and - _ . ~)"
                ),
            ))
        }
    }
}

/// What every handler shares.
#[derive(Debug, Clone)]
struct App {
    pool: MySqlPool,
    jobs: Jobs,
    schedules: Schedules,
    cfg: Arc<WebConfig>,
    minutes: minutes::MinuteCache,
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
/// credentials and CSRF checks.
///
/// # Errors
/// [`crate::Error::Invalid`] for a bad prefix.
pub fn router(pool: MySqlPool, cfg: WebConfig) -> crate::Result<Router> {
    cfg.validate()?;
    let app = App {
        jobs: Jobs::new(pool.clone()),
        schedules: Schedules::new(pool.clone()).by("jobq web"),
        pool,
        cfg: Arc::new(cfg),
        minutes: minutes::MinuteCache::default(),
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
    Ok(if prefix.is_empty() {
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
    })
}
