//! The claim watcher: the worker's check, while it runs jobs, that each row still carries its token.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::Shared;
use crate::db::claim;
use crate::id::JobId;
use crate::job::AttemptKey;
use crate::service::sleep_or_stop;

/// Once a second while the worker runs jobs: reads which of its rows still carry its token, stops at
/// once every copy whose row was taken away (a reaper reset it; running on would make two copies), and
/// trips the jobs an operator asked to cancel. Also reconciles after a claim whose outcome was
/// uncertain.
pub(super) async fn watch_claims(shared: Arc<Shared>, stop: CancellationToken) {
    const EVERY: Duration = Duration::from_secs(1);
    loop {
        if sleep_or_stop(EVERY, &stop).await {
            return;
        }
        if shared.ledger.is_uncertain() {
            reconcile(&shared).await;
        }
        // Taken before the read: a job claimed after it is not judged by a read that may predate it.
        let running = shared.ledger.snapshot();
        if running.is_empty() {
            continue;
        }
        let ids: Vec<u64> = running.iter().map(|k| k.id.0).collect();
        match claim::held_rows(&shared.pool, &shared.token, &ids).await {
            Ok(held) => {
                // A set: a busy worker runs thousands of jobs at once.
                let still_held: HashSet<AttemptKey> = held
                    .iter()
                    .map(|h| AttemptKey {
                        id: h.id,
                        attempt: h.attempt,
                    })
                    .collect();
                for &key in &running {
                    if !still_held.contains(&key) && shared.ledger.mark_lost(key) {
                        warn!(job_id = key.id.0, attempt = key.attempt, claim = %shared.token,
                              "claim lost: the row no longer carries this worker's token and attempt; stopping this copy");
                    }
                }
                let wanted: Vec<JobId> = held
                    .iter()
                    .filter(|h| h.cancel_requested)
                    .map(|h| h.id)
                    .collect();
                for id in shared.ledger.request_cancel(&wanted) {
                    info!(
                        job_id = id.0,
                        "cancel requested by an operator; stopping the job"
                    );
                }
            }
            Err(e) => debug!(error = %e, "could not read this worker's claims"),
        }
    }
}

/// Hands back rows stamped with this worker's token that it is not running: left by a claim whose
/// COMMIT went through while its reply was lost. Without this they would stay `running` under the token
/// of a live worker, which no reaper touches.
async fn reconcile(shared: &Shared) {
    let _gate = shared.claim_gate.lock().await;
    let held = match claim::listed_rows(&shared.pool, &shared.token).await {
        Ok(h) => h,
        Err(e) => {
            debug!(error = %e, "cannot reconcile claims yet");
            return;
        }
    };
    let unknown: Vec<AttemptKey> = held
        .into_iter()
        .filter(|h| !shared.ledger.runs(h.id))
        .map(|h| AttemptKey {
            id: h.id,
            attempt: h.attempt,
        })
        .collect();
    for key in unknown {
        let AttemptKey { id, attempt } = key;
        let outcome = shared.ledger.outcome_for_held(key);
        let ran = outcome != crate::db::finish::Finish::Release;
        match crate::db::finish::finish(&shared.pool, id, &shared.token, attempt, &outcome).await {
            Ok(true) if ran => warn!(
                job_id = id.0,
                attempt, "recorded the outcome of a job that ran here once the database took it"
            ),
            Ok(true) => warn!(
                job_id = id.0,
                "handed back a job claimed by a claim whose reply was lost"
            ),
            Ok(false) => {}
            Err(e) => {
                if ran {
                    shared.ledger.unrecorded(key, outcome);
                }
                debug!(error = %e, "cannot reconcile claims yet");
                return;
            }
        }
    }
    shared.ledger.clear_uncertain();
}
