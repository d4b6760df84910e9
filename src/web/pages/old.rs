//! The pages: overview, jobs, a job, schedules, a schedule, processes, the audit trail.

use std::fmt::Write;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::App;
use super::guard::CsrfToken;
use super::html::{badge, button, csrf_field, error_page, esc, page, query_value, when, when_opt};
use crate::db::admin::{self, JobFilter};
use crate::error::Error;
use crate::job::{JobId, State as JobState};
use crate::schedule::ScheduleState;

/// Rows per page of the jobs list.
pub(super) const PAGE_SIZE: u32 = 50;

/// Every job state, in the order a job passes through them.
pub(super) const STATES: [&str; 6] = ["queued", "running", "retry", "done", "dead", "cancelled"];

/// A notice to show, passed along by the redirect after an action.
#[derive(Debug, Default, Deserialize)]
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
        Error::JobState { .. } | Error::ScheduleState { .. } => StatusCode::CONFLICT,
        Error::InvalidArgument(_) | Error::Spec { .. } => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub(super) async fn not_found(State(app): State<App>) -> Response {
    error_page(&app, StatusCode::NOT_FOUND, "no such page")
}

/// What the overview shows, gathered in one go (the statements run side by side). Every part is cheap
/// on a table with millions of finished rows: state counts stop at a cap, the queue lines read waiting
/// and running rows only, the chart counts the last hour's index entries (and, kept between views, only
/// the last two minutes after the first).
#[derive(Debug, serde::Serialize)]
pub(super) struct Overview {
    states: Vec<admin::StateCount>,
    queues: Vec<admin::QueueSummary>,
    last_hour: Vec<admin::MinuteCount>,
    unserved: Vec<UnservedGroup>,
    processes: Vec<admin::ProcessRow>,
}

/// Due jobs no live worker will claim, and why.
#[derive(Debug, serde::Serialize)]
struct UnservedGroup {
    #[serde(flatten)]
    group: admin::KindLag,
    reason: admin::Unserved,
}

pub(super) async fn gather(app: &App) -> crate::Result<Overview> {
    let (states, queues, last_hour, due_by_kind, processes) = tokio::try_join!(
        admin::state_counts(&app.pool),
        admin::queue_summaries(&app.pool),
        app.minutes.last_hour(&app.pool),
        admin::due_by_kind(&app.pool),
        admin::processes(&app.pool),
    )?;
    let unserved = admin::unserved(&due_by_kind, &processes)
        .into_iter()
        .map(|(k, reason)| UnservedGroup {
            group: k.clone(),
            reason,
        })
        .collect();
    Ok(Overview {
        states,
        queues,
        last_hour,
        unserved,
        processes,
    })
}

