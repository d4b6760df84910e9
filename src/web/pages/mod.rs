//! The pages: overview, jobs, a job, schedules, a schedule, processes, the audit trail. One file per
//! page (or pair of pages), each page's body built by named helpers, one per part of the page.

mod job;
mod jobs;
mod overview;
mod schedules;
mod system;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::App;
use super::html::error_page;
use crate::error::Error;

pub(super) use job::job;
pub(super) use jobs::{JobsQuery, jobs};
pub(super) use overview::{gather, overview};
pub(super) use schedules::{schedule, schedules};
pub(super) use system::{audit, processes};

/// Rows per page of the jobs list.
pub(super) const PAGE_SIZE: u32 = 50;

/// Every job state, in the order a job passes through them (one with dependencies waits first).
const STATES: [&str; 7] = [
    "waiting",
    "queued",
    "running",
    "retry",
    "done",
    "dead",
    "cancelled",
];

/// A notice to show, passed along by the redirect after an action: the only key these pages take
/// (any other is refused, as on every page and API call).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Notice {
    notice: Option<String>,
}

/// An error as a page: not found 404, a refused change 409, a bad request 400, the rest 500.
pub(super) fn failure(app: &App, e: &Error) -> Response {
    let status = status_of(e);
    if status.is_server_error() {
        tracing::error!(error = %e, "dashboard request failed");
    }
    error_page(app, status, &e.to_string())
}

pub(super) fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::JobNotFound(_) | Error::ScheduleNotFound { .. } => StatusCode::NOT_FOUND,
        Error::JobState { .. } | Error::ScheduleState { .. } | Error::UniqueKeyHeld { .. } => {
            StatusCode::CONFLICT
        }
        Error::Invalid { .. } | Error::Spec { .. } => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub(super) async fn not_found(State(app): State<App>) -> Response {
    error_page(&app, StatusCode::NOT_FOUND, "no such page")
}

/// A form field's value, trimmed; `None` when absent or blank (an empty filter form submits them).
fn some(s: &Option<String>) -> Option<String> {
    s.as_ref()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}
