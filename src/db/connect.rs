//! Opening connections: URLs (one host or several), TLS settings, passwords, the pool's settings, and
//! failures turned into messages that say what is wrong.

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, MySqlPool};

use super::hosts::{self, Host};
use super::{failover, tls};
use crate::errno;
use crate::error::{ConnectFailure, Error, Result};
use tls::SslMode;

pub(crate) async fn setup_session(conn: &mut sqlx::MySqlConnection) -> Result<(), sqlx::Error> {
    for stmt in crate::statements::SESSION_SETUP {
        conn.execute(stmt).await?;
    }
    Ok(())
}

/// How to reach the database: a URL plus pool sizing.
#[derive(Debug, Clone)]
pub struct ConnectConfig {
    /// `mysql://user:password@host:port/database`, with TLS settings in its query if any:
    /// `?ssl-mode=verify_identity&ssl-ca=/etc/mysql/ca.pem` ([`with_tls`](crate::with_tls) writes them in; see [`SslMode`] for the modes).
    pub url: String,
    /// Most connections the pool opens.
    pub max_connections: u32,
    /// How long to wait for a connection before giving up.
    pub acquire_timeout: Duration,
}

impl ConnectConfig {
    /// Default `max_connections`: a small pool, fit for admin commands and the services beside the
    /// workers (the reaper reads its gauges with several queries at once).
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 4;
    /// Default `acquire_timeout`.
    pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

    /// A config for `url` with the default small pool.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: Self::DEFAULT_ACQUIRE_TIMEOUT,
        }
    }

    /// Sets the pool's maximum size.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Parses the URL and pins jobq's session settings.
    pub(crate) fn options(&self) -> Result<MySqlConnectOptions> {
        connect_options(&self.url)
    }
}

/// The driver's connect options for a `mysql://` (or `mariadb://`) URL, its TLS settings included
/// (see [`SslMode`]): what [`connect`] uses, for programs that open their own connections beside jobq's.
///
/// A URL may name several hosts (`mysql://user:password@node1:3306,node2:3306/app`, for a Galera
/// cluster): [`connect`] then follows whichever serves; this returns the first host's options.
///
/// # Errors
/// [`Error::InvalidUrl`] naming what is wrong.
pub fn connect_options(url: &str) -> Result<MySqlConnectOptions> {
    let mut hosts = parse_hosts(url)?;
    Ok(hosts.swap_remove(0).opts)
}

/// The hosts of `url`, each checked as [`super::connect_options`] checks a URL.
///
/// # Errors
/// [`Error::InvalidUrl`] for a bad URL, and for a host list with no host in it.
pub(crate) fn parse_hosts(url: &str) -> Result<Vec<Host>> {
    let hosts: Vec<Host> = hosts::split(url)
        .iter()
        .map(|one| {
            let opts = single_host_options(one)?;
            let name = format!("{}:{}", opts.get_host(), opts.get_port());
            Ok::<_, Error>(Host { opts, name })
        })
        .collect::<Result<_>>()?;
    if hosts.is_empty() {
        return Err(Error::InvalidUrl {
            url: redact_url(url),
            reason: "no host: expected mysql://user:password@host:port/database".into(),
        });
    }
    Ok(hosts)
}

