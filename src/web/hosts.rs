//! Which `Host` headers the dashboard answers: the guard against DNS rebinding.
//!
//! A web page on `attacker.example` whose name the attacker re-resolves to 127.0.0.1 makes the
//! visitor's browser send requests to the dashboard with `Host: attacker.example`, and the browser
//! treats the answers as same-origin with the attacker's page: it can read `/api/*`, take the CSRF
//! token from a page and post with it. The browser always sends the name it resolved, so answering
//! only the names the dashboard is really reached by stops it. An IP address in `Host` cannot be
//! rebound (nothing is resolved), so the address a client connected to is always accepted.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{Error, Result};

/// The address a connection arrived on, which [`super::serve`] puts in each request's extensions: an
/// IP address in `Host` equal to it is accepted. A server of an application's own can insert it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAddr(pub SocketAddr);

/// The `Host` headers the dashboard answers; any other gets 421 Misdirected Request, and a request
/// without one 400, before credentials are checked or any page runs.
///
/// The default is [`AllowedHosts::loopback`]. An application that nests the router behind a host
/// check of its own can turn the check off with [`AllowedHosts::any`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    /// No check at all.
    any: bool,
    /// Names and addresses accepted, each with any port or with the one given.
    names: Vec<HostPattern>,
    /// Also the IP address of the interface the connection arrived on ([`LocalAddr`]).
    connection_ip: bool,
}

impl Default for AllowedHosts {
    fn default() -> Self {
        Self::loopback()
    }
}

impl AllowedHosts {
    /// Every `Host`: for an application that checks hosts itself.
    pub fn any() -> Self {
        Self {
            any: true,
            names: Vec::new(),
            connection_ip: false,
        }
    }

    /// `localhost`, `127.0.0.1` and `[::1]` (any port), and the address a client connected to.
    pub fn loopback() -> Self {
        Self {
            any: false,
            names: ["localhost", "127.0.0.1", "[::1]"]
                .iter()
                .map(|h| HostPattern::parse(h).expect("a valid host"))
                .collect(),
            connection_ip: true,
        }
    }

    /// What a dashboard listening on `bind` is reached by without naming anything: on a loopback
    /// address, [`AllowedHosts::loopback`]; on `0.0.0.0` or `::`, `localhost` and whichever of the
    /// machine's addresses a client connected to; on one address, that address. DNS names users
    /// type (or a reverse proxy forwards) are added with [`AllowedHosts::with`].
    pub fn for_bind(bind: SocketAddr) -> Self {
        let ip = bind.ip();
        if ip.is_loopback() {
            return Self::loopback();
        }
        let name = if ip.is_unspecified() {
            "localhost".to_string()
        } else {
            HostPattern::ip_text(ip)
        };
        Self {
            any: false,
            names: vec![HostPattern::parse(&name).expect("a valid host")],
            connection_ip: true,
        }
    }

    /// Also accepts `host`: a DNS name or an IP address (`[…]` around an IPv6 address when a port
    /// follows), with `:PORT` to accept that port only.
    ///
    /// # Errors
    /// [`Error::Invalid`] when `host` is not a host name or address.
    pub fn with(mut self, host: &str) -> Result<Self> {
        let p = HostPattern::parse(host).map_err(|why| {
            Error::invalid(
                "public host",
                format!("{host:?}: {why} (e.g. jobs.example.com or jobs.example.com:443)"),
            )
        })?;
        if !self.names.contains(&p) {
            self.names.push(p);
        }
        Ok(self)
    }

    /// Whether a request with `host` (its `Host` header) that arrived on `local` is answered.
    fn allows(&self, host: &str, local: Option<IpAddr>) -> bool {
        if self.any {
            return true;
        }
        let Ok(given) = HostPattern::parse(host) else {
            return false;
        };
        if self.connection_ip
            && let (Host::Ip(ip), Some(local)) = (&given.host, local)
            && *ip == local.to_canonical()
        {
            return true;
        }
        self.names
            .iter()
            .any(|p| p.host == given.host && p.port.is_none_or(|port| given.port == Some(port)))
    }
}

/// A host name or address, with an optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPattern {
    host: Host,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    /// Lower case, without a trailing dot.
    Name(String),
    /// IPv4-mapped IPv6 addresses as IPv4 ones.
    Ip(IpAddr),
}

