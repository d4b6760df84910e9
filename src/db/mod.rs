//! Connections and the SQL that jobq runs. Every statement lives in a submodule of this one, one file per
//! concern, so there is one place to look for each table's queries.

pub(crate) mod admin;
pub(crate) mod aging;
pub(crate) mod attempts;
pub(crate) mod audit;
pub(crate) mod claim;
mod connect;
pub(crate) mod dedicated;
pub(crate) mod deps;
pub(crate) mod done_minutes;
pub(crate) mod enqueue;
pub(crate) mod failover;
pub(crate) mod finish;
pub(crate) mod gauges;
pub(crate) mod hosts;
pub(crate) mod idle;
pub(crate) mod limits;
pub(crate) mod migrate;
pub(crate) mod prune;
pub(crate) mod queues;
pub(crate) mod reap;
pub(crate) mod registry;
pub(crate) mod report;
pub(crate) mod row;
pub(crate) mod scale;
pub(crate) mod schedule;
pub(crate) mod tls;
pub(crate) mod uninstall;
mod url;

use std::future::Future;
use std::time::Duration;

use sqlx::MySqlPool;

use crate::error::Result;

use crate::errno::{self, is_transient};
pub(crate) use connect::open_anchor;
pub use connect::{connect, connect_lazy, create_database};
pub use tls::{SslMode, check_ca_file};
pub(crate) use url::database_key;
pub use url::{ConnectConfig, UrlSettings};

/// Most ids one statement binds in an `IN (…)` list: a statement takes at most 65,535 placeholders,
/// and [`push_id_list`] pads a list to the next power of two, so a list of more than 32,768 ids would
/// fail whatever else the statement binds. Longer lists go in chunks of this many.
pub(crate) const ID_CHUNK: usize = 8_192;

/// Pushes `ids` as a bound list for `IN (…)`, padded to the next power of two by repeating the last id.
///
/// Each distinct list length is a distinct prepared statement. sqlx keeps a connection's prepared
/// statements in a cache of 100, so batches whose sizes vary from one claim or finish to the next would
/// cost a prepare round trip and a server-side parse nearly every time (measured at the wire by `jobq
/// bench`: about one prepare per claim). Padded, a shape has at most 12 forms up to 2,048 rows. A
/// repeated id matches its row once, so neither the rows changed nor the rows returned differ.
pub(crate) fn push_id_list(q: &mut sqlx::QueryBuilder<'_, sqlx::MySql>, ids: &[u64]) {
    let mut list = q.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    if let Some(&last) = ids.last() {
        for _ in ids.len()..ids.len().next_power_of_two() {
            list.push_bind(last);
        }
    }
}

/// The pause before try `attempt + 1` after a transient failure: equal jitter over 10 ms doubling up to
/// about 1.3 s, so that claimers that deadlocked with each other do not collide again in step.
pub(crate) fn transient_pause(attempt: u32) -> Duration {
    let base_ms = 5u64 << attempt.min(8);
    Duration::from_millis(base_ms / 2 + rand::random_range(0..=base_ms / 2))
}

/// Runs `op` again on transient errors (deadlock, lock wait timeout, lost connection), with a short
/// jittered pause, up to `tries` times in all. Deadlocks are part of life for InnoDB under concurrency;
/// the caller never sees one unless it repeats `tries` times.
pub(crate) async fn retry_transient<T, F, Fut>(what: &str, tries: u32, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                if !try_again(what, attempt, tries, &e).await {
                    return Err(e.into());
                }
            }
        }
    }
}

/// The retry policy of every loop that runs a statement again ([`retry_transient`], and the
/// dedicated connections' own, which keep their connection across tries): after try number `attempt`
/// of `tries` failed with `e`, notes a failover, and for a transient error with tries left, counts it,
/// pauses and says to go on. False: give up and return `e`.
pub(crate) async fn try_again(what: &str, attempt: u32, tries: u32, e: &sqlx::Error) -> bool {
    failover::note(e);
    if attempt >= tries || !is_transient(e) {
        return false;
    }
    tracing::debug!(error = %e, attempt, what, "transient database error; retrying");
    crate::telemetry::db_retry(errno::transient_kind(e));
    tokio::time::sleep(transient_pause(attempt)).await;
    true
}

/// The name of the database the pool is connected to.
pub(crate) async fn current_database(pool: &MySqlPool) -> Result<String> {
    let name: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(pool)
        .await?;
    Ok(name.unwrap_or_default())
}
