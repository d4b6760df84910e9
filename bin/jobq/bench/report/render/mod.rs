//! The report as the text `jobq bench` prints: one function per section, in files by what the sections
//! measure (the raw limit and the lean schema in `raw.rs`, the drain in `drain.rs`, latencies in
//! `latency.rs`, the costs of a big table, memory, enqueue and the dashboard in `cost.rs`, clusters and
//! backlogs in `scale.rs`, other languages' handlers in `languages.rs`); the header, the order of the
//! sections and the verdict here.

mod cost;
mod drain;
mod languages;
mod latency;
mod raw;
mod scale;

use cost::{big_section, enqueue_section, footprint_section, web_section};
use drain::drain_section;
use languages::languages_section;
use latency::{idle_section, steady_section};
use raw::raw_section;
use scale::{backlog_section, cluster_section};

use std::fmt::Write as _;

use super::{BenchReport, Check};
use crate::bench::cpu::CpuUse;

fn load_text(l: Option<[f64; 3]>) -> String {
    l.map_or("?".into(), |l| {
        format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
    })
}

fn cpu_text(c: &CpuUse) -> String {
    match c.server_us_per_job {
        Some(s) => format!(
            "{:>6.0} {:>6.0} {:>5.2}",
            c.client_us_per_job, s, c.other_cores
        ),
        None => format!(
            "{:>6.0} {:>6} {:>5.2}",
            c.client_us_per_job, "-", c.other_cores
        ),
    }
}

/// Renders the report as the text `jobq bench` prints.
pub fn render_text(r: &BenchReport) -> String {
    let mut o = String::new();
    let load_mark = if r.load.under_load {
        "  ** UNDER LOAD **"
    } else {
        ""
    };
    let _ = writeln!(
        o,
        "jobq bench {} ({}), {} on {} ({} cores{}), {}{}",
        env!("CARGO_PKG_VERSION"),
        if r.quick { "quick" } else { "full" },
        r.started_at.format("%Y-%m-%d %H:%M UTC"),
        r.host,
        r.cores,
        r.cpu_model
            .as_deref()
            .map_or(String::new(), |m| format!(", {m}")),
        format_args!("{:.0} s", r.elapsed_secs),
        load_mark
    );
    let _ = writeln!(
        o,
        "load average at start {}, at end {} (end includes the bench itself){}",
        load_text(r.load.start),
        load_text(r.load.end),
        r.load.other_cores.map_or(String::new(), |c| format!(
            "; other processes used {c:.2} cores during the drains"
        ))
    );
    let _ = writeln!(o, "server {}", r.server.version);
    let settings: Vec<String> = r
        .server
        .settings
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(o, "  {}", settings.join(", "));
    let _ = writeln!(
        o,
        "CPU columns: client = this process µs/job, server = database server µs/job, other = cores used by other processes"
    );

    if let Some(raw) = &r.raw {
        raw_section(&mut o, raw);
    }
    if let Some(d) = &r.drain {
        drain_section(&mut o, d);
    }
    for s in &r.steady {
        steady_section(&mut o, s);
    }
    if let Some(b) = &r.big {
        big_section(&mut o, b);
    }
    if let Some(i) = &r.idle {
        idle_section(&mut o, i);
    }
    if let Some(f) = &r.footprint {
        footprint_section(&mut o, f);
    }
    if let Some(e) = &r.enqueue {
        enqueue_section(&mut o, e);
    }
    if let Some(w) = &r.web {
        web_section(&mut o, w);
    }
    if let Some(c) = &r.cluster {
        cluster_section(&mut o, c);
    }
    if let Some(b) = &r.backlog {
        backlog_section(&mut o, b);
    }
    if let Some(l) = &r.languages {
        languages_section(&mut o, l);
    }
    verdict(&mut o, r);
    o
}

/// The targets and the correctness checks.
fn verdict(o: &mut String, r: &BenchReport) {
    let _ = writeln!(
        o,
        "\nTARGETS{}",
        if r.load.under_load {
            " (measured under load)"
        } else {
            ""
        }
    );
    for t in &r.targets {
        let _ = writeln!(
            o,
            "   {:<4} {:<50} {:<10} {}",
            if t.pass { "PASS" } else { "MISS" },
            t.name,
            t.goal,
            t.measured
        );
    }
    let failed: Vec<&Check> = r.checks.iter().filter(|c| !c.ok).collect();
    let _ = writeln!(
        o,
        "\nCORRECTNESS: {} of {} checks passed (every job claimed and finished exactly once){}",
        r.checks.len() - failed.len(),
        r.checks.len(),
        if failed.is_empty() { "" } else { "; FAILED:" }
    );
    for c in failed {
        let _ = writeln!(o, "   {}: {}: {}", c.section.name(), c.what, c.detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{BenchConfig, IdleReport, Section, ServerInfo};

    #[test]
    fn a_report_renders_its_targets_and_failed_checks() {
        let cfg = BenchConfig::smoke("mysql://root@127.0.0.1:3306/test");
        let server = ServerInfo {
            version: "11.8.3-MariaDB".into(),
            settings: Default::default(),
        };
        let mut r = BenchReport::new(&cfg, "jobq_bench_test", server, None);
        r.idle = Some(IdleReport {
            window_secs: 1.0,
            counted_at_wire: true,
            statements_per_sec: Some(0.5),
            round_trips_per_sec: Some(0.5),
            commands: None,
            server_questions_per_sec: None,
            server_queries_per_sec: None,
            baseline_questions_per_sec: None,
            baseline_queries_per_sec: None,
            start_ms: vec![80.0],
            start_mean_ms: 80.0,
            start_max_ms: 80.0,
        });
        r.checks.push(Check {
            section: Section::Idle,
            what: "each job ran once".into(),
            ok: false,
            detail: "job 7 ran twice".into(),
        });
        r.finish();
        let text = render_text(&r);
        assert!(text.contains("TARGETS"), "{text}");
        assert!(text.contains("idle worker statements/s"), "{text}");
        assert!(text.contains("CORRECTNESS"), "{text}");
        assert!(
            text.contains("idle: each job ran once: job 7 ran twice"),
            "{text}"
        );
    }
}
