//! `/jobs`: the filters, one page of matching jobs with actions on a selection, the actions on every
//! job matching, and paging by id.

use std::fmt::Write;

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{PAGE_SIZE, STATES, failure, some};
use crate::db::admin::JobFilter;
use crate::error::Error;
use crate::job::{JobId, JobRecord, State as JobState};
use crate::web::App;
use crate::web::guard::CsrfToken;
use crate::web::html::{badge, csrf_field, error_page, esc, page, query_value, when};

/// The jobs list's query string. Empty fields count as absent (an empty filter form submits them);
/// unknown keys are refused, so a misspelt filter never quietly shows (or acts on) every job.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::web) struct JobsQuery {
    pub(in crate::web) state: Option<String>,
    pub(in crate::web) queue: Option<String>,
    pub(in crate::web) kind: Option<String>,
    /// Text in the last error.
    pub(in crate::web) error: Option<String>,
    /// Jump to this job.
    pub(in crate::web) id: Option<String>,
    pub(in crate::web) before: Option<String>,
    pub(in crate::web) notice: Option<String>,
}

impl JobsQuery {
    /// The filter it asks for, or what is wrong with it.
    pub(in crate::web) fn filter(&self, limit: u32) -> Result<JobFilter, Error> {
        let state = some(&self.state)
            .map(|s| s.parse::<JobState>())
            .transpose()?;
        let before = some(&self.before)
            .map(|b| {
                b.parse::<u64>()
                    .map(JobId::from)
                    .map_err(|_| Error::invalid("before", format!("{b:?} is not a job id")))
            })
            .transpose()?;
        Ok(JobFilter {
            state,
            queue: some(&self.queue),
            kind: some(&self.kind),
            error_contains: some(&self.error),
            before,
            limit,
        })
    }

    /// The filter in words, for confirmations and the audit trail: `state=dead queue=mail`, or
    /// `everything`.
    pub(in crate::web) fn describe(&self) -> String {
        let parts: Vec<String> = [
            ("state", &self.state),
            ("queue", &self.queue),
            ("kind", &self.kind),
            ("error", &self.error),
        ]
        .iter()
        .filter_map(|(k, v)| some(v).map(|v| format!("{k}={v:?}")))
        .collect();
        if parts.is_empty() {
            "everything".into()
        } else {
            parts.join(" ")
        }
    }

    /// The query string of the same filter (without paging), for links.
    pub(in crate::web) fn to_query(&self) -> String {
        [
            ("state", &self.state),
            ("queue", &self.queue),
            ("kind", &self.kind),
            ("error", &self.error),
        ]
        .iter()
        .filter_map(|(k, v)| some(v).map(|v| format!("{k}={}", query_value(&v))))
        .collect::<Vec<_>>()
        .join("&")
    }
}

pub(in crate::web) async fn jobs(
    State(app): State<App>,
    Extension(csrf): Extension<CsrfToken>,
    q: Result<Query<JobsQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return failure(&app, &Error::invalid("query", e.body_text())),
    };
    if let Some(id) = some(&q.id) {
        return match id.trim_start_matches('#').parse::<u64>() {
            Ok(n) => Redirect::to(&app.link(&format!("/jobs/{n}"))).into_response(),
            Err(_) => error_page(
                &app,
                StatusCode::BAD_REQUEST,
                &format!("id={id:?} is not a job id"),
            ),
        };
    }
    let filter = match q.filter(PAGE_SIZE) {
        Ok(f) => f,
        Err(e) => return failure(&app, &e),
    };
    let rows = match app.jobs.list(&filter).await {
        Ok(r) => r,
        Err(e) => return failure(&app, &e),
    };
    let mut b = filters_form(&app, &q);
    b.push_str(&jobs_table(&app, &csrf, &rows));
    if !app.cfg.read_only && !rows.is_empty() {
        b.push_str(&matching_form(&app, &csrf, &q));
    }
    b.push_str(&pager(&app, &q, &filter, &rows));
    page(&app, "Jobs", q.notice.as_deref(), &b)
}

/// The filter form, filled in with the current filter.
fn filters_form(app: &App, q: &JobsQuery) -> String {
    let mut b = format!(
        "<form method=\"get\" action=\"{}\" class=\"filters\" id=\"filters\">\
         <label>state<select name=\"state\"><option value=\"\">any</option>",
        esc(&app.link("/jobs"))
    );
    let chosen = some(&q.state).unwrap_or_default();
    for s in STATES {
        let sel = if s == chosen { " selected" } else { "" };
        let _ = write!(b, "<option{sel}>{s}</option>");
    }
    let field = |name: &str, label: &str, v: &Option<String>| {
        format!(
            "<label>{label}<input name=\"{name}\" value=\"{}\"></label>",
            esc(&some(v).unwrap_or_default())
        )
    };
    b.push_str("</select></label>");
    b.push_str(&field("queue", "queue", &q.queue));
    b.push_str(&field("kind", "kind", &q.kind));
    b.push_str(&field("error", "last error contains", &q.error));
    b.push_str(&field("id", "job id", &None));
    b.push_str("<button type=\"submit\">Filter</button></form>");
    b
}

