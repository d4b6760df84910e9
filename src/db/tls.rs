//! TLS to the database server: the `ssl-mode` and `ssl-ca` settings.
//!
//! The database URL carries them, as sqlx reads them (`?ssl-mode=verify_identity&ssl-ca=/etc/mysql/ca.pem`),
//! so every connection opened from that URL uses the same settings: the pool, the anchor session (which
//! copies the pool's connect options), the dedicated connections of a worker's loops (taken from the pool),
//! [`super::create_database`], the processes `jobq bench` starts (its wire-counting relay alone turns TLS
//! off, to read the commands), and the workers a supervisor starts (which read the config file and
//! environment the same way). Settings given apart from the URL, in the config
//! file or the environment, are written into it with `with_tls` ([`super::UrlSettings`]).
//!
//! Every URL jobq parses is checked here (`check_url`), so a mistyped mode, an unreadable CA file, or a CA file
//! that would be silently ignored fails before any connection is tried, with a message naming the setting.
//!
//! What each mode checks, with sqlx on rustls (see `Cargo.toml` for why rustls):
//! * `verify_identity`: the server's certificate chains to the CA file (or to a public CA of the webpki
//!   list compiled in) *and* names the host of the URL (a DNS name, or an IP address in its SAN).
//! * `verify_ca`: meant to check the chain only, so that any certificate those CAs issued, for any host,
//!   would pass. sqlx 0.8.6 on rustls 0.23.24 or later checks the name too (sqlx issue #3793: it lets
//!   only the older `NotValidForName` error through, and rustls now reports `NotValidForNameContext`),
//!   so today it behaves as `verify_identity`; `tests/it/tls.rs` notices when that changes.
//! * `required`: encrypted, certificate not checked: safe from a passive eavesdropper only.
//! * `preferred` (the default): like `required` when the server offers TLS, plaintext when it does not, so
//!   an active attacker can strip it.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::error::{Error, Result};

/// How the connection to the server is protected: the `ssl-mode` values of sqlx and the MySQL client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Plaintext, even when the server offers TLS.
    Disabled,
    /// TLS when the server offers it, plaintext when it does not; the certificate is not checked.
    #[default]
    Preferred,
    /// TLS or no connection; the certificate is not checked.
    Required,
    /// TLS, and the server's certificate must chain to a trusted CA (the CA file, or a public CA);
    /// its name is meant not to be checked, but is in this build (see the module docs).
    VerifyCa,
    /// TLS, a trusted chain, and the certificate must name the host jobq connects to.
    VerifyIdentity,
}

impl SslMode {
    /// The mode when none is set: `preferred`, the default of sqlx and of the MySQL and MariaDB clients,
    /// so a server that offers TLS gets it without any setting and one that does not still works. It does
    /// not protect against an active attacker (who can strip TLS or present any certificate): production
    /// should set [`SslMode::VerifyIdentity`] with a CA file.
    pub const DEFAULT: SslMode = SslMode::Preferred;

    /// Every mode, weakest first.
    pub const ALL: [SslMode; 5] = [
        SslMode::Disabled,
        SslMode::Preferred,
        SslMode::Required,
        SslMode::VerifyCa,
        SslMode::VerifyIdentity,
    ];

    /// The spelling used in URLs and config files.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disabled => "disabled",
            SslMode::Preferred => "preferred",
            SslMode::Required => "required",
            SslMode::VerifyCa => "verify_ca",
            SslMode::VerifyIdentity => "verify_identity",
        }
    }

    /// True for the modes that check the server's certificate, the only ones that use a CA file.
    pub fn verifies_certificate(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyIdentity)
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SslMode {
    type Err = Error;

    /// Case-insensitive, as sqlx parses the URL's value (`VERIFY_IDENTITY`, the MySQL client's spelling,
    /// works too).
    fn from_str(s: &str) -> Result<Self> {
        SslMode::ALL
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::invalid(
                    "ssl-mode",
                    format!(
                        "{s:?} is not one of {}",
                        SslMode::ALL.map(SslMode::as_str).join(", ")
                    ),
                )
            })
    }
}

