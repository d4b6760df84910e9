//! Time as the latency figures need it: the client's clock, the server's clock's offset from it, and
//! quantiles of the measured latencies.

use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::MySqlPool;

use super::BResult;

/// Microseconds since the Unix epoch on the client's clock.
pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The server's NOW(6) minus the client's clock, from the round trip with the smallest delay out of a
/// few, so pickup latency can compare a handler's start (client clock) with `run_at` (server clock).
pub(crate) async fn clock_offset(pool: &MySqlPool) -> BResult<i64> {
    let mut conn = pool.acquire().await?;
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..20 {
        let t0 = now_us();
        let server: i64 =
            sqlx::query_scalar("SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)")
                .fetch_one(&mut *conn)
                .await?;
        let t1 = now_us();
        let rtt = t1 - t0;
        if best.is_none_or(|(r, _)| rtt < r) {
            best = Some((rtt, server - (t0 + t1) / 2));
        }
    }
    Ok(best.map_or(0, |(_, off)| off))
}

/// The value at quantile `q` (0..=1) of sorted `v`.
pub(crate) fn quantile(v: &[i64], q: f64) -> i64 {
    if v.is_empty() {
        return 0;
    }
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i.min(v.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), 51);
        assert_eq!(quantile(&v, 0.99), 99);
        assert_eq!(quantile(&[], 0.5), 0);
    }
}
