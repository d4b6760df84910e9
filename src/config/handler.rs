//! `[handlers.KIND]`: a command, SQL or HTTP handler as the file spells it, checked into a
//! [`HandlerSpec`].

use std::collections::BTreeMap;

use serde::Deserialize;

use super::HumanDuration;
use crate::handler::http::HttpSpec;
use crate::handler::{HandlerOptions, HandlerSpec};
use crate::retry::RetryPolicy;

/// `[handlers.KIND]`: exactly one of `command`, `sql`, `process` or `url`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerConfig {
    /// Program and arguments; the payload goes to its stdin.
    pub command: Option<Vec<String>>,
    /// A long-lived program handed one job at a time over protocol v1 (see
    /// [`crate::handler::process`]).
    pub process: Option<Vec<String>>,
    /// Process handlers: copies of the program, each running one job at a time (default 1).
    pub processes: Option<u32>,
    /// Process handlers: jobs a copy runs before it is replaced (default: no limit).
    pub max_jobs_per_process: Option<u32>,
    /// Extra environment for the command or process.
    pub env: Option<BTreeMap<String, String>>,
    /// When set, only these variables of the worker's environment reach the command (besides `env`
    /// and the job's own `JOBQ_*` variables). Unset: all of them, except jobq's secrets (see
    /// [`crate::handler::command`]).
    pub inherit_env: Option<Vec<String>>,
    /// One SQL statement with `?` placeholders.
    pub sql: Option<String>,
    /// Payload fields bound to the placeholders, in order.
    pub params: Option<Vec<String>>,
    /// SQL handlers: run the statement and the job's done finish in one transaction, fenced, so that its
    /// effects (rows in this database) happen exactly once. The statement must not commit by itself
    /// (no DDL, no COMMIT inside a procedure).
    pub transactional: Option<bool>,
    /// Run-time limit for jobs of this kind that set none themselves.
    pub timeout: Option<HumanDuration>,
    /// Attempts before a job of this kind is dead, for jobs that set no `max_attempts` of their own
    /// (see [`HandlerOptions::max_attempts`]).
    pub max_attempts: Option<u16>,
    /// The first backoff of this kind, instead of `[retry]`'s `base`.
    pub retry_base: Option<HumanDuration>,
    /// The longest backoff of this kind, instead of `[retry]`'s `cap`.
    pub retry_cap: Option<HumanDuration>,
    /// Command handlers: exit status 75 (`EX_TEMPFAIL`) snoozes the job for this long instead of
    /// failing it (see [`crate::JobError::snooze`]). Unset: 75 is a failure like any other status.
    pub snooze: Option<HumanDuration>,
    /// HTTP handlers: the endpoint each job is POSTed to (see [`crate::handler::http`]).
    pub url: Option<String>,
    /// HTTP handlers: headers sent with every request.
    pub headers: Option<BTreeMap<String, String>>,
    /// HTTP handlers: a file holding the secret that signs each request (`Jobq-Signature`).
    pub secret_file: Option<std::path::PathBuf>,
    /// HTTP handlers: a PEM file of the CAs to trust instead of the public ones.
    pub ca_file: Option<std::path::PathBuf>,
    /// HTTP handlers: requests in flight at most (and idle connections kept); default
    /// [`crate::handler::http::DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: Option<usize>,
    /// HTTP handlers: 4xx statuses that are retried instead of killing the job.
    pub retry_statuses: Option<Vec<u16>>,
}

/// The keys only HTTP handlers take, as the file spells them.
const HTTP_KEYS: &str =
    "`headers`, `secret_file`, `ca_file`, `max_connections` and `retry_statuses`";

