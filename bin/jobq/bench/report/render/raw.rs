//! Section 1 of the text: jobq's claim and finish statements in a hand-written loop (the limit), and
//! the lean-schema cells beside it.

use std::fmt::Write as _;

use super::cpu_text;
use crate::bench::report::{OTHER_CORES_THRESHOLD, RawCell, RawReport};
use crate::bench::{FinishMode, raw};

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

/// What each statement a job meets costs per row, and what each part of jobq's table adds.
fn row_cost_lines(o: &mut String, raw: &RawReport) {
    let Some(first) = raw.row_costs.first() else {
        return;
    };
    let _ = writeln!(
        o,
        "   time per row of each statement a job meets, µs (one connection, 100-row statements, medians of {} batches), \
         on jobq's table and on copies with one part less or more:",
        first.batches
    );
    let _ = writeln!(
        o,
        "   {:<40} {:>7} {:>8} {:>8} {:>8} {:>8}   {:>15}",
        "table", "payload", "insert", "claim", "finish", "total", "vs jobq's table"
    );
    for c in &raw.row_costs {
        let base = raw
            .row_costs
            .iter()
            .find(|b| b.payload_bytes == c.payload_bytes)
            .map_or(c.total_us(), |b| b.total_us());
        let _ = writeln!(
            o,
            "   {:<40} {:>6}B {:>8.1} {:>8.1} {:>8.1} {:>8.1}   {:>+14.0}%",
            c.table,
            c.payload_bytes,
            c.insert_us,
            c.claim_us,
            c.finish_us,
            c.total_us(),
            (c.total_us() / base - 1.0) * 100.0
        );
    }
}

/// What the server spent per job draining each table.
fn table_cpu_lines(o: &mut String, raw: &RawReport) {
    let Some(first) = raw.table_cpu.first() else {
        return;
    };
    let _ = writeln!(
        o,
        "   the server's CPU per job of a drain by one connection ({} jobs, {} rows per claim, one batched finish per claim, \
         purge included; medians), on jobq's table, copies of it, and the lean table:",
        first.jobs,
        crate::bench::tablecpu::BATCH
    );
    let _ = writeln!(
        o,
        "   {:<46} {:>8} {:>12} {:>16}",
        "table", "jobs/s", "server µs/job", "vs jobq's table"
    );
    for t in &raw.table_cpu {
        let vs = match (t.server_us_per_job, first.server_us_per_job) {
            (Some(s), Some(b)) if b > 0.0 => format!("{:+.0}%", (s / b - 1.0) * 100.0),
            _ => "-".into(),
        };
        let _ = writeln!(
            o,
            "   {:<46} {:>8.0} {:>12} {:>16}{}",
            t.table,
            t.jobs_per_sec,
            t.server_us_per_job
                .map_or("-".into(), |s| format!("{s:.1}")),
            vs,
            if t.ok { "" } else { "  NOT OK" }
        );
    }
}

/// 1. The raw-SQL grid.
pub(super) fn raw_section(o: &mut String, raw: &RawReport) {
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
    row_cost_lines(o, raw);
    table_cpu_lines(o, raw);
}
