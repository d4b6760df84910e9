//! Library handlers' copies: a handler running in the test's own process records each copy it runs,
//! as [`super::recorded_command`] does for a command in a file.
//!
//! A copy here is one call of the handler for one attempt; its `pid` is a number the recorder hands
//! out, since every copy shares the test's process. Times are the host's clock, read by the handler.

use std::sync::{Arc, Mutex};

use jobq::JobContext;

use super::{At, Event, History, Kind, Source};

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
        let pid = {
            let mut record = self.record.lock().unwrap();
            record.copies += 1;
            record.copies
        };
        let copy = LibraryCopy {
            copies: self.clone(),
            job: job.id.0,
            attempt: job.attempt,
            pid,
            claim: job.claim.clone(),
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
    job: super::JobId,
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