impl HandlerConfig {
    /// Checks that the entry is one complete handler and turns it into a spec.
    pub fn spec(&self) -> std::result::Result<HandlerSpec, String> {
        if let Some(url) = &self.url {
            return self.http_spec(url);
        }
        if self.has_http_keys() {
            return Err(format!("{HTTP_KEYS} belong to `url` (HTTP) handlers"));
        }
        let set = [
            self.command.is_some(),
            self.sql.is_some(),
            self.process.is_some(),
        ];
        let named: Vec<&str> = ["`command`", "`sql`", "`process`"]
            .into_iter()
            .zip(set)
            .filter_map(|(name, is_set)| is_set.then_some(name))
            .collect();
        match named.as_slice() {
            [a, b] => return Err(format!("set either {a} or {b}, not both")),
            [_, _, _] => {
                return Err("set one of `command`, `sql` or `process`, not all three".into());
            }
            _ => {}
        }
        if self.process.is_none()
            && (self.processes.is_some() || self.max_jobs_per_process.is_some())
        {
            return Err(
                "`processes` and `max_jobs_per_process` belong to `process` handlers".into(),
            );
        }
        if let Some(argv) = &self.process {
            return self.process_spec(argv);
        }
        match (&self.command, &self.sql) {
            (Some(_), Some(_)) => unreachable!("refused above"),
            (None, None) => Err(
                "set `command` (a program per job), `sql` (a statement), `process` (a long-lived \
                 program) or `url` (an HTTP endpoint)"
                    .into(),
            ),
            (Some(argv), None) => self.command_spec(argv),
            (None, Some(sql)) => self.sql_spec(sql),
        }
    }
}

impl HandlerConfig {
    /// `command = […]`: a program per job. The keys of `sql` handlers are refused by name.
    fn command_spec(&self, argv: &[String]) -> std::result::Result<HandlerSpec, String> {
        if self.params.is_some() {
            return Err(
                "`params` belongs to `sql` handlers; a command reads the payload on stdin".into(),
            );
        }
        if self.transactional.is_some() {
            return Err(
                "`transactional` belongs to `sql` handlers: a command's effects \
                        are outside the database"
                    .into(),
            );
        }
        if argv.is_empty() || argv[0].is_empty() {
            return Err("`command` must name a program: command = [\"prog\", \"arg\"]".into());
        }
        let snooze = self.snooze.map(|d| d.0);
        if let Some(d) = snooze {
            check_snooze(d)?;
        }
        Ok(HandlerSpec::Command {
            argv: argv.to_vec(),
            env: self.env.clone().unwrap_or_default(),
            inherit_env: self.inherit_env.clone(),
            snooze,
        })
    }

    /// `sql = "…"`: one statement, with as many placeholders as `params` names. The keys of
    /// `command` handlers are refused by name.
    fn sql_spec(&self, sql: &str) -> std::result::Result<HandlerSpec, String> {
        if self.env.is_some() || self.inherit_env.is_some() || self.snooze.is_some() {
            return Err(
                "`env`, `inherit_env` and `snooze` belong to `command` handlers (`env` and \
                 `inherit_env` to `process` handlers too)"
                    .into(),
            );
        }
        let params = self.params.clone().unwrap_or_default();
        let placeholders = count_placeholders(sql);
        if placeholders != params.len() {
            return Err(format!(
                "`sql` has {placeholders} `?` placeholder(s) but `params` names {} field(s)",
                params.len()
            ));
        }
        if let Some(p) = params
            .iter()
            .find(|p| p.starts_with('$') && !crate::handler::sql::JOB_PARAMS.contains(&p.as_str()))
        {
            return Err(format!(
                "`params` names {p:?}: the names starting with `$` are jobq's own, {}",
                crate::handler::sql::JOB_PARAMS.join(", ")
            ));
        }
        if sql.trim().trim_end_matches(';').contains(';') {
            return Err(
                "`sql` must be one statement; wrap several in a procedure and CALL it".into(),
            );
        }
        Ok(HandlerSpec::Sql {
            sql: sql.trim().trim_end_matches(';').to_string(),
            params,
            transactional: self.transactional.unwrap_or(false),
        })
    }

    fn has_http_keys(&self) -> bool {
        self.headers.is_some()
            || self.secret_file.is_some()
            || self.ca_file.is_some()
            || self.max_connections.is_some()
            || self.retry_statuses.is_some()
    }

