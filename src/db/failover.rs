//! Connections opened before a read-only error (or a Galera node's "not ready", or a move to another
//! host of the URL) are not used again.
//!
//! After a failover the old primary turns read-only, and every pooled connection still talks to it: a
//! retry on one of them fails the same way forever. When any statement of this process gets a read-only
//! error, [`note`] records when; from then on the pools close, instead of handing out, every connection
//! opened before that instant (see `before_acquire` in `pool_options`), so the retry opens a fresh one,
//! which reaches the new primary. Process-wide on purpose: the cost of a wrongly recycled connection is
//! one reconnect, and the error on one connection is news about the server behind all of them.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);
/// Milliseconds after `BASE` of the last read-only error, plus one; 0 = none yet.
static SEEN: AtomicU64 = AtomicU64::new(0);

fn now_ms() -> u64 {
    u64::try_from(BASE.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Records `e` if it says the server cannot serve: read-only, or a Galera node cut off from its cluster.
/// Warns once per episode: every statement of a busy worker sees the same error.
pub(crate) fn note(e: &sqlx::Error) {
    let what = if crate::errno::is_read_only(e) {
        "the server is read-only (a failover?); reconnecting"
    } else if crate::errno::is_node_unusable(e) {
        "the server is a Galera node cut off from its cluster; reconnecting"
    } else {
        return;
    };
    if recycle() {
        tracing::warn!(error = %e, "{what}");
    } else {
        tracing::debug!(error = %e, "{what}");
    }
}

/// Marks every connection open now as stale: the pools close them instead of handing them out. True
/// when nothing was marked in the last five seconds (a new episode, worth a warning).
pub(crate) fn recycle() -> bool {
    let now = now_ms();
    let before = SEEN.fetch_max(now + 1, Ordering::SeqCst);
    before == 0 || now.saturating_sub(before) > 5_000
}

/// True when a connection of this `age` was opened at or before the last [`recycle`].
pub(crate) fn predates_recycle(age: Duration) -> bool {
    let seen = SEEN.load(Ordering::SeqCst);
    if seen == 0 {
        return false;
    }
    let age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
    now_ms().saturating_sub(age_ms) < seen
}
