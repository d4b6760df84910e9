//! A counting TCP relay between a client and the server: it forwards bytes both ways unchanged and counts
//! the commands the client sends, by type. This is how the bench tells how many statements (and pings)
//! a worker sends, per job or per second, without performance_schema (often off, as on Debian's
//! MariaDB) and without counting other clients of a shared server, which `SHOW GLOBAL STATUS` would.
//!
//! The MySQL protocol frames every message as a 3-byte length, a sequence number and the payload; a
//! client's command is a packet with sequence number 0 whose first payload byte names it (COM_QUERY 3,
//! COM_PING 14, COM_STMT_PREPARE 22, COM_STMT_EXECUTE 23, COM_STMT_CLOSE 25). The handshake's packets
//! have sequence numbers above 0, so they are not counted. TLS would hide the framing, so connections
//! through the relay are made with `ssl-mode=DISABLED`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Client commands seen, by type.
#[derive(Debug, Default)]
pub(crate) struct WireCounts {
    query: AtomicU64,
    prepare: AtomicU64,
    execute: AtomicU64,
    ping: AtomicU64,
    other: AtomicU64,
    connects: AtomicU64,
}

/// A snapshot of the relay's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Commands {
    /// COM_QUERY: text statements (sqlx sends BEGIN, COMMIT, ROLLBACK and statements without
    /// parameters this way).
    pub query: u64,
    /// COM_STMT_PREPARE.
    pub prepare: u64,
    /// COM_STMT_EXECUTE: prepared statements.
    pub execute: u64,
    /// COM_PING (sqlx pings a pooled connection before lending it out).
    pub ping: u64,
    /// Anything else (COM_STMT_CLOSE, COM_QUIT, …).
    pub other: u64,
    /// Connections opened.
    pub connects: u64,
}

impl Commands {
    /// Statements: text queries plus prepared executions.
    pub fn statements(&self) -> u64 {
        self.query + self.execute
    }

    /// Every command, i.e. every round trip the client started.
    pub fn round_trips(&self) -> u64 {
        self.query + self.prepare + self.execute + self.ping + self.other
    }

    /// `self - earlier`.
    pub(crate) fn since(&self, earlier: &Commands) -> Commands {
        Commands {
            query: self.query - earlier.query,
            prepare: self.prepare - earlier.prepare,
            execute: self.execute - earlier.execute,
            ping: self.ping - earlier.ping,
            other: self.other - earlier.other,
            connects: self.connects - earlier.connects,
        }
    }
}

impl WireCounts {
    pub(crate) fn snapshot(&self) -> Commands {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Commands {
            query: g(&self.query),
            prepare: g(&self.prepare),
            execute: g(&self.execute),
            ping: g(&self.ping),
            other: g(&self.other),
            connects: g(&self.connects),
        }
    }

    fn command(&self, byte: u8) {
        let c = match byte {
            3 => &self.query,
            22 => &self.prepare,
            23 => &self.execute,
            14 => &self.ping,
            _ => &self.other,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A running relay. Dropping it stops accepting; open connections end with their clients.
#[derive(Debug)]
pub struct Relay {
    pub(crate) port: u16,
    pub(crate) counts: Arc<WireCounts>,
    stop: CancellationToken,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Relay {
    /// Listens on 127.0.0.1 (a free port) and relays to `host:port`.
    ///
    /// # Errors
    /// When no local port can be bound.
    pub async fn start(host: String, port: u16) -> std::io::Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let local = listener.local_addr()?.port();
        let counts = Arc::new(WireCounts::default());
        let stop = CancellationToken::new();
        let (c, s) = (counts.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = s.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((client, _)) = accepted else { continue };
                let Ok(server) = TcpStream::connect((host.as_str(), port)).await else {
                    continue;
                };
                c.connects.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(pipe(client, server, c.clone(), s.clone()));
            }
        });
        Ok(Relay {
            port: local,
            counts,
            stop,
        })
    }

    /// `url` (with its database) pointed at the relay, TLS off.
    pub fn url(&self, url: &str) -> String {
        relay_url(url, self.port)
    }

    /// The commands counted so far, over every connection through the relay.
    #[allow(dead_code)] // the integration tests, which share this file, count with it
    pub fn commands(&self) -> Commands {
        self.counts.snapshot()
    }
}

async fn pipe(
    client: TcpStream,
    server: TcpStream,
    counts: Arc<WireCounts>,
    stop: CancellationToken,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let down = async {
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
        let _ = cw.shutdown().await;
    };
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut framer = Framer::default();
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            framer.feed(&buf[..n], &counts);
            if sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = sw.shutdown().await;
    };
    tokio::select! {
        () = stop.cancelled() => {}
        _ = async { tokio::join!(down, up) } => {}
    }
}

