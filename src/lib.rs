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
//!   itself ([`fence`]) before any reaper may hand the job on.
//!
//! # Pieces
//! * [`db::migrate`] creates and upgrades the schema.
//! * [`NewJob`] and [`enqueue`] insert jobs, also inside the caller's transaction.
//! * [`Worker`] claims and runs jobs with [`Handlers`]: async functions in the library, or the command and
//!   SQL handlers of [`config::Config`] in the `jobq` binary.
//! * [`Scheduler`] turns schedules (cron, intervals, calendar specs, one-off times; [`Schedules`]
//!   manages them) into jobs: exactly one job per planned time, however many schedulers run.
//! * [`reaper::Reaper`] makes the rows of dead claimants runnable again (judged by [`liveness`]), and
//!   [`supervisor::Supervisor`] keeps N worker processes alive, releasing a dead child's rows at once.
//! * [`bench`](mod@bench) measures all of it against the server's own limit (`jobq bench`).
//!
//! ```no_run
//! use jobq::{Handlers, JobContext, JobError, Worker, WorkerConfig, Mode};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = jobq::db::connect(&jobq::db::ConnectConfig::new("mysql://root@127.0.0.1:3306/test")).await?;
//! jobq::db::migrate::migrate(&pool).await?;
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

pub mod bench;
pub mod config;
pub mod db;
pub mod error;
pub mod fence;
pub mod handler;
pub mod job;
pub mod liveness;
pub mod reaper;
pub mod retry;
pub mod scheduler;
mod service;
pub mod session;
pub mod supervisor;
pub mod token;
pub mod worker;

pub use db::admin::{JobFilter, Stats};
pub use db::enqueue::{NewJob, enqueue, enqueue_many};
pub use error::{ConnectFailure, Error, Result};
pub use handler::{Handler, Handlers, JobContext, JobError};
pub use job::{JobRecord, State};
pub use scheduler::{Clock, ScheduleDef, Scheduler, SchedulerConfig, Schedules, TickReport};
pub use worker::{Mode, Worker, WorkerConfig, WorkerReport};

/// Re-exported so library users need not depend on tokio-util for the shutdown token.
pub use tokio_util::sync::CancellationToken;
