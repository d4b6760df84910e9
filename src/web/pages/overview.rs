//! `/`: what needs attention now, the jobs by state, the last hour, and each queue's jobs by state.

use std::collections::BTreeMap;
use std::fmt::Write;

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::Response;

use super::{Notice, failure};
use crate::db::admin;
use crate::db::gauges::{self, QueueStateCount};
use crate::job::State as JobState;
use crate::web::App;
use crate::web::guard::CsrfToken;
use crate::web::html::{button, chart, esc, page, query_value};

/// What the overview shows, gathered in one go (the statements run side by side). Every part is cheap
/// on a table with millions of finished rows: state counts stop at a cap, the queue lines read waiting
/// and running rows only, the per-queue states count each state's rows up to a cap, the chart counts
/// the last hour's index entries (and, kept between views, only the last two minutes after the first).
#[derive(Debug, serde::Serialize)]
pub(in crate::web) struct Overview {
    states: Vec<admin::StateCount>,
    queues: Vec<admin::QueueSummary>,
    /// Jobs per queue and state; a state marked `capped` had more rows than were counted.
    queue_states: Vec<QueueStateCount>,
    last_hour: Vec<admin::MinuteCount>,
    unserved: Vec<UnservedGroup>,
    processes: Vec<admin::ProcessRow>,
    /// Paused queues: no worker claims from them.
    paused: Vec<crate::db::queues::PausedQueue>,
    /// Due jobs a pause, a pin or a full or zero limit holds back, and what holds them.
    held: Vec<admin::HeldGroup>,
    /// Jobs that have waited for other jobs longer than the dashboard's threshold.
    long_waiting: crate::db::deps::LongWaiting,
    /// Queues whose waiting jobs gain priority as they wait.
    aging: Vec<crate::db::aging::QueueAging>,
}

/// Due jobs no live worker will claim, and why.
#[derive(Debug, serde::Serialize)]
struct UnservedGroup {
    #[serde(flatten)]
    group: admin::KindLag,
    reason: admin::Unserved,
}

pub(in crate::web) async fn gather(app: &App) -> crate::Result<Overview> {
    let (states, queues, queue_states, last_hour, due_by_kind, processes, paused, long_waiting) = tokio::try_join!(
        admin::state_counts(&app.pool),
        admin::queue_summaries(&app.pool),
        gauges::queue_state_counts(&app.pool),
        app.jobs.last_hour(),
        admin::due_by_kind(&app.pool),
        app.jobs.processes(),
        app.queues.paused(),
        app.jobs.long_waiting(crate::Jobs::DEFAULT_LONG_WAIT),
    )?;
    let (pins, limits, running, aging) = tokio::try_join!(
        app.queues.pins(),
        app.limits.list(),
        admin::running_counts(&app.pool),
        app.queues.aging(),
    )?;
    let held = admin::held(&admin::HoldFacts {
        due: &due_by_kind,
        paused: &paused,
        pins: &pins,
        processes: &processes,
        limits: &limits,
        running: &running,
    });
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
        queue_states,
        last_hour,
        unserved,
        processes,
        paused,
        held,
        long_waiting,
        aging,
    })
}

pub(in crate::web) async fn overview(
    State(app): State<App>,
    Extension(csrf): Extension<CsrfToken>,
    Query(n): Query<Notice>,
) -> Response {
    let o = match gather(&app).await {
        Ok(o) => o,
        Err(e) => return failure(&app, &e),
    };
    let mut b = headline(&app, &o);
    b.push_str(&state_cards(&app, &o.states));
    b.push_str("<h2>Finished per minute, last hour</h2>");
    b.push_str(&chart(&o.last_hour));
    b.push_str(&queues_table(&app, &csrf, &o));
    b.push_str(&unserved_list(&o.unserved));
    b.push_str(&held_list(&o.held));
    page(&app, "Overview", n.notice.as_deref(), &b)
}

