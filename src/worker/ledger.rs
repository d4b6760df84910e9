//! The claim ledger: what a worker runs, what it holds, and what it is unsure of.
//!
//! One entry per claimed attempt, keyed by job id *and* attempt: if a row is taken away from this
//! worker (a reaper reset it) and this same worker claims it again, the old copy and the new one are two
//! entries, and the new one starts only when the old one has ended. Together with self-fencing this is
//! what keeps a job from running twice at once inside one worker.
//!
//! Every entry carries three signals: an operator's cancel request, the claim being lost (the row no
//! longer carries this worker's token and attempt), and the copy having ended.

use std::collections::{HashMap, hash_map};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use smallvec::SmallVec;
use tokio::sync::SetOnce;

use crate::db::finish::Finish;
use crate::id::JobId;
use crate::job::AttemptKey;

/// The signals one running attempt watches, shared by the ledger and the attempt's task: one
/// allocation and one reference count for the four of them.
#[derive(Debug, Clone)]
pub(crate) struct Entry(Arc<Tokens>);

#[derive(Debug, Default)]
pub(crate) struct Tokens {
    /// Raised by an operator's cancel request.
    pub(crate) cancel_request: Signal,
    /// Raised when the row no longer carries this worker's token and attempt.
    pub(crate) lost: Signal,
    /// Raised when this attempt's task has ended.
    pub(crate) ended: Signal,
    /// Set once the handler has returned and the outcome is being recorded: a row that stops carrying
    /// the token then was finished by this worker, not taken away.
    recording: AtomicBool,
}

impl std::ops::Deref for Entry {
    type Target = Tokens;

    fn deref(&self) -> &Tokens {
        &self.0
    }
}

/// A flag raised once, which tasks can wait for: what a `CancellationToken` does for an attempt,
/// held inside the attempt's entry. Three tokens per job were three allocations, and their tree's
/// lock and reference counts were a fifteenth of a draining worker's instructions (`valgrind
/// --tool=callgrind`); an attempt's signals have no parent and no children, so a `SetOnce` is all
/// they need.
#[derive(Debug, Default)]
pub(crate) struct Signal(SetOnce<()>);

impl Signal {
    /// Raises the signal (again: nothing happens) and wakes its waiters.
    pub(crate) fn raise(&self) {
        let _already = self.0.set(());
    }

    /// Whether the signal was raised.
    pub(crate) fn is_raised(&self) -> bool {
        self.0.initialized()
    }

    /// Returns once the signal is raised (at once if it was). Cancel safe.
    pub(crate) async fn raised(&self) {
        self.0.wait().await;
    }
}

impl Entry {
    /// Marks the handler as returned: from now on the row may change under our own finish.
    pub(crate) fn recording(&self) {
        self.recording.store(true, Ordering::SeqCst);
    }
}

/// The attempts of one job id running here: nearly always one, held without an allocation of its own.
type Copies = SmallVec<[(u16, Entry); 1]>;

/// The running attempts by job id, hashed by foldhash: SipHash's resistance to chosen keys buys nothing
/// for row ids the database hands out, and its three hashes per job (one to enter, two to leave) were a
/// fiftieth of a draining worker's instructions.
type ById = HashMap<JobId, Copies, foldhash::fast::RandomState>;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The attempts running here, by job id (nearly always one per id). Keyed by id so that entering a
    /// claimed job finds an older copy of it without a walk over every job the worker runs: with
    /// thousands running, that walk per job was a cost quadratic in the concurrency.
    entries: Mutex<ById>,
    /// Set when a claim may have committed without our seeing its rows.
    uncertain: AtomicBool,
    /// Jobs claimed and not yet recorded (the finisher lingers only while some are).
    pub(crate) in_flight: Arc<AtomicUsize>,
    /// Jobs that have given their slot back, counted before they do (a done job when its handler has
    /// returned, its finish then only waiting for the finisher's batch; any other when its outcome has
    /// been recorded), and again when they leave the ledger, their outcome recorded. A claim that saw
    /// this move may have missed what such a job left behind: a done finish that released waiting jobs
    /// (the next job of a key, a dependent) commits after its job gave its slot back, and a draining
    /// worker whose claim ran across that commit must look again, not stop.
    pub(crate) ended: AtomicU64,
    /// How long jobs held their slot lately, in µs (a moving average, 0 before the first).
    held_us: AtomicU64,
    /// Attempts that ran here but whose outcome could not be recorded, with that outcome: a reconcile
    /// records it later instead of handing the row back as if it had never run.
    unrecorded: Mutex<HashMap<AttemptKey, Finish>>,
}

