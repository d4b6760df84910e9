//! The JSON API under `/api`: what the pages show, as the records `--json` prints, and the same actions.
//! Errors are `{"error": "..."}` with the status the page would have.

use axum::Extension;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::App;
use super::actions::{self, ScheduleAction};
use super::guard::Actor;
use super::pages::{JobsQuery, PAGE_SIZE, status_of};
use crate::admin::jobs::JobAction;
use crate::error::Error;
use crate::job::JobId;

/// Most jobs one `GET /api/jobs` returns.
const MAX_LIMIT: u32 = 500;

fn fail(e: &Error) -> Response {
    let status = status_of(e);
    if status.is_server_error() {
        tracing::error!(error = %e, "dashboard API request failed");
    }
    (status, Json(json!({ "error": e.to_string() }))).into_response()
}

fn ok<T: serde::Serialize>(r: crate::Result<T>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => fail(&e),
    }
}

pub(super) async fn overview(State(app): State<App>) -> Response {
    ok(super::pages::gather(&app).await)
}

/// The jobs list's filters, plus `limit` (default 50, at most 500). Unknown keys are refused (a 400
/// naming the key), so a misspelt filter never quietly widens the list.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApiJobsQuery {
    state: Option<String>,
    queue: Option<String>,
    kind: Option<String>,
    error: Option<String>,
    before: Option<String>,
    limit: Option<u32>,
}

pub(super) async fn jobs(
    State(app): State<App>,
    q: Result<Query<ApiJobsQuery>, QueryRejection>,
) -> Response {
    ok(async {
        let Query(q) = q.map_err(|e| Error::invalid("query", e.body_text()))?;
        let limit = q.limit.unwrap_or(PAGE_SIZE).clamp(1, MAX_LIMIT);
        let query = JobsQuery {
            state: q.state,
            queue: q.queue,
            kind: q.kind,
            error: q.error,
            before: q.before,
            ..JobsQuery::default()
        };
        let jobs = app.jobs.list(&query.filter(limit)?).await?;
        let next_before = (jobs.len() as u32 == limit)
            .then(|| jobs.last().map(|j| j.id))
            .flatten();
        Ok(json!({ "jobs": jobs, "next_before": next_before }))
    }
    .await)
}

/// A job's fields (its `progress` among them), its recorded attempts beside them in
/// `attempt_history`, the jobs it waits for and that wait for it in `waits_for` and `dependents`, and
/// the `output` it left (as `jobq jobs show --json`).
pub(super) async fn job(State(app): State<App>, Path(id): Path<u64>) -> Response {
    ok(async {
        let (job, attempts, deps, output) = tokio::try_join!(
            app.jobs.get(id),
            app.jobs.attempts(id),
            app.jobs.dependencies(id),
            app.jobs.output(id)
        )?;
        let mut v = serde_json::to_value(&job).map_err(Error::Payload)?;
        // `attempts` is the count; the records sit beside it.
        v["attempt_history"] = serde_json::to_value(&attempts).map_err(Error::Payload)?;
        v["waits_for"] = serde_json::to_value(&deps.waits_for).map_err(Error::Payload)?;
        v["dependents"] = serde_json::to_value(&deps.dependents).map_err(Error::Payload)?;
        // The output as the JSON it is; text that is not JSON (a row written by hand) as a string.
        v["output"] = match output {
            Some(o) => serde_json::from_str(&o).unwrap_or(serde_json::Value::String(o)),
            None => serde_json::Value::Null,
        };
        Ok(v)
    }
    .await)
}

pub(super) async fn job_action(
    State(app): State<App>,
    Extension(actor): Extension<Actor>,
    Path((id, action)): Path<(u64, String)>,
) -> Response {
    ok(async {
        let action = action.parse::<JobAction>()?;
        let id = JobId::from(id);
        let message = app.jobs.clone().by(&actor.name).apply(action, id).await?;
        Ok(json!({ "ok": true, "message": message }))
    }
    .await)
}