/// Finds packet boundaries in the client's byte stream.
#[derive(Debug, Default)]
struct Framer {
    header: [u8; 4],
    have: usize,
    /// Payload bytes of the current packet still to skip.
    left: usize,
    /// The next payload byte is a command byte (the packet had sequence number 0).
    want_command: bool,
}

impl Framer {
    fn feed(&mut self, mut bytes: &[u8], counts: &WireCounts) {
        while !bytes.is_empty() {
            if self.left == 0 && !self.want_command {
                let take = (4 - self.have).min(bytes.len());
                self.header[self.have..self.have + take].copy_from_slice(&bytes[..take]);
                self.have += take;
                bytes = &bytes[take..];
                if self.have == 4 {
                    self.have = 0;
                    self.left = usize::from(self.header[0])
                        | usize::from(self.header[1]) << 8
                        | usize::from(self.header[2]) << 16;
                    self.want_command = self.header[3] == 0 && self.left > 0;
                }
                continue;
            }
            if self.want_command {
                counts.command(bytes[0]);
                self.want_command = false;
            }
            let skip = self.left.min(bytes.len());
            self.left -= skip;
            bytes = &bytes[skip..];
        }
    }
}

/// `url` with host and port replaced by 127.0.0.1:`port`, and `ssl-mode=DISABLED` added.
pub(crate) fn relay_url(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("mysql", url));
    let (creds, hostpart) = match rest.rsplit_once('@') {
        Some((c, h)) => (format!("{c}@"), h),
        None => (String::new(), rest),
    };
    let tail_at = hostpart.find(['/', '?']).unwrap_or(hostpart.len());
    let tail = &hostpart[tail_at..];
    let sep = if tail.contains('?') { '&' } else { '?' };
    format!("{scheme}://{creds}127.0.0.1:{port}{tail}{sep}ssl-mode=DISABLED")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_commands_across_chunk_boundaries() {
        let counts = WireCounts::default();
        let mut f = Framer::default();
        // handshake response (seq 1), then COM_QUERY "BEGIN", COM_PING, COM_STMT_EXECUTE.
        let mut bytes = vec![3, 0, 0, 1, 9, 9, 9];
        bytes.extend([6, 0, 0, 0, 3, b'B', b'E', b'G', b'I', b'N']);
        bytes.extend([1, 0, 0, 0, 14]);
        bytes.extend([2, 0, 0, 0, 23, 1]);
        for chunk in bytes.chunks(3) {
            f.feed(chunk, &counts);
        }
        let c = counts.snapshot();
        assert_eq!((c.query, c.ping, c.execute, c.other), (1, 1, 1, 0));
    }

    #[test]
    fn relay_urls() {
        assert_eq!(
            relay_url("mysql://u:p@db:3306/x", 9),
            "mysql://u:p@127.0.0.1:9/x?ssl-mode=DISABLED"
        );
        assert_eq!(
            relay_url("mysql://db/x?a=b", 9),
            "mysql://127.0.0.1:9/x?a=b&ssl-mode=DISABLED"
        );
    }
}
