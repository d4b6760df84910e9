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
    let mut term = signal(SignalKind::terminate()).context("installing signal handlers")?;
    let mut int = signal(SignalKind::interrupt()).context("installing signal handlers")?;
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
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

/// Called early in a supervised worker: ask for SIGTERM when the supervisor dies, and exit if it is
/// already gone (the supervisor names itself in the child's environment).
pub fn watch_parent() -> Result<()> {
    let Ok(expected) = std::env::var(jobq::for_the_binary::SUPERVISOR_PID_ENV) else {
        return Ok(());
    };
    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)
        .context("asking for a signal when the supervisor dies")?;
    if nix::unistd::getppid().as_raw().to_string() != expected {
        bail!("the supervisor that started this worker is gone");
    }
    Ok(())
}