    /// `url = …`: an HTTP handler. The keys of the other kinds are refused by name.
    fn http_spec(&self, url: &str) -> std::result::Result<HandlerSpec, String> {
        let others: Vec<&str> = [
            ("command", self.command.is_some()),
            ("sql", self.sql.is_some()),
            ("params", self.params.is_some()),
            ("transactional", self.transactional.is_some()),
            ("env", self.env.is_some()),
            ("inherit_env", self.inherit_env.is_some()),
            ("snooze", self.snooze.is_some()),
            ("process", self.process.is_some()),
            ("processes", self.processes.is_some()),
            ("max_jobs_per_process", self.max_jobs_per_process.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect();
        if !others.is_empty() {
            let named: Vec<String> = others.iter().map(|k| format!("`{k}`")).collect();
            return Err(format!(
                "`url` (an HTTP handler) does not go with {}: those belong to command, SQL and \
                 process handlers",
                named.join(", ")
            ));
        }
        let spec = HttpSpec {
            url: url.to_string(),
            headers: self.headers.clone().unwrap_or_default(),
            secret_file: self.secret_file.clone(),
            ca_file: self.ca_file.clone(),
            max_connections: self
                .max_connections
                .unwrap_or(crate::handler::http::DEFAULT_MAX_CONNECTIONS),
            retry_statuses: self.retry_statuses.clone().unwrap_or_default(),
        };
        spec.check()?;
        Ok(HandlerSpec::Http(spec))
    }

    /// `process = [...]`: checks the keys that go with it.
    fn process_spec(&self, argv: &[String]) -> std::result::Result<HandlerSpec, String> {
        use crate::handler::process::{MAX_PROCESSES, ProcessConfig};
        if self.params.is_some() || self.transactional.is_some() {
            return Err(
                "`params` and `transactional` belong to `sql` handlers; a process gets the payload \
                 in its request line and can finish the job itself with jobq_finish"
                    .into(),
            );
        }
        if self.snooze.is_some() {
            return Err(
                "`snooze` belongs to `command` handlers; a process answers {\"snooze\": \"5m\"} itself"
                    .into(),
            );
        }
        if argv.is_empty() || argv[0].is_empty() {
            return Err(
                "`process` must name a program: process = [\"python3\", \"/srv/app/worker.py\"]"
                    .into(),
            );
        }
        let processes = self.processes.unwrap_or(1);
        if !(1..=MAX_PROCESSES).contains(&processes) {
            return Err(format!(
                "`processes` must be from 1 to {MAX_PROCESSES} (copies of the program), not {processes}"
            ));
        }
        if self.max_jobs_per_process == Some(0) {
            return Err(
                "`max_jobs_per_process` must be at least 1 (leave it out for no limit)".into(),
            );
        }
        let mut cfg = ProcessConfig::new(argv.to_vec());
        cfg.env = self.env.clone().unwrap_or_default();
        cfg.inherit_env = self.inherit_env.clone();
        cfg.processes = processes;
        cfg.max_jobs_per_process = self.max_jobs_per_process;
        Ok(HandlerSpec::Process(cfg))
    }

    /// The per-kind settings, with `global` (the `[retry]` policy) filling in the backoff bound this
    /// entry leaves out when it sets the other.
    ///
    /// # Errors
    /// An option out of range, named as the file spells it.
    pub fn options(&self, global: RetryPolicy) -> std::result::Result<HandlerOptions, String> {
        let retry = (self.retry_base.is_some() || self.retry_cap.is_some()).then(|| RetryPolicy {
            base: self.retry_base.map_or(global.base, |d| d.0),
            cap: self.retry_cap.map_or(global.cap, |d| d.0),
        });
        let options = HandlerOptions {
            timeout: self.timeout.map(|d| d.0),
            max_attempts: self.max_attempts,
            retry,
        };
        options.check()?;
        Ok(options)
    }
}

/// A snooze must be above zero (a job that snoozes for nothing would be claimed again at once, in a
/// loop) and must leave `run_at` within what a TIMESTAMP holds.
fn check_snooze(d: std::time::Duration) -> std::result::Result<(), String> {
    if d.is_zero() {
        return Err("snooze must be above zero".into());
    }
    crate::handler::snooze_until(d, chrono::Utc::now())
        .map(|_| ())
        .map_err(|e| format!("snooze: {e}"))
}

/// Counts `?` outside quoted strings and backquoted names.
fn count_placeholders(sql: &str) -> usize {
    let mut n = 0;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) if c == '\\' && q != '`' => {
                chars.next();
            }
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, '\'' | '"' | '`') => quote = Some(c),
            None if c == '?' => n += 1,
            None => {}
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_inside_strings_do_not_count() {
        assert_eq!(count_placeholders("SELECT '?', \"?\", `?`, ?"), 1);
        assert_eq!(count_placeholders("SELECT 'it\\'s ?', ?"), 1);
    }
}
