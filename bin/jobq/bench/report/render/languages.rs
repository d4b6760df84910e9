//! Section 11 of the text: the same no-op job through handlers in other languages.

use std::fmt::Write as _;

/// 11. Handlers for jobs in other languages.
pub(super) fn languages_section(o: &mut String, l: &crate::bench::report::LanguagesReport) {
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