impl<'de> serde::Deserialize<'de> for SslMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The URL query keys sqlx reads for the mode and the CA file (it takes both spellings; the last
/// occurrence wins).
const MODE_KEYS: [&str; 2] = ["ssl-mode", "sslmode"];
const CA_KEYS: [&str; 2] = ["ssl-ca", "sslca"];

/// `url` with its `ssl-mode` and `ssl-ca` replaced by `mode` and `ca` where they are `Some`; `None` keeps
/// what the URL has. Other query parameters are kept as they are.
///
/// # Errors
/// [`Error::Invalid`] when `ca` is not valid UTF-8 (a URL cannot carry it).
pub(crate) fn with_tls(url: &str, mode: Option<SslMode>, ca: Option<&Path>) -> Result<String> {
    let ca = ca
        .map(|p| {
            p.to_str().ok_or_else(|| {
                Error::invalid("CA file path", format!("{} is not UTF-8", p.display()))
            })
        })
        .transpose()?;
    let (head, query) = url.split_once('?').unwrap_or((url, ""));
    let replaced = |key: &str| {
        (mode.is_some() && MODE_KEYS.contains(&key)) || (ca.is_some() && CA_KEYS.contains(&key))
    };
    let mut pairs: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty() && !replaced(p.split_once('=').map_or(*p, |(k, _)| k)))
        .map(str::to_string)
        .collect();
    if let Some(mode) = mode {
        pairs.push(format!("ssl-mode={mode}"));
    }
    if let Some(ca) = ca {
        pairs.push(format!("ssl-ca={}", encode_query_value(ca)));
    }
    Ok(if pairs.is_empty() {
        head.to_string()
    } else {
        format!("{head}?{}", pairs.join("&"))
    })
}

/// Percent-encodes a query value, keeping the characters a file path usually has (`/`, `.`, `-`, `_`)
/// readable. `+` is encoded: the query is decoded as a form, where `+` means a space.
fn encode_query_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/' | b':') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `ssl-mode` and `ssl-ca` a URL sets, if any, decoded as sqlx decodes them
/// (application/x-www-form-urlencoded, the last occurrence winning), so both see the same values.
fn url_settings(url: &str) -> std::result::Result<(Option<SslMode>, Option<String>), String> {
    let Some((_, query)) = url.split_once('?') else {
        return Ok((None, None));
    };
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    let mut mode = None;
    let mut ca = None;
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        if MODE_KEYS.contains(&&*key) {
            mode = Some(value.parse::<SslMode>().map_err(|e| e.to_string())?);
        } else if CA_KEYS.contains(&&*key) {
            ca = Some(value.into_owned());
        }
    }
    Ok((mode, ca))
}

/// Checks the TLS settings of a URL: a known `ssl-mode`, a readable CA file holding a PEM certificate,
/// and no CA file with a mode that would ignore it. Returns the mode the URL connects with (its
/// `ssl-mode`, else the default), or what is wrong, naming the setting.
pub(crate) fn check_url(url: &str) -> std::result::Result<SslMode, String> {
    let (mode, ca) = url_settings(url)?;
    if let Some(ca) = ca {
        check_ca_file(Path::new(&ca)).map_err(|e| format!("ssl-ca: {e}"))?;
        check_ca_is_used(mode)?;
    }
    Ok(mode.unwrap_or(SslMode::DEFAULT))
}

/// A CA file is used only to check the server's certificate. With `preferred` or `required` sqlx
/// ignores it and accepts any certificate, so a CA file there would look like protection and be none:
/// refused. With `disabled` there is no TLS at all, as asked (the benchmark's relay adds it to any URL).
fn check_ca_is_used(mode: Option<SslMode>) -> std::result::Result<(), String> {
    let effective = mode.unwrap_or(SslMode::DEFAULT);
    if effective.verifies_certificate() || effective == SslMode::Disabled {
        return Ok(());
    }
    Err(format!(
        "ssl-ca is set but ssl-mode is {effective}{}, which does not check the server's certificate \
         and ignores the CA file: set ssl-mode to verify_identity (or verify_ca)",
        if mode.is_none() { " (the default)" } else { "" }
    ))
}

