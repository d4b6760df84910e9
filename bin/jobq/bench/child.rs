//! The bench's own `jobq` child processes (the footprint's worker, the process drain's workers).

/// This jobq binary, quiet, on the scratch database, ready for its subcommand's arguments: none of the
/// caller's config, section or log settings reach it (they would point it elsewhere or change what it
/// prints), stdout is dropped and stderr kept for the check, and it dies with the bench.
pub(crate) fn jobq_child(exe: &std::path::Path, url: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(["--database-url", url, "-q"])
        .env_remove("JOBQ_CONFIG")
        .env_remove("JOBQ_DATABASE")
        .env_remove("JOBQ_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}
