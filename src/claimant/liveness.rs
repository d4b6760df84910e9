//! Is a claimant alive? A pure decision over facts the reaper gathered, plus the local probes it uses.
//!
//! The signals, strongest first:
//! * **Its process** (only when the reaper runs on the same host and sees the same pids, which
//!   `host_id` tells): a dead pid, a zombie, or a pid now owned by a younger process means the claimant is
//!   gone. This is definitive and immediate: nothing a dead worker started lives on (its command
//!   handlers die with it).
//! * **Its anchor session**: a claimant holds a named lock on its anchor session (`GET_LOCK`), which the
//!   server releases the moment the session ends; `IS_USED_LOCK` tells whether it is still held, and the
//!   registry's connection id in the processlist is a second witness. A lost session does *not* prove
//!   the process dead: a live worker whose session dropped (a proxy restart, `wait_timeout`, a DBA's
//!   `KILL`, a network cut) may still be running its jobs. So a lost session counts only once the
//!   claimant's heartbeat is older than its self-fence bound plus [`crate::claimant::fence::MARGIN`]: by then a
//!   live claimant has stopped its jobs itself (see [`crate::claimant::fence`]). Until then it is [`Verdict::Suspect`].
//!   Not at all in the first moments after a server restart, when every session is new.
//! * **Its heartbeat**: older than the lease means gone, whatever else is true. This catches a hung
//!   process whose session stays open, and it is the only signal when connections go through a proxy that
//!   multiplexes sessions (turn the session signal off there). A claimant is never judged by a lease
//!   shorter than three of its heartbeats or its fence bound plus the margin.
//!
//! A claimant whose lock is held and whose heartbeat is within the lease is alive, however long its jobs
//! run: a slow job of a live worker keeps its claim.

use std::time::Duration;

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

use crate::claimant::fence::MARGIN;

/// What the reaper knows about one claimant.
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// Its registry row, if it has one.
    pub registered: Option<Registered>,
    /// Whether the lock on its anchor session is held (by any connection).
    pub lock_held: bool,
    /// Whether its registered connection id is in the processlist of the same server incarnation.
    pub connection_listed: bool,
    /// Whether the session facts refer to the server the reaper is on now (same server id, same start
    /// time). When false, session signals say nothing.
    pub same_server: bool,
    /// The state of its process, when the reaper can see it (same boot and pid namespace).
    pub process: Option<ProcessState>,
    /// How long the server has been up.
    pub server_uptime: Duration,
    /// Age of its newest claim on a running row, by the database clock (for a claimant without a
    /// registry row).
    pub newest_claim_age: Option<Duration>,
}

/// The parts of a registry row that matter here.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registered {
    /// Age of its last heartbeat, by the database clock.
    pub heartbeat_age: Duration,
    /// How often it heartbeats, if it said so when it registered.
    pub heartbeat_every: Option<Duration>,
    /// Its self-fence bound, if it keeps one (older versions do not).
    pub fence: Option<Duration>,
}

/// A local process, as the reaper sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
pub enum ProcessState {
    /// Running, and old enough to be the claimant.
    Alive,
    /// No such process, or a zombie.
    Dead,
    /// The pid belongs to a process started after the claimant registered.
    Reused,
}

/// Thresholds of the decision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Thresholds {
    /// A heartbeat older than this means the claimant is gone.
    pub lease: Duration,
    /// Whether anchor sessions can be trusted (false behind a session-multiplexing proxy).
    pub session_signals: bool,
    /// For this long after a server restart, a missing session proves nothing.
    pub restart_grace: Duration,
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Leave it alone.
    Alive,
    /// Its session is gone but it may still be running its jobs: wait until its fence has passed.
    Suspect(String),
    /// Gone: reset its rows. Why, as a bounded label and in words.
    Dead(Cause, String),
}

/// Why a claimant was judged gone: the `reason` label of `jobq_released_jobs_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Its process is gone from this host (or its pid was reused).
    Process,
    /// No heartbeat within its lease.
    Lease,
    /// Its database session is gone and its fence bound has passed.
    Session,
}

impl Cause {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Process => "process_gone",
            Self::Lease => "lease_expired",
            Self::Session => "session_gone",
        }
    }
}

