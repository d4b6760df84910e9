//! The exact text of the statements on jobq's hot path: the session set-up, the claim and the done
//! finish. The library builds its queries from these parts and nothing else (`db::claim`,
//! `db::finish`; their unit tests compare the built text with [`Statement::sql`]), and `jobq bench`
//! measures its raw-SQL limit with the same text, so the limit it reports is the limit of these
//! statements. A DBA can print them to `EXPLAIN` them ([`explain`] puts the word where the server
//! wants it):
//!
//! ```
//! use jobq::statements::{CLAIM_SELECT, FINISH_DONE, explain, placeholders};
//! let kinds = placeholders(2);
//! let sql = CLAIM_SELECT.sql(&["?", "?", "?", "?", "?", "?", &kinds, &kinds, "?", "?", "?", "?", "?"]);
//! assert!(sql.contains("kind IN (?, ?)") && sql.ends_with("FOR UPDATE SKIP LOCKED"));
//! assert!(explain(&FINISH_DONE.sql(&["?", "?", "?"])).contains("*/ EXPLAIN UPDATE job_queue"));
//! ```

/// The clause that keeps a claim to exact kind names ([`EXACT_KIND`] says why). A macro so that it can
/// be spliced into the statements' literal text.
macro_rules! exact_kind {
    () => {
        " AND kind NOT LIKE '% '"
    };
}

/// Put before each of jobq's own UPDATEs of a row's state (the claim's stamp, every finish, a reaper's
/// reset): MariaDB runs it with its CHECK constraints off; MySQL reads a comment. A macro so that it
/// can be spliced into the statements' literal text.
///
/// On MariaDB the payload is text with `CHECK (json_valid(payload))`, and MariaDB checks every CHECK of
/// a row on each UPDATE of it, whatever the UPDATE sets: every claim and every finish parsed the whole
/// payload again, though none of them writes it. `jobq bench --sections raw` prints what that cost
/// (row costs "without the payload's JSON check"): at 2.4 KB payloads the claim took 83–98 µs per row
/// and the finish 40–49 against 73–83 and 28–33 without the check, a sixth of a job's server time; at
/// 2 B, a few µs. These statements write only jobq's own columns (state, token, times, attempts, the
/// error), never the payload, so the check has nothing to find there; INSERTs and every UPDATE that
/// writes a payload (a debounce merge, a batch callback's) keep it. A row written past the check (a
/// session with the checks off, a restore) is therefore claimed like any other, and the claim sets it
/// aside before it runs (`db::claim::malformed`).
///
/// `/*M! … */` is MariaDB's executable comment, read by the parser (also in prepared statements) and
/// ignored by MySQL, whose JSON type cannot hold invalid JSON anyway. This skips every CHECK of
/// `job_queue` in these statements, an operator's own among them; they change only jobq's columns.
macro_rules! unchecked {
    () => {
        "/*M! SET STATEMENT check_constraint_checks = 0 FOR */ "
    };
}
pub(crate) use unchecked;

/// The clause that keeps the worker's finishes to jobs nothing waits for ([`NO_DEPENDENTS`] says why).
macro_rules! no_dependents {
    () => {
        " AND has_dependents = 0"
    };
}

/// Appended to the fence of every finish a worker makes (schema 20): the statement changes only rows
/// no other job waits for. A job that has dependents makes the finish change fewer rows than it names,
/// and is finished again with [`HAS_DEPENDENTS`] in a transaction that also queues or cancels the
/// dependents whose last dependency just ended (`db::finish`, `db::deps`). So the common finish stays
/// one statement with no round trip added: the flag is a column of the row the fence reads anyway,
/// read under the row's lock, and an enqueue sets it (locking the job) before it looks at the job's
/// state, so no dependent is ever missed by its dependency's finish.
pub const NO_DEPENDENTS: &str = no_dependents!();

/// What replaces [`NO_DEPENDENTS`] in the finish of a job that has dependents.
pub const HAS_DEPENDENTS: &str = " AND has_dependents = 1";

