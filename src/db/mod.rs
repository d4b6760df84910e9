//! Connections and the SQL that jobq runs. Every statement lives in a submodule of this one, one file per
//! concern, so there is one place to look for each table's queries.

pub mod admin;
pub mod claim;
pub(crate) mod dedicated;
pub mod enqueue;
pub mod finish;
pub mod migrate;
pub mod prune;
pub mod reap;
pub mod registry;
pub(crate) mod row;
pub mod schedule;
pub mod tls;

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, MySqlPool};

use crate::error::{ConnectFailure, Error, Result};

pub use sqlx::MySqlPool as Pool;
pub use tls::{SslMode, check_ca_file, with_tls};

/// MySQL and MariaDB server error numbers jobq reacts to.
pub(crate) mod codes {
    /// `ER_LOCK_WAIT_TIMEOUT`.
    pub(crate) const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// `ER_LOCK_DEADLOCK`.
    pub(crate) const DEADLOCK: u16 = 1213;
    /// `ER_SERVER_SHUTDOWN`: the server is going down.
    pub(crate) const SERVER_SHUTDOWN: u16 = 1053;
    /// `ER_CONNECTION_KILLED` (MariaDB) / `ER_QUERY_INTERRUPTED` (1317): our statement was killed.
    pub(crate) const CONNECTION_KILLED: u16 = 1927;
    pub(crate) const QUERY_INTERRUPTED: u16 = 1317;
    /// `ER_ACCESS_DENIED_ERROR`.
    pub(crate) const ACCESS_DENIED: u16 = 1045;
    /// `ER_ACCESS_DENIED_NO_PASSWORD_ERROR`: e.g. root that may only log in through the unix socket.
    pub(crate) const ACCESS_DENIED_NO_PASSWORD: u16 = 1698;
    /// `ER_CON_COUNT_ERROR`: the server has `max_connections` clients already.
    pub(crate) const TOO_MANY_CONNECTIONS: u16 = 1040;
    /// `ER_SECURE_TRANSPORT_REQUIRED` (MySQL 5.7+): a plaintext connection under
    /// `require_secure_transport=ON`. MariaDB answers [`ACCESS_DENIED`] instead.
    pub(crate) const SECURE_TRANSPORT_REQUIRED: u16 = 3159;
    /// `ER_BAD_DB_ERROR`: unknown database.
    pub(crate) const BAD_DB: u16 = 1049;
    /// `ER_NO_SUCH_TABLE`.
    pub(crate) const NO_SUCH_TABLE: u16 = 1146;
    /// `ER_OPTION_PREVENTS_STATEMENT`: "running with the --read-only option" (also used for other
    /// options, so the message is checked too; see [`super::is_read_only`]).
    pub(crate) const OPTION_PREVENTS_STATEMENT: u16 = 1290;
    /// `ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION`.
    pub(crate) const READ_ONLY_TRANSACTION: u16 = 1792;
    /// `ER_READ_ONLY_MODE` (MySQL's `super_read_only`/InnoDB read-only mode).
    pub(crate) const READ_ONLY_MODE: u16 = 1836;
}

/// True for the errors a server gives once it is read-only: seen on the old primary after a failover,
/// while a proxy or DNS already points new connections at the new one. The statement is worth trying
/// again on a new connection, never on this one: see [`failover`].
pub(crate) fn is_read_only(e: &sqlx::Error) -> bool {
    match error_number(e) {
        Some(codes::READ_ONLY_TRANSACTION | codes::READ_ONLY_MODE) => true,
        Some(codes::OPTION_PREVENTS_STATEMENT) => {
            let m = db_message(e).to_ascii_lowercase();
            m.contains("read-only") || m.contains("read_only")
        }
        _ => false,
    }
}