/// The lease a claimant is judged by: never shorter than three of its heartbeats or its fence plus the
/// margin, whatever the reaper was told.
pub(crate) fn lease_for(reg: &Registered, t: &Thresholds) -> Duration {
    let mut lease = t.lease;
    if let Some(h) = reg.heartbeat_every {
        lease = lease.max(h * 3);
    }
    if let Some(f) = reg.fence {
        lease = lease.max(f + MARGIN);
    }
    lease
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// Decides about one claimant.
pub(crate) fn judge(f: &Facts, t: &Thresholds) -> Verdict {
    match f.process {
        Some(ProcessState::Dead) => {
            return Verdict::Dead(Cause::Process, "its process is gone".into());
        }
        Some(ProcessState::Reused) => {
            return Verdict::Dead(
                Cause::Process,
                "its pid now belongs to another process".into(),
            );
        }
        Some(ProcessState::Alive) | None => {}
    }
    if let Some(reg) = &f.registered {
        let lease = lease_for(reg, t);
        if reg.heartbeat_age > lease {
            return Verdict::Dead(
                Cause::Lease,
                format!(
                    "no heartbeat for {} (lease {})",
                    secs(reg.heartbeat_age),
                    secs(lease)
                ),
            );
        }
    }
    if f.lock_held || (f.same_server && f.connection_listed) {
        return Verdict::Alive;
    }
    if !t.session_signals {
        return Verdict::Alive;
    }
    if f.server_uptime < t.restart_grace {
        // Every session ended with the restart; give claimants time to come back.
        return Verdict::Alive;
    }
    // The session is gone. A live claimant that lost it stops its own jobs once its fence bound has
    // passed without a heartbeat; only after that, plus the margin, may its rows go to someone else.
    let (age, wait, what) = match &f.registered {
        Some(reg) => (
            reg.heartbeat_age,
            // A claimant that keeps no fence (an older version) is judged by the lease alone.
            reg.fence.map_or(lease_for(reg, t), |b| b + MARGIN),
            "heartbeat",
        ),
        // Processes register before they claim and a live one re-registers within a heartbeat, so this
        // is rare (its row was removed): its bound is unknown, so wait out the lease.
        None => (f.newest_claim_age.unwrap_or_default(), t.lease, "claim"),
    };
    if age > wait {
        Verdict::Dead(
            Cause::Session,
            format!(
                "its database session is gone and its last {what} is {} old (it stops its own jobs after {})",
                secs(age),
                secs(wait.saturating_sub(MARGIN))
            ),
        )
    } else {
        Verdict::Suspect(format!(
            "its database session is gone; waiting until its last {what} is {} old",
            secs(wait)
        ))
    }
}

/// The state of local process `pid`, which registered at `registered_at` (database clock). Only
/// meaningful when the caller has checked that the claimant ran in this boot and pid namespace.
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
pub fn local_process(pid: u32, registered_at: Option<DateTime<Utc>>) -> ProcessState {
    let Ok(raw) = i32::try_from(pid) else {
        return ProcessState::Dead;
    };
    // EPERM still means the process exists.
    if let Err(Errno::ESRCH) = kill(Pid::from_raw(raw), None) {
        return ProcessState::Dead;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return ProcessState::Alive;
    };
    // Fields after the command name, which is in parentheses and may contain spaces.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return ProcessState::Alive;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return ProcessState::Dead;
    }
    let (Some(registered_at), Some(start)) = (
        registered_at,
        fields.get(19).and_then(|s| s.parse::<u64>().ok()),
    ) else {
        return ProcessState::Alive;
    };
    match process_started_at(start) {
        // Generous slack: the registry's time is the database's clock, which may differ from ours.
        Some(started) if started > registered_at + chrono::Duration::seconds(60) => {
            ProcessState::Reused
        }
        _ => ProcessState::Alive,
    }
}

