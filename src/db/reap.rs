//! The reaper's statements: who holds running rows, what the registry and the server say about them, and
//! the fenced reset of a dead claimant's rows.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row};

use crate::db::retry_transient;
use crate::db::row::text;
use crate::error::Result;
use crate::job::row_max_attempts;

/// A registry row as the reaper reads it.
#[derive(Debug, Clone)]
pub(crate) struct RegistryRow {
    /// Claim token.
    pub token: String,
    /// Boot id and pid namespace.
    pub host_id: String,
    /// Process id.
    pub pid: u32,
    /// Current anchor connection id.
    pub connection_id: u64,
    /// Server the anchor is on.
    pub server_id: u64,
    /// That server's start time.
    pub server_epoch: i64,
    /// Registration time.
    pub started_at: DateTime<Utc>,
    /// Age of the last heartbeat, by the database clock.
    pub heartbeat_age: Duration,
    /// The last heartbeat as stored: a reset of this claimant's rows goes ahead only while the row
    /// still shows it (see [`ResetIf`]).
    pub heartbeat_at: DateTime<Utc>,
    /// How often it heartbeats (schema 7; `None` for rows of older versions).
    pub heartbeat_every: Option<Duration>,
    /// Its self-fence bound (schema 7; `None` for rows of older versions).
    pub fence: Option<Duration>,
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for RegistryRow {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        let age_us: i64 = row.try_get("heartbeat_age_us")?;
        Ok(Self {
            token: text(row, "token")?,
            host_id: text(row, "host_id")?,
            pid: row.try_get("pid")?,
            connection_id: row.try_get("connection_id")?,
            server_id: row.try_get("server_id")?,
            server_epoch: row.try_get("server_epoch")?,
            started_at: row.try_get("started_at")?,
            heartbeat_age: Duration::from_micros(age_us.max(0) as u64),
            heartbeat_at: row.try_get("heartbeat_at")?,
            heartbeat_every: row
                .try_get::<Option<u32>, _>("heartbeat_ms")?
                .map(|ms| Duration::from_millis(ms.into())),
            fence: row
                .try_get::<Option<u32>, _>("fence_ms")?
                .map(|ms| Duration::from_millis(ms.into())),
        })
    }
}

/// Every registry row.
pub(crate) async fn registry(pool: &MySqlPool) -> Result<Vec<RegistryRow>> {
    Ok(sqlx::query_as(
        "SELECT token, host_id, pid, connection_id, server_id, server_epoch, started_at, \
         heartbeat_ms, fence_ms, heartbeat_at, \
         TIMESTAMPDIFF(MICROSECOND, heartbeat_at, NOW(6)) AS heartbeat_age_us FROM jobq_processes",
    )
    .fetch_all(pool)
    .await?)
}

/// The claim tokens of running rows, with how many rows each holds and the age of its newest claim
/// (database clock): through the claimants' holdings lists (`statements::listed_running!`), which name
/// every row a claim stamped. Rows that run under a token without being listed (stamped by hand, or by
/// a jobq older than schema 38) are listed by [`sweep_unlisted`] first.
pub(crate) async fn running_claims(pool: &MySqlPool) -> Result<Vec<(String, i64, Duration)>> {
    let rows: Vec<(Vec<u8>, i64, Option<i64>)> = sqlx::query_as(concat!(
        "SELECT h.holder, COUNT(DISTINCT q.id), \
         TIMESTAMPDIFF(MICROSECOND, MAX(q.claimed_at), NOW(6)) FROM jobq_holdings h JOIN ",
        crate::statements::listed_running!(),
        " GROUP BY h.holder"
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(c, n, age)| {
            (
                String::from_utf8_lossy(&c).into_owned(),
                n,
                Duration::from_micros(age.unwrap_or(0).max(0) as u64),
            )
        })
        .collect())
}

/// How far one pass of [`sweep_unlisted`] reads: ids from the first one after where the last pass
/// stopped, this many ids on. At the reaper's default interval (2 s) a sweep of a million rows takes
/// under two minutes; each pass reads at most this many rows by primary key.
pub(crate) const SWEEP_IDS: u64 = 20_000;

/// What one pass of [`sweep_unlisted`] did.
#[derive(Debug, Default)]
pub(crate) struct Swept {
    /// Where the next pass starts (past the last id this one read; 0 starts over).
    pub next: u64,
    /// Per token, the running rows it found on no list and listed.
    pub listed: Vec<(String, Vec<u64>)>,
    /// Holdings rows removed: no registered claimant, nothing listed running.
    pub dropped: u64,
}

