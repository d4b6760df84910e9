//! HTML building blocks: escaping, the page frame, forms for actions, and the last hour's chart.

use std::fmt::Write;

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Utc};

use super::App;
use super::guard::{CSRF_FIELD, CsrfToken};
use crate::db::admin::MinuteCount;

/// `s` safe inside HTML text and double-quoted attributes.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` as one query-string value.
pub(super) fn query_value(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A hidden form field, escaped.
pub(super) fn hidden_field(name: &str, value: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
        esc(name),
        esc(value)
    )
}

/// `s` with its first letter in upper case (`retry` → `Retry`), for a sentence's start.
pub(super) fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// A time as `2026-11-24 07:31:02 UTC`, with its age beside it.
pub(super) fn when(t: &DateTime<Utc>) -> String {
    let secs = (Utc::now() - *t).num_milliseconds() as f64 / 1e3;
    let rel = if secs >= 0.0 {
        format!("{} ago", crate::duration::human_age(secs))
    } else {
        format!("in {}", crate::duration::human_age(-secs))
    };
    format!(
        "<time datetime=\"{}\" title=\"{}\">{}</time> <small>{}</small>",
        t.to_rfc3339(),
        t.format("%Y-%m-%d %H:%M:%S%.3f UTC"),
        t.format("%Y-%m-%d %H:%M:%S"),
        esc(&rel)
    )
}

/// An optional time, or a dash.
pub(super) fn when_opt(t: &Option<DateTime<Utc>>) -> String {
    t.as_ref().map_or_else(|| "-".into(), when)
}

/// A state as a coloured badge (the colour comes from the stylesheet, by class).
pub(super) fn badge(state: &str) -> String {
    format!("<span class=\"badge s-{0}\">{0}</span>", esc(state))
}

/// A POST form of one button, carrying the CSRF token; `None` in read-only mode.
pub(super) fn button(app: &App, csrf: &CsrfToken, action: &str, label: &str) -> String {
    if app.cfg.read_only {
        return String::new();
    }
    format!(
        "<form method=\"post\" action=\"{}\" class=\"inline\">\
         <input type=\"hidden\" name=\"{CSRF_FIELD}\" value=\"{}\">\
         <button type=\"submit\" data-action=\"{}\">{}</button></form>",
        esc(action),
        esc(&csrf.0),
        esc(label.to_lowercase().as_str()),
        esc(label)
    )
}

/// The hidden CSRF field, for forms built by hand.
pub(super) fn csrf_field(csrf: &CsrfToken) -> String {
    format!(
        "<input type=\"hidden\" name=\"{CSRF_FIELD}\" value=\"{}\">",
        esc(&csrf.0)
    )
}

/// The page frame: navigation, title, the notice of a `?notice=` parameter (shown only if this server
/// signed it: see [`super::notice`]), the body.
pub(super) fn page(app: &App, title: &str, sealed_notice: Option<&str>, body: &str) -> Response {
    let mut out = String::with_capacity(body.len() + 1024);
    let nav = [
        ("/", "Overview"),
        ("/jobs", "Jobs"),
        ("/schedules", "Schedules"),
        ("/processes", "Processes"),
        ("/audit", "Audit"),
    ];
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · jobq</title><link rel=\"stylesheet\" href=\"{}\"></head><body>\
         <header><nav><a class=\"brand\" href=\"{}\">jobq</a>",
        esc(title),
        esc(&app.link("/assets/app.css")),
        esc(&app.link("/"))
    );
    for (path, name) in nav {
        let _ = write!(out, "<a href=\"{}\">{name}</a>", esc(&app.link(path)));
    }
    if app.cfg.read_only {
        out.push_str("<span class=\"ro\">read-only</span>");
    }
    let _ = write!(out, "</nav></header><main><h1>{}</h1>", esc(title));
    if let Some(n) = sealed_notice
        .and_then(|s| app.notices.open(s))
        .filter(|n| !n.is_empty())
    {
        let _ = write!(out, "<p class=\"notice\" role=\"status\">{}</p>", esc(n));
    }
    out.push_str(body);
    out.push_str("</main></body></html>");
    Html(out).into_response()
}

/// An error page with its status.
pub(super) fn error_page(app: &App, status: StatusCode, message: &str) -> Response {
    let mut resp = page(
        app,
        status.canonical_reason().unwrap_or("Error"),
        None,
        &format!("<p class=\"error\">{}</p>", esc(message)),
    );
    *resp.status_mut() = status;
    resp
}

/// Done and dead jobs per minute over the last hour, as stacked SVG bars (no script: the CSP forbids it).
pub(super) fn chart(minutes: &[MinuteCount]) -> String {
    const W: usize = 600;
    const H: usize = 120;
    let max = minutes
        .iter()
        .map(|m| m.done + m.dead)
        .max()
        .unwrap_or(0)
        .max(1);
    let bar = W / minutes.len().max(1);
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {W} {}\" width=\"{W}\" height=\"{}\" role=\"img\" \
         aria-label=\"jobs finished per minute over the last hour\">",
        H + 16,
        H + 16
    );
    for (i, m) in minutes.iter().enumerate() {
        let x = i * bar;
        let h_done = (m.done as f64 / max as f64 * H as f64).round() as usize;
        let h_dead = (m.dead as f64 / max as f64 * H as f64).round() as usize;
        let _ = write!(
            svg,
            "<g><title>{} min ago: {} done, {} dead</title>\
             <rect class=\"done\" x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{h_done}\"/>\
             <rect class=\"dead\" x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{h_dead}\"/></g>",
            m.minutes_ago,
            m.done,
            m.dead,
            H - h_done,
            bar.saturating_sub(1),
            H - h_done - h_dead,
            bar.saturating_sub(1),
        );
    }
    let _ = write!(
        svg,
        "<text x=\"0\" y=\"{}\">60 min ago</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">now \
         (peak {max}/min)</text></svg>",
        H + 14,
        W,
        H + 14
    );
    svg
}

/// The embedded stylesheet.
pub(super) async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        include_str!("app.css"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn the_chart_scales_to_the_busiest_minute() {
        let minutes: Vec<MinuteCount> = (0..60u8)
            .rev()
            .map(|m| MinuteCount {
                minutes_ago: m,
                done: i64::from(m == 0) * 10,
                dead: i64::from(m == 0) * 10,
            })
            .collect();
        let svg = chart(&minutes);
        assert!(svg.contains("peak 20/min"), "{svg}");
        assert!(svg.contains("height=\"60\""), "{svg}");
    }
}
