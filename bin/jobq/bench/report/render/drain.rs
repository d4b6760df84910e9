//! Section 2 of the text: the library drain, its head-to-head against the raw loop, handler costs and
//! commands per job at the wire.

use std::fmt::Write as _;

use super::cpu_text;
use crate::bench::Settings;
use crate::bench::report::{DrainReport, DrainRun, HeadToHead, OTHER_CORES_THRESHOLD};
use crate::bench::wire::Commands;

/// 2. The library drain: the runs, the head-to-head, handler costs and wire profiles.
pub(super) fn drain_section(o: &mut String, d: &DrainReport) {
    let _ = writeln!(
        o,
        "\n2. DRAIN through the library: no-op Rust handler, W workers in one process (each its own pool)"
    );
    let _ = writeln!(
        o,
        "   {:<22} {:>7} {:>9} {:>7} {:>7}  {:>6} {:>6} {:>5}",
        "settings", "jobs", "jobs/s", "rows/cl", "rows/fi", "client", "server", "other"
    );
    let row = |o: &mut String, label: &str, run: &DrainRun| {
        let _ = writeln!(
            o,
            "   {:<22} {:>7} {:>9.0} {:>7.1} {:>7.1}  {}{}{}",
            label,
            run.jobs,
            run.jobs_per_sec,
            run.rows_per_claim,
            run.rows_per_finish,
            cpu_text(&run.cpu),
            if run.cpu.other_cores > OTHER_CORES_THRESHOLD {
                " *"
            } else {
                ""
            },
            if run.ok { "" } else { "  CHECK FAILED" }
        );
    };
    row(o, &format!("defaults {}", d.defaults.settings), &d.defaults);
    for s in &d.sweep {
        row(o, &format!("sweep {}", s.settings), s);
    }
    row(o, &format!("winner {}", d.winner.settings), &d.winner);
    let pct = |x: Option<f64>| x.map_or("n/a".into(), |v| format!("{:.0}%", v * 100.0));
    let _ = writeln!(
        o,
        "   winner vs best raw cell: {}; vs raw carried at same W and B: {}; defaults vs raw carried W=1 B=10: {}",
        pct(d.vs_best_raw),
        pct(d.vs_raw_same),
        pct(d.defaults_vs_raw_same)
    );
    if let Some(h) = &d.head_to_head {
        head_to_head(o, h);
    }
    handler_costs(o, d);
    wire_profiles(o, d);
}

/// The alternating re-measurement of the limit and the winner.
fn head_to_head(o: &mut String, h: &HeadToHead) {
    let runs = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        o,
        "   head to head, {} alternating rounds of {} jobs: raw W={} B={} {} median {:.0} jobs/s ({}); jobq {} median {:.0} ({}): {:.0}%{}",
        h.raw.len(),
        h.jobs,
        h.raw_workers,
        h.raw_batch,
        h.raw_finish.label(),
        h.raw_median(),
        runs(&h.raw),
        h.settings,
        h.jobq_median(),
        runs(&h.jobq),
        h.ratio() * 100.0,
        if h.ok { "" } else { "  CHECK FAILED" }
    );
    if let Some(same) = h.same_ratio() {
        let _ = writeln!(
            o,
            "   the raw loop at jobq's W={} B={} (carried finish) in the same rounds: median {:.0} jobs/s ({}); jobq {:.0}% of it",
            h.settings.workers,
            h.settings.batch_size,
            h.raw_same_median(),
            runs(&h.raw_same),
            same * 100.0
        );
    }
    if !h.lean.is_empty() {
        let lean = h.lean_median();
        let procs = if h.procs.is_empty() {
            "no jobq binary to start".to_string()
        } else {
            format!(
                "median {:.0} ({}): {:.0}% of lean",
                h.procs_median(),
                runs(&h.procs),
                h.procs_median() / lean * 100.0
            )
        };
        let _ = writeln!(
            o,
            "   against the lean schema at W={} B={}: lean median {:.0} jobs/s ({}); jobq in-process {:.0}% of lean; \
             jobq as {} worker processes {}",
            h.raw_workers,
            h.raw_batch,
            lean,
            runs(&h.lean),
            h.jobq_median() / lean * 100.0,
            h.settings.workers,
            procs
        );
        if !h.procs_at_lean.is_empty() {
            let at = h.procs_at_lean_median();
            let _ = writeln!(
                o,
                "   jobq as {} worker processes (lean's W and B, {}): median {:.0} ({}): {:.0}% of lean",
                h.raw_workers,
                h.procs_at_lean_settings(),
                at,
                runs(&h.procs_at_lean),
                at / lean * 100.0
            );
        }
    }
}

/// What a command and an SQL handler cost over the no-op one.
fn handler_costs(o: &mut String, d: &DrainReport) {
    let _ = writeln!(
        o,
        "   handler cost at jobq's defaults ({}):",
        Settings::DEFAULTS
    );
    for h in &d.handlers {
        let _ = writeln!(
            o,
            "     {:<16} {:>6} jobs {:>8.0} jobs/s  {:>+8.0} µs/job wall vs no-op  client cpu {:.0} µs/job",
            h.handler, h.jobs, h.jobs_per_sec, h.extra_us_per_job, h.client_cpu_us_per_job
        );
    }
    let _ = writeln!(
        o,
        "   rows/cl, rows/fi = mean rows per claim and per finish statement; * = other processes used > {OTHER_CORES_THRESHOLD} cores (under load)"
    );
}

/// Commands per job at the wire, jobq against the raw loop.
fn wire_profiles(o: &mut String, d: &DrainReport) {
    for w in &d.wire {
        let per = |c: &Commands, f: fn(&Commands) -> u64| f(c) as f64 / w.jobs as f64;
        let _ = writeln!(
            o,
            "   commands per job at the wire ({}, {} jobs, through a counting relay; raw = same W and B, carried):",
            w.settings, w.jobs
        );
        for (label, c, rate, cpu, claim, fin) in [
            (
                "jobq",
                &w.jobq,
                w.jobq_jobs_per_sec,
                &w.jobq_cpu,
                w.jobq_rows_per_claim,
                w.jobq_rows_per_finish,
            ),
            (
                "raw",
                &w.raw,
                w.raw_jobs_per_sec,
                &w.raw_cpu,
                w.raw_rows_per_claim,
                w.raw_rows_per_finish,
            ),
        ] {
            let _ = writeln!(
                o,
                "     {label:<5} {:.3} round trips = {:.3} statements ({:.3} text, {:.3} prepared) + {:.3} pings + {:.3} prepares + {:.3} other; \
                 {claim:.1} rows/claim, {fin:.1} rows/finish; {:.0} jobs/s; cpu client/server {:.0}/{} µs/job",
                per(c, Commands::round_trips),
                per(c, Commands::statements),
                per(c, |c| c.query),
                per(c, |c| c.execute),
                per(c, |c| c.ping),
                per(c, |c| c.prepare),
                per(c, |c| c.other),
                rate,
                cpu.client_us_per_job,
                cpu.server_us_per_job
                    .map_or("-".into(), |s| format!("{s:.0}"))
            );
        }
    }
}
