//! Claim tokens: the name a claimant stamps on the rows it holds.
//!
//! A token names the claimant well enough for a reaper to decide whether it is still alive: the host and
//! pid of the process, the MySQL connection id of its anchor session together with the server's id and
//! start time (connection ids start again at 1 when the server restarts), and a random part drawn once
//! per process, so that a token never repeats across pid reuse or a container restarted with the same
//! host name and pid.
//!
//! Text form: `host:pid:connection_id:server_id-server_epoch:nonce`, for example
//! `web-3:4121:88:1-1763852400:9f0c2e1a5b7d3c44`. Host names never contain `:`.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use crate::error::Error;

/// The longest host part kept in a token; the column is 191 ASCII characters.
const MAX_HOST_LEN: usize = 64;

/// The process-wide half of a token: drawn once, at first use.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
pub struct ProcessIdentity {
    /// Host name, reduced to `[A-Za-z0-9._-]`.
    pub host: String,
    /// This process's id.
    pub pid: u32,
    /// Random, drawn when the process first asked.
    pub nonce: u64,
    /// The kernel's boot id and this process's pid namespace: equal for two processes exactly when
    /// each can see the other's pid. Empty where /proc does not tell.
    pub host_id: String,
}

impl ProcessIdentity {
    /// This process's identity. The nonce is drawn on the first call and kept.
    #[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
    pub fn current() -> &'static ProcessIdentity {
        static ID: OnceLock<ProcessIdentity> = OnceLock::new();
        ID.get_or_init(|| ProcessIdentity {
            host: sanitize_host(&gethostname::gethostname().to_string_lossy()),
            pid: std::process::id(),
            nonce: rand::random(),
            host_id: read_host_id(),
        })
    }
}

/// `<boot id>/<pid namespace inode>`, e.g. `22515520-14c4-4613-8f42-b65035ba760c/4026531836`.
fn read_host_id() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ns: String = ns.chars().filter(char::is_ascii_digit).collect();
    if boot.trim().is_empty() || ns.is_empty() {
        return String::new();
    }
    format!("{}/{ns}", boot.trim())
}

/// Keeps the characters a token can carry and bounds the length.
pub(crate) fn sanitize_host(raw: &str) -> String {
    let s: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_HOST_LEN)
        .collect();
    if s.is_empty() { "unknown".into() } else { s }
}

/// The server incarnation a connection id belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerIdentity {
    /// `@@server_id`.
    pub server_id: u64,
    /// When the server started, in Unix seconds (`UNIX_TIMESTAMP() - Uptime`; may differ by a second
    /// between two readings).
    pub epoch: i64,
}

/// A claimant's token as rows carry it in `job_queue.claim`: what a claim stamps and every fenced
/// write compares, from the worker's registration down to each statement. Made once from the
/// [`ClaimToken`]; cheap to clone. Only the statement binders below `db/` take its text (`as_str`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TokenText(Arc<str>);

impl TokenText {
    /// The text, to bind.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&ClaimToken> for TokenText {
    fn from(token: &ClaimToken) -> Self {
        Self(token.to_string().into())
    }
}

/// Any text as a claim: for the test entry points, whose tests stamp short names (`"w"`) of their own.
impl From<&str> for TokenText {
    fn from(text: &str) -> Self {
        Self(text.into())
    }
}

impl fmt::Display for TokenText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A claimant's name, stamped into `job_queue.claim`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ClaimToken {
    /// Host name of the claimant.
    pub host: String,
    /// Its pid.
    pub pid: u32,
    /// `CONNECTION_ID()` of its anchor session when the token was made.
    pub connection_id: u64,
    /// `@@server_id` of the server that session is on.
    pub server_id: u64,
    /// That server's start time, Unix seconds.
    pub server_epoch: i64,
    /// The claimant process's random nonce.
    pub nonce: u64,
}

impl ClaimToken {
    /// A token for this process on the given session.
    pub(crate) fn new(connection_id: u64, server: ServerIdentity) -> Self {
        let me = ProcessIdentity::current();
        Self {
            host: me.host.clone(),
            pid: me.pid,
            connection_id,
            server_id: server.server_id,
            server_epoch: server.epoch,
            nonce: me.nonce,
        }
    }
}

impl ClaimToken {
    /// What every token of process `pid` on `host` starts with, whatever its session and nonce: how a
    /// supervisor finds the rows of a child that died.
    pub(crate) fn process_prefix(host: &str, pid: u32) -> String {
        format!("{host}:{pid}:")
    }
}

impl fmt::Display for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}-{}:{:016x}",
            self.host, self.pid, self.connection_id, self.server_id, self.server_epoch, self.nonce
        )
    }
}

impl FromStr for ClaimToken {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| Error::invalid("claim token", format!("{s:?}: {why}"));
        let parts: Vec<&str> = s.split(':').collect();
        let [host, pid, conn, server, nonce] = parts[..] else {
            return Err(bad("expected host:pid:connection:server-epoch:nonce"));
        };
        let (server_id, epoch) = server
            .split_once('-')
            .ok_or_else(|| bad("server part has no '-'"))?;
        Ok(Self {
            host: host.to_string(),
            pid: pid.parse().map_err(|_| bad("pid is not a number"))?,
            connection_id: conn
                .parse()
                .map_err(|_| bad("connection id is not a number"))?,
            server_id: server_id
                .parse()
                .map_err(|_| bad("server id is not a number"))?,
            server_epoch: epoch.parse().map_err(|_| bad("epoch is not a number"))?,
            nonce: u64::from_str_radix(nonce, 16).map_err(|_| bad("nonce is not hex"))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_fits_the_column() {
        let t = ClaimToken {
            host: sanitize_host(&"h".repeat(300)),
            pid: u32::MAX,
            connection_id: u64::MAX,
            server_id: u64::MAX,
            server_epoch: i64::MAX,
            nonce: u64::MAX,
        };
        let s = t.to_string();
        assert!(s.len() <= 191, "{} chars", s.len());
        assert_eq!(s.parse::<ClaimToken>().unwrap(), t);
    }

    #[test]
    fn sanitizes_hosts() {
        assert_eq!(sanitize_host("web:1 é"), "web_1__");
        assert_eq!(sanitize_host(""), "unknown");
    }

    #[test]
    fn rejects_malformed() {
        assert!("a:b".parse::<ClaimToken>().is_err());
        assert!("h:1:2:3:ff".parse::<ClaimToken>().is_err());
        assert!("h:1:2:3-4:zz".parse::<ClaimToken>().is_err());
    }

    #[test]
    fn nonce_is_drawn_once_per_process() {
        assert_eq!(
            ProcessIdentity::current().nonce,
            ProcessIdentity::current().nonce
        );
    }
}