/// One step of the reaper's slow walk of `job_queue` by primary key: puts every running row it finds
/// that its token's holdings list does not name on that list (making the list if there is none), so
/// that the readers of lists ([`running_claims`], the reset) see it. jobq's own claims list every row
/// they stamp; rows stamped by plain SQL, or by a worker of a jobq older than schema 38 still running
/// through an upgrade, are found here, within one walk of the table. Also removes the holdings rows
/// of claimants no longer registered whose lists name nothing that runs.
///
/// Reads from the first id after `after` (from the start when there is none), [`SWEEP_IDS`] ids on.
pub(crate) async fn sweep_unlisted(pool: &MySqlPool, after: u64) -> Result<Swept> {
    // Found by a plain read and removed one by one: a DELETE that scanned every list would lock them
    // all, and each claim waits for its own.
    let unheld: Vec<Vec<u8>> = sqlx::query_scalar(concat!(
        "SELECT h.holder FROM jobq_holdings h WHERE NOT EXISTS \
         (SELECT 1 FROM jobq_processes p WHERE p.token = h.holder) \
         AND NOT EXISTS (SELECT 1 FROM ",
        crate::statements::listed_running!(),
        ")"
    ))
    .fetch_all(pool)
    .await?;
    let mut dropped = 0;
    for holder in unheld {
        dropped += sqlx::query(crate::statements::UNHOLD)
            .bind(holder)
            .execute(pool)
            .await?
            .rows_affected();
    }
    let first = "SELECT MIN(id) FROM job_queue WHERE id > ?";
    let mut from: Option<u64> = sqlx::query_scalar(first)
        .bind(after)
        .fetch_one(pool)
        .await?;
    if from.is_none() && after > 0 {
        from = sqlx::query_scalar(first).bind(0u64).fetch_one(pool).await?;
    }
    let Some(from) = from else {
        return Ok(Swept {
            dropped,
            ..Swept::default()
        });
    };
    let until = from.saturating_add(SWEEP_IDS);
    let running: Vec<(u64, Vec<u8>)> = sqlx::query_as(
        "SELECT id, claim FROM job_queue FORCE INDEX (PRIMARY) \
         WHERE id >= ? AND id < ? AND state = 'running' AND claim IS NOT NULL",
    )
    .bind(from)
    .bind(until)
    .fetch_all(pool)
    .await?;
    let mut by_token: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for (id, claim) in running {
        by_token
            .entry(String::from_utf8_lossy(&claim).into_owned())
            .or_default()
            .push(id);
    }
    // The lists as they are now, read without locks: a row found running above that its list does not
    // name is either unlisted or ended since (a later claim dropped it). Only those tokens are looked
    // at again with their list locked, so a pass does not lock the list of every worker it meets.
    let mut lists =
        QueryBuilder::<MySql>::new("SELECT holder, held_ids FROM jobq_holdings WHERE holder IN (");
    let mut holders = lists.separated(", ");
    for token in by_token.keys() {
        holders.push_bind(token.as_str());
    }
    lists.push(")");
    let named: std::collections::HashMap<Vec<u8>, Vec<u8>> = if by_token.is_empty() {
        Default::default()
    } else {
        lists
            .build_query_as()
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect()
    };
    let mut listed = Vec::new();
    for (token, ids) in by_token {
        let on_list = named
            .get(token.as_bytes())
            .map(|l| parse_list(l))
            .unwrap_or_default();
        if ids.iter().all(|id| on_list.binary_search(id).is_ok()) {
            continue;
        }
        let missing = retry_transient("list unlisted rows", 8, || {
            list_unlisted(pool, &token, &ids)
        })
        .await?;
        if !missing.is_empty() {
            listed.push((token, missing));
        }
    }
    Ok(Swept {
        next: until - 1,
        listed,
        dropped,
    })
}

