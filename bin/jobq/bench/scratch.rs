//! The scratch database a run works in: its URL, dropping it at the end (also after an interrupted
//! section), and what the report says about the server it is on.

use std::collections::BTreeMap;

use sqlx::{Executor, MySqlPool};

use super::{BResult, ServerInfo, note};

/// Ends every other session using the scratch database (workers of an interrupted section), then drops
/// it. Best effort: errors are printed, not returned.
pub(super) async fn drop_scratch(admin: &mut sqlx::MySqlConnection, name: &str) {
    let ids: Vec<u64> = sqlx::query_scalar(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()",
    )
    .bind(name)
    .fetch_all(&mut *admin)
    .await
    .unwrap_or_default();
    for id in ids {
        let _ = admin.execute(format!("KILL {id}").as_str()).await;
    }
    if let Err(e) = admin
        .execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
        .await
    {
        note(format_args!(
            "bench: could not drop scratch database {name}: {e}"
        ));
    }
}

/// `url` with its database replaced by `name` (any `?params` kept).
pub(crate) fn database_url(url: &str, name: &str) -> String {
    let (main, query) = match url.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (url, None),
    };
    let head = match main.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('/') {
            Some((authority, _)) => format!("{scheme}://{authority}"),
            None => main.to_string(),
        },
        None => main.to_string(),
    };
    match query {
        Some(q) => format!("{head}/{name}?{q}"),
        None => format!("{head}/{name}"),
    }
}

pub(super) fn is_local(opts: &sqlx::mysql::MySqlConnectOptions) -> bool {
    opts.get_socket().is_some() || matches!(opts.get_host(), "localhost" | "127.0.0.1" | "::1")
}

pub(super) async fn server_info(pool: &MySqlPool) -> BResult<ServerInfo> {
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(pool)
        .await?;
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('innodb_flush_log_at_trx_commit', 'log_bin', \
         'sync_binlog', 'innodb_buffer_pool_size', 'tx_isolation', 'transaction_isolation', \
         'performance_schema', 'max_connections', 'innodb_log_file_size')",
    )
    .fetch_all(pool)
    .await?;
    let mut settings: BTreeMap<String, String> = rows.into_iter().collect();
    if let Some(b) = settings.get_mut("innodb_buffer_pool_size")
        && let Ok(n) = b.parse::<u64>()
    {
        *b = format!("{} MiB", n >> 20);
    }
    // MariaDB 10.x names it tx_isolation, MySQL 8 transaction_isolation.
    let session = match sqlx::query_scalar::<_, String>("SELECT @@SESSION.tx_isolation")
        .fetch_one(pool)
        .await
    {
        Ok(s) => s,
        Err(_) => sqlx::query_scalar("SELECT @@SESSION.transaction_isolation")
            .fetch_one(pool)
            .await
            .unwrap_or_else(|_| "unknown".to_string()),
    };
    settings.insert("jobq session isolation".into(), session);
    Ok(ServerInfo { version, settings })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database() {
        assert_eq!(
            database_url("mysql://u:p@h:3306/test", "x"),
            "mysql://u:p@h:3306/x"
        );
        assert_eq!(
            database_url("mysql://h/test?ssl-mode=DISABLED", "x"),
            "mysql://h/x?ssl-mode=DISABLED"
        );
        assert_eq!(database_url("mysql://h", "x"), "mysql://h/x");
    }
}