/// `POST /api/jobs/bulk`: `{"action": "retry", "ids": [1, 2]}` for the given jobs (at most 1,000), or
/// `{"action": "cancel", "filter": {"state": "queued", "queue": "mail"}}` for every job matching the
/// filter when the request arrives, or `{"action": "delete", "all": true}` for every job. `limit`
/// (default and at most 10,000) bounds how many jobs the request may take: when more match, nothing
/// is done and the answer says so. Unknown keys, at any level, are refused with a 400 naming them: a
/// misspelt filter key must never widen the selection to every job. Each job is changed on its own,
/// as by its own action; jobs whose state does not allow it are counted as refused. No confirmation
/// step: the caller has decided.
pub(super) async fn bulk(
    State(app): State<App>,
    Extension(actor): Extension<Actor>,
    body: axum::body::Bytes,
) -> Response {
    ok(async {
        let req: BulkRequest = serde_json::from_slice(&body)
            .map_err(|e| Error::invalid("bulk request", e.to_string()))?;
        let action = req.action.parse::<JobAction>()?;
        let jobs = app.jobs.clone().by(&actor.name);
        let outcome = match (req.ids, req.filter, req.all) {
            (Some(ids), None, false) => {
                let most = req
                    .limit
                    .map_or(actions::MAX_BULK, |l| (l as usize).min(actions::MAX_BULK));
                if ids.len() > most {
                    return Err(Error::invalid(
                        "bulk request",
                        format!("{} jobs given; at most {most} at once", ids.len()),
                    ));
                }
                let ids: Vec<JobId> = ids.into_iter().map(JobId::from).collect();
                jobs.apply_each(action, &ids, |_, _| {}).await
            }
            (None, filter, all) => {
                let limit = match req.limit {
                    Some(l) if l > actions::MAX_FILTER_BULK => {
                        return Err(Error::invalid(
                            "bulk request",
                            format!(
                                "limit {l} is more than the {} jobs one request may take",
                                actions::MAX_FILTER_BULK
                            ),
                        ));
                    }
                    Some(l) => l,
                    None => actions::MAX_FILTER_BULK,
                };
                let filter = filter.unwrap_or_default().into_query().filter(limit)?;
                jobs.apply_matching(action, &filter, all, |_, _| {}).await?
            }
            _ => {
                return Err(Error::invalid(
                    "bulk request",
                    "give \"ids\", or a \"filter\", or \"all\": true; not more than one",
                ));
            }
        };
        Ok(json!({
            "ok": outcome.stopped.is_none(),
            "action": action.as_str(),
            "matched": outcome.matched,
            "changed": outcome.done,
            "refused": outcome.refused.len(),
            "first_refusal": outcome.refused.first(),
            "stopped": outcome.stopped.map(|e| e.to_string()),
        }))
    }
    .await)
}

/// The body of `POST /api/jobs/bulk`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkRequest {
    action: String,
    ids: Option<Vec<u64>>,
    filter: Option<BulkFilter>,
    /// Every job: what an empty filter would mean, said on purpose.
    #[serde(default)]
    all: bool,
    limit: Option<u32>,
}

/// The `filter` of a bulk request: the jobs list's criteria, and nothing else (paging and notices have
/// no place in a selection).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkFilter {
    state: Option<String>,
    queue: Option<String>,
    kind: Option<String>,
    error: Option<String>,
}

impl BulkFilter {
    fn into_query(self) -> JobsQuery {
        JobsQuery {
            state: self.state,
            queue: self.queue,
            kind: self.kind,
            error: self.error,
            ..JobsQuery::default()
        }
    }
}

pub(super) async fn schedules(State(app): State<App>) -> Response {
    ok(app.schedules.list().await)
}

pub(super) async fn schedule(State(app): State<App>, Path(name): Path<String>) -> Response {
    ok(async {
        let schedule = app.schedules.get(&name).await?;
        let (next, runs) =
            tokio::try_join!(app.schedules.next(&name, 5), app.schedules.runs(&name, 50))?;
        Ok(json!({ "schedule": schedule, "next": next, "runs": runs }))
    }
    .await)
}

pub(super) async fn schedule_action(
    State(app): State<App>,
    Extension(actor): Extension<Actor>,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    ok(async {
        let action = ScheduleAction::parse(&action)?;
        let message = actions::apply_schedule(&app, &actor, action, &name).await?;
        Ok(json!({ "ok": true, "message": message }))
    }
    .await)
}

/// `POST /api/queues/{name}/{pause|resume}`.
pub(super) async fn queue_action(
    State(app): State<App>,
    Extension(actor): Extension<Actor>,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    ok(async {
        let message = actions::apply_queue(&app, &actor, &action, &name).await?;
        Ok(json!({ "ok": true, "message": message }))
    }
    .await)
}

pub(super) async fn processes(State(app): State<App>) -> Response {
    ok(async {
        let (procs, running) =
            tokio::try_join!(app.jobs.processes(), app.jobs.running_by_claimant())?;
        let rows: Vec<_> = procs
            .into_iter()
            .map(|p| {
                let jobs = running
                    .iter()
                    .find(|(t, _, _)| *t == p.token)
                    .map_or(0, |(_, n, _)| *n);
                json!({ "process": p, "running_jobs": jobs })
            })
            .collect();
        Ok(rows)
    }
    .await)
}

pub(super) async fn audit(State(app): State<App>) -> Response {
    ok(app.jobs.audit(200).await)
}