impl Ledger {
    fn lock(&self) -> MutexGuard<'_, ById> {
        crate::sync::lock(&self.entries)
    }

    /// Enters a claimed attempt. Returns its entry and, when an older attempt of the same job is still
    /// running here, that attempt's entry (the new copy must wait for its `ended`).
    pub(crate) fn enter(&self, key: AttemptKey) -> (Entry, Option<Entry>) {
        let AttemptKey { id, attempt } = key;
        let entry = Entry(Arc::default());
        let mut entries = self.lock();
        let copies = entries.entry(id).or_default();
        let older = copies
            .iter()
            .filter(|(a, _)| *a != attempt)
            .map(|(_, e)| {
                // A newer claim of the same row proves the older one is lost.
                e.lost.raise();
                e.clone()
            })
            .next();
        copies.retain(|(a, _)| *a != attempt);
        copies.push((attempt, entry.clone()));
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        (entry, older)
    }

    /// Removes an attempt whose outcome has been recorded (or given up on).
    pub(crate) fn leave(&self, key: AttemptKey) {
        let AttemptKey { id, attempt } = key;
        let mut entries = self.lock();
        if let hash_map::Entry::Occupied(mut copies) = entries.entry(id) {
            if let Some(at) = copies.get().iter().position(|(a, _)| *a == attempt) {
                copies.get_mut().swap_remove(at).1.ended.raise();
            }
            if copies.get().is_empty() {
                copies.remove();
            }
        }
        drop(entries);
        // Counted before `in_flight` falls: a claim that sees no job in flight then also sees this.
        self.ended.fetch_add(1, Ordering::SeqCst);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// Counts a job giving its slot back after holding it for `held`; call it before the slot is given
    /// back (see [`Ledger::ended`]).
    pub(crate) fn slot_freed(&self, held: Duration) {
        let sample = (held.as_micros() as u64).max(1);
        // Jobs ending at once may each fold their sample into an older average: one of them is lost,
        // which an average of many does not notice.
        let prev = self.held_us.load(Ordering::Relaxed);
        self.held_us
            .store(moving_average(prev, sample), Ordering::Relaxed);
        self.ended.fetch_add(1, Ordering::SeqCst);
    }

    /// How long jobs held their slot lately; `None` before any has given it back.
    pub(crate) fn slot_time(&self) -> Option<Duration> {
        match self.held_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Whether nothing runs.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Whether this job id runs here, in any attempt.
    pub(crate) fn runs(&self, id: JobId) -> bool {
        self.lock().contains_key(&id)
    }

    /// The attempts running now whose handler has not returned yet.
    pub(crate) fn snapshot(&self) -> Vec<AttemptKey> {
        self.lock()
            .iter()
            .flat_map(|(id, copies)| copies.iter().map(move |(a, e)| (*id, *a, e)))
            .filter(|(_, _, e)| !e.recording.load(Ordering::SeqCst))
            .map(|(id, attempt, _)| AttemptKey { id, attempt })
            .collect()
    }

    /// Every job id whose row may still run under this worker's token: the attempts entered and not yet
    /// left (a done job stays until its finish is made) and the ones whose outcome could not be
    /// recorded. What a claim writes to the holdings list besides the rows it stamps.
    pub(crate) fn holding(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.lock().keys().map(|id| id.0).collect();
        let unrecorded: Vec<u64> = crate::sync::lock(&self.unrecorded)
            .keys()
            .map(|k| k.id.0)
            .filter(|id| !ids.contains(id))
            .collect();
        ids.extend(unrecorded);
        ids
    }

    /// Trips the cancel requests of these job ids; returns the ids newly told to stop.
    pub(crate) fn request_cancel(&self, ids: &[JobId]) -> Vec<JobId> {
        let entries = self.lock();
        let mut told = Vec::new();
        for id in ids {
            for (_, e) in entries.get(id).into_iter().flatten() {
                if !e.cancel_request.is_raised() {
                    e.cancel_request.raise();
                    told.push(*id);
                }
            }
        }
        told
    }

    /// Marks an attempt lost unless its handler has already returned; true if it was newly marked.
    pub(crate) fn mark_lost(&self, key: AttemptKey) -> bool {
        let AttemptKey { id, attempt } = key;
        let entries = self.lock();
        let copy = entries
            .get(&id)
            .and_then(|copies| copies.iter().find(|(a, _)| *a == attempt));
        match copy {
            Some((_, e)) if !e.recording.load(Ordering::SeqCst) && !e.lost.is_raised() => {
                e.lost.raise();
                true
            }
            _ => false,
        }
    }

    /// The flag a claim raises when its outcome is unknown (see `claim_batch_watched`).
    pub(crate) fn uncertain_flag(&self) -> &AtomicBool {
        &self.uncertain
    }

    /// Whether a reconcile is due.
    pub(crate) fn is_uncertain(&self) -> bool {
        self.uncertain.load(Ordering::SeqCst)
    }

    /// Clears the flag after a reconcile.
    pub(crate) fn clear_uncertain(&self) {
        self.uncertain.store(false, Ordering::SeqCst);
    }

    /// Keeps the outcome of an attempt that ran but could not be recorded, and asks for a reconcile.
    pub(crate) fn unrecorded(&self, key: AttemptKey, outcome: Finish) {
        crate::sync::lock(&self.unrecorded).insert(key, outcome);
        self.uncertain.store(true, Ordering::SeqCst);
    }

    /// The outcome to record for a row held under this worker's token that it does not run: the one
    /// kept by [`Ledger::unrecorded`] if the attempt ran here, else [`Finish::Release`] (a claim whose
    /// reply was lost: it never started). Taken, so it is applied once.
    pub(crate) fn outcome_for_held(&self, key: AttemptKey) -> Finish {
        crate::sync::lock(&self.unrecorded)
            .remove(&key)
            .unwrap_or(Finish::Release)
    }
}

/// An exponential moving average over about the last eight samples (`prev` 0: none yet), so that a
/// claim follows a change of job length within a batch or two.
fn moving_average(prev: u64, sample: u64) -> u64 {
    if prev == 0 {
        sample
    } else {
        (prev * 7 + sample).div_ceil(8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u64, attempt: u16) -> AttemptKey {
        AttemptKey::from((id, attempt))
    }

    #[test]
    fn slot_time_follows_the_jobs_within_a_few_samples() {
        let l = Ledger::default();
        assert_eq!(l.slot_time(), None);
        l.slot_freed(Duration::from_micros(400));
        assert_eq!(l.slot_time(), Some(Duration::from_micros(400)));
        assert_eq!(l.ended.load(Ordering::SeqCst), 1);
        for _ in 0..16 {
            l.slot_freed(Duration::from_secs(1));
        }
        assert!(l.slot_time().unwrap() > Duration::from_millis(800));
        assert_eq!(moving_average(0, 5), 5);
        assert_eq!(moving_average(8, 16), 9);
    }

    #[test]
    fn an_attempt_that_ran_keeps_its_outcome_for_the_reconcile_and_is_not_handed_back() {
        let l = Ledger::default();
        assert_eq!(l.outcome_for_held(key(7, 1)), Finish::Release);
        l.unrecorded(key(7, 1), Finish::Done);
        assert!(l.is_uncertain(), "a reconcile is asked for");
        assert_eq!(
            l.outcome_for_held(key(7, 2)),
            Finish::Release,
            "another attempt"
        );
        assert_eq!(l.outcome_for_held(key(7, 1)), Finish::Done);
        assert_eq!(
            l.outcome_for_held(key(7, 1)),
            Finish::Release,
            "applied once"
        );
    }

    #[test]
    fn a_second_claim_of_a_running_job_marks_the_first_lost_and_waits_for_it() {
        let l = Ledger::default();
        let (first, older) = l.enter(key(7, 1));
        assert!(older.is_none());
        let (_second, older) = l.enter(key(7, 2));
        assert!(first.lost.is_raised());
        let older = older.expect("the first copy is still running");
        assert!(!older.ended.is_raised());
        l.leave(key(7, 1));
        assert!(older.ended.is_raised());
        assert!(l.runs(JobId(7)));
        l.leave(key(7, 2));
        assert!(l.is_empty());
    }

    #[test]
    fn a_job_leaving_counts_as_an_end_before_it_stops_being_in_flight() {
        // A done job gives its slot back (one end) before its finish commits; the finish may release
        // waiting jobs, so its leaving is an end too, seen by any claim that sees no job in flight.
        let l = Ledger::default();
        l.enter(key(1, 1));
        l.slot_freed(Duration::from_millis(1));
        let before = l.ended.load(Ordering::SeqCst);
        assert_eq!(l.in_flight.load(Ordering::SeqCst), 1);
        l.leave(key(1, 1));
        assert_eq!(l.in_flight.load(Ordering::SeqCst), 0);
        assert_ne!(l.ended.load(Ordering::SeqCst), before);
    }

    #[test]
    fn a_returned_handler_is_never_marked_lost() {
        let l = Ledger::default();
        let (e, _) = l.enter(key(1, 1));
        e.recording();
        assert!(!l.mark_lost(key(1, 1)));
        assert!(l.snapshot().is_empty());
        let (_e2, _) = l.enter(key(2, 1));
        assert!(l.mark_lost(key(2, 1)));
        assert!(!l.mark_lost(key(2, 1)), "only once");
    }

    #[test]
    fn cancel_requests_reach_every_attempt_of_the_id_once() {
        let l = Ledger::default();
        let (a, _) = l.enter(key(3, 1));
        assert_eq!(l.request_cancel(&[JobId(3), JobId(4)]), vec![JobId(3)]);
        assert!(a.cancel_request.is_raised());
        assert!(l.request_cancel(&[JobId(3)]).is_empty());
    }
}
