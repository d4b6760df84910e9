//! Integration tests. They talk to a real MariaDB/MySQL server (JOBQ_TEST_DATABASE_URL, default

// A test binary exports nothing.
#![allow(unreachable_pub)]
//! mysql://root@127.0.0.1:3306/test); each test creates its own database and drops it afterwards, so tests
//! run in parallel. `scripts/test.sh` makes sure a server is there.

mod common;
// The bench's counting wire relay, shared with the binary (one file, two crates).
#[allow(dead_code)]
#[path = "../../bin/jobq/bench/wire.rs"]
mod wire;

// The claim engine: fences, plans, concurrency.
mod claim;
// The holdings ledger: every running row on its claimant's list.
mod holdings;
// Priority aging: starvation under a flood, what it costs, its rules, and how it is shown.
mod aging;
mod aging_rules;
// Holds an operator can see: warnings for changes that would hold jobs back.
mod holds;
// The schema: defaults for plain INSERTs, time zones, migrations, pruning.
mod schema;
// The worker: drain and forever modes, retries, timeouts, shutdown.
mod worker;
// Command and SQL handlers.
mod handlers;
// HTTP handlers against a local HTTP server: answers, signing, keep-alive, dropped requests.
mod http_handlers;
// Process handlers: long-lived programs over the line protocol, and the reference workers.
mod process_handlers;
// The jobq binary: commands and their error messages.
mod cli;
// The reaper: recovering dead claimants' jobs.
mod reaper;
// Cancelling running jobs.
mod cancel;
// The supervisor: N workers through crashes.
mod supervisor;
// The promise under partial failure: killed sessions, killed workers, network cuts, lost rows.
mod partial_failure;
// One history of a fault test's jobs (effect lines, rows, attempts, logs) and one checker of the promise.
mod history;
// Restarting the database server under running workers.
mod restart;
// A chaos run of minutes (scripts/chaos.sh): every fault at random under a mixed workload, one history check.
mod chaos;
// The scheduler: exactly one job per planned time, policies, DST, racing schedulers, the CLI.
mod scheduler;
// `jobq bench` at CI size: it runs, and every job finishes exactly once.
mod bench;
// Least privilege: the documented grants for an enqueue-only application and for workers and reapers.
mod grants;
// TLS to the database: ssl-mode, CA files, and every connection of a worker, on a private server.
mod tls;
// Import direction between the library's modules (reads the source; no database).
mod layers;
// What the binary prints for programs: --json reports and JSON log lines.
mod output;
mod progress;
// --metrics-addr: Prometheus text, health and readiness.
mod metrics;
// The dashboard: pages, API, actions, CSRF, credentials, read-only, prefix.
mod web;
// Who the dashboard lets in: hosts, slow clients, failed logins, notices, JSON errors, prefixes.
mod web_guard;
// The dashboard in headless Chromium (a small DevTools-protocol client of our own).
mod browser;
mod web_browser;
// A 3-node Galera cluster (scripts/galera.sh): processes spread over the nodes.
mod dependencies;
mod galera;
mod limits;
mod queues;
mod transactional;
// Workers on many hosts: hosts made of network and pid namespaces, each with a supervisor and a reaper.
mod hosts;
// The DBA views: jobq_jobs, jobq_jobs_running, jobq_schedules_next.
mod views;
// Snoozes and per-kind attempts and backoff.
mod snooze;
// The schedules' change log: library, scheduler and CLI.
mod schedule_log;
// The enqueue examples of clients/<language>/: the rows `jobq enqueue` writes, from plain SQL.
mod clients;
// Unique jobs: a live job holds its key against enqueues from the library, SQL and the CLI.
mod unique;
// Debounced jobs.
mod debounce;
// Ordered keys: one job of a key at a time, in order.
mod ordered;
// The docs' examples: TOML blocks load, SQL blocks run, command lines parse, alerting rules fire.
mod docs;
// Several databases from one config: `--database`, `jobq enable`/`disable`, one supervisor for all.
mod databases;
// Trace context: captured at enqueue, handed to every kind of handler, shown by jobs show.
mod traces;
// Job spans exported over OTLP/HTTP to a receiver the test runs (the `otel` feature).
mod trace_export;