pub(super) async fn overview(State(app): State<App>, Query(n): Query<Notice>) -> Response {
    let o = match gather(&app).await {
        Ok(o) => o,
        Err(e) => return failure(&app, &e),
    };
    let due: i64 = o.queues.iter().map(|q| q.due).sum();
    let oldest = o
        .queues
        .iter()
        .filter_map(|q| q.oldest_due_secs)
        .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))));
    let running: i64 = o.queues.iter().map(|q| q.running).sum();
    let workers = o.processes.iter().filter(|p| p.role == "worker").count();
    let done_hour: i64 = o.last_hour.iter().map(|m| m.done).sum();
    let dead_hour: i64 = o.last_hour.iter().map(|m| m.dead).sum();
    let mut b = String::new();
    let _ = write!(
        b,
        "<div class=\"cards\">\
         <div class=\"card\"><b id=\"due\">{due}</b>due now</div>\
         <div class=\"card\"><b id=\"oldest-due\">{}</b>oldest due job waiting</div>\
         <div class=\"card\"><b>{running}</b>running</div>\
         <div class=\"card\"><b>{done_hour}</b>done in the last hour</div>\
         <div class=\"card\"><b>{dead_hour}</b>dead in the last hour</div>\
         <div class=\"card\"><b>{workers}</b>workers</div></div>",
        oldest.map_or("-".into(), crate::human_age),
    );
    b.push_str("<h2>Jobs by state</h2><div class=\"cards\" id=\"states\">");
    for c in &o.states {
        let _ = write!(
            b,
            "<a class=\"card\" href=\"{}\"><b>{}{}</b>{}</a>",
            esc(&app.link(&format!("/jobs?state={}", c.state.as_str()))),
            c.count,
            if c.capped { "+" } else { "" },
            c.state.as_str()
        );
    }
    b.push_str("</div><h2>Finished per minute, last hour</h2>");
    b.push_str(&super::html::chart(&o.last_hour));
    b.push_str(
        "<h2>Queues</h2><table id=\"queues\"><thead><tr><th>queue</th><th class=\"num\">waiting</th>\
         <th class=\"num\">due</th><th class=\"num\">oldest due</th><th class=\"num\">running</th>\
         </tr></thead><tbody>",
    );
    if o.queues.is_empty() {
        b.push_str("<tr><td colspan=\"5\">no waiting or running jobs</td></tr>");
    }
    for q in &o.queues {
        let _ = write!(
            b,
            "<tr><td><a href=\"{}\">{}</a></td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&app.link(&format!("/jobs?queue={}", query_value(&q.queue)))),
            esc(&q.queue),
            q.waiting,
            q.due,
            q.oldest_due_secs.map_or("-".into(), crate::human_age),
            q.running
        );
    }
    b.push_str("</tbody></table>");
    if !o.unserved.is_empty() {
        b.push_str(
            "<h2>Due jobs no live worker will claim</h2><ul class=\"warn\" id=\"unserved\">",
        );
        for u in &o.unserved {
            let _ = write!(
                b,
                "<li>{} jobs of kind {} in queue {}: {}</li>",
                u.group.due,
                esc(&format!("{:?}", u.group.kind)),
                esc(&u.group.queue),
                esc(&u.reason.to_string())
            );
        }
        b.push_str("</ul>");
    }
    page(&app, "Overview", n.notice.as_deref(), &b)
}

/// The jobs list's query string. Empty fields count as absent (an empty filter form submits them).
#[derive(Debug, Default, Deserialize)]
pub(super) struct JobsQuery {
    pub(super) state: Option<String>,
    pub(super) queue: Option<String>,
    pub(super) kind: Option<String>,
    /// Text in the last error.
    pub(super) error: Option<String>,
    /// Jump to this job.
    pub(super) id: Option<String>,
    pub(super) before: Option<String>,
    pub(super) notice: Option<String>,
}

