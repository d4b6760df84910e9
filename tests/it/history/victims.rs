//! The processes and claimants a fault test kills or cuts off, read before it does so, and the
//! evidence that a killed handler copy is gone.

use std::path::Path;

/// Pids of the direct children of `parent` (from /proc): a supervisor's workers, among which a test
/// picks the one it kills.
pub fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        // state is f[0], ppid f[1]; zombies are dead children not yet collected.
        if f.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) && f[0] != "Z" {
            out.push(pid);
        }
    }
    out
}

/// The claim tokens of the workers registered in the database: the claimants a test is about to
/// kill, cut off or put through a fault, read before it does so.
pub async fn worker_tokens(pool: &sqlx::MySqlPool) -> Vec<String> {
    let tokens: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT CAST(token AS BINARY) FROM jobq_processes WHERE role = 'worker'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    tokens
        .into_iter()
        .map(|t| String::from_utf8(t).unwrap())
        .collect()
}

/// The claim token of the worker process `pid` if it has registered: the claimant a test is about
/// to kill when it picks its victim by pid (a supervisor's child), read before the kill. None for a
/// child killed before it registered, which has claimed nothing.
pub async fn worker_token_of(pool: &sqlx::MySqlPool, pid: u32) -> Option<String> {
    let token: Option<Vec<u8>> = sqlx::query_scalar(
        "SELECT CAST(token AS BINARY) FROM jobq_processes WHERE role = 'worker' AND pid = ?",
    )
    .bind(pid)
    .fetch_optional(pool)
    .await
    .unwrap();
    token.map(|t| String::from_utf8(t).unwrap())
}

/// The claim token of the one worker registered in the database (see [`worker_tokens`]).
pub async fn sole_worker_token(pool: &sqlx::MySqlPool) -> String {
    let mut tokens = worker_tokens(pool).await;
    assert_eq!(tokens.len(), 1, "one worker registered");
    tokens.remove(0)
}

/// Whether some process still holds `lock`, the lock a [`super::recorded_command`] copy holds for as long
/// as any of its processes lives: a killed copy is gone once this is false.
pub fn lock_held(lock: &Path) -> bool {
    !std::process::Command::new("flock")
        .arg("-n")
        .arg(lock)
        .arg("true")
        .status()
        .unwrap()
        .success()
}

/// The last heartbeat of the killed worker `token`, µs since the epoch by the server's clock: read after
/// its process is dead (a heartbeat still in flight at the kill lands within milliseconds; one that
/// landed after this read would only make the gap to its release look longer) and before a reaper
/// releases its rows and removes its registry row.
pub async fn last_heartbeat_us(pool: &sqlx::MySqlPool, token: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT CAST(UNIX_TIMESTAMP(heartbeat_at) * 1000000 AS SIGNED) FROM jobq_processes \
         WHERE token = ?",
    )
    .bind(token)
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| panic!("the registry row of {token}: {e}"))
}

/// When a reaper released the rows of `claim`, µs since the epoch by the server's clock: the
/// `released` attempts it recorded in the same transaction as the reset.
pub async fn released_us(pool: &sqlx::MySqlPool, claim: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT CAST(UNIX_TIMESTAMP(MIN(ended_at)) * 1000000 AS SIGNED) FROM jobq_attempts \
         WHERE outcome = 'released' AND claim = ?",
    )
    .bind(claim)
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| panic!("the released attempts of {claim}: {e}"))
}