impl HostPattern {
    /// `name`, `name:port`, `1.2.3.4[:port]`, `[::1][:port]` or a bare `::1`.
    fn parse(s: &str) -> std::result::Result<Self, &'static str> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Self {
                host: Host::Ip(ip.to_canonical()),
                port: None,
            });
        }
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or("an unclosed [")?;
            let ip = inside
                .parse::<IpAddr>()
                .map_err(|_| "not an IPv6 address inside [ ]")?;
            (Host::Ip(ip.to_canonical()), after)
        } else {
            let (name, after) = match s.rfind(':') {
                Some(i) => (&s[..i], &s[i..]),
                None => (s, ""),
            };
            let name = name.strip_suffix('.').unwrap_or(name);
            if let Ok(ip) = name.parse::<IpAddr>() {
                (Host::Ip(ip.to_canonical()), after)
            } else {
                if name.is_empty()
                    || name.len() > 253
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
                    || name.split('.').any(str::is_empty)
                {
                    return Err("not a host name (letters, digits, - and dots)");
                }
                (Host::Name(name.to_ascii_lowercase()), after)
            }
        };
        let port = match port {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .and_then(|p| p.parse::<u16>().ok())
                    .ok_or("the port is not a number from 0 to 65535")?,
            ),
        };
        Ok(Self { host, port })
    }

    /// An address as a `Host` header writes it.
    fn ip_text(ip: IpAddr) -> String {
        match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        }
    }
}

/// The middleware: refuses a request whose `Host` is not allowed, before anything else sees it.
pub(super) async fn check(
    State(allowed): State<Arc<AllowedHosts>>,
    req: Request,
    next: Next,
) -> Response {
    if allowed.any {
        return next.run(req).await;
    }
    // HTTP/1.1 puts the host in `Host`; a request in absolute form (and HTTP/2) in the URI.
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{fffd}").to_string())
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    let local = req.extensions().get::<LocalAddr>().map(|a| a.0.ip());
    let refusal = match host {
        None => Some((
            StatusCode::BAD_REQUEST,
            "a Host header is required".to_string(),
        )),
        Some(h) if !allowed.allows(&h, local) => {
            tracing::debug!(host = ?h, "request for a host the dashboard does not answer refused");
            Some((
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "this dashboard does not answer to Host {h:?} (a guard against DNS rebinding); if \
                     users reach it by that name, start it with --public-host NAME"
                ),
            ))
        }
        Some(_) => None,
    };
    match refusal {
        Some((status, why)) => {
            super::guard::with_headers((status, format!("{why}\n")).into_response())
        }
        None => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn loopback_answers_its_names_and_the_address_connected_to() {
        let a = AllowedHosts::loopback();
        for h in [
            "localhost",
            "LOCALHOST:8080",
            "localhost.",
            "127.0.0.1:8080",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(a.allows(h, None), "{h}");
        }
        for h in [
            "attacker.example",
            "attacker.example:8080",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "",
            "[::1",
            "localhost:99999",
        ] {
            assert!(!a.allows(h, None), "{h}");
        }
        // On a dual-stack socket the local address of an IPv4 client is IPv4-mapped.
        assert!(a.allows("127.0.0.2:80", local("::ffff:127.0.0.2")));
        assert!(!a.allows("127.0.0.2:80", local("127.0.0.3")));
    }

    #[test]
    fn an_unspecified_bind_answers_localhost_and_the_address_connected_to_only() {
        let a = AllowedHosts::for_bind("0.0.0.0:8080".parse().unwrap());
        assert!(a.allows("localhost:8080", None));
        assert!(a.allows("10.1.2.3:8080", local("10.1.2.3")));
        assert!(!a.allows("10.1.2.4:8080", local("10.1.2.3")));
        assert!(!a.allows("jobs.example.com", local("10.1.2.3")));
        let a = a.with("Jobs.Example.com").unwrap();
        assert!(a.allows("jobs.example.com:8080", local("10.1.2.3")));
        let one = AllowedHosts::for_bind("10.1.2.3:8080".parse().unwrap());
        assert!(one.allows("10.1.2.3:8080", None));
        assert!(!one.allows("localhost", None));
    }

    #[test]
    fn a_public_host_with_a_port_answers_that_port_only() {
        let a = AllowedHosts::loopback()
            .with("jobs.example.com:443")
            .unwrap()
            .with("[2001:db8::1]")
            .unwrap();
        assert!(a.allows("jobs.example.com:443", None));
        assert!(!a.allows("jobs.example.com", None));
        assert!(!a.allows("jobs.example.com:8443", None));
        assert!(a.allows("[2001:db8::1]:8080", None));
        for bad in ["", "jobs example", "a..b", "x:port", "[::1", "ex_ample.com"] {
            assert!(AllowedHosts::any().with(bad).is_err(), "{bad}");
        }
        assert!(AllowedHosts::any().allows("anything.example", None));
    }
}
