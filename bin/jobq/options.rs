//! The options and flag parsers several commands share (metrics address, JSON output, the job options
//! of `enqueue` and `schedule`, durations). A leaf: the commands import it, and it imports none of them.

use std::time::Duration;

use clap::Args;

/// A duration as the help texts and the config file spell it (`2s`, `30m`, `7days`).
pub(crate) fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// Where a long-running command serves its metrics.
#[derive(Debug, Args, Clone, Copy)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics on /metrics, and /healthz and /readyz, at this address (e.g.
    /// 127.0.0.1:9187; port 0 picks a free one and logs it).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// How a command that reports prints it.
#[derive(Debug, Args, Clone, Copy)]
pub struct Format {
    /// Print JSON instead of text (field names: the README's "JSON output").
    #[arg(long)]
    pub json: bool,
}

/// The options of the jobs a command makes, declared once for `jobq enqueue` (one job) and `jobq
/// schedule create|update` (each job of a schedule). `H` words their help for the command; `D` sits
/// between the priority and the attempts, where `enqueue` has its due time and a schedule nothing
/// ([`NoDue`]: its times are its spec), so that each command lists its options in the order it did.
#[derive(Debug, Args)]
pub struct JobOptions<H: JobHelp, D: Args> {
    #[arg(long, short = 'p', help = H::PAYLOAD)]
    pub payload: Option<String>,

    #[arg(long, help = H::QUEUE)]
    pub queue: Option<String>,

    #[arg(long, allow_negative_numbers = true, help = H::PRIORITY)]
    pub priority: Option<i16>,

    #[command(flatten)]
    pub due: D,

    #[arg(long, help = H::MAX_ATTEMPTS)]
    pub max_attempts: Option<u16>,

    #[arg(long, value_parser = parse_duration, help = H::TIMEOUT)]
    pub timeout: Option<Duration>,

    #[arg(skip)]
    wording: std::marker::PhantomData<H>,
}

/// The help texts of [`JobOptions`] in one command: its defaults differ (a schedule's jobs get fewer
/// attempts), and so does whom they are about.
pub trait JobHelp {
    const PAYLOAD: &'static str;
    const QUEUE: &'static str;
    const PRIORITY: &'static str;
    const MAX_ATTEMPTS: &'static str;
    const TIMEOUT: &'static str;
}

/// No options in [`JobOptions`]'s due-time slot.
#[derive(Debug, Args)]
pub struct NoDue {}

/// `*key = flag` when the flag was given.
pub(crate) fn set<T>(key: &mut Option<T>, flag: Option<T>) {
    if flag.is_some() {
        *key = flag;
    }
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 30s, 5m, 2h, 7d)"))
}

/// A period: a duration above zero (a zero interval is a busy loop at best, and tokio's timer panics
/// on it).
pub(crate) fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be above zero".into());
    }
    Ok(d)
}
