//! `/jobs/{id}`: one job's actions, fields, claimant, payload, last error and attempts.

use std::fmt::Write;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::Response;

use super::{Notice, failure};
use crate::claimant::token::ClaimToken;
use crate::job::{JobRecord, State as JobState};
use crate::web::App;
use crate::web::guard::CsrfToken;
use crate::web::html::{badge, button, esc, page, when, when_opt};
use crate::{JobId, db::attempts::AttemptRecord};

/// How often a running job's page reloads itself, in seconds: progress is written at most once a
/// second, and a reload costs four primary key reads.
const REFRESH_RUNNING: &str = "5";

pub(in crate::web) async fn job(
    State(app): State<App>,
    Extension(csrf): Extension<CsrfToken>,
    Path(id): Path<u64>,
    Query(n): Query<Notice>,
) -> Response {
    let (j, attempts, deps, output) = match tokio::try_join!(
        app.jobs.get(id),
        app.jobs.attempts(id),
        app.jobs.dependencies(id),
        app.jobs.output(id)
    ) {
        Ok(x) => x,
        Err(e) => return failure(&app, &e),
    };
    let mut b = action_buttons(&app, &csrf, JobId::from(id), j.state);
    b.push_str(&fields(&j, &claimant(&app, j.claim.as_deref()).await));
    b.push_str(&dependencies(&app, &deps));
    if let Some(p) = &j.progress {
        let of = if p.attempt == j.attempts {
            String::new()
        } else {
            format!(" (reported by attempt {})", p.attempt)
        };
        let _ = write!(
            b,
            "<h2>Progress</h2><p id=\"progress\"><progress max=\"100\" value=\"{}\"></progress> \
             {}%{} {}{}</p>",
            p.percent,
            p.percent,
            p.message
                .as_deref()
                .map_or(String::new(), |m| format!(": {}", esc(m))),
            esc(&when(&p.at)),
            esc(&of)
        );
    }
    let pretty = serde_json::from_str::<serde_json::Value>(&j.payload)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| j.payload.clone());
    let _ = write!(
        b,
        "<h2>Payload</h2><pre id=\"payload\">{}</pre>",
        esc(&pretty)
    );
    if let Some(err) = &j.last_error {
        let _ = write!(
            b,
            "<h2>Last error</h2><pre id=\"last-error\">{}</pre>",
            esc(err)
        );
    }
    if let Some(o) = &output {
        let pretty = serde_json::from_str::<serde_json::Value>(o)
            .and_then(|v| serde_json::to_string_pretty(&v))
            .unwrap_or_else(|_| o.clone());
        let _ = write!(
            b,
            "<h2>Output</h2><pre id=\"output\">{}</pre>",
            esc(&pretty)
        );
    }
    b.push_str(&attempts_table(&j, &attempts));
    let mut response = page(&app, &format!("Job {id}"), n.notice.as_deref(), &b);
    if j.state == JobState::Running {
        // The page runs no script: a running job's page reloads itself, so its progress moves.
        response.headers_mut().insert(
            axum::http::header::REFRESH,
            axum::http::HeaderValue::from_static(REFRESH_RUNNING),
        );
    }
    response
}

/// The actions the job's state allows. Cancel and delete ask for confirmation on a page of their own.
fn action_buttons(app: &App, csrf: &CsrfToken, id: JobId, state: JobState) -> String {
    use JobState::{Cancelled, Dead, Done, Queued, Retry, Running, Waiting};
    let link = |action: &str| app.link(&format!("/jobs/{id}/{action}"));
    let mut b = String::from("<div class=\"actions\">");
    if matches!(state, Done | Dead | Cancelled | Retry) {
        b.push_str(&button(app, csrf, &link("retry"), "Retry"));
    }
    if state == Waiting {
        b.push_str(&button(
            app,
            csrf,
            &link("retry"),
            "Run now without waiting",
        ));
    }
    if matches!(state, Queued | Retry) {
        b.push_str(&button(app, csrf, &link("run-now"), "Run now"));
    }
    if matches!(state, Queued | Retry | Running | Waiting) {
        b.push_str(&button(app, csrf, &link("cancel"), "Cancel"));
    }
    if state != Running {
        b.push_str(&button(app, csrf, &link("delete"), "Delete"));
    }
    b.push_str("</div>");
    b
}