/// Appended after every `kind IN (…)` of the claim path: only rows whose kind matches a handler's kind
/// exactly. Spliced into [`CLAIM_SELECT`]; the idle probe and wait use it as a value.
///
/// `kind` is `ascii_bin`, a PAD SPACE collation, so `'quick ' = 'quick'` is true and `kind IN ('quick')`
/// alone also matches a row written with a trailing space. A worker serving `quick` claimed such a row,
/// found no handler for the kind it read back (`"quick "`), and the job failed every attempt for hours.
/// `LIKE` compares without padding, and no valid kind name ends in a space (trailing spaces are the only
/// difference PAD SPACE hides), so this keeps exact matches only. It is checked on the index entry (kind
/// is the last column of `claim_order`), so the claim's plan and the rows it reads stay as they were
/// (`tests/it/claim.rs` checks the plan with this clause).
pub(crate) const EXACT_KIND: &str = exact_kind!();

/// A statement as its fixed text between its parameters: `parts[0]`, the first parameter (or list of
/// them), `parts[1]`, and so on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statement {
    parts: &'static [&'static str],
}

impl Statement {
    /// The fixed text, in order; parameters go between consecutive parts.
    pub const fn parts(&self) -> &'static [&'static str] {
        self.parts
    }

    /// The whole text, with `gaps[i]` between `parts[i]` and `parts[i + 1]`: `"?"` for one parameter,
    /// [`placeholders`] or [`pair_placeholders`] for a list.
    ///
    /// # Panics
    /// When `gaps` does not have one entry per gap.
    pub fn sql(&self, gaps: &[&str]) -> String {
        assert_eq!(
            gaps.len() + 1,
            self.parts.len(),
            "a statement of {} parts has {} gaps",
            self.parts.len(),
            self.parts.len() - 1
        );
        let mut out = String::from(self.parts[0]);
        for (gap, part) in gaps.iter().zip(&self.parts[1..]) {
            out.push_str(gap);
            out.push_str(part);
        }
        out
    }
}

/// `EXPLAIN` of a statement's text: after the MariaDB prefix that the UPDATEs begin with (`unchecked`
/// in the source; `EXPLAIN /*M! SET STATEMENT … FOR */ UPDATE …` is a syntax error there), else first.
pub fn explain(sql: &str) -> String {
    match sql.strip_prefix(unchecked!()) {
        Some(rest) => format!("{}EXPLAIN {rest}", unchecked!()),
        None => format!("EXPLAIN {sql}"),
    }
}

/// `n` placeholders for an `IN (…)` list: `?, ?, ?`.
pub fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// The fewest pairs an `(id, attempts) IN (…)` list is sent with: a list of one pair is sent with the
/// pair twice. MariaDB 10.11 plans an UPDATE whose row-constructor IN holds a single pair as a scan of
/// the whole primary key (EXPLAIN: type `index`; with 1,000,000 finished rows in the table each such
/// finish examined every row and took 0.8–1.5 s, found in `jobq bench --sections big` through the slow
/// log), where two pairs, even the same one twice, give a range of one row. A repeated pair matches its
/// row once, so the rows changed do not differ.
pub const MIN_PAIRS: usize = 2;

/// `n` placeholder pairs for an `(a, b) IN (…)` list: `(?, ?), (?, ?)`.
pub fn pair_placeholders(n: usize) -> String {
    vec!["(?, ?)"; n].join(", ")
}

/// Run on every connection jobq opens, whatever the pool.
///
/// * `time_zone`: sqlx already sends `+00:00`; it is repeated here so the invariant does not depend on
///   a driver default. TIMESTAMP columns are shown and compared in this zone.
/// * READ COMMITTED: no gap locks, so a claim and a fenced finish cannot deadlock on the token index
///   the way they do under REPEATABLE READ, and a locking read sees rows committed since the
///   transaction began.
/// * A short lock wait: the claim path never waits (SKIP LOCKED), and a finish that waits more than a
///   few seconds is better retried than stuck.
pub const SESSION_SETUP: [&str; 2] = [
    "SET time_zone = '+00:00', SESSION innodb_lock_wait_timeout = 10",
    // Its own statement: MariaDB 10.x names the variable tx_isolation, MySQL 8 transaction_isolation.
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
];