/// [`connect_options`] for a URL that names one host.
fn single_host_options(url: &str) -> Result<MySqlConnectOptions> {
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
/// [`Error::Io`] naming the file when it cannot be read, [`Error::Invalid`] when it is empty or
/// not UTF-8.
pub fn read_password_file(path: &std::path::Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        context: format!("cannot read the database password file {}", path.display()),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        Error::invalid(
            "database password file",
            format!("{} is not UTF-8", path.display()),
        )
    })?;
    let password = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if password.is_empty() {
        return Err(Error::invalid(
            "database password file",
            format!("{} is empty", path.display()),
        ));
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
/// With several hosts in the URL the pool starts on the first and moves to the next that serves when
/// its host stops serving (checked every second; the README's "Clusters and many hosts").
///
/// # Errors
/// When the URL is invalid.
pub fn connect_lazy(cfg: &ConnectConfig) -> Result<MySqlPool> {
    let hosts = parse_hosts(&cfg.url)?;
    let pool = pool_options(cfg).connect_lazy_with(hosts[0].opts.clone());
    hosts::watch(pool.clone(), hosts, 0, None);
    Ok(pool)
}

/// Opens a pool after checking, with one plain connection, that the server answers and takes the login,
/// so the usual failures become messages that say what is wrong (bad URL, unreachable server, bad login,
/// unknown database) at once instead of after the pool's acquire timeout.
///
/// With several hosts in the URL the pool opens on the first that serves (a Galera node outside the
/// Primary component does not) and moves to the next when its host stops serving.
pub async fn connect(cfg: &ConnectConfig) -> Result<MySqlPool> {
    let hosts = parse_hosts(&cfg.url)?;
    if hosts.len() > 1 {
        return connect_to_one_of(cfg, hosts).await;
    }
    let opts = cfg.options()?;
    probe(cfg, &opts).await?;
    Ok(pool_options(cfg).connect_lazy_with(opts))
}

/// Checks, with one plain connection, that the server at `opts` answers and takes the login.
async fn probe(cfg: &ConnectConfig, opts: &MySqlConnectOptions) -> Result<()> {
    let probe = tokio::time::timeout(cfg.acquire_timeout, async {
        let mut conn = opts.connect().await?;
        setup_session(&mut conn).await?;
        conn.close().await
    })
    .await;
    match probe {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(connect_error(&cfg.url, e)),
        Err(_) => Err(Error::Connect {
            url: redact_url(&cfg.url),
            kind: ConnectFailure::Unreachable,
            reason: format!(
                "server unreachable (no answer within {} s)",
                cfg.acquire_timeout.as_secs()
            ),
        }),
    }
}

async fn connect_to_one_of(cfg: &ConnectConfig, hosts: Vec<Host>) -> Result<MySqlPool> {
    let found = tokio::time::timeout(cfg.acquire_timeout, hosts::first_serving(&hosts, 0)).await;
    let Ok(Some((current, check))) = found else {
        // The first host's own failure, when it has one, says more (a refused login, say).
        probe(cfg, &hosts[0].opts).await?;
        let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        return Err(Error::Connect {
            url: redact_url(&cfg.url),
            kind: ConnectFailure::Unreachable,
            reason: format!(
                "server unreachable: none of the hosts {} serves (each refused, did not answer, or is a \
                 Galera node outside the Primary component)",
                names.join(", ")
            ),
        });
    };
    let pool = pool_options(cfg).connect_lazy_with(hosts[current].opts.clone());
    tracing::debug!(host = %hosts[current].name, "database pool opened");
    hosts::watch(pool.clone(), hosts, current, Some(check));
    Ok(pool)
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
        // After a read-only error (a failover), a Galera node's "not ready" or a move to another host,
        // connections opened before it are closed instead of handed out. No round trip: one atomic load per checkout.
        .before_acquire(|_conn, meta| {
            let keep = !failover::predates_recycle(meta.age);
            Box::pin(async move { Ok(keep) })
        })
}

/// Creates the URL's database if it does not exist (`jobq migrate --create-database`). Connects to the
/// server without selecting a database, so it works before the database exists.
pub async fn create_database(url: &str) -> Result<bool> {
    let opts = connect_options(url)?;
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
    let (kind, reason) = match (&e, errno::number(&e)) {
        (_, Some(errno::ACCESS_DENIED | errno::SECURE_TRANSPORT_REQUIRED))
            if mode == SslMode::Disabled =>
        {
            // MariaDB refuses a plaintext login under require_secure_transport=ON with a plain
            // "access denied" (measured on 10.11), so the likely cause is named here.
            (
                ConnectFailure::Tls,
                format!(
                    "access denied: {}; ssl-mode is disabled, and a server with \
                     require_secure_transport=ON refuses every login without TLS this way",
                    errno::message(&e)
                ),
            )
        }
        (_, Some(errno::ACCESS_DENIED | errno::ACCESS_DENIED_NO_PASSWORD)) => (
            ConnectFailure::AccessDenied,
            format!("access denied: {}", errno::message(&e)),
        ),
        (_, Some(errno::BAD_DB)) => (
            ConnectFailure::UnknownDatabase,
            format!(
                "{}; create it first (CREATE DATABASE ...)",
                errno::message(&e)
            ),
        ),
        (_, Some(errno::TOO_MANY_CONNECTIONS)) => (
            ConnectFailure::Unreachable,
            format!(
                "server unreachable (too many connections: {})",
                errno::message(&e)
            ),
        ),
        (_, Some(errno::SECURE_TRANSPORT_REQUIRED)) => (
            ConnectFailure::Tls,
            format!(
                "the server requires TLS: {}; set ssl-mode to verify_identity (or required)",
                errno::message(&e)
            ),
        ),
        (sqlx::Error::Tls(inner), _) => (
            ConnectFailure::Tls,
            format!("TLS failed (ssl-mode {mode}): {inner}"),
        ),
        (sqlx::Error::Io(io), _) if let Some(tls) = tls_failure(io) => {
            (ConnectFailure::Tls, tls_reason(tls, mode))
        }
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

/// Why a TLS handshake failed, with a hint at the fix for a refused certificate.
fn tls_reason(tls: &rustls::Error, mode: SslMode) -> String {
    let rustls::Error::InvalidCertificate(why) = tls else {
        return format!("TLS handshake failed (ssl-mode {mode}): {tls}");
    };
    let hint = match why {
        rustls::CertificateError::UnknownIssuer => "; ssl-ca must hold the CA that signed it",
        rustls::CertificateError::NotValidForName
        | rustls::CertificateError::NotValidForNameContext { .. } => {
            "; connect to a host name or address that the certificate names"
        }
        _ => "",
    };
    format!("the server's TLS certificate was refused (ssl-mode {mode}): {tls}{hint}")
}

/// The TLS error inside an I/O error, if that is what it is: rustls reports a failed handshake (a refused
/// certificate, an alert from the server) as an `InvalidData` I/O error wrapping its own error, which
/// sqlx passes on as it is. Tied to the TLS backend chosen in `Cargo.toml`.
fn tls_failure(io: &std::io::Error) -> Option<&rustls::Error> {
    io.get_ref()?.downcast_ref::<rustls::Error>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::with_tls;

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
        let opts = connect_options(&url).unwrap();
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
        let e = connect_options("postgres://x/y").unwrap_err().to_string();
        assert!(e.contains("expected mysql://"), "{e}");
        let e = connect_options("mysql://root@127.0.0.1:3306")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no database name"), "{e}");
        assert!(connect_options("mysql://root@127.0.0.1:3306/test").is_ok());
        assert!(connect_options("mariadb://root@127.0.0.1:3306/test").is_ok());
    }

    #[test]
    fn a_host_list_without_a_host_is_refused() {
        let e = parse_hosts("mysql://u:secret@,/db")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no host") && !e.contains("secret"), "{e}");
        let hosts = parse_hosts("mysql://u:p@a:1,b:2/db").unwrap();
        let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["a:1", "b:2"]);
    }
}