/// Connections opened before a read-only error are not used again.
///
/// After a failover the old primary turns read-only, and every pooled connection still talks to it: a
/// retry on one of them fails the same way forever. When any statement of this process gets a read-only
/// error, [`note`] records when; from then on the pools close, instead of handing out, every connection
/// opened before that instant (see `before_acquire` in `pool_options`), so the retry opens a fresh one,
/// which reaches the new primary. Process-wide on purpose: the cost of a wrongly recycled connection is
/// one reconnect, and the error on one connection is news about the server behind all of them.
pub(crate) mod failover {
    use std::sync::LazyLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);
    /// Milliseconds after `BASE` of the last read-only error, plus one; 0 = none yet.
    static SEEN: AtomicU64 = AtomicU64::new(0);

    fn now_ms() -> u64 {
        u64::try_from(BASE.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Records `e` if it is a read-only error.
    pub(crate) fn note(e: &sqlx::Error) {
        if super::is_read_only(e) {
            tracing::warn!(error = %e, "the server is read-only (a failover?); reconnecting");
            SEEN.fetch_max(now_ms() + 1, Ordering::SeqCst);
        }
    }

    /// True when a connection of this `age` was opened at or before the last read-only error.
    pub(crate) fn predates_read_only(age: Duration) -> bool {
        let seen = SEEN.load(Ordering::SeqCst);
        if seen == 0 {
            return false;
        }
        let age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        now_ms().saturating_sub(age_ms) < seen
    }
}

/// The server error number of a database error, if it is one.
pub(crate) fn error_number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .map(|m| m.number())
}

/// Deadlocks, lock-wait timeouts, lost connections and a read-only server (after a failover; the retry
/// gets a new connection, see [`failover`]): the statement (or its whole transaction) can be tried again
/// as it is.
pub(crate) fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(_) => {
            matches!(
                error_number(e),
                Some(
                    codes::DEADLOCK
                        | codes::LOCK_WAIT_TIMEOUT
                        | codes::SERVER_SHUTDOWN
                        | codes::CONNECTION_KILLED
                        | codes::QUERY_INTERRUPTED
                        | codes::TOO_MANY_CONNECTIONS
                )
            ) || is_read_only(e)
        }
        _ => false,
    }
}

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

/// Statements run on every connection jobq opens, whatever the pool.
///
/// * `time_zone`: sqlx already sends `+00:00`; it is repeated here so the invariant does not depend on a
///   driver default. TIMESTAMP columns are shown and compared in this zone.
/// * READ COMMITTED: no gap locks, so a claim and a fenced finish cannot deadlock on the token index the
///   way they do under REPEATABLE READ, and a locking read sees rows committed since the transaction began.
/// * A short lock wait: the claim path never waits (SKIP LOCKED), and a finish that waits more than a few
///   seconds is better retried than stuck.
const SESSION_SETUP: [&str; 2] = [
    "SET time_zone = '+00:00', SESSION innodb_lock_wait_timeout = 10",
    // Its own statement: MariaDB 10.x names the variable tx_isolation, MySQL 8 transaction_isolation.
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
];

async fn setup_session(conn: &mut sqlx::MySqlConnection) -> Result<(), sqlx::Error> {
    for stmt in SESSION_SETUP {
        conn.execute(stmt).await?;
    }
    Ok(())
}

/// How to reach the database: a URL plus pool sizing.
#[derive(Debug, Clone)]
pub struct ConnectConfig {
    /// `mysql://user:password@host:port/database`, with TLS settings in its query if any:
    /// `?ssl-mode=verify_identity&ssl-ca=/etc/mysql/ca.pem` (see [`tls`]; [`with_tls`] writes them in).
    pub url: String,
    /// Most connections the pool opens.
    pub max_connections: u32,
    /// How long to wait for a connection before giving up.
    pub acquire_timeout: Duration,
}

impl ConnectConfig {
    /// A config for `url` with a small pool, fit for admin commands.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 4,
            acquire_timeout: Duration::from_secs(10),
        }
    }

    /// Sets the pool's maximum size.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Parses the URL and pins jobq's session settings.
    pub(crate) fn options(&self) -> Result<MySqlConnectOptions> {
        parse_url(&self.url)
    }
}

/// Parses a `mysql://` URL into connect options, with a message naming what is wrong (including its TLS
/// settings: see [`tls`]).
pub(crate) fn parse_url(url: &str) -> Result<MySqlConnectOptions> {
    if !(url.starts_with("mysql://") || url.starts_with("mariadb://")) {
        return Err(Error::InvalidUrl {
            url: redact_url(url),
            reason: "expected mysql://user:password@host:port/database".into(),
        });
    }
    let url = url.replacen("mariadb://", "mysql://", 1);
    tls::check_url(&url).map_err(|reason| Error::InvalidUrl {
        url: redact_url(&url),
        reason,
    })?;
    let opts = MySqlConnectOptions::from_str(&url).map_err(|e| Error::InvalidUrl {
        url: redact_url(&url),
        reason: e.to_string(),
    })?;
    if opts.get_database().is_none_or(str::is_empty) {
        return Err(Error::InvalidUrl {
            url: redact_url(&url),
            reason: "no database name: add /DATABASE at the end".into(),
        });
    }
    // sqlx's own statement logging would warn about every idle wait (a CALL that waits on purpose) as a
    // slow statement; jobq logs what matters itself.
    Ok(opts
        .timezone(Some("+00:00".to_string()))
        .disable_statement_logging())
}

