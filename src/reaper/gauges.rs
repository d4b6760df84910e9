//! The database gauges a reaper reads for every process (queue depths, states, processes, held jobs),
//! so that a metrics exporter sees them without each worker running a dozen queries of its own.

use std::time::Duration;

use super::Reaper;
use crate::error::Result;

/// How often a reaper reads the queue gauges (`jobq_queue_*`, `jobq_processes`) from the database.
pub(super) const GAUGES_EVERY: Duration = Duration::from_secs(15);
impl Reaper {
    /// Reads the queue gauges every process would otherwise read for itself: due jobs and the oldest
    /// one's wait per queue, waiting and running jobs per queue (walks over waiting and running rows
    /// only), jobs per state (each counted up to 100,000), jobs per queue and state (each state's rows
    /// counted up to 10,000), processes per role, schedules per state, the longest-running job, the
    /// jobs waiting for others longer than `long_wait`, and InnoDB's history list length when this
    /// user may read it.
    pub(super) async fn read_gauges(&self) -> Result<()> {
        use crate::db::admin;
        let (
            lag,
            queues,
            paused,
            processes,
            states,
            by_queue,
            schedules,
            oldest_running,
            long_waiting,
        ) = tokio::try_join!(
            admin::lag(&self.pool),
            admin::queue_summaries(&self.pool),
            crate::db::queues::paused(&self.pool),
            admin::processes(&self.pool),
            admin::state_counts(&self.pool),
            crate::db::gauges::queue_state_counts(&self.pool),
            admin::schedules_by_state(&self.pool),
            admin::oldest_running_secs(&self.pool),
            crate::db::deps::long_waiting(&self.pool, self.cfg.long_wait),
        )?;
        let mut roles: std::collections::BTreeMap<String, i64> = Default::default();
        for p in &processes {
            *roles.entry(p.role.clone()).or_default() += 1;
        }
        let held = self.held(&paused, &processes).await?;
        let gauges = crate::telemetry::DbGauges {
            held,
            due: lag
                .into_iter()
                .map(|l| (l.queue, l.due, l.oldest_due_secs))
                .collect(),
            queues: queues
                .into_iter()
                .map(|q| (q.queue, q.waiting, q.running))
                .collect(),
            paused: paused.into_iter().map(|p| p.name).collect(),
            processes: roles.into_iter().collect(),
            states: states
                .into_iter()
                .map(|s| (s.state.as_str(), s.count))
                .collect(),
            queue_states: by_queue
                .into_iter()
                .map(|c| (c.queue, c.state.as_str(), c.count))
                .collect(),
            schedules,
            oldest_running_secs: oldest_running,
            waiting_long: long_waiting.count,
            history_length: admin::history_length(&self.pool).await,
        };
        crate::telemetry::db_gauges(&gauges);
        Ok(())
    }

    /// Due jobs held back per queue and reason (a pause, a pin, a full or zero limit): the
    /// `jobq_queue_held_jobs` gauge. Reads the due rows by kind, the pins, the limits and the running
    /// rows: each a short range, none of the history.
    async fn held(
        &self,
        paused: &[crate::db::queues::PausedQueue],
        processes: &[crate::db::admin::ProcessRow],
    ) -> Result<Vec<(String, &'static str, i64)>> {
        use crate::db::admin;
        let (due, pins, limits, running) = tokio::try_join!(
            admin::due_by_kind(&self.pool),
            crate::db::queues::pins(&self.pool),
            crate::db::limits::all(&self.pool),
            admin::running_counts(&self.pool),
        )?;
        let groups = admin::held(&admin::HoldFacts {
            due: &due,
            paused,
            pins: &pins,
            processes,
            limits: &limits,
            running: &running,
        });
        let mut sums: std::collections::BTreeMap<(String, &'static str), i64> = Default::default();
        for g in groups {
            for h in &g.holds {
                *sums.entry((g.queue.clone(), h.label())).or_default() += g.due;
            }
        }
        Ok(sums.into_iter().map(|((q, r), n)| (q, r, n)).collect())
    }
}
