//! Turning SIGTERM and SIGINT into a shutdown request.
//!
//! The first signal cancels the returned token: services stop taking new work and finish what they
//! have. A second signal means "now": the process exits at once with status 130, and whatever it held
//! is recovered from the database by the reaper.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::{Error, Result};

/// Exit status after a second signal.
pub const FORCED_EXIT_STATUS: i32 = 130;

/// Installs the handlers and returns the token the first signal cancels.
///
/// # Errors
/// When the signal handlers cannot be installed.
pub fn on_signals() -> Result<CancellationToken> {
    let io = |e| Error::Io {
        context: "installing signal handlers".into(),
        source: e,
    };
    let mut term = signal(SignalKind::terminate()).map_err(io)?;
    let mut int = signal(SignalKind::interrupt()).map_err(io)?;
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
        crate::handler::command::kill_all_running();
        std::process::exit(FORCED_EXIT_STATUS);
    });
    Ok(token)
}