/// Reads a password file: its content with one trailing line ending removed (`echo secret > file` and
/// editors add one; a password never ends in a newline).
///
/// # Errors
/// [`Error::Io`] naming the file when it cannot be read, [`Error::InvalidArgument`] when it is empty or
/// not UTF-8.
pub fn read_password_file(path: &std::path::Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        context: format!("cannot read the database password file {}", path.display()),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        Error::InvalidArgument(format!(
            "database password file {} is not UTF-8",
            path.display()
        ))
    })?;
    let password = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if password.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "database password file {} is empty",
            path.display()
        )));
    }
    Ok(password.to_string())
}

/// `url` with its password set to `password` (percent-encoded, so any character works), replacing any
/// password it had.
///
/// # Errors
/// [`Error::InvalidUrl`] when the URL has no `user@` part to attach a password to.
pub fn with_password(url: &str, password: &str) -> Result<String> {
    let bad = |reason: &str| Error::InvalidUrl {
        url: redact_url(url),
        reason: reason.into(),
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("expected mysql://user@host:port/database"))?;
    // The host part never contains '@'; a password could, encoded or not, so split at the last one.
    let (creds, host) = rest.rsplit_once('@').ok_or_else(|| {
        bad("a password file needs a user in the URL: mysql://user@host:port/database")
    })?;
    let user = creds.split_once(':').map_or(creds, |(u, _)| u);
    let mut encoded = String::with_capacity(password.len() * 3);
    for b in password.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(format!("{scheme}://{user}:{encoded}@{host}"))
}

/// The URL with its password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((creds, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match creds.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// A pool that connects when first used: for long-running services, which wait out a database that
/// is not there yet instead of failing at start. Only the URL is checked here.
///
/// # Errors
/// When the URL is invalid.
pub fn connect_lazy(cfg: &ConnectConfig) -> Result<MySqlPool> {
    Ok(pool_options(cfg).connect_lazy_with(cfg.options()?))
}

/// Opens a pool after checking, with one plain connection, that the server answers and takes the login,
/// so the usual failures become messages that say what is wrong (bad URL, unreachable server, bad login,
/// unknown database) at once instead of after the pool's acquire timeout.
pub async fn connect(cfg: &ConnectConfig) -> Result<MySqlPool> {
    let opts = cfg.options()?;
    let probe = tokio::time::timeout(cfg.acquire_timeout, async {
        let mut conn = opts.connect().await?;
        setup_session(&mut conn).await?;
        conn.close().await
    })
    .await;
    match probe {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(connect_error(&cfg.url, e)),
        Err(_) => {
            return Err(Error::Connect {
                url: redact_url(&cfg.url),
                kind: ConnectFailure::Unreachable,
                reason: format!(
                    "server unreachable (no answer within {} s)",
                    cfg.acquire_timeout.as_secs()
                ),
            });
        }
    }
    Ok(pool_options(cfg).connect_lazy_with(opts))
}

fn pool_options(cfg: &ConnectConfig) -> MySqlPoolOptions {
    MySqlPoolOptions::new()
        .max_connections(cfg.max_connections)
        .min_connections(0)
        .acquire_timeout(cfg.acquire_timeout)
        // No ping before handing out a connection: sqlx already pings every connection when it comes
        // back, and a connection that died in between fails its statement with an I/O error, which every
        // caller on the hot path retries anyway. That is one round trip per claim and per finish saved.
        .test_before_acquire(false)
        .after_connect(|conn, _meta| Box::pin(setup_session(conn)))
        // After a read-only error (a failover), connections opened before it are closed instead of
        // handed out. No round trip: one atomic load per checkout.
        .before_acquire(|_conn, meta| {
            let keep = !failover::predates_read_only(meta.age);
            Box::pin(async move { Ok(keep) })
        })
}

