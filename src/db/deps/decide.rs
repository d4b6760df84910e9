//! What becomes of a waiting job, as a pure decision over its dependencies' states as read: kept
//! apart from the SQL so that every case is a unit test.

use crate::job::State;

/// How a waiting job waits for one dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// Until it is done; cancelled if it ends otherwise.
    Done,
    /// Until it has ended in any way (a batch's callback).
    Ended,
    /// Until the job before it with the same order key has ended in any way, or is gone (schema 27).
    Next,
    /// Until the job before it with the same order key is done or cancelled, or is gone: one that ends
    /// dead holds the key until an operator retries, cancels or deletes it.
    Halt,
}

impl Until {
    /// The `jobq_job_deps.until` value; one this build does not know is taken as `done`, the strictest.
    pub(crate) fn parse(text: &str) -> Self {
        match text {
            "ended" => Until::Ended,
            "next" => Until::Next,
            "halt" => Until::Halt,
            _ => Until::Done,
        }
    }

    /// As `jobq_job_deps.until` stores it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Until::Done => "done",
            Until::Ended => "ended",
            Until::Next => "next",
            Until::Halt => "halt",
        }
    }

    /// Whether a predecessor that no longer exists holds nothing (an ordered key's), rather than making
    /// the job impossible to run.
    fn gone_is_ended(self) -> bool {
        matches!(self, Until::Next | Until::Halt)
    }
}

/// One dependency of a waiting job, as read: its id, how it is waited for, and its state (`None`: no
/// such job).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Edge {
    pub(crate) after: u64,
    pub(crate) until: Until,
    pub(crate) state: Option<State>,
}

/// What becomes of a waiting job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Some dependency has not ended as it must yet.
    Wait,
    /// Every dependency ended as it must: queue it, with the outcome counts of the jobs it waited for
    /// until they ended (done, dead, cancelled) when there are any.
    Release(Option<[u64; 3]>),
    /// It can never run: cancel it with this `last_error`.
    Cancel(String),
}

/// What becomes of a waiting job with dependencies `edges`. A missing dependency comes first (nothing
/// else can be said of it), then one that ended dead or cancelled (the lowest id is named), then
/// whether every one has ended as it must. A job with no dependencies at all waits for nothing.
pub(crate) fn decide(edges: &[Edge]) -> Verdict {
    let mut edges = edges.to_vec();
    edges.sort_by_key(|e| e.after);
    if let Some(e) = edges
        .iter()
        .find(|e| e.state.is_none() && !e.until.gone_is_ended())
    {
        return Verdict::Cancel(format!("waits on job {}, which does not exist", e.after));
    }
    // The edges left without a state are an order key's to a predecessor that is gone: ended.
    let edges: Vec<Edge> = edges.into_iter().filter(|e| e.state.is_some()).collect();
    let state = |e: &Edge| e.state.expect("missing ones filtered out above");
    if let Some(e) = edges
        .iter()
        .find(|e| e.until == Until::Done && matches!(state(e), State::Dead | State::Cancelled))
    {
        return Verdict::Cancel(format!(
            "cancelled: job {}, which it waited for, ended {}",
            e.after,
            state(e)
        ));
    }
    let pending = edges.iter().any(|e| match e.until {
        Until::Done => state(e) != State::Done,
        Until::Ended | Until::Next => !state(e).is_final(),
        Until::Halt => !matches!(state(e), State::Done | State::Cancelled),
    });
    if pending {
        return Verdict::Wait;
    }
    let mut counts = [0u64; 3];
    let mut members = false;
    for e in edges.iter().filter(|e| e.until == Until::Ended) {
        members = true;
        match state(e) {
            State::Done => counts[0] += 1,
            State::Dead => counts[1] += 1,
            _ => counts[2] += 1,
        }
    }
    Verdict::Release(members.then_some(counts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(after: u64, until: Until, state: Option<State>) -> Edge {
        Edge {
            after,
            until,
            state,
        }
    }

    #[test]
    fn a_job_runs_once_every_dependency_is_done() {
        use State::*;
        let done = |id| edge(id, Until::Done, Some(Done));
        assert_eq!(decide(&[done(1), done(2)]), Verdict::Release(None));
        assert_eq!(
            decide(&[done(1), edge(2, Until::Done, Some(Running))]),
            Verdict::Wait
        );
        assert_eq!(
            decide(&[done(1), edge(2, Until::Done, Some(Retry))]),
            Verdict::Wait
        );
        assert_eq!(decide(&[]), Verdict::Release(None), "waits for nothing");
    }

    #[test]
    fn a_dependency_that_failed_or_is_missing_cancels_and_says_which() {
        use State::*;
        assert_eq!(
            decide(&[
                edge(9, Until::Done, Some(Cancelled)),
                edge(4, Until::Done, Some(Dead)),
                edge(7, Until::Done, Some(Running)),
            ]),
            Verdict::Cancel("cancelled: job 4, which it waited for, ended dead".into())
        );
        assert_eq!(
            decide(&[
                edge(3, Until::Done, Some(Dead)),
                edge(12, Until::Done, None)
            ]),
            Verdict::Cancel("waits on job 12, which does not exist".into())
        );
    }

    #[test]
    fn a_batch_callback_runs_once_every_member_ended_with_their_outcomes() {
        use State::*;
        let m = |id, s| edge(id, Until::Ended, Some(s));
        assert_eq!(
            decide(&[m(1, Done), m(2, Dead), m(3, Cancelled), m(4, Done)]),
            Verdict::Release(Some([2, 1, 1]))
        );
        assert_eq!(decide(&[m(1, Done), m(2, Queued)]), Verdict::Wait);
    }

    #[test]
    fn an_ordered_job_runs_after_its_predecessor_ended_or_halts_on_a_dead_one() {
        use State::*;
        let next = |s| edge(5, Until::Next, s);
        let halt = |s| edge(5, Until::Halt, s);
        for s in [Queued, Retry, Running, Waiting] {
            assert_eq!(decide(&[next(Some(s))]), Verdict::Wait, "{s}");
            assert_eq!(decide(&[halt(Some(s))]), Verdict::Wait, "{s}");
        }
        for s in [Done, Dead, Cancelled] {
            assert_eq!(decide(&[next(Some(s))]), Verdict::Release(None), "{s}");
        }
        assert_eq!(decide(&[halt(Some(Done))]), Verdict::Release(None));
        assert_eq!(decide(&[halt(Some(Cancelled))]), Verdict::Release(None));
        assert_eq!(
            decide(&[halt(Some(Dead))]),
            Verdict::Wait,
            "held by a dead job"
        );
        // A predecessor deleted or pruned holds nothing; no outcome counts are added.
        assert_eq!(decide(&[next(None)]), Verdict::Release(None));
        assert_eq!(decide(&[halt(None)]), Verdict::Release(None));
        for u in [Until::Done, Until::Ended, Until::Next, Until::Halt] {
            assert_eq!(Until::parse(u.as_str()), u);
        }
    }
}