/// Adds to `token`'s holdings list the rows of `ids` that run under it and it does not name. The list
/// is locked first: a claim of the token writes its list in the statement that stamps, so while it is
/// locked no row can become listed, and a row found running and unlisted truly is.
async fn list_unlisted(
    pool: &MySqlPool,
    token: &str,
    ids: &[u64],
) -> Result<Vec<u64>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let named = locked_list(&mut tx, token).await?;
    let unnamed: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|id| named.binary_search(id).is_err())
        .collect();
    if unnamed.is_empty() {
        tx.rollback().await?;
        return Ok(Vec::new());
    }
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT id FROM job_queue FORCE INDEX (PRIMARY) WHERE state = 'running' AND claim = ",
    );
    q.push_bind(token).push(" AND id IN (");
    crate::db::push_id_list(&mut q, &unnamed);
    q.push(") ORDER BY id");
    let missing: Vec<u64> = q.build_query_scalar().fetch_all(&mut *tx).await?;
    if missing.is_empty() {
        tx.rollback().await?;
        return Ok(Vec::new());
    }
    let add = serde_json::to_string(&missing).expect("a list of integers");
    sqlx::query(
        "INSERT INTO jobq_holdings (holder, held_ids) VALUES (?, ?) \
         ON DUPLICATE KEY UPDATE held_ids = JSON_MERGE_PRESERVE(held_ids, ?)",
    )
    .bind(token)
    .bind(&add)
    .bind(&add)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(missing)
}

/// The ids `token`'s holdings list names ([`parse_list`]), with the list locked until the transaction
/// ends (none when it has no list).
async fn locked_list(
    tx: &mut sqlx::Transaction<'_, MySql>,
    token: &str,
) -> Result<Vec<u64>, sqlx::Error> {
    let list: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT held_ids FROM jobq_holdings WHERE holder = ? FOR UPDATE")
            .bind(token)
            .fetch_optional(&mut **tx)
            .await?;
    Ok(list.as_deref().map(parse_list).unwrap_or_default())
}

/// The ids a holdings list names, once each and in order. A list jobq did not write (not a JSON array
/// of ids) names nothing: the sweep finds its rows again.
fn parse_list(list: &[u8]) -> Vec<u64> {
    let mut ids: Vec<u64> = serde_json::from_slice(list).unwrap_or_default();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The server the reaper is connected to: id, start time (Unix seconds) and uptime.
pub(crate) async fn server_state(pool: &MySqlPool) -> Result<(u64, i64, Duration)> {
    let mut conn = pool.acquire().await?;
    let (_, server) = crate::db::registry::session_identity(&mut conn).await?;
    let now: i64 = sqlx::query_scalar("SELECT UNIX_TIMESTAMP()")
        .fetch_one(&mut *conn)
        .await?;
    Ok((
        server.server_id,
        server.epoch,
        Duration::from_secs((now - server.epoch).max(0) as u64),
    ))
}

/// The number of nodes in the Galera cluster the server belongs to, or None for a server that is not
/// one (no wsrep provider; MariaDB reports a size of 0 then, MySQL has no such variable).
pub(crate) async fn galera_cluster_size(pool: &MySqlPool) -> Result<Option<u32>> {
    let row: Option<(String, String)> =
        sqlx::query_as("SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'")
            .fetch_optional(pool)
            .await?;
    Ok(row
        .and_then(|(_, v)| v.parse::<u32>().ok())
        .filter(|n| *n > 0))
}

/// For each lock name, whether some session holds it.
pub(crate) async fn locks_held(pool: &MySqlPool, names: &[String]) -> Result<Vec<bool>> {
    let mut held = Vec::with_capacity(names.len());
    for chunk in names.chunks(100) {
        let mut q = QueryBuilder::<MySql>::new("SELECT ");
        let mut cols = q.separated(", ");
        for n in chunk {
            cols.push("IS_USED_LOCK(")
                .push_bind_unseparated(n.as_str())
                .push_unseparated(") IS NOT NULL");
        }
        let row = q.build().fetch_one(pool).await?;
        for i in 0..chunk.len() {
            held.push(row.try_get::<i64, _>(i)? == 1);
        }
    }
    Ok(held)
}

/// Which of these connection ids the processlist shows. Without the PROCESS privilege a user sees only
/// its own connections; a connection missing here is therefore only a hint, never proof.
pub(crate) async fn listed_connections(pool: &MySqlPool, ids: &[u64]) -> Result<HashSet<u64>> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    // PROCESSLIST.ID is signed on MariaDB and unsigned on MySQL: read it as text.
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT CAST(ID AS CHAR) FROM information_schema.PROCESSLIST WHERE ID IN (",
    );
    let mut list = q.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    q.push(")");
    let rows: Vec<String> = q.build_query_scalar().fetch_all(pool).await?;
    Ok(rows.iter().filter_map(|s| s.parse().ok()).collect())
}

