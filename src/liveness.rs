//! Is a claimant alive? A pure decision over facts the reaper gathered, plus the local probes it uses.
//!
//! The signals, strongest first:
//! * **Its process** (only when the reaper runs on the same host and sees the same pids, which
//!   `host_id` tells): a dead pid, a zombie, or a pid now owned by a younger process means the claimant is
//!   gone. This is definitive and immediate.
//! * **Its anchor session**: a claimant holds a named lock on its anchor session (`GET_LOCK`), which the
//!   server releases the moment the session ends; `IS_USED_LOCK` tells whether it is still held, and the
//!   registry's connection id in the processlist is a second witness. A session that is gone is looked at
//!   again after a short delay before it counts (a live process may be re-establishing its session), and
//!   not at all in the first moments after a server restart, when every session is new.
//! * **Its heartbeat**: older than the lease means gone, whatever else is true. This catches a hung
//!   process whose session stays open, and it is the only signal when connections go through a proxy that
//!   multiplexes sessions (turn the session signal off there).
//!
//! A claimant whose lock is held and whose heartbeat is within the lease is alive, however long its jobs
//! run: a slow job of a live worker keeps its claim.

use std::time::Duration;

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// What the reaper knows about one claimant.
#[derive(Debug, Clone, Default)]
pub struct Facts {
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
}

/// The parts of a registry row that matter here.
#[derive(Debug, Clone)]
pub struct Registered {
    /// Age of its last heartbeat, by the database clock.
    pub heartbeat_age: Duration,
}

/// A local process, as the reaper sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
pub struct Thresholds {
    /// A heartbeat older than this means the claimant is gone.
    pub lease: Duration,
    /// Whether anchor sessions can be trusted (false behind a session-multiplexing proxy).
    pub session_signals: bool,
    /// For this long after a server restart, a missing session proves nothing.
    pub restart_grace: Duration,
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Leave it alone.
    Alive,
    /// Its session is gone: gone for good if it is still gone when looked at again shortly.
    SessionGone(String),
    /// Gone: reset its rows.
    Dead(String),
}

/// Decides about one claimant.
pub fn judge(f: &Facts, t: &Thresholds) -> Verdict {
    if let Some(reg) = &f.registered
        && reg.heartbeat_age > t.lease
    {
        return Verdict::Dead(format!(
            "no heartbeat for {}s (lease {}s)",
            reg.heartbeat_age.as_secs(),
            t.lease.as_secs()
        ));
    }
    match f.process {
        Some(ProcessState::Dead) => return Verdict::Dead("its process is gone".into()),
        Some(ProcessState::Reused) => {
            return Verdict::Dead("its pid now belongs to another process".into());
        }
        Some(ProcessState::Alive) | None => {}
    }
    if f.lock_held || (f.same_server && f.connection_listed) {
        return Verdict::Alive;
    }
    if f.registered.is_none() {
        // Processes register before they claim and deregister only after giving their rows back.
        return Verdict::SessionGone("it is not registered and holds no session".into());
    }
    if !t.session_signals {
        return Verdict::Alive;
    }
    if f.server_uptime < t.restart_grace {
        // Every session ended with the restart; give claimants time to come back.
        return Verdict::Alive;
    }
    Verdict::SessionGone("its database session is gone".into())
}

/// The state of local process `pid`, which registered at `registered_at` (database clock). Only
/// meaningful when the caller has checked that the claimant ran in this boot and pid namespace.
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

    fn alive_facts() -> Facts {
        Facts {
            registered: Some(Registered {
                heartbeat_age: Duration::from_secs(3),
            }),
            lock_held: true,
            connection_listed: true,
            same_server: true,
            process: None,
            server_uptime: Duration::from_secs(3600),
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
                lock_held: false,
                connection_listed: false,
                ..alive_facts()
            };
            assert!(matches!(judge(&f, &t()), Verdict::Dead(_)), "{p:?}");
        }
    }

    #[test]
    fn a_stale_heartbeat_is_dead_even_with_a_session() {
        let f = Facts {
            registered: Some(Registered {
                heartbeat_age: Duration::from_secs(61),
            }),
            ..alive_facts()
        };
        assert!(matches!(judge(&f, &t()), Verdict::Dead(r) if r.contains("lease")));
    }

    #[test]
    fn a_lost_session_needs_confirmation() {
        let f = Facts {
            lock_held: false,
            connection_listed: false,
            ..alive_facts()
        };
        assert!(matches!(judge(&f, &t()), Verdict::SessionGone(_)));
        // Either witness keeps it alive.
        let f = Facts {
            lock_held: false,
            ..alive_facts()
        };
        assert_eq!(judge(&f, &t()), Verdict::Alive);
    }

    #[test]
    fn sessions_prove_nothing_right_after_a_restart_or_behind_a_proxy() {
        let f = Facts {
            lock_held: false,
            connection_listed: false,
            server_uptime: Duration::from_secs(5),
            ..alive_facts()
        };
        assert_eq!(judge(&f, &t()), Verdict::Alive);
        let proxy = Thresholds {
            session_signals: false,
            ..t()
        };
        let f = Facts {
            lock_held: false,
            connection_listed: false,
            ..alive_facts()
        };
        assert_eq!(judge(&f, &proxy), Verdict::Alive);
    }

    #[test]
    fn an_unregistered_claimant_without_a_session_is_suspect() {
        let f = Facts {
            registered: None,
            lock_held: false,
            connection_listed: false,
            ..alive_facts()
        };
        assert!(matches!(judge(&f, &t()), Verdict::SessionGone(_)));
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