fn some(s: &Option<String>) -> Option<String> {
    s.as_ref()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

impl JobsQuery {
    /// The filter it asks for, or what is wrong with it.
    pub(super) fn filter(&self, limit: u32) -> Result<JobFilter, Error> {
        let state = some(&self.state)
            .map(|s| s.parse::<JobState>())
            .transpose()?;
        let before = some(&self.before)
            .map(|b| {
                b.parse::<u64>()
                    .map(JobId::from)
                    .map_err(|_| Error::InvalidArgument(format!("before={b:?} is not a job id")))
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
    pub(super) fn describe(&self) -> String {
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
    pub(super) fn to_query(&self) -> String {
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

pub(super) async fn jobs(
    State(app): State<App>,
    Extension(csrf): Extension<CsrfToken>,
    Query(q): Query<JobsQuery>,
) -> Response {
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
    let mut b = String::new();
    let _ = write!(
        b,
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

    let _ = write!(
        b,
        "<form method=\"post\" action=\"{}\" id=\"bulk\">{}",
        esc(&app.link("/jobs/bulk")),
        csrf_field(&csrf)
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
    for j in &rows {
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
            j.max_attempts,
            when(&j.run_at),
            id = j.id,
            err = esc(j.last_error.as_deref().unwrap_or("")),
        );
    }
    b.push_str("</tbody></table></form>");
    if !app.cfg.read_only && !rows.is_empty() {
        let _ = write!(
            b,
            "<form method=\"post\" action=\"{}\" id=\"bulk-filter\" class=\"actions\">{}\
             <input type=\"hidden\" name=\"scope\" value=\"filter\">",
            esc(&app.link("/jobs/bulk")),
            csrf_field(&csrf)
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
        let _ = write!(
            b,
            "Every job matching {}: \
             <button name=\"action\" value=\"retry\">Retry all</button> \
             <button name=\"action\" value=\"cancel\">Cancel all</button> \
             <button name=\"action\" value=\"delete\" class=\"danger\">Delete all</button></form>",
            esc(&q.describe())
        );
    }
    b.push_str("<div class=\"pager\">");
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
    page(&app, "Jobs", q.notice.as_deref(), &b)
}

pub(super) async fn job(
    State(app): State<App>,
    Extension(csrf): Extension<CsrfToken>,
    Path(id): Path<u64>,
    Query(n): Query<Notice>,
) -> Response {
    let (j, attempts) = match tokio::try_join!(app.jobs.get(id), app.jobs.attempts(id)) {
        Ok(x) => x,
        Err(e) => return failure(&app, &e),
    };
    let mut b = String::new();
    let link = |action: &str| app.link(&format!("/jobs/{id}/{action}"));
    b.push_str("<div class=\"actions\">");
    use JobState::{Cancelled, Dead, Done, Queued, Retry, Running};
    if matches!(j.state, Done | Dead | Cancelled | Retry) {
        b.push_str(&button(&app, &csrf, &link("retry"), "Retry"));
    }
    if matches!(j.state, Queued | Retry) {
        b.push_str(&button(&app, &csrf, &link("run-now"), "Run now"));
    }
    if matches!(j.state, Queued | Retry | Running) {
        b.push_str(&button(&app, &csrf, &link("cancel"), "Cancel"));
    }
    if j.state != Running {
        b.push_str(&button(&app, &csrf, &link("delete"), "Delete"));
    }
    let state = j.state.as_str();
    b.push_str("</div><dl class=\"fields\">");
    let mut field = |k: &str, v: String| {
        let _ = write!(b, "<dt>{k}</dt><dd>{v}</dd>");
    };
    field("state", badge(state));
    field("queue", esc(&j.queue));
    field("kind", esc(&j.kind));
    field("priority", j.priority.to_string());
    field("attempts", format!("{} of {}", j.attempts, j.max_attempts));
    field(
        "timeout",
        j.timeout_secs.map_or("-".into(), |t| format!("{t} s")),
    );
    field("created", when(&j.created_at));
    field("run at", when(&j.run_at));
    field("claimed", when_opt(&j.claimed_at));
    field("started", when_opt(&j.started_at));
    field("finished", when_opt(&j.finished_at));
    let claimant = match &j.claim {
        None => "-".to_string(),
        Some(token) => {
            let registered = admin::processes(&app.pool)
                .await
                .ok()
                .and_then(|ps| ps.into_iter().find(|p| p.token == *token));
            match registered {
                Some(p) => format!(
                    "{} <small>(pid {} on {}, jobq {}, last heartbeat {})</small>",
                    esc(token),
                    p.pid,
                    esc(&p.host),
                    esc(&p.version),
                    when(&p.heartbeat_at)
                ),
                None => format!(
                    "{} <small class=\"warn\">(not registered: gone, or about to be reaped)</small>",
                    esc(token)
                ),
            }
        }
    };
    field("claimant", claimant);
    b.push_str("</dl><h2>Payload</h2>");
    let pretty = serde_json::from_str::<serde_json::Value>(&j.payload)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| j.payload.clone());
    let _ = write!(b, "<pre id=\"payload\">{}</pre>", esc(&pretty));
    if let Some(err) = &j.last_error {
        let _ = write!(
            b,
            "<h2>Last error</h2><pre id=\"last-error\">{}</pre>",
            esc(err)
        );
    }
    b.push_str(&attempts_table(&j, &attempts));
    page(&app, &format!("Job {id}"), n.notice.as_deref(), &b)
}

/// Every attempt: the recorded ones that did not end done, then the one the row holds now (running, or
/// done).
fn attempts_table(j: &crate::JobRecord, attempts: &[crate::AttemptRecord]) -> String {
    let mut b = String::from(
        "<h2>Attempts</h2><table id=\"attempts\"><thead><tr><th class=\"num\">#</th><th>outcome</th>\
         <th>started</th><th>ended</th><th>claimant</th><th>error</th></tr></thead><tbody>",
    );
    for a in attempts {
        let _ = write!(
            b,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td><small>{}</small></td>\
             <td class=\"err\" title=\"{err}\">{err}</td></tr>",
            a.attempt,
            badge(&a.outcome),
            when_opt(&a.started_at),
            when(&a.ended_at),
            esc(a.claim.as_deref().unwrap_or("-")),
            err = esc(a.error.as_deref().unwrap_or("")),
        );
    }
    let current = match j.state {
        JobState::Running => Some(("running", "-".to_string())),
        JobState::Done => Some(("done", when_opt(&j.finished_at))),
        _ => None,
    };
    let none = attempts.is_empty() && current.is_none();
    if let Some((outcome, ended)) = current {
        let _ = write!(
            b,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{ended}</td><td><small>{}</small></td>\
             <td></td></tr>",
            j.attempts,
            badge(outcome),
            when_opt(&j.started_at),
            esc(j.claim.as_deref().unwrap_or("-")),
        );
    }
    if none {
        b.push_str("<tr><td colspan=\"6\">no attempt recorded</td></tr>");
    }
    b.push_str("</tbody></table>");
    b
}

pub(super) async fn schedules(
    State(app): State<App>,
    Extension(csrf): Extension<CsrfToken>,
    Query(n): Query<Notice>,
) -> Response {
    let list = match app.schedules.list().await {
        Ok(l) => l,
        Err(e) => return failure(&app, &e),
    };
    let mut b = String::from(
        "<table id=\"schedules\"><thead><tr><th>name</th><th>kind</th><th>spec</th><th>zone</th>\
         <th>state</th><th>next run</th><th>last run</th><th class=\"num\">runs</th>\
         <th class=\"num\">failures</th><th></th></tr></thead><tbody>",
    );
    if list.is_empty() {
        b.push_str("<tr><td colspan=\"10\">no schedules</td></tr>");
    }
    for s in &list {
        let name = &s.def.name;
        let _ = write!(
            b,
            "<tr data-schedule=\"{}\"><td><a href=\"{}\">{}</a></td><td>{}</td><td><code>{}</code></td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{} <small>({} in a row)</small></td><td>",
            esc(name),
            esc(&app.link(&format!("/schedules/{}", query_value(name)))),
            esc(name),
            esc(&s.def.kind),
            esc(&s.def.spec),
            esc(&s.def.time_zone),
            badge(s.state.as_str()),
            when_opt(&s.next_run_at),
            when_opt(&s.last_run_at),
            s.total_runs,
            s.total_failures,
            s.consecutive_failures,
        );
        b.push_str(&schedule_buttons(&app, &csrf, name, s.state));
        b.push_str("</td></tr>");
    }
    b.push_str("</tbody></table>");
    page(&app, "Schedules", n.notice.as_deref(), &b)
}

fn schedule_buttons(app: &App, csrf: &CsrfToken, name: &str, state: ScheduleState) -> String {
    let link = |action: &str| app.link(&format!("/schedules/{}/{action}", query_value(name)));
    let mut b = String::new();
    match state {
        ScheduleState::Enabled => b.push_str(&button(app, csrf, &link("pause"), "Pause")),
        ScheduleState::Paused | ScheduleState::Broken => {
            b.push_str(&button(app, csrf, &link("resume"), "Resume"));
        }
        ScheduleState::Finished => {}
    }
    // Run now works in every state (see `Schedules::run_now`).
    b.push_str(&button(app, csrf, &link("run-now"), "Run now"));
    b
}

pub(super) async fn schedule(
    State(app): State<App>,
    Extension(csrf): Extension<CsrfToken>,
    Path(name): Path<String>,
    Query(n): Query<Notice>,
) -> Response {
    let s = match app.schedules.get(&name).await {
        Ok(s) => s,
        Err(e) => return failure(&app, &e),
    };
    let (next, runs) = tokio::join!(app.schedules.next(&name, 5), app.schedules.runs(&name, 50));
    let mut b = format!(
        "<div class=\"actions\">{}</div><dl class=\"fields\">",
        schedule_buttons(&app, &csrf, &name, s.state)
    );
    let mut field = |k: &str, v: String| {
        let _ = write!(b, "<dt>{k}</dt><dd>{v}</dd>");
    };
    field("state", badge(s.state.as_str()));
    field("kind", esc(&s.def.kind));
    field("spec", format!("<code>{}</code>", esc(&s.def.spec)));
    field("time zone", esc(&s.def.time_zone));
    field("queue", esc(&s.def.queue));
    field("overlap", esc(s.def.overlap.as_str()));
    field("on error", esc(s.def.on_error.as_str()));
    field("misfire", esc(s.def.misfire.as_str()));
    field("next run", when_opt(&s.next_run_at));
    field("last run", when_opt(&s.last_run_at));
    field(
        "runs",
        format!(
            "{} made, {} failed ({} in a row), {} skipped",
            s.total_runs, s.total_failures, s.consecutive_failures, s.skipped_runs
        ),
    );
    if let Some(e) = &s.last_error {
        field(
            "last error",
            format!("<span class=\"warn\">{}</span>", esc(e)),
        );
    }
    b.push_str("</dl><h2>Next runs</h2><ul id=\"next\">");
    match next {
        Ok(times) if times.is_empty() => b.push_str("<li>none planned</li>"),
        Ok(times) => {
            for t in times {
                let _ = write!(b, "<li>{}</li>", when(&t));
            }
        }
        Err(e) => {
            let _ = write!(b, "<li class=\"warn\">{}</li>", esc(&e.to_string()));
        }
    }
    b.push_str(
        "</ul><h2>Runs</h2><table id=\"runs\"><thead><tr><th>planned</th><th>cause</th><th>job</th>\
         <th>state</th><th>started</th><th>finished</th><th>error</th></tr></thead><tbody>",
    );
    match runs {
        Ok(runs) => {
            if runs.is_empty() {
                b.push_str("<tr><td colspan=\"7\">no runs yet</td></tr>");
            }
            for r in runs {
                let job = r.job_id.map_or("-".into(), |id| {
                    format!(
                        "<a href=\"{}\">{id}</a>",
                        esc(&app.link(&format!("/jobs/{id}")))
                    )
                });
                let _ = write!(
                    b,
                    "<tr><td>{}</td><td>{}</td><td>{job}</td><td>{}</td><td>{}</td><td>{}</td>\
                     <td class=\"err\">{}</td></tr>",
                    when(&r.planned_at),
                    esc(r.cause.as_str()),
                    r.job_state.map_or("-".into(), |s| badge(s.as_str())),
                    when_opt(&r.started_at),
                    when_opt(&r.finished_at),
                    esc(r.error.as_deref().unwrap_or("")),
                );
            }
        }
        Err(e) => {
            let _ = write!(
                b,
                "<tr><td colspan=\"7\" class=\"warn\">{}</td></tr>",
                esc(&e.to_string())
            );
        }
    }
    b.push_str("</tbody></table>");
    page(&app, &format!("Schedule {name}"), n.notice.as_deref(), &b)
}

pub(super) async fn processes(State(app): State<App>) -> Response {
    let (procs, running) = match tokio::try_join!(
        admin::processes(&app.pool),
        crate::db::reap::running_claims(&app.pool)
    ) {
        Ok(x) => x,
        Err(e) => return failure(&app, &e),
    };
    let mut b = String::from(
        "<table id=\"processes\"><thead><tr><th>role</th><th>host</th><th class=\"num\">pid</th>\
         <th class=\"num\">connection</th><th>version</th><th>queues</th><th>started</th>\
         <th>heartbeat</th><th class=\"num\">running jobs</th><th>token</th></tr></thead><tbody>",
    );
    if procs.is_empty() {
        b.push_str("<tr><td colspan=\"10\">no processes registered</td></tr>");
    }
    for p in &procs {
        let jobs = running
            .iter()
            .find(|(t, _, _)| *t == p.token)
            .map_or(0, |(_, n, _)| *n);
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{jobs}</td><td><small>{}</small></td></tr>",
            esc(&p.role),
            esc(&p.host),
            p.pid,
            p.connection_id,
            esc(&p.version),
            esc(&p.queues),
            when(&p.started_at),
            when(&p.heartbeat_at),
            esc(&p.token),
        );
    }
    b.push_str("</tbody></table>");
    page(&app, "Processes", None, &b)
}

pub(super) async fn audit(State(app): State<App>) -> Response {
    let entries = match crate::db::audit::recent(&app.pool, 200).await {
        Ok(e) => e,
        Err(e) => return failure(&app, &e),
    };
    let mut b = String::from(
        "<table id=\"audit\"><thead><tr><th>when</th><th>who</th><th>action</th><th>target</th>\
         <th class=\"num\">rows</th></tr></thead><tbody>",
    );
    if entries.is_empty() {
        b.push_str("<tr><td colspan=\"5\">nothing changed through the dashboard yet</td></tr>");
    }
    for e in &entries {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            when(&e.at),
            esc(&e.actor),
            esc(&e.action),
            esc(&e.target),
            e.affected
        );
    }
    b.push_str("</tbody></table>");
    page(&app, "Audit trail", None, &b)
}
