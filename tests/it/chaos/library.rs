//! The workload's library handler: an async Rust function in a `jobq::Worker` inside the run's own
//! process, behind the relay. It cannot be SIGKILLed without ending the run, so it meets the network
//! cuts, session kills and server restarts, and its fence stops its copies.
//!
//! Each copy records itself in the effect-line format of [`crate::history::recorded_command`]:
//! `start`, then `end`, or `gone` when its worker stopped it part way; its "pid" is a number of its
//! own. A set of the jobs running stands for the command's lock: a copy that finds its job in it
//! records `lock-taken`, an overlap.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobq::{CancellationToken, Handlers, JobContext, JobError, WorkerConfig};

#[derive(Default)]
struct Shared {
    lines: Mutex<String>,
    running: Mutex<HashSet<u64>>,
    copies: AtomicU32,
}

impl Shared {
    fn record(&self, what: &str, job: &JobContext, copy: u32) {
        let at = crate::history::At::now().micros;
        let line = format!(
            "{what} job={} attempt={} pid={copy} at={at} claim={}\n",
            job.id, job.attempt, job.claim
        );
        self.lines.lock().unwrap().push_str(&line);
    }
}

/// Ends a copy however its future ends: run to its end, or dropped by a stopping worker.
struct Copy {
    shared: Arc<Shared>,
    job: JobContext,
    id: u32,
    ended: bool,
}

impl Drop for Copy {
    fn drop(&mut self) {
        if !self.ended {
            self.shared.record("gone", &self.job, self.id);
        }
        self.shared.running.lock().unwrap().remove(&self.job.id.0);
    }
}

async fn handle(shared: Arc<Shared>, job: JobContext) -> Result<(), JobError> {
    let id = 1_000_000 + shared.copies.fetch_add(1, Ordering::SeqCst);
    if !shared.running.lock().unwrap().insert(job.id.0) {
        shared.record("lock-taken", &job, id);
        return Err(JobError::retry(
            "another copy of this job runs in this process",
        ));
    }
    shared.record("start", &job, id);
    let mut copy = Copy {
        shared: shared.clone(),
        job: job.clone(),
        id,
        ended: false,
    };
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(100)) => {
            shared.record("end", &job, id);
            copy.ended = true;
            Ok(())
        }
        _ = job.cancelled() => Err(JobError::retry("stopped by the worker")),
    }
}

pub struct LibraryWorker {
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<jobq::Result<jobq::WorkerReport>>,
}

impl LibraryWorker {
    /// Starts a worker of the `lib` kind on `url`, forever, with eight at a time.
    pub async fn start(url: &str) -> LibraryWorker {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let handlers = Handlers::new()
            .register("lib", move |job: JobContext| handle(s.clone(), job))
            .unwrap();
        let pool = jobq::connect(&jobq::ConnectConfig::new(url).unwrap().max_connections(4))
            .await
            .unwrap();
        let cfg = WorkerConfig {
            mode: jobq::Mode::Forever,
            concurrency: 8,
            ..WorkerConfig::default()
        };
        let worker = jobq::Worker::new(pool, handlers, cfg).unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(worker.run(stop.clone()));
        LibraryWorker { shared, stop, task }
    }

    /// Whether the worker ended by itself (a forever worker never should).
    pub fn has_ended(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the worker as a shutdown signal would.
    pub async fn stop(&mut self) -> Result<(), String> {
        self.stop.cancel();
        match tokio::time::timeout(Duration::from_secs(60), &mut self.task).await {
            Ok(Ok(Ok(_))) => Ok(()),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("it did not stop within 60 s".into()),
        }
    }

    /// The effect lines its copies wrote.
    pub fn effects(&self) -> String {
        self.shared.lines.lock().unwrap().clone()
    }
}
