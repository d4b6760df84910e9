//! The `jobq` binary: parse arguments, set up logging, run one command, map errors to exit codes.

// A binary exports nothing, so `pub` inside it only means "visible to sibling modules".
#![allow(unreachable_pub)]

mod args;
mod cmd;
mod out;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use args::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            out::err_line(format_args!("error: cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cmd::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`jobq jobs list | head`): it has all it wanted.
        Err(e) if e.is::<out::Closed>() => ExitCode::SUCCESS,
        Err(e) => {
            out::err_line(format_args!("error: {}", describe(&e)));
            ExitCode::FAILURE
        }
    }
}

fn init_logging(cli: &Cli) {
    let default = match (cli.quiet, cli.verbose) {
        (true, _) => "warn",
        (false, 0) => "info,sqlx=warn",
        (false, 1) => "debug,sqlx=info",
        (false, _) => "trace",
    };
    let filter = std::env::var("JOBQ_LOG")
        .ok()
        .and_then(|s| EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // A dead stderr (a log pipe whose reader exited) must not turn logging into panics: see `out`.
        .with_writer(|| out::LogWriter)
        .log_internal_errors(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}

/// The error and its causes on one line, leaving out a cause whose text its parent already shows
/// (library errors include their source's message, and so do sqlx's).
fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
