//! What is checked over every reachable state, as properties of [`Protocol`]. The model's steps keep
//! ghost facts in the state (a stale finish accepted, a live worker reset) so that each property is a
//! look at one state.

use stateright::Property;

use crate::protocol::Protocol;
use crate::state::{Row, State};

/// (1) Never two copies of one job executing at the same moment.
pub(crate) const ONE_COPY: &str = "one executing copy per job";
/// (2) A finish counts only under the row's current claim token and attempt.
pub(crate) const CURRENT_CLAIM: &str = "finishes count only under the current claim";
/// (3) Once the faults stop, every job ends done or dead within the horizon.
pub(crate) const NO_JOB_LOST: &str = "no job is lost";
/// (4) A live worker whose heartbeat is within its bound keeps its rows.
pub(crate) const LIVE_NOT_RESET: &str = "a live worker that keeps its heartbeat is never reset";
/// Non-vacuity: a gone claimant's row is reset and claimed again.
pub(crate) const RECLAIMED: &str = "a reset row is claimed again";
/// Non-vacuity: the fence refuses a late finish.
pub(crate) const REFUSED: &str = "a late finish is refused";

pub(crate) fn all() -> Vec<Property<Protocol>> {
    vec![
        Property::always(ONE_COPY, |_, s: &State| {
            (0..s.jobs.len()).all(|j| s.executing(j) <= 1)
        }),
        Property::always(CURRENT_CLAIM, |_, s: &State| !s.stale_finish_accepted),
        // Checked at the horizon, which is reached only through ticks that every due step preceded.
        Property::always(NO_JOB_LOST, |m: &Protocol, s: &State| {
            s.now < m.0.horizon()
                || s.jobs
                    .iter()
                    .all(|j| matches!(j.row, Row::Done | Row::Dead))
        }),
        Property::always(LIVE_NOT_RESET, |_, s: &State| !s.live_worker_reset),
        Property::sometimes(RECLAIMED, |_, s: &State| s.reset_and_reclaimed),
        Property::sometimes(REFUSED, |_, s: &State| s.stale_finish_refused),
    ]
}