/// Wall-clock start of a process from its start time in clock ticks since boot.
fn process_started_at(ticks: u64) -> Option<DateTime<Utc>> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: i64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // USER_HZ is 100 on every Linux architecture jobq runs on.
    let secs = btime + (ticks / 100) as i64;
    DateTime::from_timestamp(secs, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Thresholds {
        Thresholds {
            lease: Duration::from_secs(60),
            session_signals: true,
            restart_grace: Duration::from_secs(30),
        }
    }

    fn reg(heartbeat_age: u64) -> Registered {
        Registered {
            heartbeat_age: Duration::from_secs(heartbeat_age),
            heartbeat_every: Some(Duration::from_secs(2)),
            fence: Some(Duration::from_secs(10)),
        }
    }

    fn alive_facts() -> Facts {
        Facts {
            registered: Some(reg(3)),
            lock_held: true,
            connection_listed: true,
            same_server: true,
            process: None,
            server_uptime: Duration::from_secs(3600),
            newest_claim_age: None,
        }
    }

    fn no_session(f: Facts) -> Facts {
        Facts {
            lock_held: false,
            connection_listed: false,
            ..f
        }
    }

    #[test]
    fn a_live_claimant_with_a_long_job_is_alive() {
        assert_eq!(judge(&alive_facts(), &t()), Verdict::Alive);
        let f = Facts {
            process: Some(ProcessState::Alive),
            ..alive_facts()
        };
        assert_eq!(judge(&f, &t()), Verdict::Alive);
    }

    #[test]
    fn a_dead_or_reused_pid_is_dead_at_once() {
        for p in [ProcessState::Dead, ProcessState::Reused] {
            let f = Facts {
                process: Some(p),
                registered: Some(reg(0)),
                ..no_session(alive_facts())
            };
            assert!(matches!(judge(&f, &t()), Verdict::Dead(..)), "{p:?}");
        }
    }

    #[test]
    fn a_stale_heartbeat_is_dead_even_with_a_session() {
        let f = Facts {
            registered: Some(reg(61)),
            ..alive_facts()
        };
        assert!(matches!(judge(&f, &t()), Verdict::Dead(_, r) if r.contains("lease")));
    }

    #[test]
    fn a_lost_session_waits_out_the_claimants_fence_and_margin() {
        // Inside the bound (10 s) plus the margin (2 s): the claimant may still be running its jobs.
        for age in [0, 5, 11] {
            let f = Facts {
                registered: Some(reg(age)),
                ..no_session(alive_facts())
            };
            assert!(
                matches!(judge(&f, &t()), Verdict::Suspect(_)),
                "heartbeat {age}s old"
            );
        }
        let f = Facts {
            registered: Some(reg(13)),
            ..no_session(alive_facts())
        };
        assert!(matches!(judge(&f, &t()), Verdict::Dead(_, r) if r.contains("session is gone")));
        // Either witness keeps it alive.
        let f = Facts {
            lock_held: false,
            registered: Some(reg(30)),
            ..alive_facts()
        };
        assert_eq!(judge(&f, &t()), Verdict::Alive);
    }

    #[test]
    fn a_claimant_without_a_fence_is_judged_by_the_lease() {
        let old = Registered {
            fence: None,
            heartbeat_every: None,
            ..reg(30)
        };
        let f = Facts {
            registered: Some(old.clone()),
            ..no_session(alive_facts())
        };
        assert!(matches!(judge(&f, &t()), Verdict::Suspect(_)));
        let f = Facts {
            registered: Some(Registered {
                heartbeat_age: Duration::from_secs(61),
                ..old
            }),
            ..no_session(alive_facts())
        };
        assert!(matches!(judge(&f, &t()), Verdict::Dead(..)));
    }

    #[test]
    fn a_short_lease_never_undercuts_the_claimants_own_bounds() {
        let short = Thresholds {
            lease: Duration::from_secs(1),
            ..t()
        };
        assert_eq!(lease_for(&reg(0), &short), Duration::from_secs(12));
        let f = Facts {
            registered: Some(reg(5)),
            ..alive_facts()
        };
        assert_eq!(judge(&f, &short), Verdict::Alive);
    }

    #[test]
    fn sessions_prove_nothing_right_after_a_restart_or_behind_a_proxy() {
        let f = Facts {
            server_uptime: Duration::from_secs(5),
            registered: Some(reg(20)),
            ..no_session(alive_facts())
        };
        assert_eq!(judge(&f, &t()), Verdict::Alive);
        let proxy = Thresholds {
            session_signals: false,
            ..t()
        };
        let f = Facts {
            registered: Some(reg(20)),
            ..no_session(alive_facts())
        };
        assert_eq!(judge(&f, &proxy), Verdict::Alive);
    }

    #[test]
    fn an_unregistered_claimant_without_a_session_waits_out_the_lease() {
        let f = Facts {
            registered: None,
            newest_claim_age: Some(Duration::from_secs(20)),
            ..no_session(alive_facts())
        };
        assert!(matches!(judge(&f, &t()), Verdict::Suspect(_)));
        let f = Facts {
            registered: None,
            newest_claim_age: Some(Duration::from_secs(61)),
            ..no_session(alive_facts())
        };
        assert!(matches!(judge(&f, &t()), Verdict::Dead(..)));
    }

    #[test]
    fn probes_this_process_and_a_dead_one() {
        let me = std::process::id();
        assert_eq!(local_process(me, Some(Utc::now())), ProcessState::Alive);
        assert_eq!(
            local_process(me, Some(Utc::now() - chrono::Duration::days(30))),
            ProcessState::Reused
        );
        assert_eq!(local_process(u32::MAX - 1, None), ProcessState::Dead);
    }
}
