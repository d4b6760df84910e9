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
//! Everything a program needs is re-exported here; the modules behind it are private, except
//! [`config`] (the `jobq.toml` file), [`handler`] (writing handlers, and the stock command and SQL
//! ones), [`schedule`] (what a schedule is) and [`statements`].
//!
//! * **Setup**: [`connect`] (or [`connect_lazy`]) with a [`ConnectConfig`], which parses the URL once
//!   (with [`UrlSettings`]: a password file, TLS settings as [`SslMode`]) and gives the redacted URL and
//!   the driver's options for programs that open their own connections; [`create_database`]; [`migrate`] creates and upgrades the schema,
//!   [`ensure_migrated`] checks it ([`latest_version`]), [`uninstall`] removes it ([`Uninstalled`]).
//! * **Jobs in**: [`NewJob`] with [`enqueue`] (which returns its [`JobId`]) and [`enqueue_many`],
//!   also inside the caller's transaction; or a plain `INSERT INTO job_queue` from any language. A job
//!   with a unique key is not inserted while another holds the key: [`enqueue_unique`] says which
//!   ([`Enqueued`]).
//! * **Running jobs**: a [`Worker`] ([`WorkerConfig`], [`Mode`], [`WorkerReport`]) claims and runs
//!   jobs with [`Handlers`]: async functions ([`Handler`], [`JobContext`], [`JobError`]), or the
//!   command and SQL handlers of [`config::Config`]; failures are retried by a [`RetryPolicy`].
//! * **Scheduling**: a [`Scheduler`] ([`SchedulerConfig`], [`TickReport`]) turns schedules
//!   ([`ScheduleDef`]: cron, intervals, calendar specs, one-off times; [`Misfire`], [`Overlap`],
//!   [`OnError`], [`ScheduleState`]) into jobs, exactly one per planned time however many schedulers
//!   run; [`Schedules`] manages them ([`Upserted`], [`AbortReport`]); a [`Clock`] ([`ManualClock`]
//!   in tests) tells the time.
//! * **Keeping workers alive**: a [`Reaper`] ([`ReaperConfig`], [`ReapReport`]) makes the rows of
//!   dead claimants runnable again; a [`Supervisor`] ([`SupervisorConfig`], [`SupervisorReport`])
//!   keeps N worker processes alive ([`SUPERVISOR_PID_ENV`], [`SUPERVISOR_SLOT_ENV`]) and releases a dead child's rows at
//!   once; [`Scale`] changes how many workers supervisors keep while they run ([`ScaleSetting`]);
//!   [`keep_alive`]
//!   restarts an in-process service that fails.
//! * **Looking at the queue**: [`Jobs`] gets, lists ([`JobFilter`], [`JobRecord`], [`State`]),
//!   retries, cancels ([`CancelOutcome`]), deletes and prunes jobs, and reads [`Stats`] ([`QueueCount`],
//!   [`QueueLag`], [`KindLag`], [`ProcessRow`], [`Unserved`]) or the cheap figures the dashboard shows
//!   ([`StateCount`], [`QueueSummary`], [`MinuteCount`]), and a job's attempts ([`AttemptRecord`]);
//!   [`JobAction`] names what can be done to one job ([`Jobs::apply`]), and [`human_age`] spells a wait
//!   the way `jobq` and the dashboard show it.
//! * **Queue control**: [`Queues`] pauses and resumes queues for every worker at once ([`Paused`],
//!   [`PausedQueue`]); [`JobLimits`] caps how many jobs of a kind or queue run at once, or start per
//!   period, across every worker ([`Limit`], [`LimitScope`]).
//! * **The dashboard**: [`web::router`] serves pages and a JSON API over all of it ([`web::WebConfig`]).
//! * **Errors**: [`Error`] (with [`ConnectFailure`]) and [`Result`]; [`is_transient`] classifies a
//!   driver error the way jobq's own retries do.
//! * **Metrics**: recorded through the `metrics` facade (see [`describe_metrics`]; kinds past
//!   [`MAX_KINDS`] are folded into `other`); no exporter is installed by the library.
//! * **Shutdown**: every service stops when its [`CancellationToken`] (re-exported from tokio-util) is
//!   cancelled.
//! * [`statements`] holds the exact claim and finish statements, for `EXPLAIN` and `jobq bench`.
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

mod admin;
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
mod reaper;
mod retry;
pub mod schedule;
mod scheduler;
mod service;
mod session;
pub mod statements;
mod supervisor;
mod sync;
mod telemetry;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod web;
mod worker;

// Setup.
pub use db::migrate::{ensure_migrated, latest_version, migrate};
pub use db::uninstall::{Uninstalled, uninstall};
pub use db::{ConnectConfig, SslMode, UrlSettings, connect, connect_lazy, create_database};
// Jobs in.
pub use db::enqueue::{Enqueued, NewJob, enqueue, enqueue_many, enqueue_unique};
pub use job::{DEFAULT_MAX_ATTEMPTS, JobId, JobRecord, State};
// Running jobs.
pub use handler::{Handler, Handlers, JobContext, JobError};
pub use retry::RetryPolicy;
pub use worker::{Mode, Worker, WorkerConfig, WorkerReport};
// Scheduling.
pub use schedule::{Misfire, OnError, Overlap, ScheduleDef, ScheduleState};
pub use scheduler::{
    AbortReport, Clock, ManualClock, Scheduler, SchedulerConfig, Schedules, TickReport, Upserted,
};
// Keeping workers alive.
pub use admin::scale::Scale;
pub use db::scale::ScaleSetting;
pub use reaper::{ReapReport, Reaper, ReaperConfig};
pub use supervisor::{
    SUPERVISOR_PID_ENV, SUPERVISOR_SLOT_ENV, Supervisor, SupervisorConfig, SupervisorReport,
    keep_alive,
};
// Looking at the queue.
pub use admin::jobs::{JobAction, Jobs};
pub use admin::limits::{JobLimits, Limit, LimitScope};
pub use admin::queues::{Paused, PausedQueue, QueuePin, Queues};
pub use db::admin::{
    CancelOutcome, HeldGroup, Hold, JobFilter, KindLag, ProcessRow, QueueCount, QueueLag,
    RunningCount, Stats, Unserved,
};
pub use db::admin::{MinuteCount, QueueSummary, StateCount};
pub use db::attempts::AttemptRecord;
pub use db::deps::{Dependencies, Link, LongWaiting};
pub use db::gauges::QueueStateCount;
pub use duration::human_age;
// Errors.
pub use errno::is_transient;
pub use error::{ConnectFailure, Error, Result};
pub use service::{RegistrationHealth, registrations};
pub use telemetry::{MAX_KINDS, MAX_QUEUES, describe_metrics};

/// Re-exported so library users need not depend on tokio-util for the shutdown token.
pub use tokio_util::sync::CancellationToken;