/// The cards of what needs attention: due now, the oldest due job's wait, running, the last hour's
/// done and dead, the workers, the jobs that have waited long for other jobs.
fn headline(app: &App, o: &Overview) -> String {
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
    let long = &o.long_waiting;
    let long_card = format!(
        "<a class=\"card{}\" id=\"waiting-long\" href=\"{}\"><b>{}</b>waiting for other jobs over {}</a>",
        if long.count > 0 { " warn" } else { "" },
        esc(&app.link("/jobs?state=waiting")),
        long.count,
        crate::duration::human_age(long.over_secs)
    );
    format!(
        "<div class=\"cards\">\
         <div class=\"card\"><b id=\"due\">{due}</b>due now</div>\
         <div class=\"card\"><b id=\"oldest-due\">{}</b>oldest due job waiting</div>\
         <div class=\"card\"><b>{running}</b>running</div>\
         <div class=\"card\"><b>{done_hour}</b>done in the last hour</div>\
         <div class=\"card\"><b>{dead_hour}</b>dead in the last hour</div>\
         <div class=\"card\"><b>{workers}</b>workers</div>{long_card}</div>",
        oldest.map_or("-".into(), crate::duration::human_age),
    )
}

/// One card per state, linking to the jobs in it.
fn state_cards(app: &App, states: &[admin::StateCount]) -> String {
    let mut b = String::from("<h2>Jobs by state</h2><div class=\"cards\" id=\"states\">");
    for c in states {
        let _ = write!(
            b,
            "<a class=\"card\" href=\"{}\"><b>{}{}</b>{}</a>",
            esc(&app.link(&format!("/jobs?state={}", c.state.as_str()))),
            c.count,
            if c.capped { "+" } else { "" },
            c.state.as_str()
        );
    }
    b.push_str("</div>");
    b
}

/// The states of the per-queue table, in the order a job passes through them.
const QUEUE_COLUMNS: [JobState; 7] = [
    JobState::Waiting,
    JobState::Queued,
    JobState::Running,
    JobState::Retry,
    JobState::Done,
    JobState::Dead,
    JobState::Cancelled,
];

/// One line per queue with waiting, running or counted jobs (and every paused queue): due, the oldest
/// due job's wait, then its jobs in each state, each linking to them, and a pause or resume button.
fn queues_table(app: &App, csrf: &CsrfToken, o: &Overview) -> String {
    let mut b = String::from(
        "<h2>Queues</h2><table id=\"queues\"><thead><tr><th>queue</th><th class=\"num\">due</th>\
         <th class=\"num\">oldest due</th>",
    );
    for s in QUEUE_COLUMNS {
        let capped = o.queue_states.iter().any(|c| c.state == s && c.capped);
        let _ = write!(
            b,
            "<th class=\"num\"{}>{}{}</th>",
            if capped {
                " title=\"more than 10,000 jobs in this state: each queue's count is among the most \
                 recent 10,000, so at least this many (N+)\""
            } else {
                ""
            },
            s.as_str(),
            if capped { "*" } else { "" }
        );
    }
    b.push_str("<th>claims</th></tr></thead><tbody>");
    let lines = queue_lines(o);
    if lines.is_empty() {
        b.push_str("<tr><td colspan=\"11\">no jobs</td></tr>");
    }
    for (queue, (summary, counts)) in &lines {
        let _ = write!(
            b,
            "<tr data-queue=\"{}\"><td><a href=\"{}\">{}</a>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td>",
            esc(queue),
            esc(&app.link(&format!("/jobs?queue={}", query_value(queue)))),
            esc(queue),
            aging_note(queue, o),
            summary.map_or(0, |s| s.due),
            summary
                .and_then(|s| s.oldest_due_secs)
                .map_or("-".into(), crate::duration::human_age),
        );
        for (state, n) in QUEUE_COLUMNS.iter().zip(counts) {
            let href = format!(
                "/jobs?queue={}&state={}",
                query_value(queue),
                state.as_str()
            );
            // A capped state's count is a lower bound: shown as `N+`, never as if it were exact.
            let capped = o.queue_states.iter().any(|c| c.state == *state && c.capped);
            let _ = write!(
                b,
                "<td class=\"num\" data-state=\"{}\"><a href=\"{}\">{n}{}</a></td>",
                state.as_str(),
                esc(&app.link(&href)),
                if capped { "+" } else { "" }
            );
        }
        b.push_str(&pause_cell(app, csrf, queue, o));
        b.push_str("</tr>");
    }
    b.push_str("</tbody></table>");
    b
}