/// The text both claim SELECTs share between `ready_queue = ?` and their LIMIT: the pause and pin
/// checks, the guard, the due time, the kinds (parameters: the queue three times, the host, the queue
/// and the kinds of the guard, the kinds).
///
/// The guard asks the index `due_kinds (ready_queue, kind, run_at)` (schema 32) whether anything of
/// the claim's kinds is due in the queue at all: one dive per kind, stopping at the first due entry.
/// Like the pause and pin checks it names no column of the outer query, and MariaDB evaluates such a
/// subquery once while it optimizes: when nothing is due, the plan is "Impossible WHERE" and not one
/// entry of the claim index is read. Without it, a queue whose due rows are all of kinds the worker
/// does not run was read to its end by every claim (`jobq bench --sections backlog`, 1,000,000 due rows
/// over 100 queues and 50 kinds, a worker of 20 kinds whose first nine queues it had run dry: 54,188
/// index entries per claim, 3.98 times the time of the same claim at 10,000 rows). When something is
/// due, the guard costs the one dive that finds it. The guard reads without locks, also inside the
/// locking SELECTs (InnoDB's lock count of the claim transaction is the same with and without it).
/// MySQL 8 may evaluate the subquery at execution instead (not measured): the answer is the same, and
/// the claim index is then read as before.
const DUE: [&str; 8] = [
    " AND NOT EXISTS (SELECT 1 FROM jobq_queues WHERE name = ",
    ") AND (NOT EXISTS (SELECT 1 FROM jobq_queue_hosts WHERE queue = ",
    ") OR EXISTS (SELECT 1 FROM jobq_queue_hosts WHERE queue = ",
    " AND host = ",
    ")) AND EXISTS (SELECT 1 FROM job_queue due FORCE INDEX (due_kinds) WHERE due.ready_queue = ",
    " AND due.kind IN (",
    ") AND due.run_at <= NOW(6)) AND run_at <= NOW(6) AND kind IN (",
    concat!(")", exact_kind!(), " ORDER BY priority, run_at, id LIMIT "),
];

/// What [`CLAIM_SELECT`]'s pick has where `DUE` ends in its ORDER BY: the kinds' end and the slice of
/// the rows it picks from (parameters: how many slices, which one).
///
/// A worker on a Galera node picks first from its node's slice of the due rows, `CRC32(id) MOD n = i`
/// for the `n` nodes live workers are on (`worker::slices`), so that claimers on different nodes lock
/// and stamp different rows: two claims that commit at once on two nodes and write one row fail
/// certification, and one of them is retried. Everywhere else the slice is the whole queue, `MOD 1 =
/// 0`. The hash, not `id MOD n`: Galera gives each node its own `auto_increment_offset`, so the ids of
/// the rows an application enqueued through one node all leave the same remainder. The condition is
/// on a column of the claim index and is checked on its entries (the pick reads the index alone).
const PICK_SLICE: [&str; 3] = [
    concat!(")", exact_kind!(), " AND CRC32(id) MOD "),
    " = ",
    " ORDER BY priority, run_at, id LIMIT ",
];

