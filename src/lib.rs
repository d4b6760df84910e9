//! jobq: a job queue and scheduler that lives inside the MySQL or MariaDB database you already run.
//!
//! # What it guarantees
//! * **At-least-once delivery.** A job inserted (by jobq or by any application's plain `INSERT INTO
//!   job_queue`) runs until it succeeds, is dead after `max_attempts` failures, or is cancelled.
//! * **Claims are fenced.** A worker claims rows by stamping its claim token on them, and a finish
//!   counts only while the row still carries that token and attempt number. A worker whose claim was
//!   taken away (its process was judged dead) cannot overwrite what happened since.
//! * **Duplicates only where a copy was stopped, and never two at once.** A job runs again without
//!   having failed only when the copy running it is gone: its process died (its command handlers die
//!   with it), or it lost touch with the database for longer than its fence bound and stopped the job
//!   itself (its *fence*, [`WorkerConfig::fence_after`]) before any reaper may hand the job on.
//!
//! # The public API
//! The crate root holds what a program needs day to day; public modules named for their topic hold
//! the rest.
//!
//! * **Setup**: [`connect`] (or [`connect_lazy`]) with a [`ConnectConfig`], which parses the URL once
//!   ([`UrlSettings`]: a password file and [`SslMode`] given apart from it; the redacted URL and the
//!   driver's options for a program's own connections); [`create_database`]; [`migrate`] and
//!   [`ensure_migrated`] ([`uninstall`]; reports and versions in [`schema`]).
//! * **Jobs in**: [`NewJob`] with [`enqueue`], [`enqueue_many`] or [`enqueue_unique`] ([`Enqueued`]),
//!   also inside the caller's transaction, giving a [`JobId`]; or a plain `INSERT INTO job_queue` from
//!   any language.
//! * **Running jobs**: a [`Worker`] ([`WorkerConfig`], [`Mode`], [`WorkerReport`]) runs [`Handlers`]:
//!   async functions ([`Handler`], [`JobContext`], [`JobError`]), or the command, SQL, HTTP and
//!   process handlers of [`handler`] and [`config::Config`]; a [`RetryPolicy`] spaces retries.
//! * **Scheduling**: a [`Scheduler`] ([`SchedulerConfig`]) turns schedules ([`ScheduleDef`]) into
//!   jobs, exactly one per planned time however many run; [`Schedules`] manages them. What a
//!   schedule is: [`schedule`]; the service's reports and clocks: [`scheduler`].
//! * **Keeping workers alive**: a [`Reaper`] ([`ReaperConfig`], [`ReapReport`]) makes dead
//!   claimants' rows runnable again; a [`Supervisor`] ([`SupervisorConfig`], [`SupervisorReport`])
//!   keeps N worker processes; [`keep_alive`] restarts an in-process service that fails.
//! * **Looking and controlling**: [`Jobs`] gets, lists ([`JobFilter`], [`JobRecord`], [`State`]),
//!   retries, cancels, deletes and prunes jobs and reads statistics; [`Queues`] pauses and pins
//!   queues; [`JobLimits`] caps kinds and queues; [`Scale`] sets how many workers supervisors keep.
//!   Named with `by(actor)`, each records its changes in the audit trail. What they take and return:
//!   [`admin`]; the figures: [`stats`].
//! * **The dashboard**: [`web::router`] serves pages and a JSON API over all of it.
//! * **Errors**: [`Error`] (with [`ConnectFailure`]) and [`Result`]; [`is_transient`] classifies a
//!   driver error as jobq's own retries do.
//! * **Metrics**: recorded through the `metrics` facade, no exporter installed ([`telemetry`]).
//! * **Traces**: a job carries the W3C trace context it was enqueued under ([`Traceparent`],
//!   [`NewJob::traceparent`]) to its handlers ([`JobContext::traceparent`]); with the `otel` feature,
//!   a span per attempt through OpenTelemetry's global tracer, and `jobq::otel`.
//! * **Shutdown**: every service stops when its [`CancellationToken`] (re-exported from tokio-util)
//!   is cancelled.
//! * [`statements`] holds the exact claim and finish statements, for `EXPLAIN`.
//!
//! ```no_run
//! use jobq::{Handlers, JobContext, JobError, Worker, WorkerConfig, Mode};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = jobq::connect(&jobq::ConnectConfig::new("mysql://root@127.0.0.1:3306/test")?).await?;
//! jobq::migrate(&pool).await?;
//! jobq::enqueue(&pool, &jobq::NewJob::new("greet").payload(&serde_json::json!({"name": "Ada"}))?).await?;
//! let handlers = Handlers::new().register("greet", |job: JobContext| async move {
//!     #[derive(serde::Deserialize)]
//!     struct Greet { name: String }
//!     let g: Greet = job.payload()?;
//!     println!("hello, {}", g.name);
//!     Ok::<(), JobError>(())
//! })?;
//! let worker = Worker::new(pool, handlers, WorkerConfig { mode: Mode::Drain, ..Default::default() })?;
//! worker.run(tokio_util::sync::CancellationToken::new()).await?;
//! # Ok(()) }
//! ```

pub mod admin;
mod backoff;
mod claimant;
pub mod config;
mod counts;
mod db;
mod duration;
mod errno;
mod error;
#[doc(hidden)]
pub mod for_the_binary;
pub mod handler;
mod id;
mod job;
mod json;
mod name;
#[cfg(feature = "otel")]
pub mod otel;
mod reaper;
mod retry;
pub mod schedule;
pub mod scheduler;
pub mod schema;
mod service;
mod session;
pub mod statements;
pub mod stats;
mod supervisor;
mod sync;
pub mod telemetry;
#[cfg(feature = "test-util")]
pub mod testing;
mod traceparent;
pub mod web;
mod worker;

// Setup.
pub use db::migrate::{ensure_migrated, migrate};
pub use db::uninstall::uninstall;
pub use db::{ConnectConfig, SslMode, UrlSettings, connect, connect_lazy, create_database};
// Jobs in.
pub use db::enqueue::{Enqueued, NewJob, enqueue, enqueue_many, enqueue_unique};
pub use job::{JobId, JobRecord, State};
pub use traceparent::{Traceparent, TraceparentError};
// Running jobs.
pub use handler::{Handler, Handlers, JobContext, JobError};
pub use retry::RetryPolicy;
pub use worker::{Mode, Worker, WorkerConfig, WorkerReport};
// Scheduling.
pub use schedule::ScheduleDef;
pub use scheduler::{Scheduler, SchedulerConfig, Schedules};
// Keeping workers alive.
pub use reaper::{ReapReport, Reaper, ReaperConfig};
pub use supervisor::{Supervisor, SupervisorConfig, SupervisorReport, keep_alive};
// Looking at the queue, and controlling it.
pub use admin::{JobFilter, JobLimits, Jobs, Queues, Scale};
// Errors.
pub use errno::is_transient;
pub use error::{ConnectFailure, Error, Result};

/// Re-exported so library users need not depend on tokio-util for the shutdown token.
pub use tokio_util::sync::CancellationToken;