/// The page of jobs, each with a checkbox, inside the form of the actions on the selected ones.
fn jobs_table(app: &App, csrf: &CsrfToken, rows: &[JobRecord]) -> String {
    let mut b = format!(
        "<form method=\"post\" action=\"{}\" id=\"bulk\">{}",
        esc(&app.link("/jobs/bulk")),
        csrf_field(csrf)
    );
    if !app.cfg.read_only && !rows.is_empty() {
        b.push_str(
            "<div class=\"actions\">Selected: \
             <button name=\"action\" value=\"retry\">Retry</button> \
             <button name=\"action\" value=\"run-now\">Run now</button> \
             <button name=\"action\" value=\"cancel\">Cancel</button> \
             <button name=\"action\" value=\"delete\" class=\"danger\">Delete</button></div>",
        );
    }
    b.push_str(
        "<table id=\"jobs\"><thead><tr><th></th><th>id</th><th>queue</th><th>kind</th><th>state</th>\
         <th class=\"num\">attempts</th><th>run at</th><th>last error</th></tr></thead><tbody>",
    );
    if rows.is_empty() {
        b.push_str("<tr><td colspan=\"8\">no jobs match</td></tr>");
    }
    for j in rows {
        let _ = write!(
            b,
            "<tr><td><input type=\"checkbox\" name=\"id\" value=\"{id}\" aria-label=\"select job {id}\"></td>\
             <td><a href=\"{}\">{id}</a></td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}/{}</td><td>{}</td><td class=\"err\" title=\"{err}\">{err}</td></tr>",
            esc(&app.link(&format!("/jobs/{}", j.id))),
            esc(&j.queue),
            esc(&j.kind),
            badge(j.state.as_str()),
            j.attempts,
            j.max_attempts_text(),
            when(&j.run_at),
            id = j.id,
            err = esc(j.last_error.as_deref().unwrap_or("")),
        );
    }
    b.push_str("</tbody></table></form>");
    b
}

/// The actions on every job matching the filter (each asks for confirmation first).
fn matching_form(app: &App, csrf: &CsrfToken, q: &JobsQuery) -> String {
    let mut b = format!(
        "<form method=\"post\" action=\"{}\" id=\"bulk-filter\" class=\"actions\">{}\
         <input type=\"hidden\" name=\"scope\" value=\"filter\">",
        esc(&app.link("/jobs/bulk")),
        csrf_field(csrf)
    );
    for (k, v) in [
        ("state", &q.state),
        ("queue", &q.queue),
        ("kind", &q.kind),
        ("error", &q.error),
    ] {
        let _ = write!(
            b,
            "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
            esc(&some(v).unwrap_or_default())
        );
    }
    // A form without a filter would take every job: that has to be said with the box ticked (the
    // server refuses an empty filter without `all`).
    let every = [&q.state, &q.queue, &q.kind, &q.error]
        .iter()
        .all(|v| some(v).is_none());
    if every {
        b.push_str(
            "<label class=\"all\"><input type=\"checkbox\" name=\"all\" value=\"yes\" required> \
             no filter is set: I mean every job</label> ",
        );
    }
    let _ = write!(
        b,
        "Every job matching {}: \
         <button name=\"action\" value=\"retry\">Retry all</button> \
         <button name=\"action\" value=\"run-now\">Run all now</button> \
         <button name=\"action\" value=\"cancel\">Cancel all</button> \
         <button name=\"action\" value=\"delete\" class=\"danger\">Delete all</button></form>",
        esc(&q.describe())
    );
    b
}

/// Links to the newest page and to the next older one.
fn pager(app: &App, q: &JobsQuery, filter: &JobFilter, rows: &[JobRecord]) -> String {
    let mut b = String::from("<div class=\"pager\">");
    let base = q.to_query();
    if filter.before.is_some() {
        let _ = write!(
            b,
            "<a href=\"{}\">← newest</a>",
            esc(&app.link(&format!("/jobs?{base}")))
        );
    }
    if rows.len() as u32 == PAGE_SIZE
        && let Some(last) = rows.last()
    {
        let sep = if base.is_empty() { "" } else { "&" };
        let _ = write!(
            b,
            "<a href=\"{}\" id=\"older\">older →</a>",
            esc(&app.link(&format!("/jobs?{base}{sep}before={}", last.id)))
        );
    }
    b.push_str("</div>");
    b
}
