//! Sections 4, 6, 7 and 8 of the text: what else jobq costs: a drain on a big table, a worker's
//! memory, enqueue rates, and the dashboard's response times.

use std::fmt::Write as _;

use crate::bench::report::{BigReport, EnqueueReport, FootprintReport, WebReport, rates};

/// 4. The big table against the empty one.
pub(super) fn big_section(o: &mut String, b: &BigReport) {
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

/// 6. The worker process's memory.
pub(super) fn footprint_section(o: &mut String, f: &FootprintReport) {
    let _ = writeln!(
        o,
        "\n6. FOOTPRINT: `jobq worker` process, defaults, {} handler, {} jobs in {:.1} s ({:.0} jobs/s): peak RSS {:.1} MB",
        f.handler, f.jobs, f.secs, f.jobs_per_sec, f.peak_rss_mb
    );
}

/// 7. Enqueue rates.
pub(super) fn enqueue_section(o: &mut String, e: &EnqueueReport) {
    let _ = writeln!(
        o,
        "\n7. ENQUEUE rows/s, one connection; medians of {} rounds, each library way beside its plain-SQL twin \
         (share = median of the rounds' pairs)",
        e.rounds
    );
    let _ = writeln!(
        o,
        "   one row a statement ({} rows): jobq::enqueue {:.0}, plain SQL {:.0} ({:.0}%)",
        e.single_rows,
        e.library_single,
        e.sql_single,
        e.single_ratio * 100.0
    );
    let _ = writeln!(
        o,
        "   1,000 rows a statement ({} rows): jobq::enqueue_many {:.0}, plain SQL {:.0} ({:.0}%)",
        e.multi_rows,
        e.library_multi,
        e.sql_multi,
        e.multi_ratio * 100.0
    );
}

/// 8. Dashboard response times.
pub(super) fn web_section(o: &mut String, w: &WebReport) {
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