/// Claim, step 1: lock the first due rows of one queue, in claim order, skipping rows another claim
/// holds, unless the queue is paused (schema 11) or pinned to hosts other than this worker's (schema
/// 15), or nothing of the claim's kinds is due there (the guard, see `DUE`). Parameters: the queue four
/// times, the worker's host, the queue, the kinds (a list), the kinds again, how many slices and which
/// one (`PICK_SLICE`; 1 and 0 for the whole queue), how many rows to pick ([`pick_ahead`] times the
/// claim's rows), the queue, the most rows to lock. `waited_us`
/// is how long each row was due before this claim, by the server's clock (the pickup delay metric; no
/// clock skew).
///
/// Two steps in one statement. The derived table `pick` reads the first due entries of the claim
/// index without locking them; the outer query then locks those rows by primary key, in pick order,
/// skipping rows another claim holds, and checks each again on its newest version (a row claimed
/// since the pick is no longer ready and drops out). Why not lock while walking the index
/// (as [`CLAIM_SELECT_PAST_LOCKED`] does): every claim leaves entries behind in the
/// claim index (its rows' old `ready_queue`) until purge removes them, and at thousands of jobs a
/// second purge lags behind. A non-locking read passes such entries cheaply; a locking read visits
/// each entry's row. Measured on MariaDB 10.11, 2 cores, 60 due rows behind 5,000 claimed rows that an
/// open read view kept from purge: the locking walk took 2.8–5.7 ms, this statement 0.8–1.3 ms (the
/// pick alone 0.6 ms); with purge caught up both took 0.2–0.5 ms. In `jobq bench` (same machine,
/// this claim and the walk alone alternating, three rounds each): pickup p50 at 6,000 jobs/s with one
/// worker of 1,000-row claims (`--sections steady --settings 1:2000:1000 --steady-rates 6000`)
/// 5.4–6.6 ms against 10.5–12.2 ms; one worker at the defaults (`--sections drain --sweep 1:10:10`,
/// two rounds) 4,750–6,050 jobs/s against 3,070–3,270.
///
/// The pick reads rows that other claims in flight are locking (they still look ready to a
/// non-locking read), so it picks a claim's worth for each claimer ([`pick_ahead`]) and the outer LIMIT
/// stops once it has locked enough: concurrent claimers then lock different rows of the same pick. The outer
/// query has no ORDER BY on purpose: sorting the joined rows would lock every picked row before the
/// LIMIT, holding rows the claim does not take. It reads the materialized pick in the order the pick
/// wrote it, which is claim order (MariaDB and MySQL both scan a derived table's temporary table in
/// insertion order; a server that did not would reorder rows within one pick, never skip a
/// higher-priority row for a later pick). When a worker's claim across all its queues locked nothing,
/// it claims once more walking the index with [`CLAIM_SELECT_PAST_LOCKED`] before it believes nothing
/// is due (`Reach` in `db/claim.rs` says why not after every empty pick).
///
/// FORCE INDEX: the plan must never become a table scan, also on a freshly bulk-loaded table whose
/// statistics have not caught up yet.
///
/// The pause and pin checks are primary-key lookups of constants, which MariaDB resolves while it
/// optimizes: for a paused queue, or one pinned elsewhere, the plan is "Impossible WHERE" and not one
/// index entry of the queue is read (measured on 10.11 with 300,000 due rows), for any other queue the
/// plan is unchanged. MySQL 8 reads such subqueries as const tables too (not measured here).
///
/// The columns are what a handler needs. `traceparent` (schema 25) comes from the row the outer query
/// locks by primary key anyway, so it adds no read (`tests/it/traces.rs` compares the Handler_read_*
/// counts), and a NULL adds one byte to the result.
pub const CLAIM_SELECT: Statement = Statement {
    parts: &[
        "SELECT j.id, j.queue, j.kind, j.payload, j.attempts, j.max_attempts, j.timeout_secs, \
         j.traceparent, \
         TIMESTAMPDIFF(MICROSECOND, j.run_at, NOW(6)) AS waited_us \
         FROM (SELECT id FROM job_queue FORCE INDEX (claim_order) \
         WHERE ready_queue = ",
        DUE[0],
        DUE[1],
        DUE[2],
        DUE[3],
        DUE[4],
        DUE[5],
        DUE[6],
        PICK_SLICE[0],
        PICK_SLICE[1],
        PICK_SLICE[2],
        ") pick STRAIGHT_JOIN job_queue j FORCE INDEX (PRIMARY) ON j.id = pick.id \
         WHERE j.ready_queue = ",
        " AND j.run_at <= NOW(6) LIMIT ",
        " FOR UPDATE SKIP LOCKED",
    ],
};

/// The most times the rows a claim wants [`CLAIM_SELECT`] picks: enough for four claimers picking at
/// once to lock different rows of the same pick. Fewer claimers pick less ([`pick_ahead`]). Measured with `jobq bench --sections drain --sweep
/// 1:10:10,4:10:10,2:2000:1000` (two rounds each): four workers of 10-row claims did 3,560–3,840
/// jobs/s picking exactly the rows wanted, 4,330–4,530 picking twice as many, 5,860–6,040 picking four
/// times as many (4,340–4,980 with the locking walk alone); one worker was not slower for it. The
/// entries are index-only reads, but not cheap during a drain, when the index's pages keep changing
/// under the pick: `worker::slices` measures what reading fewer saves.
pub const CLAIM_PICK_AHEAD: u32 = 4;