/// One row the reaper made runnable again (or ended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResetJob {
    /// Row id.
    pub id: u64,
    /// Its kind.
    pub kind: String,
    /// What it is now: queued, dead (attempts used up) or cancelled (cancel was requested).
    pub state: String,
}

/// Takes every running row of `claim` back (every row its holdings list names that still runs under
/// it; rows on no list wait for the sweep, [`sweep_unlisted`]): `queued` again, `dead` if the reset
/// used up its attempts (the interrupted attempt counts, so a job that kills its worker every time
/// ends dead instead of looping), `cancelled` if an operator had asked to cancel it. Fenced on the
/// token: two reapers, or a reaper and the claimant finishing at the same moment, never both change a
/// row.
///
/// `only_if` is what the verdict rested on: `None` when the claimant came back between the verdict and
/// the reset (its registry row shows another heartbeat), and nothing was changed.
pub(crate) async fn reset_claim(
    pool: &MySqlPool,
    claim: &str,
    reason: &str,
    only_if: ResetIf,
) -> Result<Option<Vec<ResetJob>>> {
    retry_transient("reset", 8, || reset_once(pool, claim, reason, only_if)).await
}

/// What must still hold when a gone claimant's rows are reset.
///
/// A reaper judges every claimant first and resets the rows of the gone ones after. In between, a
/// claimant judged gone on a stale heartbeat (its network was cut, its process stalled) can reconnect,
/// heartbeat, finish its stopped copy and claim the job again under the same token; a reset fenced on the
/// token alone would then take that fresh claim away while it runs, and the job would run twice at once.
/// The model of the protocol (`tests/model`) found this interleaving. So the reset locks the claimant's
/// registry row and goes ahead only if it still shows the heartbeat the verdict was made on: a claimant
/// that heartbeats first is left alone (and judged again next pass), one that heartbeats after waits for
/// the reset on that lock and then finds its rows gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResetIf {
    /// The process is known dead (a supervisor saw its child exit): nothing can come back.
    ProcessDead,
    /// The registry row still shows this heartbeat (`None`: there was no row, and there still is none).
    HeartbeatUnchanged(Option<DateTime<Utc>>),
}

