//! The supervisor's bookkeeping of its children: their slots, the planned restarts, rolls and second
//! releases, and the signals sent to them. No database here; [`super::Supervisor`] acts on it.

use std::collections::VecDeque;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tracing::info;

use super::SupervisorReport;
use crate::backoff::Backoff;

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) pid: Option<u32>,
    pub(super) started: Instant,
    pub(super) backoff: Backoff,
    pub(super) restart_at: Option<Instant>,
    /// Asked to drain and not to be restarted: the supervisor was scaled down.
    pub(super) retiring: bool,
}

impl Slot {
    /// A slot whose child starts at once.
    pub(super) fn starting_now(min_backoff: Duration, max_backoff: Duration) -> Slot {
        Slot {
            pid: None,
            started: Instant::now(),
            backoff: Backoff::new(min_backoff, max_backoff),
            restart_at: Some(Instant::now()),
            retiring: false,
        }
    }
}

/// A child's end: its slot, its pid, and how it ended.
pub(super) type Exit = (usize, u32, std::io::Result<ExitStatus>);

/// The children and what is planned for them.
#[derive(Debug)]
pub(super) struct Children {
    pub(super) slots: Vec<Slot>,
    /// Slots still to roll (SIGHUP): one at a time, so the node never loses more than one worker.
    pub(super) rolling: VecDeque<usize>,
    /// The slot being rolled now.
    pub(super) rolling_now: Option<usize>,
    /// Dead children to release a second time (see [`SWEEP_AFTER`]).
    pub(super) sweeps: Vec<Sweep>,
    pub(super) report: SupervisorReport,
}

/// How long after a child's death its rows are released a second time. A child killed mid-statement
/// can leave that statement on its way to the server (in the socket, or waiting for a lock), and the
/// server runs it after the supervisor's first release: a registry INSERT, or a claim that stamps rows
/// with the dead child's token. Those rows would otherwise wait for a reaper, which may not be running.
pub(super) const SWEEP_AFTER: Duration = Duration::from_secs(2);

/// A second release planned for dead child `pid`.
#[derive(Debug)]
pub(super) struct Sweep {
    pub(super) pid: u32,
    pub(super) at: Instant,
    pub(super) why: String,
}

impl Children {
    /// Asks the next child waiting to be rolled to drain, once the previous one is gone.
    pub(super) fn roll_next(&mut self) {
        if self.rolling_now.is_none()
            && let Some(i) = self.rolling.pop_front()
            && let Some(pid) = self.slots[i].pid
        {
            info!(pid, "rolling worker: asking it to drain");
            signal(pid, Signal::SIGTERM);
            self.rolling_now = Some(i);
        }
    }

    /// Plans a roll of every child but the one rolling now and those retiring.
    pub(super) fn roll_all(&mut self) {
        let now = self.rolling_now;
        self.rolling = (0..self.slots.len())
            .filter(|i| Some(*i) != now && !self.slots[*i].retiring)
            .collect();
    }

    /// The number of workers kept: slots not retiring.
    pub(super) fn kept(&self) -> u32 {
        self.slots.iter().filter(|s| !s.retiring).count() as u32
    }

    /// Keeps `n` workers from now on. Growing takes back retiring slots first (lowest first; a child
    /// already asked to drain is restarted when it exits), then adds slots that start at once. Shrinking
    /// retires the highest slots: their children are asked to drain (SIGTERM: running jobs finish within
    /// their grace) and are not restarted. Slot numbers stay stable for the children that remain.
    pub(super) fn resize(&mut self, n: u32, min_backoff: Duration, max_backoff: Duration) {
        let mut kept = self.kept();
        for slot in self.slots.iter_mut().filter(|s| s.retiring) {
            if kept >= n {
                break;
            }
            slot.retiring = false;
            if slot.pid.is_none() {
                slot.restart_at = Some(Instant::now());
            }
            kept += 1;
        }
        while kept < n {
            self.slots
                .push(Slot::starting_now(min_backoff, max_backoff));
            kept += 1;
        }
        for i in (0..self.slots.len()).rev() {
            if kept <= n {
                break;
            }
            let slot = &mut self.slots[i];
            if slot.retiring {
                continue;
            }
            slot.retiring = true;
            slot.restart_at = None;
            self.rolling.retain(|r| *r != i);
            if let Some(pid) = slot.pid {
                info!(pid, slot = i, "scaling down: asking a worker to drain");
                signal(pid, Signal::SIGTERM);
            }
            kept -= 1;
        }
        self.trim();
    }

    /// Drops trailing slots that are retired and whose child is gone.
    pub(super) fn trim(&mut self) {
        while self
            .slots
            .last()
            .is_some_and(|s| s.retiring && s.pid.is_none())
        {
            self.slots.pop();
        }
    }

    /// How long until the earliest planned restart or sweep (an hour when none is planned).
    pub(super) fn until_next_wake(&self) -> Duration {
        let restarts = self.slots.iter().filter_map(|s| s.restart_at);
        let sweeps = self.sweeps.iter().map(|s| s.at);
        restarts
            .chain(sweeps)
            .min()
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(3600))
    }

    /// Takes the sweeps due by `by`.
    pub(super) fn due_sweeps(&mut self, by: Instant) -> Vec<Sweep> {
        let (due, later) = std::mem::take(&mut self.sweeps)
            .into_iter()
            .partition(|s| s.at <= by);
        self.sweeps = later;
        due
    }
}

/// Whether a process with this pid exists (signal 0 checks without sending anything; EPERM means it
/// exists under another user).
pub(super) fn is_alive(pid: u32) -> bool {
    i32::try_from(pid)
        .is_ok_and(|raw| kill(Pid::from_raw(raw), None) != Err(nix::errno::Errno::ESRCH))
}

pub(super) fn signal(pid: u32, sig: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(raw), sig);
    }
}

pub(super) fn describe(status: &std::io::Result<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("worker exited with status {c}"),
            (None, Some(sig)) => format!("worker was killed by signal {sig}"),
            _ => "worker ended".into(),
        },
        Err(e) => format!("worker lost: {e}"),
    }
}