/// How many times the rows it wants a claim picks when `claimers` claimers (itself among them) lock
/// rows of the same queue on one server: one claim's worth for each, at most [`CLAIM_PICK_AHEAD`]
/// (`worker::slices` counts them and says what the depth costs).
pub fn pick_ahead(claimers: u32) -> u32 {
    claimers.clamp(1, CLAIM_PICK_AHEAD)
}

/// Claim, step 1 when [`CLAIM_SELECT`] locked nothing in any of a worker's queues: lock the first due
/// rows of one queue while walking the claim index, skipping rows another claim holds, so a claim
/// comes back empty only when nothing due is free (the rows [`CLAIM_SELECT`] picked may all have been
/// locked by other claimers while more were due behind them). Same checks; parameters: the queue four
/// times, the worker's host, the queue, the kinds (a list), the kinds again, the most rows.
pub const CLAIM_SELECT_PAST_LOCKED: Statement = Statement {
    parts: &[
        "SELECT id, queue, kind, payload, attempts, max_attempts, timeout_secs, traceparent, \
         TIMESTAMPDIFF(MICROSECOND, run_at, NOW(6)) AS waited_us \
         FROM job_queue FORCE INDEX (claim_order) \
         WHERE ready_queue = ",
        DUE[0],
        DUE[1],
        DUE[2],
        DUE[3],
        DUE[4],
        DUE[5],
        DUE[6],
        DUE[7],
        " FOR UPDATE SKIP LOCKED",
    ],
};

/// Claim, step 2a for a claim of [`LIST_APART_FROM`] rows or more, in the claim's transaction before
/// the stamp: write the claimant's holdings list (schema 38), so a row never runs under a token without
/// being on that token's list. The list (a JSON array of ids) becomes the one given or, when the flag is
/// true, what it held with the given ids added. A worker gives every row it may still be running plus
/// the rows it stamps, so rows finished since drop off; it keeps what the list held while a claim of
/// its own may have committed unseen (until its reconcile has handed such rows back). Parameters: the
/// flag, the ids (a JSON array), the token. It matches no row when the claimant has none (a reaper
/// forgot it): the claim then makes the row again before it stamps (`db::claim`).
pub const HOLDINGS_WRITE: Statement = Statement {
    parts: &[
        "UPDATE jobq_holdings SET held_ids = JSON_MERGE_PRESERVE(IF(",
        ", held_ids, '[]'), ",
        ") WHERE holder = ",
        "",
    ],
};

/// Gives a claimant its holdings row (schema 38), keeping the list of one it already has (a claimant
/// registering again after a reaper forgot it while rows were still listed). Parameter: the token.
pub const HOLD: &str = "INSERT INTO jobq_holdings (holder, held_ids) VALUES (?, '[]') \
     ON DUPLICATE KEY UPDATE held_ids = held_ids";

/// The rows a holdings list names that still run under its holder's token, for a FROM clause in which
/// `h` is a row of `jobq_holdings` (joined before, or outside a subquery): `l.id` each listed id, `q`
/// its row. The one way jobq finds the rows a claimant holds (schema 38): each listed id is one
/// primary-key lookup, however large the table (`STRAIGHT_JOIN` keeps the plan from reading
/// `job_queue` first). A list also names rows that ended since the
/// claimant's last claim (the join drops them) and may name a row twice (count `DISTINCT`).
/// `JSON_TABLE` needs MariaDB 10.6 or MySQL 8.0.
macro_rules! listed_running {
    () => {
        "JSON_TABLE(h.held_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) l \
         STRAIGHT_JOIN job_queue q FORCE INDEX (PRIMARY) ON q.id = l.id AND q.claim = h.holder \
         AND q.state = 'running'"
    };
}
pub(crate) use listed_running;

/// The same rows as a condition on `job_queue`'s own columns (`id`, `claim`, `state`), for a WHERE that
/// reads `job_queue` without an alias, as the jobs list does. The server materialises the listed
/// (id, holder) pairs and looks each id up by primary key. Schema 41's `jobq_jobs_running` view
/// spells out the same condition.
macro_rules! listed_running_where {
    () => {
        "(id, claim) IN (SELECT l.id, h.holder FROM jobq_holdings h, \
         JSON_TABLE(h.held_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) l) \
         AND state = 'running'"
    };
}
pub(crate) use listed_running_where;

