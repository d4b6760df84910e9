//! Several database hosts in one URL, for a cluster whose nodes all take writes (Galera):
//! `mysql://user:password@node1:3306,node2:3306,node3:3306/app`.
//!
//! A pool talks to one host at a time: the first of the list that serves when it is opened. A watcher
//! checks that host every second over a connection of its own (the pool's may all be busy). After two
//! failed checks in a row (the host is down, or it is a Galera node outside the Primary component, which
//! still answers `SELECT 1` but refuses every table with error 1047: measured on 10.11) it moves the pool
//! to the next host that serves, and the connections opened before are closed instead of handed out
//! ([`super::failover`]), so every statement retried after that lands on the new host. Workers carry on:
//! claims, finishes and heartbeats retry transient errors, and the anchor session reconnects through
//! the pool's current options ([`crate::session`]).
//!
//! A pool whose URL names one host has no watcher and costs nothing.

use std::time::Duration;

use sqlx::mysql::MySqlConnectOptions;
use sqlx::{ConnectOptions, Connection, MySqlConnection, MySqlPool};
use tracing::{debug, warn};

/// How often the current host is checked.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long one check (connecting included) may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// Failed checks in a row before the pool moves: one failure can be a connection the network reset.
const FAILS_TO_MOVE: u32 = 2;

/// One host of a URL: its connect options and how logs name it (`host:port`, never the password).
#[derive(Debug, Clone)]
pub(crate) struct Host {
    pub(crate) opts: MySqlConnectOptions,
    pub(crate) name: String,
}

/// One URL per host of `url`; `url` itself when it names one host. The user, password, database and
/// query are shared by every host.
pub(crate) fn split(url: &str) -> Vec<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return vec![url.to_string()];
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    // The password may hold any character, a comma included: hosts are what follows the last '@'.
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if !hosts.contains(',') {
        return vec![url.to_string()];
    }
    hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|host| match userinfo {
            Some(u) => format!("{scheme}://{u}@{host}{tail}"),
            None => format!("{scheme}://{host}{tail}"),
        })
        .collect()
}

/// Whether the server behind `conn` can serve jobq now: it answers, and unless it is a Galera node in
/// the Primary component, `wsrep_ready` is ON. MySQL and MariaDB without Galera have no `wsrep_on`
/// (or have it OFF) and always serve.
pub(crate) async fn serves(conn: &mut MySqlConnection) -> Result<bool, sqlx::Error> {
    let on: Option<(String, String)> = sqlx::query_as("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")
        .fetch_optional(&mut *conn)
        .await?;
    if !on.is_some_and(|(_, v)| v.eq_ignore_ascii_case("ON")) {
        return Ok(true);
    }
    let ready: Option<(String, String)> = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'wsrep_ready'")
        .fetch_optional(&mut *conn)
        .await?;
    Ok(ready.is_some_and(|(_, v)| v.eq_ignore_ascii_case("ON")))
}

/// Connects to `host` and checks that it serves, within [`CHECK_TIMEOUT`]; the connection if it does.
async fn open_serving(host: &Host) -> Option<MySqlConnection> {
    let attempt = async {
        let mut conn = host.opts.connect().await?;
        let ok = serves(&mut conn).await?;
        Ok::<_, sqlx::Error>(ok.then_some(conn))
    };
    match tokio::time::timeout(CHECK_TIMEOUT, attempt).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => {
            debug!(host = %host.name, error = %e, "database host does not answer");
            None
        }
        Err(_) => {
            debug!(host = %host.name, "database host does not answer in time");
            None
        }
    }
}

/// The index of the first host, from `start` on and wrapping around, that serves now, with a
/// connection to it.
pub(crate) async fn first_serving(
    hosts: &[Host],
    start: usize,
) -> Option<(usize, MySqlConnection)> {
    for step in 0..hosts.len() {
        let i = (start + step) % hosts.len();
        if let Some(conn) = open_serving(&hosts[i]).await {
            return Some((i, conn));
        }
    }
    None
}

/// Watches `pool`'s host (`hosts[current]`, reached by `check` if given) until the pool is closed,
/// moving the pool to the next host that serves when this one stops serving. Does nothing for one host
/// or outside a tokio runtime.
pub(crate) fn watch(
    pool: MySqlPool,
    hosts: Vec<Host>,
    current: usize,
    check: Option<MySqlConnection>,
) {
    if hosts.len() < 2 {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        warn!("no async runtime to watch the database hosts from; staying on the first");
        return;
    };
    runtime.spawn(async move {
        let mut current = current;
        let mut check = check;
        let mut fails = 0;
        loop {
            tokio::time::sleep(CHECK_EVERY).await;
            if pool.is_closed() {
                if let Some(c) = check.take() {
                    let _ = c.close().await;
                }
                return;
            }
            if still_serves(&mut check, &hosts[current]).await {
                fails = 0;
                continue;
            }
            fails += 1;
            debug!(host = %hosts[current].name, fails, "database host failed a check");
            if fails < FAILS_TO_MOVE {
                continue;
            }
            if let Some((next, conn)) = first_serving(&hosts, current + 1).await
                && next != current
            {
                warn!(from = %hosts[current].name, to = %hosts[next].name,
                      "database host stopped serving; moving to the next one");
                pool.set_connect_options(hosts[next].opts.clone());
                let _ = super::failover::recycle();
                current = next;
                check = Some(conn);
                fails = 0;
            }
        }
    });
}

/// Checks `host` over `check`, opening it first if needed; drops it after a failure.
async fn still_serves(check: &mut Option<MySqlConnection>, host: &Host) -> bool {
    if check.is_none() {
        *check = open_serving(host).await;
        return check.is_some();
    }
    let conn = check.as_mut().expect("checked above");
    let ok = matches!(
        tokio::time::timeout(CHECK_TIMEOUT, serves(conn)).await,
        Ok(Ok(true))
    );
    if !ok {
        *check = None;
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn a_host_list_becomes_one_url_per_host() {
        assert_eq!(
            split("mysql://u:p@a:1,b:2,c/db?ssl-mode=required"),
            [
                "mysql://u:p@a:1/db?ssl-mode=required",
                "mysql://u:p@b:2/db?ssl-mode=required",
                "mysql://u:p@c/db?ssl-mode=required"
            ]
        );
        assert_eq!(
            split("mysql://a:1,b:2/db"),
            ["mysql://a:1/db", "mysql://b:2/db"]
        );
        assert_eq!(split("mysql://u@a:1/db"), ["mysql://u@a:1/db"]);
        // A comma in the password is not a host separator.
        assert_eq!(split("mysql://u:p,q@a:1/db"), ["mysql://u:p,q@a:1/db"]);
        // Empty entries (a trailing comma) are ignored.
        assert_eq!(split("mysql://a:1,/db"), ["mysql://a:1/db"]);
    }
}
