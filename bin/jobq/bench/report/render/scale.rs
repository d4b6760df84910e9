//! Sections 9 and 10 of the text: drains over the nodes of a Galera cluster, and the claim's cost
//! under a deep, wide backlog.

use std::fmt::Write as _;

use crate::bench::report::{BacklogReport, ClusterReport, Layout};

/// 9. Drains over a Galera cluster's nodes.
pub(super) fn cluster_section(o: &mut String, c: &ClusterReport) {
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

/// 10. The deep, wide backlog.
pub(super) fn backlog_section(o: &mut String, b: &BacklogReport) {
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
