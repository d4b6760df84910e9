//! `/schedules` and `/schedules/{name}`: every schedule with its actions; one schedule's fields, next
//! runs and past runs.

use std::fmt::Write;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use chrono::{DateTime, Utc};

use super::{Notice, failure};
use crate::schedule::{RunRecord, ScheduleRecord, ScheduleState};
use crate::web::App;
use crate::web::guard::CsrfToken;
use crate::web::html::{badge, button, esc, page, query_value, when, when_opt};

pub(in crate::web) async fn schedules(
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

pub(in crate::web) async fn schedule(
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
        "<div class=\"actions\">{}</div>",
        schedule_buttons(&app, &csrf, &name, s.state)
    );
    b.push_str(&schedule_fields(&s));
    b.push_str(&next_runs(next));
    b.push_str(&runs_table(&app, runs));
    page(&app, &format!("Schedule {name}"), n.notice.as_deref(), &b)
}

/// The schedule's definition and counters.
fn schedule_fields(s: &ScheduleRecord) -> String {
    let mut b = String::from("<dl class=\"fields\">");
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
    b.push_str("</dl>");
    b
}

/// The next planned times, or why they cannot be computed.
fn next_runs(next: crate::Result<Vec<DateTime<Utc>>>) -> String {
    let mut b = String::from("<h2>Next runs</h2><ul id=\"next\">");
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
    b.push_str("</ul>");
    b
}

/// The schedule's recent runs with their jobs' states, or why they cannot be read.
fn runs_table(app: &App, runs: crate::Result<Vec<RunRecord>>) -> String {
    let mut b = String::from(
        "<h2>Runs</h2><table id=\"runs\"><thead><tr><th>planned</th><th>cause</th><th>job</th>\
         <th>state</th><th>started</th><th>finished</th><th>error</th></tr></thead><tbody>",
    );
    let runs = match runs {
        Ok(runs) => runs,
        Err(e) => {
            let _ = write!(
                b,
                "<tr><td colspan=\"7\" class=\"warn\">{}</td></tr></tbody></table>",
                esc(&e.to_string())
            );
            return b;
        }
    };
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
    b.push_str("</tbody></table>");
    b
}
