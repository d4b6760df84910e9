//! Changes: the actions on jobs, queues and schedules, shared by the pages' forms and the JSON API.
//! Each goes through the operator facade named for the signed-in actor, which writes its audit entry.

use std::fmt::Write;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};

use super::App;
use super::guard::{Actor, CSRF_FIELD, CsrfToken, form_field};
use super::html::{capitalised, csrf_field, esc, hidden_field, page, query_value};
use super::pages::{JobsQuery, failure};
use crate::admin::BulkOutcome;
use crate::admin::audit::Auditor;
use crate::admin::jobs::JobAction;
use crate::error::{Error, Result};
use crate::job::JobId;

/// Most jobs one bulk action on a selection takes.
pub(super) const MAX_BULK: usize = 1000;

/// Most jobs one bulk action on a filter takes: each is changed on its own (the same statement, checks
/// and outcome as a single action), about a millisecond apiece.
pub(super) const MAX_FILTER_BULK: u32 = 10_000;

/// What can be done to a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ScheduleAction {
    Pause,
    Resume,
    RunNow,
}

impl ScheduleAction {
    pub(super) fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "pause" => Self::Pause,
            "resume" => Self::Resume,
            "run-now" => Self::RunNow,
            other => {
                return Err(Error::invalid(
                    "schedule action",
                    format!("{other:?} is not one of pause, resume, run-now"),
                ));
            }
        })
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::RunNow => "run-now",
        }
    }
}

/// Does `action` to schedule `name`; returns what happened, in words.
pub(super) async fn apply_schedule(
    app: &App,
    actor: &Actor,
    action: ScheduleAction,
    name: &str,
) -> Result<String> {
    let said = match action {
        ScheduleAction::Pause => {
            app.schedules.pause(name).await?;
            format!("schedule {name} paused")
        }
        ScheduleAction::Resume => {
            app.schedules.resume(name).await?;
            format!("schedule {name} resumed")
        }
        ScheduleAction::RunNow => {
            let id = app.schedules.run_now(name).await?;
            format!("schedule {name} ran now: job {id}")
        }
    };
    // The schedule's own log names the dashboard; the audit trail names who used it.
    Auditor::new(&actor.name)
        .record(&app.pool, &format!("schedule.{}", action.as_str()), name, 1)
        .await;
    Ok(said)
}

/// Pauses or resumes queue `name` (`action` is `pause` or `resume`); returns what happened, in words.
pub(super) async fn apply_queue(
    app: &App,
    actor: &Actor,
    action: &str,
    name: &str,
) -> Result<String> {
    let queues = app.queues.clone().by(&actor.name);
    Ok(match action {
        "pause" => {
            let p = queues.pause(name, &actor.name, None).await?;
            match p.newly {
                true => {
                    format!("queue {name} paused: no worker claims from it until it is resumed")
                }
                false => format!("queue {name} was paused already"),
            }
        }
        "resume" => match queues.resume(name).await? {
            true => format!("queue {name} resumed"),
            false => format!("queue {name} was not paused"),
        },
        other => {
            return Err(Error::invalid(
                "queue action",
                format!("{other:?} is not one of pause, resume"),
            ));
        }
    })
}

/// `POST /queues/{name}/{pause|resume}` from the overview.
pub(super) async fn queue_form(
    State(app): State<App>,
    Extension(actor): Extension<Actor>,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    match apply_queue(&app, &actor, &action, &name).await {
        Ok(msg) => back(&app, "/", &msg),
        Err(e) => failure(&app, &e),
    }
}

/// `POST /jobs/{id}/{action}` from a page. A cancel or a delete asks for confirmation first, on a page
/// of its own (the pages run no script, so there is no dialog to ask in).
pub(super) async fn job_form(
    State(app): State<App>,
    Extension(actor): Extension<Actor>,
    Extension(csrf): Extension<CsrfToken>,
    Path((id, action)): Path<(u64, String)>,
    body: Bytes,
) -> Response {
    let action = match action.parse::<JobAction>() {
        Ok(a) => a,
        Err(e) => return failure(&app, &e),
    };
    let id = JobId::from(id);
    let confirmed = form_field(&body, "confirm").as_deref() == Some("yes");
    if let Some(detail) = confirmation(action, id).filter(|_| !confirmed) {
        return confirm(
            &app,
            &csrf,
            &format!("{} job {id}?", capitalised(action.as_str())),
            &detail,
            &app.link(&format!("/jobs/{id}/{}", action.as_str())),
            "",
            &app.link(&format!("/jobs/{id}")),
        );
    }
    match app.jobs.clone().by(&actor.name).apply(action, id).await {
        Ok(msg) => {
            let to = if action == JobAction::Delete {
                "/jobs".to_string()
            } else {
                format!("/jobs/{id}")
            };
            back(&app, &to, &msg)
        }
        Err(e) => failure(&app, &e),
    }
}

