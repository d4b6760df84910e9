//! The workload's library handler: an async Rust function in a `jobq::Worker` inside the run's own
//! process, behind the relay. It cannot be SIGKILLed without ending the run, so it meets the network
//! cuts, session kills and server restarts, and its fence stops its copies.
//!
//! Each copy records itself in a [`LibraryCopies`]: its start, and its end or the moment its worker
//! stopped it (the copy's future dropped).

use std::time::Duration;

use jobq::{CancellationToken, Handlers, JobContext, JobError, WorkerConfig};

use crate::history::{History, LibraryCopies};

async fn handle(copies: LibraryCopies, job: JobContext) -> Result<(), JobError> {
    let copy = copies.start(&job);
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(100)) => {
            copy.ended();
            Ok(())
        }
        _ = job.cancelled() => Err(JobError::retry("stopped by the worker")),
    }
}

pub struct LibraryWorker {
    copies: LibraryCopies,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<jobq::Result<jobq::WorkerReport>>,
}

impl LibraryWorker {
    /// Starts a worker of the `lib` kind on `url`, forever, with eight at a time.
    pub async fn start(url: &str) -> LibraryWorker {
        let copies = LibraryCopies::new();
        let c = copies.clone();
        let handlers = Handlers::new()
            .register("lib", move |job: JobContext| handle(c.clone(), job))
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
        LibraryWorker { copies, stop, task }
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

    /// Adds the copies its handler ran to `h`.
    pub fn read_copies(&self, h: &mut History) {
        h.read_library_copies(&self.copies);
    }
}
