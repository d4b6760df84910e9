//! Process-level wiring that belongs to the binary, not the library: signals, and dying with the
//! supervisor.
//!
//! The first SIGTERM or SIGINT cancels the token [`on_signals`] returns: services stop taking new work
//! and finish what they have. A second signal means "now": the process exits at once with status 130,
//! and whatever it held is recovered from the database by the reaper.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use anyhow::{Context, Result, bail};
use nix::sys::signal::Signal;

/// Exit status after a second signal.
pub const FORCED_EXIT_STATUS: i32 = 130;

/// Installs the handlers and returns the token the first signal cancels.
///
/// # Errors
/// When the signal handlers cannot be installed.
pub fn on_signals() -> Result<CancellationToken> {
    on_signals_or_orphaned(None)
}

/// [`on_signals`] for a supervised worker: the supervisor's death (see [`watch_parent`]) cancels the
/// token too, as a first signal would, and only once.
///
/// # Errors
/// When the signal handlers cannot be installed.
pub fn on_signals_or_orphaned(supervisor: Option<i32>) -> Result<CancellationToken> {
    let mut term = signal(SignalKind::terminate()).context("installing signal handlers")?;
    let mut int = signal(SignalKind::interrupt()).context("installing signal handlers")?;
    let mut orphaned = match supervisor {
        Some(_) => Some(signal(PARENT_DEATH).context("installing signal handlers")?),
        None => None,
    };
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let name = loop {
            tokio::select! {
                _ = term.recv() => break "SIGTERM",
                _ = int.recv() => break "SIGINT",
                Some(()) = async { orphaned.as_mut()?.recv().await } => {
                    if supervisor.is_some_and(|s| nix::unistd::getppid().as_raw() != s) {
                        break "the supervisor's death";
                    }
                }
            }
        };
        info!(
            signal = name,
            "shutting down: no new jobs; running jobs may finish (signal again to exit now)"
        );
        t.cancel();
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        warn!(
            signal = name,
            "second signal: exiting now; the reaper will recover running jobs"
        );
        jobq::for_the_binary::kill_all_running();
        std::process::exit(FORCED_EXIT_STATUS);
    });
    Ok(token)
}

/// The signal a supervised worker asks for when its parent dies. Not SIGTERM: Linux sends it each
/// time the *thread* that is the child's parent exits, and a SIGKILLed supervisor's threads exit one
/// by one, so a child got two SIGTERMs within a millisecond, took the second for an operator's "now",
/// and abandoned its running jobs instead of draining them. It is also sent when a thread exits while
/// the supervisor lives on; the handler drains only once the parent is no longer the supervisor.
const PARENT_DEATH: SignalKind = SignalKind::user_defined1();

/// Called early in a supervised worker, before anything else: ask for [`PARENT_DEATH`] when the
/// supervisor dies, and exit if it is already gone (the supervisor names itself in the child's
/// environment). Returns the supervisor's pid, for [`on_signals_or_orphaned`]; None when the worker
/// was not started by a supervisor.
pub fn watch_parent() -> Result<Option<i32>> {
    let Ok(expected) = std::env::var(jobq::for_the_binary::SUPERVISOR_PID_ENV) else {
        return Ok(None);
    };
    let expected: i32 = expected.parse().with_context(|| {
        format!(
            "{}={expected:?} is not a pid",
            jobq::for_the_binary::SUPERVISOR_PID_ENV
        )
    })?;
    // Until the handler is installed, the signal's default action ends the worker, as the
    // supervisor's death did before: nothing has been claimed yet.
    nix::sys::prctl::set_pdeathsig(Signal::SIGUSR1)
        .context("asking for a signal when the supervisor dies")?;
    if nix::unistd::getppid().as_raw() != expected {
        bail!("the supervisor that started this worker is gone");
    }
    Ok(Some(expected))
}
