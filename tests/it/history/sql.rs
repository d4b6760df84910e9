//! SQL handlers' copies: a procedure that records each copy in an effects table on the server, a
//! statement that is a whole copy and leaves one row when it commits, and the readers that turn those
//! tables into handler events.
//!
//! A copy of an SQL job is one session running one attempt's statement, so a copy's `pid` here is the
//! session's connection id. Rows are stamped with `SYSDATE(6)`, the server's time when each row is
//! written (`NOW(6)` would be the time the `CALL` began for every row of a copy), so these events are
//! on the database clock.

use super::{At, Event, History, JobId, Kind, Source};

/// The effects table [`recorded_procedure`] writes to, keyed by job so that a watching copy's look
/// at its job's earlier copies reads those rows only, however many jobs ran before.
pub fn effects_table(table: &str) -> String {
    format!(
        "CREATE TABLE {table} (n BIGINT AUTO_INCREMENT PRIMARY KEY, job_id BIGINT UNSIGNED NOT NULL, \
         attempt SMALLINT UNSIGNED NOT NULL, what VARCHAR(10) NOT NULL, conn BIGINT UNSIGNED NOT NULL, \
         claim VARCHAR(255) NULL, at TIMESTAMP(6) NOT NULL, KEY (job_id))"
    )
}

/// [`effects_table`] in MyISAM, which a rollback does not reach: for a transactional handler, whose
/// effect commits with its finish or not at all, so that the copies whose transaction rolled back
/// (killed, or their claim gone) are on record too. In InnoDB only the copy that committed would be.
pub fn effects_table_kept_on_rollback(table: &str) -> String {
    format!("{} ENGINE = MyISAM", effects_table(table))
}

/// A procedure `name(job_id, claim, attempt)` (bind `$job_id`, `$claim`, `$attempt`) that records its
/// copy's start and end in `table` around `body`, the way [`super::recorded_command`] does in a file.
///
/// With `watch_earlier`, a copy first looks at the earlier copies of its job that never recorded an
/// end: one whose session still runs a statement on the server runs beside it (`overlap`, this
/// copy's row); the others are recorded `gone` at that moment. This is the evidence that a copy cut
/// off from its worker was stopped before the next one started, taken from the server's process list
/// rather than from the job lock under test. It goes by connection id, which starts again from 1 when
/// the server restarts: copies older than the server's start are gone whatever their id, so a test
/// that restarts its server must keep it down for two seconds or more.
pub fn recorded_procedure(name: &str, table: &str, body: &str, watch_earlier: bool) -> String {
    let row = |what: &str| {
        format!(
            "INSERT INTO {table} (job_id, attempt, what, conn, claim, at) \
             VALUES (p_job, p_attempt, '{what}', CONNECTION_ID(), p_claim, SYSDATE(6));"
        )
    };
    let unended = format!(
        "FROM {table} s WHERE s.job_id = p_job AND s.what = 'start' AND NOT EXISTS \
         (SELECT 1 FROM {table} e WHERE e.job_id = s.job_id AND e.attempt = s.attempt \
         AND e.conn = s.conn AND e.what IN ('end', 'gone'))"
    );
    // Connection ids start again from 1 when the server restarts, so only a copy that started since
    // this server's start can be the session of that id. `Uptime` counts whole seconds: a second
    // less is an earlier bound on the start, and a restart that takes two seconds or more keeps the
    // copies before it out.
    let running = "(s.at >= SYSDATE(6) - INTERVAL (1 + (SELECT VARIABLE_VALUE \
                   FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME')) SECOND \
                   AND EXISTS (SELECT 1 FROM information_schema.PROCESSLIST p \
                   WHERE p.ID = s.conn AND p.COMMAND = 'Query'))";
    let watch = if watch_earlier {
        format!(
            "IF EXISTS (SELECT 1 {unended} AND {running}) THEN {overlap} END IF; \
             INSERT INTO {table} (job_id, attempt, what, conn, claim, at) \
             SELECT s.job_id, s.attempt, 'gone', s.conn, s.claim, SYSDATE(6) {unended} \
             AND NOT {running};",
            overlap = row("overlap"),
        )
    } else {
        String::new()
    };
    format!(
        "CREATE PROCEDURE {name}(p_job BIGINT UNSIGNED, p_claim VARCHAR(255), p_attempt SMALLINT UNSIGNED) BEGIN \
         {watch} {start} {body} {end} END",
        start = row("start"),
        end = row("end"),
    )
}

/// One row of an effects table, as [`History::read_sql_effects`] selects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlEffectRow {
    pub job: JobId,
    pub attempt: u16,
    pub what: String,
    pub conn: u32,
    pub claim: Option<String>,
    /// Microseconds since the epoch, the server's clock.
    pub at: i64,
}