/// Removes a claimant's holdings row unless its list names a row that still runs under its token.
/// Parameter: the token. A row that runs under the token unlisted (stamped by hand) does not keep it:
/// the reaper's sweep lists such rows again (`db::reap::sweep_unlisted`).
pub const UNHOLD: &str = concat!(
    "DELETE h FROM jobq_holdings h WHERE h.holder = ? AND NOT EXISTS (SELECT 1 FROM ",
    listed_running!(),
    ")"
);

/// The fewest rows a claim stamps with its holdings list written apart ([`HOLDINGS_WRITE`], then
/// [`CLAIM_STAMP`] or [`CLAIM_STAMP_CARRYING`]); a smaller claim writes it in the stamp
/// ([`CLAIM_STAMP_LISTING`], [`CLAIM_STAMP_CARRYING_LISTING`]).
///
/// MariaDB 10.11 updates a multi-table UPDATE's `job_queue` after the join, each stamped row written
/// to a temporary table and read back by position (`Handler_tmp_write`, `Handler_read_rnd`); apart, the
/// list costs a round trip. Timed from one connection, the stamp of 30 rows took 1.19 ms joined against
/// 1.22 apart, 60 rows 2.13 against 2.07, 120 rows 3.48 against 3.10, 1,000 rows 17.8 against 16.5
/// (medians); a profile of the server through a drain of 1,000-row claims put a third of its time in
/// the joined stamp. Two worker processes draining 100,000 jobs in 1,000-row claims, eleven drains of
/// each alternating, took 47.0 µs of the server's CPU per job apart against 51.6 joined (medians), and
/// drained 34,200 jobs/s against 31,100. At jobq's defaults (10-row claims) the round trip would be a
/// quarter more per claim (`jobq bench` holds the defaults to half a round trip per job).
pub const LIST_APART_FROM: usize = 50;

/// The head of a stamp that writes the claimant's holdings list in the same statement (schema 38):
/// `job_queue` by primary key, joined with the claimant's one row of `jobq_holdings`. A claimant without
/// a holdings row stamps nothing. Followed by the token, then [`HOLDINGS_SET`]. The two tables share no
/// column name (a name both had would be ambiguous unqualified: error 1052).
macro_rules! listing_head {
    () => {
        "UPDATE job_queue FORCE INDEX (PRIMARY) JOIN jobq_holdings h ON h.holder = "
    };
}

/// The write of the list in a joined stamp, after [`listing_head!`]'s token, as [`HOLDINGS_WRITE`]
/// writes it. Parameters: the flag, the ids (a JSON array), followed by `), ` and the stamp's own SET.
const HOLDINGS_SET: [&str; 2] = [
    " SET h.held_ids = JSON_MERGE_PRESERVE(IF(",
    ", h.held_ids, '[]'), ",
];

/// The stamp's assignments up to the token.
macro_rules! stamp_set {
    () => {
        "state = 'running', claim = "
    };
}

/// The stamp's text after the token, up to and after its ids: [`CLAIM_STAMP`]'s last two parts.
const STAMP_REST: [&str; 2] = [
    ", claimed_at = NOW(6), started_at = NOW(6), finished_at = NULL, attempts = attempts + 1 \
     WHERE id IN (",
    ") AND state IN ('queued', 'retry') AND run_at <= NOW(6)",
];

/// Claim, step 2, in the same transaction: stamp the claim token on the locked rows of a claim of
/// [`LIST_APART_FROM`] rows or more, after [`HOLDINGS_WRITE`]. Parameters: the token, the ids (a list). It checks again that each row is still claimable, so that an engine that accepts
/// SKIP LOCKED without locking cannot let two claims stamp one row (see `stamp_selected` in
/// `db/claim.rs`).
///
/// "Claimable" is the state, not the `claim` column: a queued or retry row is claimed whatever token it
/// still carries, and the stamp overwrites it. jobq clears `claim` whenever a row leaves `running`, so
/// such a token came from outside (an application's UPDATE, a restore from a backup taken mid-claim);
/// it names no claimant that could still finish the row, because every finish is fenced on
/// `state = 'running'` as well as the token and attempt. Requiring `claim IS NULL` here made the claim
/// pick and lock such rows and then stamp none of them: a handful of them at the head of a queue stalled
/// every job behind them.
pub const CLAIM_STAMP: Statement = Statement {
    parts: &[
        concat!(
            unchecked!(),
            "UPDATE job_queue FORCE INDEX (PRIMARY) SET ",
            stamp_set!()
        ),
        STAMP_REST[0],
        STAMP_REST[1],
    ],
};

