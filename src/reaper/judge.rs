//! Judging claimants: gathering the facts about every claimant of a running row and every registered
//! process (registry rows, locks, the processlist, local pids) for the pure rules of
//! [`crate::claimant::liveness`].

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::debug;

use super::Reaper;
use crate::claimant::liveness::{self, Facts, Registered, Thresholds, Verdict};
use crate::claimant::token::{ClaimToken, ProcessIdentity};
use crate::db::reap::{self, RegistryRow};
use crate::error::Result;

/// A claimant judged dead: its token, why (cause and words), and the heartbeat its registry row showed
/// then (`None`: it had none), which the reset of its rows checks again.
pub(super) type Dead = (
    String,
    crate::claimant::liveness::Cause,
    String,
    Option<DateTime<Utc>>,
);
use crate::session::lock_name;

impl Reaper {
    /// Claimants judged dead, with the reason and the heartbeat their registry row showed (`None`: no
    /// row), which their reset re-checks.
    pub(super) async fn find_dead(&self) -> Result<Vec<Dead>> {
        let verdicts = self.judge_all().await?;
        Ok(verdicts
            .into_iter()
            .filter_map(|(t, (v, seen))| match v {
                Verdict::Dead(cause, r) => Some((t, cause, r, seen)),
                Verdict::Suspect(r) => {
                    debug!(claim = %t, reason = %r, "claimant suspect; waiting out its fence");
                    None
                }
                Verdict::Alive => None,
            })
            .collect())
    }

    /// Verdicts on every claimant of a running row and every registered process but this one, each with
    /// the heartbeat its registry row showed.
    async fn judge_all(&self) -> Result<HashMap<String, (Verdict, Option<DateTime<Utc>>)>> {
        let registry: HashMap<String, RegistryRow> = reap::registry(&self.pool)
            .await?
            .into_iter()
            .map(|r| (r.token.clone(), r))
            .collect();
        let claims = reap::running_claims(&self.pool).await?;
        let newest_claim: HashMap<String, Duration> =
            claims.iter().map(|(t, _, age)| (t.clone(), *age)).collect();
        let mut tokens: Vec<String> = claims.into_iter().map(|(t, _, _)| t).collect();
        for t in registry.keys() {
            if !tokens.contains(t) {
                tokens.push(t.clone());
            }
        }
        if tokens.is_empty() {
            return Ok(HashMap::new());
        }
        let (server_id, epoch, uptime) = reap::server_state(&self.pool).await?;
        // On a Galera node the processlist and connection ids are this node's own (every node of the
        // test cluster has server_id 1 and the same start time, give or take), so a listed connection
        // id says nothing about a claimant connected to another node: only the lock (named by the
        // claimant's nonce) and the replicated heartbeat are trusted there.
        let galera = reap::galera_cluster_size(&self.pool).await?.is_some();
        let parsed: Vec<Option<ClaimToken>> = tokens.iter().map(|t| t.parse().ok()).collect();
        let lock_names: Vec<String> = parsed
            .iter()
            .map(|p| p.as_ref().map(lock_name).unwrap_or_default())
            .collect();
        let held = reap::locks_held(&self.pool, &lock_names).await?;
        let conn_ids: Vec<u64> = registry.values().map(|r| r.connection_id).collect();
        let listed = reap::listed_connections(&self.pool, &conn_ids).await?;
        let me = ProcessIdentity::current();
        let thresholds = Thresholds {
            lease: self.cfg.lease,
            session_signals: self.cfg.session_signals,
            restart_grace: self.cfg.restart_grace,
        };

        let mut out = HashMap::new();
        for (i, token) in tokens.iter().enumerate() {
            let reg = registry.get(token);
            let same_server = !galera
                && reg.is_some_and(|r| {
                    r.server_id == server_id && (r.server_epoch - epoch).abs() <= 2
                });
            let process = reg
                .filter(|r| !r.host_id.is_empty() && r.host_id == me.host_id)
                .map(|r| liveness::local_process(r.pid, Some(r.started_at)));
            // This reaper's own row is alive by definition.
            if reg.is_some_and(|r| r.host_id == me.host_id && r.pid == me.pid) {
                continue;
            }
            let facts = Facts {
                registered: reg.map(|r| Registered {
                    heartbeat_age: r.heartbeat_age,
                    heartbeat_every: r.heartbeat_every,
                    fence: r.fence,
                }),
                lock_held: !lock_names[i].is_empty() && held[i],
                connection_listed: reg.is_some_and(|r| listed.contains(&r.connection_id)),
                same_server,
                process,
                server_uptime: uptime,
                newest_claim_age: newest_claim.get(token).copied(),
            };
            out.insert(
                token.clone(),
                (
                    liveness::judge(&facts, &thresholds),
                    reg.map(|r| r.heartbeat_at),
                ),
            );
        }
        Ok(out)
    }
}