/// Checks that `path` can be read and holds at least one PEM certificate, so a wrong path or a file of
/// another kind (a key, a DER certificate) is an error at start-up rather than a handshake failure on
/// every connection. sqlx reads the file again at each connection, so a renewed CA file is picked up
/// without a restart.
///
/// # Errors
/// [`Error::Io`] naming the file when it cannot be read, [`Error::Invalid`] when it holds no
/// `-----BEGIN CERTIFICATE-----` block.
pub fn check_ca_file(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        context: format!("cannot read the CA file {}", path.display()),
        source,
    })?;
    const PEM_CERTIFICATE: &[u8] = b"-----BEGIN CERTIFICATE-----";
    if !bytes
        .windows(PEM_CERTIFICATE.len())
        .any(|w| w == PEM_CERTIFICATE)
    {
        return Err(Error::invalid(
            "CA file",
            format!(
                "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                path.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_in_any_case_and_name_the_choices_when_wrong() {
        for m in SslMode::ALL {
            assert_eq!(m.as_str().parse::<SslMode>().unwrap(), m);
            assert_eq!(m.as_str().to_uppercase().parse::<SslMode>().unwrap(), m);
        }
        let e = "verify-full".parse::<SslMode>().unwrap_err().to_string();
        assert!(e.contains("invalid ssl-mode: \"verify-full\""), "{e}");
        assert!(e.contains("verify_identity"), "{e}");
        assert_eq!(SslMode::default(), SslMode::DEFAULT);
    }

    #[test]
    fn settings_replace_the_urls_own_and_keep_the_rest() {
        let url = "mysql://u:p%40ss@db:3306/app?sslmode=disabled&charset=utf8mb4&ssl-ca=/old.pem";
        assert_eq!(
            with_tls(url, Some(SslMode::VerifyIdentity), None).unwrap(),
            "mysql://u:p%40ss@db:3306/app?charset=utf8mb4&ssl-ca=/old.pem&ssl-mode=verify_identity"
        );
        assert_eq!(
            with_tls(url, None, Some(Path::new("/etc/my ca+1.pem"))).unwrap(),
            "mysql://u:p%40ss@db:3306/app?sslmode=disabled&charset=utf8mb4&ssl-ca=/etc/my%20ca%2B1.pem"
        );
        assert_eq!(with_tls(url, None, None).unwrap(), url);
        assert_eq!(
            with_tls("mysql://db/app", Some(SslMode::Required), None).unwrap(),
            "mysql://db/app?ssl-mode=required"
        );
    }

    #[test]
    fn a_written_ca_path_reads_back_as_sqlx_decodes_it() {
        let url = with_tls("mysql://db/app", None, Some(Path::new("/a b/c+d&e=f%.pem"))).unwrap();
        let (_, query) = url.split_once('?').unwrap();
        let pairs: Vec<_> = url::form_urlencoded::parse(query.as_bytes()).collect();
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairs[0].1, "/a b/c+d&e=f%.pem");
    }

    #[test]
    fn urls_are_checked_for_mode_and_ca_file() {
        let dir = std::env::temp_dir().join(format!("jobq-tls-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let key = dir.join("key.pem");
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let url = |q: &str| format!("mysql://db/app?{q}");
        let ca_q = format!("ssl-ca={}", ca.display());

        assert!(check_url("mysql://db/app").is_ok());
        assert!(check_url(&url("ssl-mode=REQUIRED")).is_ok());
        assert!(check_url(&url(&format!("ssl-mode=verify_ca&{ca_q}"))).is_ok());
        assert!(check_url(&url(&format!("{ca_q}&sslmode=verify_identity"))).is_ok());
        assert!(check_url(&url(&format!("{ca_q}&ssl-mode=disabled"))).is_ok());

        let e = check_url(&url("ssl-mode=on")).unwrap_err();
        assert!(e.contains("invalid ssl-mode: \"on\""), "{e}");
        let e = check_url(&url(&ca_q)).unwrap_err();
        assert!(e.contains("ssl-mode is preferred (the default)"), "{e}");
        let e = check_url(&url(&format!("ssl-mode=required&{ca_q}"))).unwrap_err();
        assert!(e.contains("ssl-mode is required,"), "{e}");
        let e = check_url(&url(&format!(
            "ssl-mode=verify_ca&ssl-ca={}",
            key.display()
        )))
        .unwrap_err();
        assert!(
            e.starts_with("ssl-ca: invalid CA file: ") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = check_url(&url("ssl-mode=verify_ca&ssl-ca=/nonexistent/ca.pem")).unwrap_err();
        assert!(
            e.starts_with("ssl-ca: cannot read the CA file /nonexistent/ca.pem"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