/// [`CLAIM_STAMP`] for a claim of fewer than [`LIST_APART_FROM`] rows: the same stamp, joined with the
/// claimant's holdings row, whose list it writes as [`HOLDINGS_WRITE`] does. Parameters: the token (its
/// holdings row), whether the list keeps what it held, the list, the token (to stamp), the ids (a list).
/// Matched rows count the holdings row as one more; a claimant with no holdings row matches nothing.
pub const CLAIM_STAMP_LISTING: Statement = Statement {
    parts: &[
        concat!(unchecked!(), listing_head!()),
        HOLDINGS_SET[0],
        HOLDINGS_SET[1],
        concat!("), ", stamp_set!()),
        STAMP_REST[0],
        STAMP_REST[1],
    ],
};

/// The carrying stamp's assignments up to the token it stamps.
macro_rules! carrying_set {
    () => {
        "finished_at = IF(state = 'running', NOW(6), NULL), \
         claimed_at = IF(state = 'running', claimed_at, NOW(6)), \
         started_at = IF(state = 'running', started_at, NOW(6)), \
         attempts = IF(state = 'running', attempts, attempts + 1), \
         claim = IF(state = 'running', NULL, "
    };
}

/// The carrying stamp's text after the token it stamps: [`CLAIM_STAMP_CARRYING`]'s last four parts.
const CARRYING_REST: [&str; 4] = [
    "), state = IF(state = 'running', 'done', 'running') WHERE (claim = ",
    concat!(
        " AND state = 'running'",
        no_dependents!(),
        " AND (id, attempts) IN ("
    ),
    ")) OR (id IN (",
    ") AND state IN ('queued', 'retry') AND run_at <= NOW(6))",
];

/// Claim, step 2, when the claim carries done finishes of the worker's earlier jobs (`db::claim`): one
/// UPDATE finishes those rows as done, fenced as [`FINISH_DONE_BATCH`] fences them (a job with
/// dependents makes it fall short, and is finished by the finisher), and stamps the
/// locked rows, checked as [`CLAIM_STAMP`] checks them (a stale token on a queued row is overwritten).
/// [`HOLDINGS_WRITE`] comes before it, as before [`CLAIM_STAMP`]; a smaller claim sends
/// [`CLAIM_STAMP_CARRYING_LISTING`] instead. A claim that carries a batch of outcomes is then five round
/// trips (four for a small one) and one commit: BEGIN, [`CLAIM_SELECT`], the list, this, COMMIT.
/// Parameters: the token (to stamp), the token (the finishes' fence), the (id, attempt) pairs to
/// finish (a list), the ids to stamp (a list).
///
/// The two branches of the WHERE match disjoint rows (running ones under our token; claimable ones),
/// and every assignment tells them apart by the row's old `state`. `state` is assigned last, so each
/// other assignment reads its old value whether the server assigns left to right (a single-table
/// UPDATE on MySQL, and on MariaDB by default) or all from the row as it was (MariaDB's
/// `SIMULTANEOUS_ASSIGNMENT` mode, and a table a multi-table UPDATE changes after the join, as
/// MariaDB 10.11 does `job_queue` in [`CLAIM_STAMP_CARRYING_LISTING`]). When it changes fewer rows than it names, an UPDATE cannot say
/// which branch fell short: the claim is rolled back and made again with the finish and the stamp
/// apart.
///
/// FORCE INDEX, as for [`FINISH_DONE_BATCH`]: both branches are lists of primary keys, which the
/// server reads as one set of point ranges.
pub const CLAIM_STAMP_CARRYING: Statement = Statement {
    parts: &[
        concat!(
            unchecked!(),
            "UPDATE job_queue FORCE INDEX (PRIMARY) SET ",
            carrying_set!()
        ),
        CARRYING_REST[0],
        CARRYING_REST[1],
        CARRYING_REST[2],
        CARRYING_REST[3],
    ],
};