/// Creates the URL's database if it does not exist (`jobq migrate --create-database`). Connects to the
/// server without selecting a database, so it works before the database exists.
pub async fn create_database(url: &str) -> Result<bool> {
    let opts = parse_url(url)?;
    let name = opts.get_database().unwrap_or_default().to_string();
    if name.contains('`') {
        return Err(Error::InvalidUrl {
            url: redact_url(url),
            reason: "database name contains a backquote".into(),
        });
    }
    let mut conn = opts
        .database("")
        .connect()
        .await
        .map_err(|e| connect_error(url, e))?;
    let exists: Option<Vec<u8>> = sqlx::query_scalar(
        "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
    )
    .bind(&name)
    .fetch_optional(&mut conn)
    .await?;
    if exists.is_none() {
        conn.execute(format!("CREATE DATABASE IF NOT EXISTS `{name}`").as_str())
            .await?;
    }
    conn.close().await?;
    Ok(exists.is_none())
}

/// Opens one connection outside any pool, with the same session setup. Used for anchor sessions, whose
/// connection id must stay the same for as long as they live.
pub(crate) async fn open_anchor(opts: &MySqlConnectOptions) -> Result<sqlx::MySqlConnection> {
    let mut conn = opts.connect().await?;
    setup_session(&mut conn).await?;
    Ok(conn)
}

fn connect_error(url: &str, e: sqlx::Error) -> Error {
    let mode = tls::mode_of(url);
    let url = redact_url(url);
    let (kind, reason) = match (&e, error_number(&e)) {
        (_, Some(codes::ACCESS_DENIED | codes::SECURE_TRANSPORT_REQUIRED))
            if mode == SslMode::Disabled =>
        {
            // MariaDB refuses a plaintext login under require_secure_transport=ON with a plain
            // "access denied" (measured on 10.11), so the likely cause is named here.
            (
                ConnectFailure::Tls,
                format!(
                    "access denied: {}; ssl-mode is disabled, and a server with \
                     require_secure_transport=ON refuses every login without TLS this way",
                    db_message(&e)
                ),
            )
        }
        (_, Some(codes::ACCESS_DENIED | codes::ACCESS_DENIED_NO_PASSWORD)) => (
            ConnectFailure::AccessDenied,
            format!("access denied: {}", db_message(&e)),
        ),
        (_, Some(codes::BAD_DB)) => (
            ConnectFailure::UnknownDatabase,
            format!("{}; create it first (CREATE DATABASE ...)", db_message(&e)),
        ),
        (_, Some(codes::TOO_MANY_CONNECTIONS)) => (
            ConnectFailure::Unreachable,
            format!(
                "server unreachable (too many connections: {})",
                db_message(&e)
            ),
        ),
        (_, Some(codes::SECURE_TRANSPORT_REQUIRED)) => (
            ConnectFailure::Tls,
            format!(
                "the server requires TLS: {}; set ssl-mode to verify_identity (or required)",
                db_message(&e)
            ),
        ),
        (sqlx::Error::Tls(inner), _) => (
            ConnectFailure::Tls,
            format!("TLS failed (ssl-mode {mode}): {inner}"),
        ),
        (sqlx::Error::Io(io), _) if let Some(tls) = tls_failure(io) => (
            ConnectFailure::Tls,
            match tls {
                rustls::Error::InvalidCertificate(why) => {
                    let hint = match why {
                        rustls::CertificateError::UnknownIssuer => {
                            "; ssl-ca must hold the CA that signed it"
                        }
                        rustls::CertificateError::NotValidForName
                        | rustls::CertificateError::NotValidForNameContext { .. } => {
                            "; connect to a host name or address that the certificate names"
                        }
                        _ => "",
                    };
                    format!(
                        "the server's TLS certificate was refused (ssl-mode {mode}): {tls}{hint}"
                    )
                }
                _ => format!("TLS handshake failed (ssl-mode {mode}): {tls}"),
            },
        ),
        (sqlx::Error::Io(io), _) => (
            ConnectFailure::Unreachable,
            format!("server unreachable ({io})"),
        ),
        (sqlx::Error::PoolTimedOut, _) => (
            ConnectFailure::Unreachable,
            "server unreachable (timed out)".to_string(),
        ),
        (sqlx::Error::Configuration(c), _) => {
            return Error::InvalidUrl {
                url,
                reason: c.to_string(),
            };
        }
        _ => (ConnectFailure::Other, e.to_string()),
    };
    Error::Connect { url, kind, reason }
}

/// The TLS error inside an I/O error, if that is what it is: rustls reports a failed handshake (a refused
/// certificate, an alert from the server) as an `InvalidData` I/O error wrapping its own error, which
/// sqlx passes on as it is. Tied to the TLS backend chosen in `Cargo.toml`.
fn tls_failure(io: &std::io::Error) -> Option<&rustls::Error> {
    io.get_ref()?.downcast_ref::<rustls::Error>()
}