impl History {
    /// Adds the copies that rows of a [`recorded_procedure`]'s table record. A row of any other
    /// kind is an error, as an unknown effect line is.
    pub fn read_sql_effect_rows(&mut self, rows: &[SqlEffectRow]) {
        for r in rows {
            let pid = r.conn;
            let kind = match r.what.as_str() {
                "start" => Kind::HandlerStarted { pid },
                "end" => Kind::HandlerEnded { pid },
                "gone" => Kind::Gone { pid },
                "overlap" => Kind::LockTaken { pid },
                _ => panic!("unknown effect row {r:?}"),
            };
            self.events.push(Event {
                job: r.job,
                attempt: r.attempt,
                kind,
                at: At::database(r.at),
                claimant: r.claim.clone().filter(|c| !c.is_empty()),
                source: Source::Effects,
            });
        }
    }

    /// Adds what the effects table `table` holds, in the order it was written.
    pub async fn read_sql_effects(&mut self, pool: &sqlx::MySqlPool, table: &str) {
        type Row = (u64, u16, Vec<u8>, u64, Option<Vec<u8>>, i64);
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "SELECT job_id, attempt, CAST(what AS BINARY), conn, CAST(claim AS BINARY), \
             CAST(UNIX_TIMESTAMP(at) * 1000000 AS SIGNED) FROM {table} ORDER BY n"
        ))
        .fetch_all(pool)
        .await
        .unwrap();
        let rows: Vec<SqlEffectRow> = rows
            .into_iter()
            .map(|(job, attempt, what, conn, claim, at)| SqlEffectRow {
                job,
                attempt,
                what: String::from_utf8(what).unwrap(),
                conn: u32::try_from(conn).unwrap(),
                claim: claim.map(|c| String::from_utf8(c).unwrap()),
                at,
            })
            .collect();
        self.read_sql_effect_rows(&rows);
    }
}

/// A table of copies that are one statement each ([`copy_statement`]): a row per copy that committed,
/// with the time its statement began (`NOW(6)`) and the time it wrote the row (`SYSDATE(6)`, after its
/// work), and the server that ran it (`@@wsrep_node_name`, on a Galera cluster the node). A copy cut
/// short before its commit leaves no row and had no effect. One row and one commit a copy, because on
/// a cluster every commit is certified by every node: [`recorded_procedure`]'s three would triple the
/// drain's writes.
pub fn copies_table(table: &str) -> String {
    format!(
        "CREATE TABLE {table} (n BIGINT AUTO_INCREMENT PRIMARY KEY, job_id BIGINT UNSIGNED NOT NULL, \
         attempt SMALLINT UNSIGNED NOT NULL, conn BIGINT UNSIGNED NOT NULL, claim VARCHAR(255) NULL, \
         node VARCHAR(64) NOT NULL, started TIMESTAMP(6) NOT NULL, ended TIMESTAMP(6) NOT NULL, \
         KEY (job_id)) ENGINE = InnoDB"
    )
}

/// The statement of an SQL handler whose every copy is one row of the [`copies_table`] `table` (bind
/// `$job_id`, `$attempt`, `$claim`). `work` is a condition evaluated before the row is written: the
/// copy's work (`SLEEP(0.01) = 0` for 10 ms), or `TRUE` for none.
pub fn copy_statement(table: &str, work: &str) -> String {
    format!(
        "INSERT INTO {table} (job_id, attempt, claim, conn, node, started, ended) \
         SELECT ?, ?, ?, CONNECTION_ID(), @@wsrep_node_name, NOW(6), SYSDATE(6) FROM DUAL WHERE {work}"
    )
}

/// One row of a [`copies_table`], as [`History::read_copies`] selects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyRow {
    pub job: JobId,
    pub attempt: u16,
    pub conn: u32,
    pub claim: Option<String>,
    /// Microseconds since the epoch, the server's clock.
    pub started: i64,
    pub ended: i64,
}

impl History {
    /// Adds the copies that rows of a [`copies_table`] record: each one started and ran to its end.
    pub fn read_copy_rows(&mut self, rows: &[CopyRow]) {
        for r in rows {
            let pid = r.conn;
            for (kind, micros) in [
                (Kind::HandlerStarted { pid }, r.started),
                (Kind::HandlerEnded { pid }, r.ended),
            ] {
                self.events.push(Event {
                    job: r.job,
                    attempt: r.attempt,
                    kind,
                    at: At::database(micros),
                    claimant: r.claim.clone().filter(|c| !c.is_empty()),
                    source: Source::Effects,
                });
            }
        }
    }

    /// Adds what the [`copies_table`] `table` holds.
    pub async fn read_copies(&mut self, pool: &sqlx::MySqlPool, table: &str) {
        type Row = (u64, u16, u64, Option<Vec<u8>>, i64, i64);
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "SELECT job_id, attempt, conn, CAST(claim AS BINARY), \
             CAST(UNIX_TIMESTAMP(started) * 1000000 AS SIGNED), \
             CAST(UNIX_TIMESTAMP(ended) * 1000000 AS SIGNED) FROM {table} ORDER BY n"
        ))
        .fetch_all(pool)
        .await
        .unwrap();
        let rows: Vec<CopyRow> = rows
            .into_iter()
            .map(|(job, attempt, conn, claim, started, ended)| CopyRow {
                job,
                attempt,
                conn: u32::try_from(conn).unwrap(),
                claim: claim.map(|c| String::from_utf8(c).unwrap()),
                started,
                ended,
            })
            .collect();
        self.read_copy_rows(&rows);
    }
}