/// What a confirmation of `action` on job `id` says will happen; `None` for the actions done at once.
fn confirmation(action: JobAction, id: JobId) -> Option<String> {
    match action {
        JobAction::Cancel => Some(format!(
            "Job {id} will not run again. If it is running now, its worker is told to stop it, and it \
             ends cancelled once the handler stops."
        )),
        JobAction::Delete => Some(format!("Job {id} and its row are removed for good.")),
        _ => None,
    }
}

/// `POST /jobs/bulk`: an `action` on the selected jobs (`id` fields), or with `scope=filter` on every
/// job matching the filter fields (`state`, `queue`, `kind`, `error`), after a confirmation. The
/// filter is read again when confirmed: it acts on what matches then.
pub(super) async fn bulk_form(
    State(app): State<App>,
    Extension(actor): Extension<Actor>,
    Extension(csrf): Extension<CsrfToken>,
    body: Bytes,
) -> Response {
    if let Err(e) = known_fields(&body, BULK_FIELDS) {
        return failure(&app, &e);
    }
    let action = match form_field(&body, "action")
        .as_deref()
        .map(str::parse::<JobAction>)
    {
        Some(Ok(a)) => a,
        Some(Err(e)) => return failure(&app, &e),
        None => return failure(&app, &Error::invalid("action", "none chosen")),
    };
    let confirmed = form_field(&body, "confirm").as_deref() == Some("yes");
    if form_field(&body, "scope").as_deref() == Some("filter") {
        return bulk_filter(&app, &actor, &csrf, action, &body, confirmed).await;
    }
    let ids: Vec<JobId> = url::form_urlencoded::parse(&body)
        .filter(|(k, _)| k == "id")
        .filter_map(|(_, v)| v.parse::<u64>().ok().map(JobId::from))
        .collect();
    if ids.is_empty() {
        return back(&app, "/jobs", "no jobs selected");
    }
    if ids.len() > MAX_BULK {
        return failure(
            &app,
            &Error::invalid(
                "selection",
                format!("{} jobs selected; at most {MAX_BULK} at once", ids.len()),
            ),
        );
    }
    if !confirmed {
        let hidden: String = ids
            .iter()
            .map(|id| format!("<input type=\"hidden\" name=\"id\" value=\"{id}\">"))
            .chain(std::iter::once(hidden_field("action", action.as_str())))
            .collect();
        let listed: Vec<String> = ids.iter().take(20).map(ToString::to_string).collect();
        let more = if ids.len() > 20 { ", …" } else { "" };
        return confirm(
            &app,
            &csrf,
            &format!("{} {} jobs?", capitalised(action.as_str()), ids.len()),
            &format!("Jobs {}{more}.", listed.join(", ")),
            &app.link("/jobs/bulk"),
            &hidden,
            &app.link("/jobs"),
        );
    }
    let outcome = app
        .jobs
        .clone()
        .by(&actor.name)
        .apply_each(action, &ids, |_, _| {})
        .await;
    back(&app, "/jobs", &summary(action, &outcome))
}

/// The fields a bulk form may carry. Any other is refused: a misspelt filter field must never widen
/// the selection.
const BULK_FIELDS: &[&str] = &[
    CSRF_FIELD, "action", "scope", "confirm", "id", "state", "queue", "kind", "error", "all",
];

