//! Warnings for changes that are stored as asked but would hold jobs back as things stand: a limit on a
//! kind nothing serves, a pin or a worker count for a host where no jobq process runs. The change is
//! still made (the worker or host may be on its way), but the operator hears at once why jobs may
//! wait, instead of finding out from a queue that does not move.

use jobq::{Jobs, stats::ProcessRow};
use sqlx::MySqlPool;

use super::Env;
use crate::out::err_line;

/// The registered processes, or none when they cannot be read (the warning is then left out: the
/// change itself has been made).
async fn processes(pool: &MySqlPool) -> Vec<ProcessRow> {
    Jobs::new(pool.clone())
        .processes()
        .await
        .unwrap_or_default()
}

/// Warns for each of `hosts` on which no jobq process is registered now.
pub async fn unseen_hosts(pool: &MySqlPool, hosts: &[&str], consequence: &str) {
    let procs = processes(pool).await;
    let mut seen: Vec<&str> = procs.iter().map(|p| p.host.as_str()).collect();
    seen.sort_unstable();
    seen.dedup();
    for host in hosts.iter().filter(|h| !seen.contains(h)) {
        let known = if seen.is_empty() {
            "none is registered anywhere".to_string()
        } else {
            format!("registered now: {}", seen.join(", "))
        };
        err_line(format_args!(
            "warning: no jobq process runs on host {host:?} ({known}); {consequence}"
        ));
    }
}

/// Warns when no handler of the config and no live worker serves `kind`.
pub async fn unserved_kind(env: &Env, pool: &MySqlPool, kind: &str) {
    if env.config.handlers.contains_key(kind) {
        return;
    }
    let procs = processes(pool).await;
    let served = procs.iter().any(|p| {
        p.role == "worker"
            && p.kinds
                .as_deref()
                .is_some_and(|k| k.split(',').any(|k| k == kind))
    });
    if !served {
        err_line(format_args!(
            "warning: no handler in this config and no live worker serves kind {kind:?}: check the \
             name; the limit holds once a worker for it starts"
        ));
    }
}

/// Warns when no reaper is registered: the passes `consequence` needs are a reaper's.
pub async fn no_reaper(pool: &MySqlPool, consequence: &str) {
    if !processes(pool).await.iter().any(|p| p.role == "reaper") {
        err_line(format_args!(
            "warning: no reaper is running (`jobq reaper`, `jobq supervise --reaper`, or `jobq \
             reaper --once` from cron); {consequence}"
        ));
    }
}
