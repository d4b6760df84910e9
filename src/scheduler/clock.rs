//! Where the scheduler's "now" comes from: the database's clock, or a manual one for tests.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::MySqlPool;

use crate::db::schedule as sql;
use crate::error::Result;

/// Where the scheduler's "now" comes from.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// `SELECT NOW(6)` once per tick (default): every scheduler agrees, whatever its host's clock.
    #[default]
    Database,
    /// A time the caller sets: tests step through days of schedules in milliseconds.
    Manual(ManualClock),
}

impl Clock {
    /// The current time by this clock.
    pub async fn now(&self, pool: &MySqlPool) -> Result<DateTime<Utc>> {
        match self {
            Clock::Database => sql::now(pool).await,
            Clock::Manual(m) => Ok(m.now()),
        }
    }
}

/// A clock that stands still until it is set or advanced. Clones share the time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    /// A clock showing `t`.
    pub fn new(t: DateTime<Utc>) -> Self {
        Self(Arc::new(Mutex::new(t)))
    }

    /// The time it shows.
    pub fn now(&self) -> DateTime<Utc> {
        *crate::sync::lock(&self.0)
    }

    /// Sets the time.
    pub fn set(&self, t: DateTime<Utc>) {
        *crate::sync::lock(&self.0) = t;
    }

    /// Moves the time on by `d`.
    pub fn advance(&self, d: Duration) {
        let mut t = crate::sync::lock(&self.0);
        *t += TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn manual_clock_is_shared_by_clones() {
        let t = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let c = ManualClock::new(t);
        let c2 = c.clone();
        c.advance(Duration::from_secs(90));
        assert_eq!(c2.now(), t + TimeDelta::seconds(90));
        c2.set(t);
        assert_eq!(c.now(), t);
    }
}
