//! The `jobq` binary: parse arguments, set up logging, run one command, map errors to exit codes.

// A binary exports nothing, so `pub` inside it only means "visible to sibling modules".
#![allow(unreachable_pub)]

mod args;
mod bench;
mod cmd;
mod metrics;
mod options;
mod otel;
mod out;
mod process;
mod scrape;
#[path = "../jobq-exec-shim/shim.rs"]
mod shim;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use args::{Cli, LogFormat};
use jobq::handler::command::ExecShim;

fn main() -> ExitCode {
    // `jobq __jobq-exec-shim …` plays the exec shim where `jobq-exec-shim` is missing.
    let mut argv = std::env::args_os().skip(1);
    if argv.next().as_deref() == Some(std::ffi::OsStr::new(shim::SHIM_ARG)) {
        std::process::exit(shim::run(argv.collect()));
    }
    use_exec_shim();
    // Usage errors exit 2 here (clap's convention); every other error exits 1 below.
    let cli = Cli::parse();
    // The docs test (tests/it/docs.rs) checks every `jobq ...` line of the docs with this very parser:
    // a line that parses stops here, before anything connects or starts.
    #[cfg(feature = "test-util")]
    if std::env::var_os("JOBQ_TEST_PARSE_ONLY").is_some() {
        return ExitCode::SUCCESS;
    }
    if let Err(e) = init_logging(&cli) {
        out::err_line(format_args!("error: {e}"));
        return ExitCode::FAILURE;
    }
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
    // A command on one of the config's databases says which on its log lines (a supervisor of several
    // runs each database's work under a span of the same name).
    let span = match cli.database.as_deref().filter(|s| !s.is_empty()) {
        Some(name) => tracing::info_span!("database", name = %name),
        None => tracing::Span::none(),
    };
    let work = async {
        // Job spans over OTLP when the environment asks for it (otel.rs); flushed after the command.
        let export = otel::install()?;
        let result = cmd::run(cli).await;
        export.shutdown().await;
        result
    };
    match runtime.block_on(tracing::Instrument::instrument(work, span)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`jobq jobs list | head`): it has all it wanted.
        Err(e) if e.is::<out::Closed>() => ExitCode::SUCCESS,
        Err(e) => {
            out::err_line(format_args!("error: {}", describe(&e)));
            ExitCode::FAILURE
        }
    }
}

/// Installs the log subscriber. An invalid `JOBQ_LOG` is an error: ignoring it would leave the operator
/// without the logs they asked for and no hint why.
fn init_logging(cli: &Cli) -> Result<(), String> {
    let default = match (cli.quiet, cli.verbose) {
        (true, _) => "warn",
        (false, 0) => "info,sqlx=warn",
        (false, 1) => "debug,sqlx=info",
        (false, _) => "trace",
    };
    let filter = match std::env::var("JOBQ_LOG") {
        Ok(s) if !s.trim().is_empty() => EnvFilter::try_new(&s).map_err(|e| {
            format!(
                "invalid JOBQ_LOG {s:?}: {e} (examples: info, jobq=debug, warn,jobq::reaper=trace)"
            )
        })?,
        Ok(_) | Err(std::env::VarError::NotPresent) => EnvFilter::new(default),
        Err(std::env::VarError::NotUnicode(_)) => return Err("JOBQ_LOG is not valid UTF-8".into()),
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // A dead stderr (a log pipe whose reader exited) must not turn logging into panics: see `out`.
        .with_writer(|| out::LogWriter)
        .log_internal_errors(false);
    match cli.log_format {
        // One object per line: timestamp, level, target, fields (message, job_id, kind, queue, attempt,
        // claim, ...) and the span they happened in, for log shippers.
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
        LogFormat::Text => logs
            .with_ansi(std::io::stderr().is_terminal())
            .with_target(false)
            .init(),
    }
    Ok(())
}

/// Command handlers start through `jobq-exec-shim` beside this binary (small, so cheap to start once
/// per job: measured, starting the 60 MB `jobq` in its place made a job of `true` take 3.5 ms instead
/// of 2.1 ms), else through this binary in shim mode.
fn use_exec_shim() {
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let beside = exe.with_file_name("jobq-exec-shim");
    let shim = if jobq::for_the_binary::find_program(&beside.to_string_lossy(), None).is_ok() {
        ExecShim {
            program: beside,
            args: Vec::new(),
        }
    } else {
        ExecShim {
            program: exe,
            args: vec![shim::SHIM_ARG.to_string()],
        }
    };
    jobq::handler::command::start_through(shim);
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
