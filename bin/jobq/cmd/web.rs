//! `jobq web`: the dashboard of [`jobq::web`], served until SIGTERM/SIGINT.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use jobq::web::{AllowedHosts, Credentials, ServeConfig, WebConfig};
use tracing::info;

use super::Env;
use crate::options::{MetricsArgs, human, parse_interval};

/// Where the dashboard listens unless told: the loopback interface, where it needs no credentials.
const DEFAULT_WEB_BIND: &str = "127.0.0.1:8080";
/// The basic-auth user name unless told.
const DEFAULT_WEB_USER: &str = "jobq";

#[derive(Debug, Args)]
pub struct WebArgs {
    /// Address to listen on (port 0 picks a free one and logs it).
    #[arg(long, default_value = DEFAULT_WEB_BIND, value_name = "HOST:PORT")]
    pub bind: std::net::SocketAddr,

    /// Also answer requests whose Host header is NAME (repeatable): the DNS names users type, and
    /// the Host a reverse proxy forwards. NAME:PORT answers that port only. Otherwise only the
    /// IP address a client connected to is answered, and `localhost` when bound to loopback or to
    /// 0.0.0.0/:: (so on 0.0.0.0, http://10.0.0.5:8080/ works, http://jobs.example.com:8080/ needs
    /// --public-host jobs.example.com); any other Host gets 421, which stops DNS-rebinding pages.
    #[arg(long = "public-host", value_name = "NAME", value_parser = parse_public_host)]
    pub public_hosts: Vec<String>,

    /// Serve under this path, for a reverse proxy that forwards e.g. /jobq/… unchanged.
    #[arg(long, default_value = "", value_name = "PATH", value_parser = parse_prefix)]
    pub prefix: String,

    /// Show everything, change nothing: no action buttons, every POST refused.
    #[arg(long)]
    pub read_only: bool,

    /// Basic-auth user name; its password comes from JOBQ_WEB_PASSWORD or --password-file.
    #[arg(long, env = "JOBQ_WEB_USER", default_value = DEFAULT_WEB_USER)]
    pub user: String,

    /// A file whose first line is the basic-auth password (instead of JOBQ_WEB_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<std::path::PathBuf>,

    /// A file whose first line is a bearer token for scripts (instead of JOBQ_WEB_TOKEN).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,

    #[arg(long, value_name = "DURATION", value_parser = parse_interval, help = format!(
        "How long a client has to send a request's headers (and an idle connection to send its next \
         request) before the connection is closed. Default {}",
        human(jobq::web::ServeConfig::DEFAULT_HEADER_TIMEOUT)
    ))]
    pub header_timeout: Option<Duration>,

    #[arg(long, value_name = "DURATION", value_parser = parse_interval, help = format!(
        "How long a request's body may take to arrive after its headers; then 408. Default {}",
        human(jobq::web::WebConfig::DEFAULT_BODY_TIMEOUT)
    ))]
    pub body_timeout: Option<Duration>,

    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help = format!(
        "Most connections open at once; more wait, in arrival order, until one closes. Default {}",
        jobq::web::ServeConfig::DEFAULT_MAX_CONNECTIONS
    ))]
    pub max_connections: Option<u32>,

    #[command(flatten)]
    pub metrics: MetricsArgs,
}

/// `--public-host`: checked as the dashboard will read it.
fn parse_public_host(s: &str) -> Result<String, String> {
    jobq::web::AllowedHosts::any()
        .with(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// `--prefix`: checked before anything is started.
fn parse_prefix(s: &str) -> Result<String, String> {
    jobq::web::check_prefix(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

pub async fn run(env: &Env, args: WebArgs) -> Result<()> {
    let credentials = Credentials {
        basic: secret("JOBQ_WEB_PASSWORD", args.password_file.as_deref())?
            .map(|password| (args.user.clone(), password)),
        token: secret("JOBQ_WEB_TOKEN", args.token_file.as_deref())?,
    };
    if !args.bind.ip().is_loopback() && !credentials.any() {
        bail!(
            "--bind {} is reachable beyond this machine: set a password (JOBQ_WEB_PASSWORD or \
             --password-file) or a token (JOBQ_WEB_TOKEN or --token-file), or bind 127.0.0.1",
            args.bind
        );
    }
    let mut hosts = AllowedHosts::for_bind(args.bind);
    for h in &args.public_hosts {
        hosts = hosts.with(h)?;
    }
    let cfg = WebConfig {
        prefix: args.prefix.clone(),
        read_only: args.read_only,
        credentials,
        hosts,
        body_timeout: args.body_timeout.unwrap_or(WebConfig::DEFAULT_BODY_TIMEOUT),
    };
    cfg.validate()?;
    let serving = ServeConfig {
        header_timeout: args
            .header_timeout
            .unwrap_or(ServeConfig::DEFAULT_HEADER_TIMEOUT),
        max_connections: args
            .max_connections
            .map_or(ServeConfig::DEFAULT_MAX_CONNECTIONS, |n| n as usize),
    };
    let pool = env.migrated_pool(8).await?;
    let app = jobq::web::router(pool.clone(), cfg)?;
    let shutdown = crate::process::on_signals()?;
    if let Some(addr) = args.metrics.metrics_addr {
        crate::metrics::serve_unregistered(addr, pool.clone(), shutdown.clone()).await?;
    }
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .with_context(|| format!("--bind {}: cannot listen", args.bind))?;
    let bound = listener.local_addr()?;
    info!(
        addr = %bound,
        read_only = args.read_only,
        public_hosts = ?args.public_hosts,
        "dashboard on http://{bound}{}/",
        args.prefix
    );
    jobq::web::serve(listener, app, serving, shutdown.cancelled_owned())
        .await
        .context("the dashboard's listener failed")?;
    pool.close().await;
    Ok(())
}

/// A secret from the first line of `file`, else the environment variable `var` (empty counts as
/// unset). A file given but empty is an error: it would silently turn the credential off.
fn secret(var: &str, file: Option<&Path>) -> Result<Option<String>> {
    if let Some(path) = file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let line = text.lines().next().unwrap_or("").trim_end();
        if line.is_empty() {
            bail!(
                "{}: the first line is empty; it must hold the secret",
                path.display()
            );
        }
        return Ok(Some(line.to_string()));
    }
    Ok(std::env::var(var).ok().filter(|v| !v.is_empty()))
}