fn db_message(e: &sqlx::Error) -> String {
    e.as_database_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
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
                failover::note(&e);
                if attempt >= tries || !is_transient(&e) {
                    return Err(e.into());
                }
                tracing::debug!(error = %e, attempt, what, "transient database error; retrying");
                tokio::time::sleep(transient_pause(attempt)).await;
            }
        }
    }
}

/// The name of the database the pool is connected to.
pub async fn current_database(pool: &MySqlPool) -> Result<String> {
    let name: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(pool)
        .await?;
    Ok(name.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_failures_are_told_apart_by_kind_not_wording() {
        let kind = |e: sqlx::Error| match connect_error("mysql://u:p@h/d", e) {
            Error::Connect { kind, url, .. } => {
                assert!(!url.contains(":p@"), "password masked: {url}");
                kind
            }
            other => panic!("{other:?}"),
        };
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(kind(sqlx::Error::Io(refused)), ConnectFailure::Unreachable);
        assert_eq!(kind(sqlx::Error::PoolTimedOut), ConnectFailure::Unreachable);
        assert_eq!(
            kind(sqlx::Error::Protocol("odd".into())),
            ConnectFailure::Other
        );
    }

    #[test]
    fn redacts_password() {
        assert_eq!(
            redact_url("mysql://u:secret@h:3306/db"),
            "mysql://u:***@h:3306/db"
        );
        assert_eq!(redact_url("mysql://u@h/db"), "mysql://u@h/db");
        assert_eq!(redact_url("nonsense"), "nonsense");
    }

    #[test]
    fn tls_settings_in_the_query_never_uncover_the_password() {
        let url = with_tls(
            "mysql://u:secret@h:3306/db",
            Some(SslMode::VerifyIdentity),
            Some(std::path::Path::new("/etc/db ca.pem")),
        )
        .unwrap();
        assert_eq!(
            redact_url(&url),
            "mysql://u:***@h:3306/db?ssl-mode=verify_identity&ssl-ca=/etc/db%20ca.pem"
        );
        // An '@' written by hand into the query: more is masked than needed, the password still is.
        let r = redact_url("mysql://u:secret@h/db?ssl-ca=/a@b/ca.pem");
        assert!(!r.contains("secret"), "{r}");
        // A password set after the TLS settings keeps them.
        let url = with_password(&url, "pw").unwrap();
        assert!(url.ends_with("@h:3306/db?ssl-mode=verify_identity&ssl-ca=/etc/db%20ca.pem"));
    }

    #[test]
    fn a_password_is_set_encoded_and_replaces_the_urls_own() {
        let url = with_password("mysql://app:old@db:3306/app", "p@ss:w/rd %1").unwrap();
        assert_eq!(url, "mysql://app:p%40ss%3Aw%2Frd%20%251@db:3306/app");
        let opts = parse_url(&url).unwrap();
        assert_eq!(opts.get_username(), "app");
        assert_eq!(opts.get_database(), Some("app"));
        assert_eq!(
            with_password("mysql://app@db/app", "x").unwrap(),
            "mysql://app:x@db/app"
        );
        let e = with_password("mysql://db/app", "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs a user"), "{e}");
    }

    #[test]
    fn a_password_file_loses_one_line_ending_only() {
        let dir = std::env::temp_dir().join(format!("jobq-pw-{}", rand::random::<u64>()));
        std::fs::write(&dir, "s3cret \n").unwrap();
        assert_eq!(read_password_file(&dir).unwrap(), "s3cret ");
        std::fs::write(&dir, "a\r\n").unwrap();
        assert_eq!(read_password_file(&dir).unwrap(), "a");
        std::fs::write(&dir, "\n").unwrap();
        assert!(
            read_password_file(&dir)
                .unwrap_err()
                .to_string()
                .contains("is empty")
        );
        std::fs::remove_file(&dir).unwrap();
        let e = read_password_file(&dir).unwrap_err().to_string();
        assert!(e.contains("cannot read the database password file"), "{e}");
    }

    #[test]
    fn rejects_urls_with_a_reason() {
        let e = parse_url("postgres://x/y").unwrap_err().to_string();
        assert!(e.contains("expected mysql://"), "{e}");
        let e = parse_url("mysql://root@127.0.0.1:3306")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no database name"), "{e}");
        assert!(parse_url("mysql://root@127.0.0.1:3306/test").is_ok());
        assert!(parse_url("mariadb://root@127.0.0.1:3306/test").is_ok());
    }
}