/// An error naming the first field of a url-encoded `body` that is not in `known`.
fn known_fields(body: &Bytes, known: &[&str]) -> Result<()> {
    match url::form_urlencoded::parse(body).find(|(k, _)| !known.contains(&k.as_ref())) {
        Some((k, _)) => Err(Error::invalid(
            "form",
            format!(
                "unknown field {k:?}; expected one of {}",
                known[1..].join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// The bulk action on every job matching the form's filter fields, or on every job when the form
/// says `all=yes` (an empty filter without it is refused).
async fn bulk_filter(
    app: &App,
    actor: &Actor,
    csrf: &CsrfToken,
    action: JobAction,
    body: &Bytes,
    confirmed: bool,
) -> Response {
    let query = JobsQuery {
        state: form_field(body, "state"),
        queue: form_field(body, "queue"),
        kind: form_field(body, "kind"),
        error: form_field(body, "error"),
        ..JobsQuery::default()
    };
    let all = form_field(body, "all").as_deref() == Some("yes");
    if confirmed {
        // The filter is read again now: the action takes what matches when it is confirmed.
        let outcome = match query.filter(MAX_FILTER_BULK) {
            Ok(filter) => {
                app.jobs
                    .clone()
                    .by(&actor.name)
                    .apply_matching(action, &filter, all, |_, _| {})
                    .await
            }
            Err(e) => Err(e),
        };
        let to = format!("/jobs?{}", query.to_query());
        return match outcome {
            Ok(o) if o.matched == 0 => back(app, &to, "no jobs match the filter"),
            Ok(o) => back(app, &to, &summary(action, &o)),
            Err(e) => failure(app, &e),
        };
    }
    let ids = match matching(app, &query, all).await {
        Ok(ids) => ids,
        Err(e) => return failure(app, &e),
    };
    let described = if all {
        "every job".to_string()
    } else {
        query.describe()
    };
    if ids.is_empty() {
        return back(
            app,
            &format!("/jobs?{}", query.to_query()),
            "no jobs match the filter",
        );
    }
    confirm_filter(app, csrf, action, &query, all, ids.len(), &described)
}

/// The page that asks before a bulk action over a filter: how many jobs match, and the filter again
/// as hidden fields for the confirmation.
fn confirm_filter(
    app: &App,
    csrf: &CsrfToken,
    action: JobAction,
    query: &JobsQuery,
    all: bool,
    n: usize,
    described: &str,
) -> Response {
    let hidden: String = [
        ("scope", "filter".to_string()),
        ("action", action.as_str().to_string()),
        ("state", query.state.clone().unwrap_or_default()),
        ("queue", query.queue.clone().unwrap_or_default()),
        ("kind", query.kind.clone().unwrap_or_default()),
        ("error", query.error.clone().unwrap_or_default()),
        ("all", if all { "yes" } else { "" }.to_string()),
    ]
    .iter()
    .map(|(k, v)| hidden_field(k, v))
    .collect();
    confirm(
        app,
        csrf,
        &if all {
            format!("{} every job, {} in all?", capitalised(action.as_str()), n)
        } else {
            format!(
                "{} all {} jobs matching {described}?",
                capitalised(action.as_str()),
                n
            )
        },
        "Every job matching the filter when you confirm is changed, one by one; jobs whose state \
         does not allow it are left as they are.",
        &app.link("/jobs/bulk"),
        &hidden,
        &app.link("/jobs"),
    )
}

/// The ids a bulk action over `query` takes (at most [`MAX_FILTER_BULK`]): see
/// [`Jobs::bulk_ids`](crate::Jobs::bulk_ids) for the rules.
///
/// # Errors
/// A filter that does not parse, an empty filter without `all`, a failed read, or more matching jobs
/// than that.
pub(super) async fn matching(app: &App, query: &JobsQuery, all: bool) -> Result<Vec<JobId>> {
    app.jobs
        .bulk_ids(&query.filter(MAX_FILTER_BULK)?, all)
        .await
}

/// `retry: 2 of 3 jobs; 1 refused, first: …`.
fn summary(action: JobAction, o: &BulkOutcome) -> String {
    let mut msg = format!("{}: {} of {} jobs", action.as_str(), o.done, o.matched);
    if let Some(first) = o.refused.first() {
        let _ = write!(msg, "; {} refused, first: {first}", o.refused.len());
    }
    if let Some(e) = &o.stopped {
        let _ = write!(msg, "; stopped by a database error: {e}");
    }
    msg
}

/// `POST /schedules/{name}/{action}` from a page.
pub(super) async fn schedule_form(
    State(app): State<App>,
    Extension(actor): Extension<Actor>,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    let action = match ScheduleAction::parse(&action) {
        Ok(a) => a,
        Err(e) => return failure(&app, &e),
    };
    match apply_schedule(&app, &actor, action, &name).await {
        Ok(msg) => back(&app, &format!("/schedules/{}", query_value(&name)), &msg),
        Err(e) => failure(&app, &e),
    }
}

/// A 303 to `path` (under the prefix) showing `notice`, signed so that the page shows it.
fn back(app: &App, path: &str, notice: &str) -> Response {
    let sep = if path.contains('?') { '&' } else { '?' };
    let sealed = app.notices.seal(notice);
    Redirect::to(&app.link(&format!("{path}{sep}notice={}", query_value(&sealed)))).into_response()
}

/// A page asking to confirm: posts `hidden` fields and `confirm=yes` to `action`; "no" goes to `back`.
fn confirm(
    app: &App,
    csrf: &CsrfToken,
    question: &str,
    detail: &str,
    action: &str,
    hidden: &str,
    back: &str,
) -> Response {
    page(
        app,
        question,
        None,
        &format!(
            "<p>{}</p><form method=\"post\" action=\"{}\" id=\"confirm\">{}{hidden}\
             <input type=\"hidden\" name=\"confirm\" value=\"yes\">\
             <button type=\"submit\" class=\"danger\">Yes, go ahead</button> \
             <a href=\"{}\">No, go back</a></form>",
            esc(detail),
            esc(action),
            csrf_field(csrf),
            esc(back)
        ),
    )
}
