//! A TCP relay to the database that a partial-failure test cuts like a network.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::common::TestDb;

/// A TCP relay to the database that the test can cut like a network. On `cut`, the server side of
/// every connection is closed (the server ends those sessions, as it does when its end of a broken
/// connection notices) while the client side stays open and silent, as a partition looks to a client;
/// new connections hang. `blackhole` keeps the server side open and silent too, as a partition looks to
/// a server that has not noticed yet: its sessions live on. On `heal`, the silent sides are closed (the
/// client's next packet meets a reset) and new connections go through again.
pub struct CutRelay {
    port: u16,
    cut: watch::Sender<Cut>,
    /// Local ports of the relay's connections to the server, which the processlist shows as the
    /// sessions' client ports.
    server_ports: Arc<std::sync::Mutex<HashSet<u16>>>,
    /// The connection ids of the sessions the relay carries, read from each server greeting: for a
    /// server whose process list shows no client ports (one run with `--skip-grant-tables`).
    session_ids: Arc<std::sync::Mutex<HashSet<u32>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Open,
    Closed,
    Blackhole,
}

impl CutRelay {
    pub async fn start(url: &str) -> CutRelay {
        Self::start_on(url, 0).await
    }

    /// A relay listening on `local_port` (0: any free port).
    pub async fn start_on(url: &str, local_port: u16) -> CutRelay {
        let opts: sqlx::mysql::MySqlConnectOptions = url.parse().unwrap();
        let (host, port) = (opts.get_host().to_string(), opts.get_port());
        let listener = TcpListener::bind(("127.0.0.1", local_port)).await.unwrap();
        let local = listener.local_addr().unwrap().port();
        let (cut, rx) = watch::channel(Cut::Open);
        let server_ports: Arc<std::sync::Mutex<HashSet<u16>>> = Arc::default();
        let ports = server_ports.clone();
        let session_ids: Arc<std::sync::Mutex<HashSet<u32>>> = Arc::default();
        let ids = session_ids.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let mut rx = rx.clone();
                if *rx.borrow() != Cut::Open {
                    tokio::spawn(async move {
                        let _ = rx.wait_for(|c| *c == Cut::Open).await;
                        drop(client);
                    });
                    continue;
                }
                let Ok(server) = TcpStream::connect((host.as_str(), port)).await else {
                    continue;
                };
                let server_port = server.local_addr().unwrap().port();
                ports.lock().unwrap().insert(server_port);
                let ports = ports.clone();
                let ids = ids.clone();
                tokio::spawn(async move {
                    let (mut client, mut server) = (client, server);
                    let id = forward_greeting(&mut server, &mut client).await;
                    if let Some(id) = id {
                        ids.lock().unwrap().insert(id);
                    }
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let cut = tokio::select! {
                        _ = async {
                            tokio::join!(
                                async { let _ = tokio::io::copy(&mut sr, &mut cw).await; let _ = cw.shutdown().await; },
                                async { let _ = tokio::io::copy(&mut cr, &mut sw).await; let _ = sw.shutdown().await; },
                            )
                        } => None,
                        r = rx.wait_for(|c| *c != Cut::Open) => r.ok().map(|c| *c),
                    };
                    if let Some(how) = cut {
                        if how == Cut::Closed {
                            drop((sr, sw));
                            let _ = rx.wait_for(|c| *c == Cut::Open).await;
                        } else {
                            let _ = rx.wait_for(|c| *c == Cut::Open).await;
                            drop((sr, sw));
                        }
                    }
                    ports.lock().unwrap().remove(&server_port);
                    if let Some(id) = id {
                        ids.lock().unwrap().remove(&id);
                    }
                });
            }
        });
        CutRelay {
            port: local,
            cut,
            server_ports,
            session_ids,
        }
    }

    /// The connection ids of the sessions the relay carries now.
    pub fn session_ids(&self) -> Vec<u32> {
        self.session_ids.lock().unwrap().iter().copied().collect()
    }

    /// `url` pointed at the relay.
    pub fn url(&self, url: &str) -> String {
        let (head, db) = url.rsplit_once('/').unwrap();
        let (scheme_user, _) = head.rsplit_once('@').unwrap();
        format!("{scheme_user}@127.0.0.1:{}/{db}", self.port)
    }

    pub fn cut(&self) {
        self.cut.send_replace(Cut::Closed);
    }

    pub fn blackhole(&self) {
        self.cut.send_replace(Cut::Blackhole);
    }

    pub fn heal(&self) {
        self.cut.send_replace(Cut::Open);
    }

    /// `KILL CONNECTION` of every session that goes through the relay; returns how many.
    pub async fn kill_sessions(&self, db: &TestDb) -> usize {
        let ports: Vec<u16> = self.server_ports.lock().unwrap().iter().copied().collect();
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT CAST(ID AS CHAR), HOST FROM information_schema.PROCESSLIST WHERE HOST LIKE '%:%'",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        let mut killed = 0;
        for (id, host) in rows {
            let port: Option<u16> = host.rsplit(':').next().and_then(|p| p.parse().ok());
            if port.is_some_and(|p| ports.contains(&p)) {
                let _ = sqlx::query(&format!("KILL CONNECTION {id}"))
                    .execute(&db.pool)
                    .await;
                killed += 1;
            }
        }
        killed
    }
}

/// Passes the server's first packet (its greeting) on to the client and returns the connection id it
/// names: after the 4-byte packet header, a protocol version byte (10), the server's version ending
/// in a NUL, then the id as 4 bytes little-endian. None if the packet is not such a greeting (the
/// bytes read are passed on all the same).
async fn forward_greeting(server: &mut TcpStream, client: &mut TcpStream) -> Option<u32> {
    use tokio::io::AsyncReadExt;
    let mut header = [0u8; 4];
    server.read_exact(&mut header).await.ok()?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
    let mut payload = vec![0u8; len];
    server.read_exact(&mut payload).await.ok()?;
    client.write_all(&header).await.ok()?;
    client.write_all(&payload).await.ok()?;
    if payload.first() != Some(&10) {
        return None;
    }
    let end = payload.iter().skip(1).position(|b| *b == 0)? + 1;
    let id = payload.get(end + 1..end + 5)?;
    Some(u32::from_le_bytes(id.try_into().ok()?))
}
