//! Using jobq as a library: enqueue inside your own transaction, and run a worker with async handlers.
//!
//! ```sh
//! cargo run --example library -- mysql://root@127.0.0.1:3306/test
//! ```

use std::time::Duration;

use jobq::{
    CancellationToken, ConnectConfig, Handlers, JobContext, JobError, Mode, NewJob, Worker,
    WorkerConfig,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Welcome {
    user_id: u64,
    email: String,
}

/// A handler is any async function from a job to `Result<(), JobError>`. Any error converts with `?`
/// into a retryable failure; `JobError::fatal` ends the job at once.
async fn send_welcome(job: JobContext) -> Result<(), JobError> {
    let w: Welcome = job.payload()?;
    if !w.email.contains('@') {
        return Err(JobError::fatal(format!("not an address: {}", w.email)));
    }
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(10)) => {}
        () = job.cancelled() => return Err(JobError::retry("stopped")),
    }
    println!(
        "job {} attempt {}: welcome mail to {} (user {})",
        job.id, job.attempt, w.email, w.user_id
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mysql://root@127.0.0.1:3306/test".into());
    let pool = jobq::connect(&ConnectConfig::new(&url)?.max_connections(8)).await?;
    jobq::migrate(&pool).await?;

    // Enqueue in the same transaction as the application's own write: both commit or neither does.
    let mut tx = pool.begin().await?;
    let job = NewJob::new("mail.welcome")
        .queue("example")
        .payload(&Welcome {
            user_id: 7,
            email: "ada@example.com".into(),
        })?;
    let id = jobq::enqueue(&mut *tx, &job).await?;
    tx.commit().await?;
    println!("enqueued job {id}");

    let handlers = Handlers::new().register("mail.welcome", send_welcome)?;
    let cfg = WorkerConfig {
        queues: vec!["example".into()],
        mode: Mode::Drain,
        ..WorkerConfig::default()
    };
    let report = Worker::new(pool.clone(), handlers, cfg)?
        .run(CancellationToken::new())
        .await?;
    println!("worker report: {report:?}");
    Ok(())
}