async fn reset_once(
    pool: &MySqlPool,
    claim: &str,
    reason: &str,
    only_if: ResetIf,
) -> Result<Option<Vec<ResetJob>>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    if let ResetIf::HeartbeatUnchanged(seen) = only_if {
        let now: Option<DateTime<Utc>> = sqlx::query_scalar(
            "SELECT heartbeat_at FROM jobq_processes WHERE token = ? FOR UPDATE",
        )
        .bind(claim)
        .fetch_optional(&mut *tx)
        .await?;
        if now != seen {
            tx.rollback().await?;
            return Ok(None);
        }
    }
    // Before the rows: a claim of this token stamps its rows and writes the list in one statement, so
    // with the list locked it names every row the token's claims stamped, and no stamp lands between
    // the reset and the emptying of the list.
    let listed = locked_list(&mut tx, claim).await?;
    if listed.is_empty() {
        tx.rollback().await?;
        return Ok(Some(Vec::new()));
    }
    // A row that never set its own max_attempts and never failed under a worker that wrote its
    // handler's bound is held to the default (a reaper knows no handler). In chunks, ascending as
    // the list is: a list can name more ids than one statement can bind (`db::ID_CHUNK`).
    let mut rows = Vec::new();
    for chunk in listed.chunks(crate::db::ID_CHUNK) {
        let mut q = QueryBuilder::<MySql>::new(concat!(
            "SELECT id, kind, \
             CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled' \
                  WHEN attempts >= ",
            row_max_attempts!(),
            " THEN 'dead' ELSE 'queued' END AS next_state \
             FROM job_queue FORCE INDEX (PRIMARY) WHERE state = 'running' AND claim = ",
        ));
        q.push_bind(claim).push(" AND id IN (");
        crate::db::push_id_list(&mut q, chunk);
        q.push(") ORDER BY id FOR UPDATE");
        rows.extend(q.build().fetch_all(&mut *tx).await?);
    }
    if rows.is_empty() {
        tx.rollback().await?;
        return Ok(Some(Vec::new()));
    }
    let jobs = rows
        .iter()
        .map(|r| {
            Ok(ResetJob {
                id: r.try_get("id")?,
                kind: text(r, "kind")?,
                state: text(r, "next_state")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    // By primary key here and above: a plan that walked rows by state would lock the running rows of
    // live workers too (see `finish_fenced`). Unchecked as the finishes are
    // (`statements::unchecked`): it writes none of the payload.
    let why = crate::db::finish::truncate_error(reason);
    let ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
    for chunk in ids.chunks(crate::db::ID_CHUNK) {
        let mut q = QueryBuilder::<MySql>::new(concat!(
            crate::statements::unchecked!(),
            "UPDATE job_queue FORCE INDEX (PRIMARY) SET \
             state = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled' \
                          WHEN attempts >= ",
            row_max_attempts!(),
            " THEN 'dead' ELSE 'queued' END, \
             finished_at = CASE WHEN cancel_requested_at IS NOT NULL OR attempts >= ",
            row_max_attempts!(),
            " THEN NOW(6) ELSE NULL END, \
             claim = NULL, debounce_key = NULL, last_error = ",
        ));
        q.push_bind(&why);
        q.push(" WHERE claim = ").push_bind(claim);
        q.push(" AND state = 'running' AND id IN (");
        crate::db::push_id_list(&mut q, chunk);
        q.push(")");
        q.build().execute(&mut *tx).await?;
    }
    // Every row that ran under the token was reset: the list names nothing that runs.
    sqlx::query("UPDATE jobq_holdings SET held_ids = '[]' WHERE holder = ?")
        .bind(claim)
        .execute(&mut *tx)
        .await?;
    crate::db::attempts::record(&mut tx, &ids, "'released'", claim, Some(&why)).await?;
    tx.commit().await?;
    Ok(Some(jobs))
}

/// Removes a dead process's registry row, and its holdings row once no row runs under its token (its
/// rows were reset just before; a claimant that came back and claimed since keeps its list).
pub(crate) async fn forget(pool: &MySqlPool, token: &str) -> Result<()> {
    sqlx::query("DELETE FROM jobq_processes WHERE token = ?")
        .bind(token)
        .execute(pool)
        .await?;
    sqlx::query(crate::statements::UNHOLD)
        .bind(token)
        .execute(pool)
        .await?;
    Ok(())
}

/// Removes the registry rows of local process `pid` (whatever its token), once it is known dead, with
/// the holdings rows of its tokens that name nothing running (the others go when their rows are reset,
/// [`forget`]).
pub(crate) async fn forget_process(pool: &MySqlPool, host_id: &str, pid: u32) -> Result<u64> {
    sqlx::query(concat!(
        "DELETE h FROM jobq_holdings h JOIN jobq_processes p ON p.token = h.holder \
         WHERE p.host_id = ? AND p.pid = ? AND p.host_id <> '' AND NOT EXISTS (SELECT 1 FROM ",
        crate::statements::listed_running!(),
        ")"
    ))
    .bind(host_id)
    .bind(pid)
    .execute(pool)
    .await?;
    Ok(
        sqlx::query("DELETE FROM jobq_processes WHERE host_id = ? AND pid = ? AND host_id <> ''")
            .bind(host_id)
            .bind(pid)
            .execute(pool)
            .await?
            .rows_affected(),
    )
}

/// Running rows whose claim token names `host` and `pid` (any nonce and session): what a supervisor
/// releases when its child `pid` has died. Tokens a process registered from another pid namespace
/// than `host_id` are left out: host names are not unique (containers given the machine's name, as
/// `--network host` does, run in pid namespaces of their own) and every such container numbers its
/// processes from 1, so a live twin there often has the dead child's name and pid.
pub(crate) async fn claims_of_process(
    pool: &MySqlPool,
    host: &str,
    host_id: &str,
    pid: u32,
) -> Result<Vec<String>> {
    let prefix = crate::claimant::token::ClaimToken::process_prefix(host, pid);
    let rows: Vec<Vec<u8>> = sqlx::query_scalar(concat!(
        "SELECT DISTINCT h.holder FROM jobq_holdings h JOIN ",
        crate::statements::listed_running!(),
        " WHERE h.holder LIKE CONCAT(?, '%') AND NOT EXISTS (SELECT 1 FROM jobq_processes p \
         WHERE p.token = h.holder AND p.host_id <> '' AND p.host_id <> ?)"
    ))
    .bind(prefix.replace('_', "\\_"))
    .bind(host_id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .collect())
}
