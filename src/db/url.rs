//! The database URL, parsed and checked once: its hosts (one or several), its TLS settings, a password
//! and TLS settings given apart from it, and the redacted form that messages and logs show.
//!
//! A [`ConnectConfig`] is made from it; everything that connects ([`super::connect`], the anchor
//! session, `jobq bench`'s own connections) takes what it needs from there instead of parsing the URL again.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use sqlx::ConnectOptions;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::MySqlConnectOptions;

use super::hosts::{self, Host};
use super::tls::{self, SslMode};
use crate::error::{Error, Result};

/// How to reach the database: the URL, parsed and checked when the config is made, plus pool sizing.
///
/// ```
/// let cfg = jobq::ConnectConfig::new("mysql://app:secret@db:3306/app?ssl-mode=required")?.max_connections(8);
/// assert_eq!(cfg.redacted_url(), "mysql://app:***@db:3306/app?ssl-mode=required");
/// assert_eq!(cfg.ssl_mode(), jobq::SslMode::Required);
/// # Ok::<(), jobq::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ConnectConfig {
    url: Arc<ParsedUrl>,
    /// Most connections the pool opens.
    pub max_connections: u32,
    /// How long to wait for a connection before giving up.
    pub acquire_timeout: Duration,
}

/// Settings given apart from the URL, as a config file or the environment gives them
/// ([`ConnectConfig::with_settings`]). Each one set replaces what the URL says; `None` keeps it.
#[derive(Debug, Clone, Default)]
pub struct UrlSettings {
    /// A file holding the password (one trailing line ending is dropped), so the URL need not carry it.
    /// The URL must name a user.
    pub password_file: Option<PathBuf>,
    /// How the connection is protected: the URL's `ssl-mode`.
    pub ssl_mode: Option<SslMode>,
    /// The CA file the server's certificate must chain to: the URL's `ssl-ca`. It must hold a PEM
    /// certificate, and is used only with [`SslMode::VerifyCa`] or [`SslMode::VerifyIdentity`].
    pub ssl_ca: Option<PathBuf>,
}

/// What was parsed out of a URL, once.
#[derive(Debug)]
struct ParsedUrl {
    /// As given, before a password file's password and the TLS settings were written in.
    given: String,
    /// What jobq connects with.
    url: String,
    /// `url` with its password masked.
    redacted: String,
    /// One entry per host, never empty.
    hosts: Vec<Host>,
    /// The mode every connection uses: the URL's `ssl-mode`, else the default.
    ssl_mode: SslMode,
}

impl ConnectConfig {
    /// Default `max_connections`: a small pool, fit for admin commands and the services beside the
    /// workers (the reaper reads its gauges with several queries at once).
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 4;
    /// Default `acquire_timeout`.
    pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

    /// A config for `url` with the default small pool.
    ///
    /// The URL is `mysql://user:password@host:port/database` (or `mariadb://`), with TLS settings in its
    /// query if any: `?ssl-mode=verify_identity&ssl-ca=/etc/mysql/ca.pem` (see [`SslMode`] for the
    /// modes). It may name several hosts (`mysql://user:password@node1:3306,node2:3306/app`, for a
    /// Galera cluster): [`connect`](crate::connect) then follows whichever serves.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] naming what is wrong: not a MySQL URL, no host, no database name, a bad
    /// `ssl-mode`, an unreadable CA file or one the mode would ignore.
    pub fn new(url: impl Into<String>) -> Result<Self> {
        Self::with_settings(url, &UrlSettings::default())
    }

    /// A config for `url` with `settings` written into it: a password file's password, and TLS settings
    /// that replace the URL's own.
    ///
    /// # Errors
    /// As [`ConnectConfig::new`]; also [`Error::Io`] naming the password file when it cannot be read,
    /// [`Error::Invalid`] when it is empty or not UTF-8, or the CA file's path is not UTF-8, and
    /// [`Error::InvalidUrl`] when the URL names no user to give the password to.
    pub fn with_settings(url: impl Into<String>, settings: &UrlSettings) -> Result<Self> {
        let given = url.into();
        let with_pw = match &settings.password_file {
            Some(path) => with_password(&given, &read_password_file(path)?)?,
            None => given.clone(),
        };
        let url = tls::with_tls(&with_pw, settings.ssl_mode, settings.ssl_ca.as_deref())?;
        let (hosts, ssl_mode) = parse_hosts(&url)?;
        Ok(ConnectConfig {
            url: Arc::new(ParsedUrl {
                redacted: redact_url(&url),
                given,
                url,
                hosts,
                ssl_mode,
            }),
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: Self::DEFAULT_ACQUIRE_TIMEOUT,
        })
    }

    /// Sets the pool's maximum size.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// The URL jobq connects with: the password file's password and the TLS settings written in. It
    /// carries the password; show [`ConnectConfig::redacted_url`] instead.
    pub fn url(&self) -> &str {
        &self.url.url
    }

    /// The URL as it was given, before [`UrlSettings`] were written in: what a process that reads the
    /// same settings itself should be handed.
    pub fn given_url(&self) -> &str {
        &self.url.given
    }

