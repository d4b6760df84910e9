//! `jobq web`: the dashboard of [`jobq::web`], served until SIGTERM/SIGINT.

use std::path::Path;

use anyhow::{Context, Result, bail};
use jobq::web::{AllowedHosts, Credentials, ServeConfig, WebConfig};
use tracing::info;

use super::Env;
use crate::args::WebArgs;

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
