//! Priority aging, a queue setting of [`Queues`]: its waiting jobs gain priority as they wait, so a
//! flood of urgent work delays less urgent work but never starves it. The reaper's pass applies it
//! (`crate::reaper::aging` says why there); the setting is a row in `jobq_queue_aging` (schema 29),
//! which plain SQL may write as well.

use std::time::Duration;

use super::queues::Queues;
use crate::db::aging::{self, QueueAging};
use crate::error::{Error, Result};
use crate::name::Name;

impl Queues {
    /// The longest aging step: a week (a job at priority 10 then reaches 0 in ten weeks).
    pub const MAX_AGING_STEP: Duration = Duration::from_secs(7 * 24 * 3600);

    /// From now on (at the next reaper pass), `queue`'s waiting jobs gain one step of priority (their
    /// number goes down by one) for every `every` they have been due, until they reach `floor`, or
    /// with `None` the most urgent priority among the queue's waiting jobs. Replaces the queue's
    /// aging if it had one. A retry or snooze puts a job back at the priority it was enqueued with.
    ///
    /// Needs a reaper (`jobq reaper`, or `jobq supervise --reaper`, or `jobq reaper --once` from
    /// cron): its pass does the aging, so a job gets the steps it earned within one reaper interval.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a queue name the schema cannot hold, or a step that is not whole
    /// milliseconds between 1 ms and [`Self::MAX_AGING_STEP`], with nothing written; a database
    /// error.
    pub async fn age(
        &self,
        queue: &str,
        every: Duration,
        floor: Option<i16>,
        by: &str,
    ) -> Result<()> {
        Name::Queue.check(queue)?;
        check_step(every)?;
        let by: String = by.chars().take(crate::db::queues::NOTE_WIDTH).collect();
        aging::set(&self.pool, queue, every, floor, &by).await?;
        let target = format!(
            "{queue} every {}{}",
            humantime::format_duration(every),
            floor.map(|f| format!(" to {f}")).unwrap_or_default()
        );
        self.auditor
            .record(&self.pool, "queue.age", &target, 1)
            .await;
        Ok(())
    }

    /// Stops aging `queue`'s jobs; false when it had no aging. Jobs raised already keep the priority
    /// they reached until they run (a retry then puts them back).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a queue name the schema cannot hold; a database error.
    pub async fn stop_aging(&self, queue: &str) -> Result<bool> {
        Name::Queue.check(queue)?;
        let removed = aging::remove(&self.pool, queue).await?;
        self.auditor
            .record(&self.pool, "queue.age.off", queue, u64::from(removed))
            .await;
        Ok(removed)
    }

    /// Every queue's aging, by queue.
    ///
    /// # Errors
    /// A database error.
    pub async fn aging(&self) -> Result<Vec<QueueAging>> {
        aging::all(&self.pool).await
    }
}

/// A step the column holds exactly and that means something: whole milliseconds, 1 ms to a week.
fn check_step(every: Duration) -> Result<()> {
    let whole_ms = every.subsec_nanos().is_multiple_of(1_000_000);
    if whole_ms && every >= Duration::from_millis(1) && every <= Queues::MAX_AGING_STEP {
        return Ok(());
    }
    Err(Error::invalid(
        "aging step",
        format!(
            "{} is not whole milliseconds between 1ms and {}",
            humantime::format_duration(every),
            humantime::format_duration(Queues::MAX_AGING_STEP)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_whole_milliseconds_up_to_a_week() {
        assert!(check_step(Duration::from_millis(200)).is_ok());
        assert!(check_step(Queues::MAX_AGING_STEP).is_ok());
        for bad in [
            Duration::ZERO,
            Duration::from_micros(1_500),
            Queues::MAX_AGING_STEP + Duration::from_secs(1),
        ] {
            let e = check_step(bad).unwrap_err().to_string();
            assert!(
                e.contains("aging step") && e.contains("whole milliseconds"),
                "{e}"
            );
        }
    }
}