    /// The URL with its password replaced by `***`, for messages and logs.
    pub fn redacted_url(&self) -> &str {
        &self.url.redacted
    }

    /// The mode every connection is protected with.
    pub fn ssl_mode(&self) -> SslMode {
        self.url.ssl_mode
    }

    /// The driver's connect options, its TLS settings and jobq's session time zone included: for
    /// programs that open their own connections beside jobq's pool. With several hosts in the URL, the
    /// first host's.
    pub fn connect_options(&self) -> MySqlConnectOptions {
        self.url.hosts[0].opts.clone()
    }

    /// Every host of the URL, in its order.
    pub(crate) fn hosts(&self) -> &[Host] {
        &self.url.hosts
    }
}

/// The hosts of `url`, each checked, and the TLS mode they share.
///
/// # Errors
/// [`Error::InvalidUrl`] for a bad URL, and for a host list with no host in it.
fn parse_hosts(url: &str) -> Result<(Vec<Host>, SslMode)> {
    let mut mode = SslMode::DEFAULT;
    let hosts: Vec<Host> = hosts::split(url)
        .iter()
        .map(|one| {
            let (opts, m) = single_host_options(one)?;
            mode = m;
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
    Ok((hosts, mode))
}

/// The connect options and TLS mode of a URL that names one host.
fn single_host_options(url: &str) -> Result<(MySqlConnectOptions, SslMode)> {
    if !(url.starts_with("mysql://") || url.starts_with("mariadb://")) {
        return Err(Error::InvalidUrl {
            url: redact_url(url),
            reason: "expected mysql://user:password@host:port/database".into(),
        });
    }
    let url = url.replacen("mariadb://", "mysql://", 1);
    let mode = tls::check_url(&url).map_err(|reason| Error::InvalidUrl {
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
    let opts = opts
        .timezone(Some("+00:00".to_string()))
        .disable_statement_logging();
    Ok((opts, mode))
}

/// Reads a password file: its content with one trailing line ending removed (`echo secret > file` and
/// editors add one; a password never ends in a newline).
///
/// # Errors
/// [`Error::Io`] naming the file when it cannot be read, [`Error::Invalid`] when it is empty or
/// not UTF-8.
fn read_password_file(path: &Path) -> Result<String> {
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
fn with_password(url: &str, password: &str) -> Result<String> {
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

/// The URL with its password replaced by `***`, for messages and logs. Works on any string, a URL that
/// does not parse included, so an error about a bad URL can show it.
pub(crate) fn redact_url(url: &str) -> String {
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

/// `host:port/database` of a URL, lower-cased: which database it names, so that two sections of a
/// config naming the same one can be told apart from two naming different ones; the URL itself when it
/// does not parse (the connection reports that error later, naming the URL).
pub(crate) fn database_key(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!(
            "{}:{}{}",
            u.host_str().unwrap_or("").to_ascii_lowercase(),
            u.port().unwrap_or(3306),
            u.path()
        ),
        Err(_) => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let url = tls::with_tls(
            "mysql://u:secret@h:3306/db",
            Some(SslMode::VerifyIdentity),
            Some(Path::new("/etc/db ca.pem")),
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
        let opts = ConnectConfig::new(&url).unwrap().connect_options();
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
    fn settings_are_written_in_once_and_the_given_url_is_kept() {
        let pw = std::env::temp_dir().join(format!("jobq-pw-{}", rand::random::<u64>()));
        std::fs::write(&pw, "s3cret\n").unwrap();
        let settings = UrlSettings {
            password_file: Some(pw.clone()),
            ssl_mode: Some(SslMode::Required),
            ssl_ca: None,
        };
        let cfg = ConnectConfig::with_settings("mysql://app@db:3306/app", &settings).unwrap();
        std::fs::remove_file(&pw).unwrap();
        assert_eq!(cfg.given_url(), "mysql://app@db:3306/app");
        assert_eq!(
            cfg.url(),
            "mysql://app:s3cret@db:3306/app?ssl-mode=required"
        );
        assert_eq!(
            cfg.redacted_url(),
            "mysql://app:***@db:3306/app?ssl-mode=required"
        );
        assert_eq!(cfg.ssl_mode(), SslMode::Required);
        assert_eq!(cfg.connect_options().get_username(), "app");
    }

    #[test]
    fn rejects_urls_with_a_reason() {
        let e = ConnectConfig::new("postgres://x/y")
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected mysql://"), "{e}");
        let e = ConnectConfig::new("mysql://root@127.0.0.1:3306")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no database name"), "{e}");
        assert!(ConnectConfig::new("mysql://root@127.0.0.1:3306/test").is_ok());
        assert!(ConnectConfig::new("mariadb://root@127.0.0.1:3306/test").is_ok());
    }

    #[test]
    fn a_host_list_without_a_host_is_refused() {
        let e = ConnectConfig::new("mysql://u:secret@,/db")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no host") && !e.contains("secret"), "{e}");
        let cfg = ConnectConfig::new("mysql://u:p@a:1,b:2/db").unwrap();
        let names: Vec<&str> = cfg.hosts().iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["a:1", "b:2"]);
    }
}