/// [`CLAIM_STAMP_CARRYING`] for a claim of fewer than [`LIST_APART_FROM`] rows, joined with the
/// claimant's holdings row as [`CLAIM_STAMP_LISTING`] is. Parameters: the token (its holdings row),
/// whether the list keeps what it held, the list, then [`CLAIM_STAMP_CARRYING`]'s.
pub const CLAIM_STAMP_CARRYING_LISTING: Statement = Statement {
    parts: &[
        concat!(unchecked!(), listing_head!()),
        HOLDINGS_SET[0],
        HOLDINGS_SET[1],
        concat!("), ", carrying_set!()),
        CARRYING_REST[0],
        CARRYING_REST[1],
        CARRYING_REST[2],
        CARRYING_REST[3],
    ],
};

/// The done finish of one job, fenced by its claim token and attempt, of a job nothing waits for
/// ([`NO_DEPENDENTS`]). Parameters: the id, the token, the attempt.
pub const FINISH_DONE: Statement = Statement {
    parts: &[
        concat!(
            unchecked!(),
            "UPDATE job_queue SET state = 'done', claim = NULL, finished_at = NOW(6) WHERE id = "
        ),
        " AND claim = ",
        " AND attempts = ",
        concat!(" AND state = 'running'", no_dependents!()),
    ],
};

/// The batched done finish: many jobs of one worker in one autocommit statement, each fenced by its
/// attempt, of jobs nothing waits for ([`NO_DEPENDENTS`]). Parameters: the token, the (id, attempt) pairs (a list). When it changes fewer rows than it
/// names, jobq reads back which rows it changed (done at the attempt it names).
///
/// FORCE INDEX: with statistics taken while few rows ran, the optimizer could walk an index of
/// `state` (schemas 34 to 40 had `state_claim`) instead, locking the running rows of every worker on
/// its way (two workers' finishes then deadlock; seen in `jobq bench`). By primary key it locks only
/// these.
pub const FINISH_DONE_BATCH: Statement = Statement {
    parts: &[
        concat!(
            unchecked!(),
            "UPDATE job_queue FORCE INDEX (PRIMARY) \
         SET state = 'done', claim = NULL, finished_at = NOW(6) WHERE claim = "
        ),
        concat!(
            " AND state = 'running'",
            no_dependents!(),
            " AND (id, attempts) IN ("
        ),
        ")",
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_join_their_parts_around_the_gaps() {
        assert_eq!(
            FINISH_DONE.sql(&["?", "?", "?"]),
            "/*M! SET STATEMENT check_constraint_checks = 0 FOR */ UPDATE job_queue SET state = 'done', \
             claim = NULL, finished_at = NOW(6) WHERE id = ? \
             AND claim = ? AND attempts = ? AND state = 'running' AND has_dependents = 0"
        );
        assert!(
            FINISH_DONE_BATCH
                .sql(&["?", &pair_placeholders(2)])
                .ends_with("(id, attempts) IN ((?, ?), (?, ?))")
        );
        let one = placeholders(1);
        let pick = CLAIM_SELECT.sql(&[
            "?", "?", "?", "?", "?", "?", &one, &one, "?", "?", "?", "?", "?",
        ]);
        assert!(
            pick.contains("kind IN (?) AND kind NOT LIKE '% ' AND CRC32(id) MOD ? = ? ORDER BY"),
            "{pick}"
        );
        assert!(
            pick.contains("due.kind IN (?) AND due.run_at <= NOW(6))"),
            "{pick}"
        );
    }

    #[test]
    fn the_carrying_stamp_assigns_state_last() {
        let sql = CLAIM_STAMP_CARRYING.sql(&["?", "?", &pair_placeholders(1), &placeholders(1)]);
        let set = &sql[..sql.find(" WHERE ").unwrap()];
        assert!(
            set.ends_with("state = IF(state = 'running', 'done', 'running')"),
            "every other assignment must read the old state: {set}"
        );
        assert!(sql.ends_with("run_at <= NOW(6))"));
    }

    #[test]
    #[should_panic(expected = "has 4 gaps")]
    fn a_missing_gap_is_a_bug() {
        CLAIM_STAMP_CARRYING.sql(&["?", "?", "?"]);
    }
}