/// The job's fields, `claimant` already rendered.
fn fields(j: &JobRecord, claimant: &str) -> String {
    let mut b = String::from("<dl class=\"fields\">");
    let mut field = |k: &str, v: String| {
        let _ = write!(b, "<dt>{k}</dt><dd>{v}</dd>");
    };
    field("state", badge(j.state.as_str()));
    field("queue", esc(&j.queue));
    field("kind", esc(&j.kind));
    field(
        "priority",
        match j.base_priority {
            Some(base) => format!(
                "{} <span class=\"aged\">(aged from {base})</span>",
                j.priority
            ),
            None => j.priority.to_string(),
        },
    );
    field(
        "attempts",
        format!("{} of {}", j.attempts, j.max_attempts_text()),
    );
    field(
        "timeout",
        j.timeout_secs.map_or("-".into(), |t| format!("{t} s")),
    );
    field("created", when(&j.created_at));
    field("run at", when(&j.run_at));
    field("claimed", when_opt(&j.claimed_at));
    field("started", when_opt(&j.started_at));
    field("finished", when_opt(&j.finished_at));
    field("claimant", claimant.to_string());
    if let Some(k) = &j.unique_key {
        field("unique key", format!("<code>{}</code>", esc(k)));
    }
    if let Some(k) = j.key_summary() {
        field("key", esc(&k));
    }
    if let Some(text) = j.debounce_summary() {
        field("debounce", esc(&text));
    }
    if let Some(tp) = &j.traceparent {
        field("traceparent", format!("<code>{}</code>", esc(tp)));
    }
    b.push_str("</dl>");
    b
}

/// The jobs this one waits for and the jobs waiting for it, each linked with its state; nothing when
/// there are none.
fn dependencies(app: &App, deps: &crate::db::deps::Dependencies) -> String {
    let list = |id: &str, title: &str, links: &[crate::db::deps::Link]| {
        if links.is_empty() {
            return String::new();
        }
        let mut b = format!("<h2>{title}</h2><ul id=\"{id}\">");
        for l in links {
            let state = l.state.map_or_else(
                || "<span class=\"bad\">does not exist</span>".to_string(),
                |s| badge(s.as_str()),
            );
            let until = if l.until == "ended" {
                " <small>(until it has ended, in any way)</small>"
            } else {
                ""
            };
            let _ = write!(
                b,
                "<li data-job=\"{0}\"><a href=\"{1}\">job {0}</a> {state}{until}</li>",
                l.id,
                esc(&app.link(&format!("/jobs/{}", l.id)))
            );
        }
        b.push_str("</ul>");
        b
    };
    let mut b = list("waits-for", "Waits for", &deps.waits_for);
    b.push_str(&list("dependents", "Waited for by", &deps.dependents));
    b
}

/// The claim token with what the registry says of its process: pid, host, version, last heartbeat;
/// or that it is not registered (gone, or about to be reaped).
async fn claimant(app: &App, claim: Option<&str>) -> String {
    let Some(token) = claim else {
        return "-".into();
    };
    let registered = app
        .jobs
        .processes()
        .await
        .ok()
        .and_then(|ps| ps.into_iter().find(|p| p.token == token));
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

/// Who ran an attempt, as its claim token says: `host pid N`, the whole token in the title. A token
/// that does not parse (written by another program) is shown as it is.
fn claimed_by(claim: Option<&str>) -> String {
    let Some(token) = claim else {
        return "-".into();
    };
    match token.parse::<ClaimToken>() {
        Ok(t) => format!(
            "<span class=\"claimant\" title=\"{}\">{} pid {}</span>",
            esc(token),
            esc(&t.host),
            t.pid
        ),
        Err(_) => format!("<small>{}</small>", esc(token)),
    }
}

/// Every attempt: the recorded ones that did not end done, then the one the row holds now (running, or
/// done).
fn attempts_table(j: &JobRecord, attempts: &[AttemptRecord]) -> String {
    let mut b = String::from(
        "<h2>Attempts</h2><table id=\"attempts\"><thead><tr><th class=\"num\">#</th><th>outcome</th>\
         <th>started</th><th>ended</th><th>claimant</th><th>error</th></tr></thead><tbody>",
    );
    for a in attempts {
        let _ = write!(
            b,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"err\" title=\"{err}\">{err}</td></tr>",
            a.attempt,
            badge(&a.outcome),
            when_opt(&a.started_at),
            when(&a.ended_at),
            claimed_by(a.claim.as_deref()),
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
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{ended}</td><td>{}</td>\
             <td></td></tr>",
            j.attempts,
            badge(outcome),
            when_opt(&j.started_at),
            claimed_by(j.claim.as_deref()),
        );
    }
    if none {
        b.push_str("<tr><td colspan=\"6\">no attempt recorded</td></tr>");
    }
    b.push_str("</tbody></table>");
    b
}

#[cfg(test)]
mod tests {
    use super::claimed_by;

    #[test]
    fn an_attempt_names_its_claimants_host_and_pid() {
        let shown = claimed_by(Some("web-3:4121:88:1-1763852400:9f0c2e1a5b7d3c44"));
        assert!(shown.contains(">web-3 pid 4121<"), "{shown}");
        assert!(shown.contains("title=\"web-3:4121:88:1-1763852400:9f0c2e1a5b7d3c44\""));
        assert_eq!(claimed_by(None), "-");
        assert!(claimed_by(Some("not<a token")).contains("not&lt;a token"));
    }
}
