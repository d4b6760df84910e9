//! The report as the text `jobq bench` prints: one function per section.

mod drain;

use drain::drain_section;

use std::fmt::Write as _;

use super::{
    BenchReport, BigReport, Check, ClusterReport, EnqueueReport, FootprintReport, IdleReport,
    Layout, OTHER_CORES_THRESHOLD, RawCell, RawReport, SteadyReport, WebReport, rates,
};
use crate::bench::cpu::CpuUse;
use crate::bench::{FinishMode, raw};

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
        "jobq bench {} ({}), {} on {} ({} cores), {}{}",
        env!("CARGO_PKG_VERSION"),
        if r.quick { "quick" } else { "full" },
        r.started_at.format("%Y-%m-%d %H:%M UTC"),
        r.host,
        r.cores,
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

/// The lean-schema cells beside jobq's schema at the same W and B (its best finish there).
fn lean_lines(o: &mut String, raw: &RawReport) {
    if raw.lean.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "   lean schema (the smallest claim-token table: one claim index, a token per claim, one UPDATE finishing a claim):"
    );
    for l in &raw.lean {
        let ours: Vec<String> = raw
            .cells
            .iter()
            .filter(|c| c.workers == l.workers && c.batch == l.batch)
            .map(|c| {
                format!(
                    "{} {:.0} ({:.0}%)",
                    c.finish.label(),
                    c.jobs_per_sec,
                    c.jobs_per_sec / l.jobs_per_sec * 100.0
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "   W={:<3} B={:<5} lean {:>8.0} jobs/s; jobq's schema, % of lean: {}{}",
            l.workers,
            l.batch,
            l.jobs_per_sec,
            if ours.is_empty() {
                "-".to_string()
            } else {
                ours.join(", ")
            },
            if l.ok { "" } else { "  NOT OK" }
        );
    }
}

/// 1. The raw-SQL grid.
fn raw_section(o: &mut String, raw: &RawReport) {
    let _ = writeln!(
        o,
        "\n1. RAW SQL LIMIT: jobq's claim (SELECT … FOR UPDATE SKIP LOCKED + UPDATE … WHERE id IN + COMMIT) in a \
         hand-written loop, {} jobs per cell ({} at B=1, {} from B=100), W connections, B rows per claim; \
         * = under load, ! = check failed",
        raw.jobs_per_cell,
        raw::cell_jobs(raw.jobs_per_cell, 1),
        raw::cell_jobs(raw.jobs_per_cell, 100)
    );
    let _ = writeln!(
        o,
        "   finishes: per-job = one fenced UPDATE per job (jobq's `finish`, for a lone job and for failures);\n   \
         batch-tx = jobq's batched done UPDATE … WHERE claim = ? AND state = 'running' AND (id, attempts) IN (…) per claim between BEGIN and COMMIT (not in jobq);\n   \
         batched = the same UPDATE in autocommit (jobq's `finish_done_batch`, what its finisher sends for done jobs);\n   \
         carried = the previous claim's rows finished by the next claim's stamping UPDATE (CLAIM_STAMP_CARRYING: one statement and one commit per claim; what jobq's worker does on a deep queue)"
    );
    for finish in FinishMode::ALL {
        let cells: Vec<&RawCell> = raw.cells.iter().filter(|c| c.finish == finish).collect();
        if cells.is_empty() {
            continue;
        }
        let mut ws: Vec<u32> = cells.iter().map(|c| c.workers).collect();
        ws.sort_unstable();
        ws.dedup();
        let mut bs: Vec<u32> = cells.iter().map(|c| c.batch).collect();
        bs.sort_unstable();
        bs.dedup();
        let _ = write!(o, "   {:<10} jobs/s", finish.label());
        for b in &bs {
            let _ = write!(o, " {:>8}", format!("B={b}"));
        }
        o.push('\n');
        for w in &ws {
            let _ = write!(o, "   {:<17}", format!("W={w}"));
            for b in &bs {
                let cell = cells.iter().find(|c| c.workers == *w && c.batch == *b);
                let _ = write!(
                    o,
                    " {:>8}",
                    cell.map_or("-".into(), |c| format!(
                        "{:.0}{}{}",
                        c.jobs_per_sec,
                        if c.cpu.other_cores > OTHER_CORES_THRESHOLD {
                            "*"
                        } else {
                            ""
                        },
                        if c.ok { "" } else { "!" }
                    ))
                );
            }
            o.push('\n');
        }
        if let Some(b) = raw.best(finish) {
            let _ = writeln!(
                o,
                "   best {}: {:.0} jobs/s at W={} B={} (claim {:.2} ms; {:.1} rows/finish; cpu client/server/other {})",
                finish.label(),
                b.jobs_per_sec,
                b.workers,
                b.batch,
                b.claim_ms,
                b.rows_per_finish,
                cpu_text(&b.cpu)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join("/")
            );
        }
    }
    lean_lines(o, raw);
}

/// 3. Pickup latency under a fixed-rate producer.
fn steady_section(o: &mut String, s: &SteadyReport) {
    let _ = writeln!(
        o,
        "\n3. STEADY STATE: producer at a fixed rate, forever workers {}; pickup latency = run_at (NOW(6)) to handler start",
        s.settings
    );
    let _ = writeln!(
        o,
        "   {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6}",
        "rate/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "left", "held"
    );
    for p in s.points.iter().chain(s.at_half.iter()) {
        let _ = writeln!(
            o,
            "   {:>8.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8} {:>6}",
            p.rate,
            p.p50_ms,
            p.p95_ms,
            p.p99_ms,
            p.max_ms,
            p.left_over,
            if p.sustained { "yes" } else { "no" }
        );
    }
    if s.fixed_rates {
        return;
    }
    let _ = writeln!(
        o,
        "   sustainable with p99 <= 100 ms: {}{}; last row is half that rate\n   \
         kept up (nothing left over, p99 < 1 s) up to: {}",
        s.sustainable_rate
            .map_or("none".into(), |r| format!("{r:.0} jobs/s")),
        if s.search_capped {
            " (search capped: higher rates not tried)"
        } else {
            ""
        },
        s.kept_up_rate
            .map_or("none".into(), |r| format!("{r:.0} jobs/s"))
    );
}

/// 4. The big table against the empty one.
fn big_section(o: &mut String, b: &BigReport) {
    let _ = writeln!(
        o,
        "\n4. BIG TABLE: drain {} of {} jobs, {} alternating rounds; empty table median {:.0} jobs/s ({}), with {} finished rows median {:.0} jobs/s ({}) = {:.2}x (history loaded in {:.1} s)",
        b.settings,
        b.jobs,
        b.empty.len(),
        b.empty_jobs_per_sec,
        rates(&b.empty),
        b.history_rows,
        b.big_jobs_per_sec,
        rates(&b.big),
        b.ratio,
        b.load_secs
    );
}

/// 5. The idle worker.
fn idle_section(o: &mut String, i: &IdleReport) {
    let _ = writeln!(
        o,
        "\n5. IDLE: one forever worker with jobq's defaults, watched {:.0} s",
        i.window_secs
    );
    match (&i.commands, i.statements_per_sec) {
        (Some(c), Some(sps)) => {
            let _ = writeln!(
                o,
                "   {sps:.2} statements/s counted at the wire ({} text + {} prepared statements, {} pings, {} prepares in {:.0} s)",
                c.query, c.execute, c.ping, c.prepare, i.window_secs
            );
        }
        _ => {
            let _ = writeln!(
                o,
                "   (no wire count: the server is reached through a socket)"
            );
        }
    }
    if let Some(q) = i.server_questions_per_sec {
        let f = |v: Option<f64>| v.map_or("?".into(), |v: f64| format!("{v:.2}"));
        let _ = writeln!(
            o,
            "   server-wide counters over the same window (every client of the server): Questions {q:.2}/s, \
             Queries (which also counts statements inside stored procedures) {}/s;\n   \
             the same counters before the worker started: Questions {}/s, Queries {}/s",
            f(i.server_queries_per_sec),
            f(i.baseline_questions_per_sec),
            f(i.baseline_queries_per_sec)
        );
    }
    let samples: Vec<String> = i.start_ms.iter().map(|v| format!("{v:.0}")).collect();
    let _ = writeln!(
        o,
        "   INSERT into the idle queue to job start: mean {:.0} ms, max {:.0} ms (samples: {} ms)",
        i.start_mean_ms,
        i.start_max_ms,
        samples.join(", ")
    );
}

/// 6. The worker process's memory.
fn footprint_section(o: &mut String, f: &FootprintReport) {
    let _ = writeln!(
        o,
        "\n6. FOOTPRINT: `jobq worker` process, defaults, {} handler, {} jobs in {:.1} s ({:.0} jobs/s): peak RSS {:.1} MB",
        f.handler, f.jobs, f.secs, f.jobs_per_sec, f.peak_rss_mb
    );
}

/// 7. Enqueue rates.
fn enqueue_section(o: &mut String, e: &EnqueueReport) {
    let _ = writeln!(o, "\n7. ENQUEUE rows/s, one connection");
    let _ = writeln!(
        o,
        "   one row a statement ({} rows): jobq::enqueue {:.0}, plain SQL {:.0} ({:.0}%)",
        e.single_rows,
        e.library_single,
        e.sql_single,
        e.library_single / e.sql_single * 100.0
    );
    let _ = writeln!(
        o,
        "   1,000 rows a statement ({} rows): jobq::enqueue_many {:.0}, plain SQL {:.0} ({:.0}%)",
        e.multi_rows,
        e.library_multi,
        e.sql_multi,
        e.library_multi / e.sql_multi * 100.0
    );
}

/// 8. Dashboard response times.
fn web_section(o: &mut String, w: &WebReport) {
    let _ = writeln!(
        o,
        "\n8. DASHBOARD with {} rows in job_queue (loaded in {:.1} s); ms from connect to last byte",
        w.rows, w.load_secs
    );
    let _ = writeln!(
        o,
        "   {:<28} {:>9} {:>9} {:>9}  path",
        "page", "first", "p50", "p95"
    );
    for p in &w.pages {
        let _ = writeln!(
            o,
            "   {:<28} {:>9.1} {:>9.1} {:>9.1}  {}",
            p.name, p.first_ms, p.p50_ms, p.p95_ms, p.path
        );
    }
}

/// 9. Drains over a Galera cluster's nodes.
fn cluster_section(o: &mut String, c: &ClusterReport) {
    let _ = writeln!(
        o,
        "\n9. CLUSTER (Galera): drains over the nodes; % is of one worker on one node with the same settings"
    );
    for r in &c.runs {
        let one = c
            .runs
            .iter()
            .find(|b| b.settings == r.settings && b.layout == Layout::SharedQueue && b.nodes == 1)
            .map_or(f64::NAN, |b| b.jobs_per_sec);
        let _ = writeln!(
            o,
            "   {:<30} {} x{} on {} node(s): {:>8.0} jobs/s ({:>3.0}%), {:>6} conflicts, {:.3} per job{}",
            r.layout.to_string(),
            r.settings,
            r.workers,
            r.nodes,
            r.jobs_per_sec,
            r.jobs_per_sec / one * 100.0,
            r.conflicts,
            r.conflicts_per_job,
            if r.ok { "" } else { "  NOT OK" }
        );
    }
}

/// 11. Handlers for jobs in other languages.
fn languages_section(o: &mut String, l: &crate::bench::languages::LanguagesReport) {
    let _ = writeln!(
        o,
        "\n11. LANGUAGES: handlers for jobs written in other languages, at {} (a process handler runs one copy per slot); latency: jobs inserted at a fixed rate, run_at to finished_at by the server's clock",
        l.settings
    );
    if let Err(why) = &l.python {
        let _ = writeln!(o, "   no Python rows: {why}");
    }
    let _ = writeln!(
        o,
        "   handler                              jobs    jobs/s  vs Rust   latency jobs   p50 ms   p99 ms"
    );
    let rust = l.rows.first().map_or(f64::NAN, |r| r.jobs_per_sec);
    for r in &l.rows {
        let _ = writeln!(
            o,
            "   {:<34} {:>6} {:>9.0} {:>7.0}% {:>14} {:>8.1} {:>8.1}",
            r.handler,
            r.jobs,
            r.jobs_per_sec,
            100.0 * r.jobs_per_sec / rust,
            r.latency_jobs,
            r.p50_ms,
            r.p99_ms
        );
    }
}

/// 10. The deep, wide backlog.
fn backlog_section(o: &mut String, b: &crate::bench::backlog::BacklogReport) {
    let [queues, kinds, served_queues, served_kinds] = b.shape;
    let _ = writeln!(
        o,
        "\n10. BACKLOG: due jobs over {queues} queues and {kinds} kinds; claims of {} rows by a worker serving {served_queues} queues and {served_kinds} kinds, each rolled back",
        b.batch
    );
    let _ = writeln!(
        o,
        "   table               rows   claims  rows/cl  mean ms   p50 ms   jobs/s  index reads/claim  disk reads/claim"
    );
    let tables = [
        ("as filled", &b.small),
        ("as filled", &b.deep),
        ("heads drained", &b.small_drained),
        ("heads drained", &b.deep_drained),
    ];
    for (state, c) in tables {
        let _ = writeln!(
            o,
            "   {state:<13} {:>9} {:>8} {:>8.1} {:>8.2} {:>8.2} {:>8.0} {:>18.0} {:>17.1}",
            c.rows,
            c.claims,
            c.rows_per_claim,
            c.mean_ms,
            c.p50_ms,
            c.jobs_per_sec,
            c.index_reads_per_claim,
            c.disk_reads_per_claim
        );
    }
    let _ = writeln!(
        o,
        "   deep vs small: {:.2}x the median claim time as filled; {:.2}x with the served kinds of the served queues but the last done (heads drained)",
        b.ratio, b.drained_ratio
    );
    let u = &b.urgent;
    let _ = writeln!(
        o,
        "   a high-priority job behind {} low-priority jobs of its queue ({}): {}",
        u.backlog,
        u.settings,
        if u.picked_up {
            format!(
                "picked up {:.1} ms after its INSERT; {} claims passed it by",
                u.wait_ms, u.claims_passed_by
            )
        } else {
            format!("not picked up within {:.0} s", u.wait_ms / 1e3)
        }
    );
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
    use crate::bench::{BenchConfig, Section, ServerInfo};

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
