//! Sections 3 and 5 of the text: pickup latency under a steady producer, and what an idle worker
//! costs and how soon it starts a new job.

use std::fmt::Write as _;

use crate::bench::report::{IdleReport, SteadyReport};

/// 3. Pickup latency under a fixed-rate producer.
pub(super) fn steady_section(o: &mut String, s: &SteadyReport) {
    let _ = writeln!(
        o,
        "\n3. STEADY STATE: producer at a fixed rate, forever workers {}; pickup latency = run_at (NOW(6)) to handler start",
        s.settings
    );
    let _ = writeln!(
        o,
        "   {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>11} {:>13}",
        "rate/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "left",
        "held",
        "INSERT p50",
        "to stamp p50"
    );
    for p in s.points.iter().chain(s.at_half.iter()) {
        let _ = writeln!(
            o,
            "   {:>8.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8} {:>6} {:>11.1} {:>13.1}",
            p.rate,
            p.p50_ms,
            p.p95_ms,
            p.p99_ms,
            p.max_ms,
            p.left_over,
            if p.sustained { "yes" } else { "no" },
            p.insert_p50_ms,
            p.due_to_stamp_p50_ms
        );
    }
    let _ = writeln!(
        o,
        "   INSERT: the producer's multi-row INSERT, start to answer (its rows' run_at is its start: no worker can \
         see them sooner);\n   to stamp: run_at to the claim's stamp (its UPDATE's NOW(6)), by the server's clock, \
         the INSERT included; the rest of the pickup is the stamp, the COMMIT and the worker starting the job"
    );
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

/// 5. The idle worker.
pub(super) fn idle_section(o: &mut String, i: &IdleReport) {
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
