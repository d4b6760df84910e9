//! Library handlers' copies: a handler running in the test's own process records each copy it runs,
//! as [`super::recorded_command`] does for a command in a file. An HTTP endpoint the test serves is
//! such a handler too: it records each request it takes as a copy.
//!
//! A copy here is one call of the handler for one attempt; its `pid` is a number the recorder hands
//! out, since every copy shares the test's process. Times are the host's clock, read by the handler.

use std::sync::{Arc, Mutex};

use jobq::JobContext;

use super::{At, Event, History, JobId, Kind, Source};

/// Where a test's library handlers record their copies; clones share one record.
#[derive(Debug, Clone, Default)]
pub struct LibraryCopies {
    record: Arc<Mutex<Record>>,
}

#[derive(Debug, Default)]
struct Record {
    events: Vec<Event>,
    copies: u32,
}

impl LibraryCopies {
    pub fn new() -> LibraryCopies {
        LibraryCopies::default()
    }

    /// Records that a copy of `job`'s attempt starts. The handler calls [`LibraryCopy::ended`] once
    /// its whole effect is done; a copy dropped without that (it failed, returned early when it was
    /// stopped, or its future was dropped by its worker) is recorded gone at that moment: nothing of
    /// it runs after its drop, so the drop is the evidence a command's lock is for.
    pub fn start(&self, job: &JobContext) -> LibraryCopy {
        self.start_attempt(job.id.0, job.attempt, &job.claim)
    }

    /// Records that a copy of `job`'s `attempt`, run for claimant `claim`, starts, and returns it to
    /// end or drop as [`LibraryCopies::start`]'s. For a handler that is not handed a [`JobContext`]
    /// but learns its job from what it receives: an HTTP endpoint reads the three from a request's
    /// `jobq-job-id`, `jobq-attempt` and `jobq-claim` headers.
    pub fn start_attempt(&self, job: JobId, attempt: u16, claim: &str) -> LibraryCopy {
        let pid = {
            let mut record = self.record.lock().unwrap();
            record.copies += 1;
            record.copies
        };
        let copy = LibraryCopy {
            copies: self.clone(),
            job,
            attempt,
            pid,
            claim: claim.to_string(),
            ended: false,
        };
        copy.record(Kind::HandlerStarted { pid }, Source::Effects);
        copy
    }
}

/// One running copy, from [`LibraryCopies::start`].
#[derive(Debug)]
pub struct LibraryCopy {
    copies: LibraryCopies,
    job: JobId,
    attempt: u16,
    pid: u32,
    claim: String,
    ended: bool,
}

impl LibraryCopy {
    /// The copy ran its whole body.
    pub fn ended(mut self) {
        self.ended = true;
        self.record(Kind::HandlerEnded { pid: self.pid }, Source::Effects);
    }

    fn record(&self, kind: Kind, source: Source) {
        let event = Event {
            job: self.job,
            attempt: self.attempt,
            kind,
            at: At::now(),
            claimant: Some(self.claim.clone()),
            source,
        };
        self.copies.record.lock().unwrap().events.push(event);
    }
}

impl Drop for LibraryCopy {
    fn drop(&mut self) {
        if !self.ended {
            self.record(Kind::Gone { pid: self.pid }, Source::Test);
        }
    }
}

impl History {
    /// Adds the copies `copies` recorded so far.
    pub fn read_library_copies(&mut self, copies: &LibraryCopies) {
        let record = copies.record.lock().unwrap();
        self.events.extend(record.events.iter().cloned());
    }
}
