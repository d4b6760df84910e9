//! Opening pools and connections from a [`ConnectConfig`] (one host or several), and failures turned
//! into messages that say what is wrong. The URL itself is parsed in [`super::url`].

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, MySqlPool};

use super::failover;
use super::hosts::{self, Host};
use super::tls::SslMode;
use super::url::ConnectConfig;
use crate::errno;
use crate::error::{ConnectFailure, Error, Result};

pub(crate) async fn setup_session(conn: &mut sqlx::MySqlConnection) -> Result<(), sqlx::Error> {
    for stmt in crate::statements::SESSION_SETUP {
        conn.execute(stmt).await?;
    }
    Ok(())
}

/// A pool that connects when first used: for long-running services, which wait out a database that
/// is not there yet instead of failing at start. Nothing is checked here: the URL was when `cfg` was made.
///
/// With several hosts in the URL the pool starts on the first and moves to the next that serves when
/// its host stops serving (checked every second; the README's "Clusters and many hosts").
///
/// # Errors
/// None today; the `Result` keeps room for a check that needs no connection.
pub fn connect_lazy(cfg: &ConnectConfig) -> Result<MySqlPool> {
    let hosts = cfg.hosts().to_vec();
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
    let hosts = cfg.hosts();
    if hosts.len() > 1 {
        return connect_to_one_of(cfg, hosts.to_vec()).await;
    }
    let opts = cfg.connect_options();
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
        Ok(Err(e)) => Err(connect_error(cfg, e)),
        Err(_) => Err(Error::Connect {
            url: cfg.redacted_url().to_string(),
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
            url: cfg.redacted_url().to_string(),
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
/// server without selecting a database, so it works before the database exists. With several hosts in
/// the URL, on the first. Returns whether it created it.
pub async fn create_database(cfg: &ConnectConfig) -> Result<bool> {
    let opts = cfg.connect_options();
    let name = opts.get_database().unwrap_or_default().to_string();
    if name.contains('`') {
        return Err(Error::InvalidUrl {
            url: cfg.redacted_url().to_string(),
            reason: "database name contains a backquote".into(),
        });
    }
    let mut conn = opts
        .database("")
        .connect()
        .await
        .map_err(|e| connect_error(cfg, e))?;
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

fn connect_error(cfg: &ConnectConfig, e: sqlx::Error) -> Error {
    let mode = cfg.ssl_mode();
    let url = cfg.redacted_url().to_string();
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

    #[test]
    fn connect_failures_are_told_apart_by_kind_not_wording() {
        let cfg = ConnectConfig::new("mysql://u:p@h/d").unwrap();
        let kind = |e: sqlx::Error| match connect_error(&cfg, e) {
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
}
