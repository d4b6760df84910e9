//! `/processes` and `/audit`: the process registry with each process's running jobs, and the changes
//! made through the dashboard.

use std::fmt::Write;

use axum::extract::State;
use axum::response::Response;

use super::failure;
use crate::web::App;
use crate::web::html::{esc, page, when};

pub(in crate::web) async fn processes(State(app): State<App>) -> Response {
    let (procs, running) =
        match tokio::try_join!(app.jobs.processes(), app.jobs.running_by_claimant()) {
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

pub(in crate::web) async fn audit(State(app): State<App>) -> Response {
    let entries = match app.jobs.audit(200).await {
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