/// A queue's priority aging, if it has one: `ages 1 per 5m`, the floor in its title.
fn aging_note(queue: &str, o: &Overview) -> String {
    let Some(g) = o.aging.iter().find(|g| g.queue == queue) else {
        return String::new();
    };
    format!(
        " <small class=\"aging\" title=\"waiting jobs gain 1 priority per {every} waited, up to {floor}\">\
         ages 1 per {every}</small>",
        every = humantime::format_duration(g.every),
        floor = g.floor.map_or_else(
            || "the most urgent waiting priority".to_string(),
            |f| f.to_string()
        ),
    )
}

/// Whether the queue's jobs are claimed, and the button that changes it.
fn pause_cell(app: &App, csrf: &CsrfToken, queue: &str, o: &Overview) -> String {
    let link = |action: &str| app.link(&format!("/queues/{}/{action}", query_value(queue)));
    match o.paused.iter().find(|p| p.name == queue) {
        Some(p) => format!(
            "<td data-paused=\"yes\"><span class=\"bad\" title=\"{}\">paused</span> {}</td>",
            esc(&format!(
                "by {}{}",
                p.paused_by,
                p.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            )),
            button(app, csrf, &link("resume"), "Resume")
        ),
        None => format!(
            "<td data-paused=\"no\">claimed {}</td>",
            button(app, csrf, &link("pause"), "Pause")
        ),
    }
}

/// Every queue of either reading, by name: its due-and-running line, if it has one, and its counts in
/// [`QUEUE_COLUMNS`] order.
fn queue_lines(o: &Overview) -> BTreeMap<&str, (Option<&admin::QueueSummary>, [i64; 7])> {
    let mut lines: BTreeMap<&str, (Option<&admin::QueueSummary>, [i64; 7])> = BTreeMap::new();
    for q in &o.queues {
        lines.entry(&q.queue).or_default().0 = Some(q);
    }
    for c in &o.queue_states {
        if let Some(i) = QUEUE_COLUMNS.iter().position(|s| *s == c.state) {
            lines.entry(&c.queue).or_default().1[i] = c.count;
        }
    }
    for p in &o.paused {
        lines.entry(&p.name).or_default();
    }
    lines
}

/// Due jobs something holds back, if any: `49 due jobs of kind "email.send" in queue mail: held by
/// limit kind email.send 0/0`.
fn held_list(held: &[admin::HeldGroup]) -> String {
    if held.is_empty() {
        return String::new();
    }
    let mut b = String::from("<h2>Due jobs held back</h2><ul class=\"warn\" id=\"held\">");
    for g in held {
        let why: Vec<String> = g.holds.iter().map(ToString::to_string).collect();
        let _ = write!(
            b,
            "<li data-queue=\"{}\">{} due jobs of kind {} in queue {}: held by {}</li>",
            esc(&g.queue),
            g.due,
            esc(&format!("{:?}", g.kind)),
            esc(&g.queue),
            esc(&why.join("; "))
        );
    }
    b.push_str("</ul>");
    b
}

/// Due jobs no live worker will claim, if any.
fn unserved_list(unserved: &[UnservedGroup]) -> String {
    if unserved.is_empty() {
        return String::new();
    }
    let mut b = String::from(
        "<h2>Due jobs no live worker will claim</h2><ul class=\"warn\" id=\"unserved\">",
    );
    for u in unserved {
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
    b
}
