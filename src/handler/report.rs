//! What a running job reports about itself through its [`JobContext`](super::JobContext): its
//! progress, written at most once a second whatever the handler asks (the last report is never lost:
//! it is written when the second is up, and before the job's outcome), and the output it leaves.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::MySqlPool;

use super::JobError;
use crate::claimant::token::TokenText;
use crate::db::report::{self, MAX_MESSAGE, MAX_OUTPUT};
use crate::job::AttemptKey;
use crate::sync::lock;

/// The least time between two progress writes of one job.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// A progress report: a percent and an optional message.
type Progress = (f64, Option<String>);

/// Writes one attempt's reports; without a database (a context made for a test), checks them only.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reporter {
    to: Option<Arc<Target>>,
}

#[derive(Debug)]
struct Target {
    pool: MySqlPool,
    key: AttemptKey,
    claim: TokenText,
    throttle: Mutex<Throttle>,
}

#[derive(Debug, Default)]
struct Throttle {
    /// When the last progress was written.
    written: Option<Instant>,
    /// A report made since, to write when the interval is up.
    pending: Option<Progress>,
    /// Whether a task waits to write `pending`.
    scheduled: bool,
}

impl Reporter {
    /// Reports of the attempt `key`, written under `claim` through `pool`.
    pub(crate) fn new(pool: MySqlPool, key: AttemptKey, claim: TokenText) -> Self {
        Self {
            to: Some(Arc::new(Target {
                pool,
                key,
                claim,
                throttle: Mutex::default(),
            })),
        }
    }

    /// See [`JobContext::progress`](super::JobContext::progress).
    pub(crate) async fn progress(
        &self,
        percent: f64,
        message: Option<String>,
    ) -> Result<(), JobError> {
        check_progress(percent, message.as_deref())?;
        let Some(to) = &self.to else { return Ok(()) };
        let now = {
            let mut t = lock(&to.throttle);
            match t.written.map(|w| w.elapsed()) {
                Some(since) if since < PROGRESS_INTERVAL => {
                    t.pending = Some((percent, message));
                    if t.scheduled {
                        return Ok(());
                    }
                    t.scheduled = true;
                    Err(PROGRESS_INTERVAL - since)
                }
                _ => {
                    t.written = Some(Instant::now());
                    t.pending = None;
                    Ok(message)
                }
            }
        };
        match now {
            Ok(message) => to.write(percent, message.as_deref()).await,
            Err(wait) => {
                let to = to.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    to.write_pending().await;
                });
            }
        }
        Ok(())
    }

    /// Writes a report the interval held back: called before the attempt's outcome is recorded, so
    /// that the last progress a job made is the one it shows.
    pub(crate) async fn flush(&self) {
        if let Some(to) = &self.to
            && lock(&to.throttle).pending.is_some()
        {
            // Boxed: most jobs never report, and the write's future would make every job's task larger.
            Box::pin(to.write_pending()).await;
        }
    }

    /// See [`JobContext::output`](super::JobContext::output).
    pub(crate) async fn output(&self, json: String) -> Result<(), JobError> {
        check_output(&json)?;
        let Some(to) = &self.to else { return Ok(()) };
        match report::output(&to.pool, to.key, &to.claim, &json).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(JobError::retry(
                "the output was not recorded: this attempt no longer holds the job's claim",
            )),
            Err(e) => Err(JobError::retry(format!(
                "the output could not be recorded: {e}"
            ))),
        }
    }
}

impl Target {
    async fn write_pending(&self) {
        let pending = {
            let mut t = lock(&self.throttle);
            t.scheduled = false;
            let p = t.pending.take();
            if p.is_some() {
                t.written = Some(Instant::now());
            }
            p
        };
        if let Some((percent, message)) = pending {
            self.write(percent, message.as_deref()).await;
        }
    }

    /// A progress write is advice to whoever watches: one that fails is logged, and the job goes on.
    async fn write(&self, percent: f64, message: Option<&str>) {
        match report::progress(&self.pool, self.key, &self.claim, percent, message).await {
            Ok(true) => {}
            Ok(false) => tracing::debug!(
                job_id = self.key.id.0,
                "progress not recorded: the claim is no longer this attempt's"
            ),
            Err(e) => {
                tracing::warn!(job_id = self.key.id.0, error = %e, "could not record the job's progress")
            }
        }
    }
}

/// A percent from 0 to 100 and a message of at most [`MAX_MESSAGE`] characters.
fn check_progress(percent: f64, message: Option<&str>) -> Result<(), JobError> {
    if !(0.0..=100.0).contains(&percent) {
        return Err(JobError::fatal(format!(
            "progress {percent} is not a percent from 0 to 100"
        )));
    }
    if let Some(m) = message
        && m.chars().count() > MAX_MESSAGE
    {
        return Err(JobError::fatal(format!(
            "a progress message is at most {MAX_MESSAGE} characters; this one has {}",
            m.chars().count()
        )));
    }
    Ok(())
}

/// At most [`MAX_OUTPUT`] bytes.
fn check_output(json: &str) -> Result<(), JobError> {
    if json.len() > MAX_OUTPUT {
        return Err(JobError::fatal(format!(
            "a job's output is at most {MAX_OUTPUT} bytes (64 KiB) of JSON; this one has {}",
            json.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_reports_are_refused_saying_why() {
        assert!(check_progress(0.0, None).is_ok());
        assert!(check_progress(100.0, Some("done")).is_ok());
        for bad in [-0.5, 100.01, f64::NAN, f64::INFINITY] {
            let e = check_progress(bad, None).unwrap_err();
            assert!(e.to_string().contains("from 0 to 100"), "{e}");
        }
        let long = "x".repeat(256);
        assert!(
            check_progress(5.0, Some(&long))
                .unwrap_err()
                .to_string()
                .contains("255")
        );
        assert!(check_output(&"1".repeat(MAX_OUTPUT)).is_ok());
        let e = check_output(&"1".repeat(MAX_OUTPUT + 1)).unwrap_err();
        assert!(e.to_string().contains("64 KiB"), "{e}");
    }
}
