//! An explicit-state model of the claim protocol, checked exhaustively for a small instance with
//! [stateright](https://docs.rs/stateright) (breadth-first, so each counterexample is a shortest one).
//!
//! Why a model: the integration tests run the real code against a real server, but only along the
//! interleavings a run happens to take. The protocol's safety rests on timing rules (the fence stops a
//! worker's copies before any reaper may reset its rows) that hold only for every interleaving of
//! heartbeats, claims, finishes, faults and reaper passes; the checker visits all of them.
//!
//! **Modelled**, in discrete time (1 tick = 1 s of the database clock):
//! - job rows (queued, running under a claim token, done, dead; `attempts`), with the claim stamping
//!   the token and `attempts + 1` and the finish fenced on token and attempt (`src/db/claim`,
//!   `src/db/finish`); a token is the worker's for its whole life, across reconnects (`src/session.rs`);
//! - workers: alive or SIGKILLed (their copies stop at once), network up or cut for any length, anchor
//!   session held or ended by the server while the process lives, runtime stalled (no heartbeat, claim
//!   or finish, while the watchdog thread still runs), `heartbeat_at` as the database has it and the
//!   send tick of the last confirmation as the worker has it, a clock whose measure of time since that
//!   confirmation lags or leads the database's by up to `drift` ticks, the copies it runs with their
//!   attempt and phase (running, told to stop by the fence, ended and waiting for its finish);
//! - the fence (`src/claimant/fence.rs`): claims only with half the bound left, trips once the bound
//!   has passed by the worker's clock, and forces its copies within `KILL_GRACE`; a confirmation
//!   re-arms it;
//! - the reaper (`src/claimant/liveness.rs`, `src/db/reap.rs`): a pass every reaper interval; a
//!   claimant is gone when its process is dead on the reaper's host, its heartbeat is older than
//!   `lease_for` (the configured lease, at least three heartbeats and bound + margin), or its session
//!   is gone and its heartbeat is older than bound + margin; a reset queues its running rows again (or
//!   ends them dead once their attempts are used up);
//! - faults, at most `fault_budget` per run and only before `faults_until`: network cut, session
//!   dropped, SIGKILL (never of the last live worker), runtime stalled, a heartbeat or claim whose reply
//!   is lost (the claim's row is then handed back by the worker's reconcile), a Galera commit of a claim
//!   or finish that fails certification and is retried.
//!
//! Time passes only once everything due at the current tick has happened (the fence's trip, a forced
//! stop, a heartbeat, a reaper pass); from `settle_at` on, networks come back, stalls end, handlers end
//! and every possible claim and finish is made, so that a run must end with every job done or dead.
//!
//! **Properties**, over every reachable state (`properties.rs`): (1) never two copies of one job
//! executing at once; (2) a finish counts only under the row's current token and attempt; (3) no job
//! is lost: at the horizon every job is done or dead; (4) a live worker whose heartbeat is within its
//! bound is never reset. Two `sometimes` properties show the checks are not vacuous: a reset row is
//! claimed again, and a late finish is refused.
//!
//! **Abstracted away**: SQL and locking (each claim, finish and reset is one atomic step, as its
//! transaction is), batches (a claim takes one row), timeouts, cancels, retries with backoff (a failed
//! attempt is not modelled: a copy succeeds or is interrupted by the fence), the server restart grace,
//! session-multiplexing proxies, several reapers, the registry row's removal after a reset (the model's
//! reaper judges by `heartbeat_at` alone, which a re-registering worker refreshes anyway), and a whole
//! process frozen by SIGSTOP or a VM pause (its watchdog would stop too; the fence does not claim to
//! cover that). Sub-second timing (the watchdog's 100 ms tick) is folded into the tick.
//!
//! **Constants** come from the code (`state::Timing::from_code`): the fence bound
//! `WorkerConfig::DEFAULT_FENCE_AFTER` (10 s), `jobq::testing::MARGIN` (2 s),
//! `jobq::testing::KILL_GRACE` (1 s), `WorkerConfig::DEFAULT_HEARTBEAT` (2 s) and
//! `ReaperConfig::DEFAULT_INTERVAL` (2 s); the reaper's lease is the shortest its config accepts
//! (three heartbeats), so the lease rule is reached within the horizon. A constant that is not a whole
//! number of seconds fails the check rather than being rounded. A drift of one tick is what the margin
//! leaves over the kill grace.
//!
//! **Instance**: two workers, one job, two attempts, two faults in the first three ticks, drift of one
//! tick, horizon 23 ticks: about 700 000 distinct states, checked in 5 to 15 s in the debug build on
//! two cores (`cargo test --features test-util --test model -- --nocapture` prints the counts).
//!
//! **Broken variants** (parameters of the instance, not edits of the code), each of which the checker
//! must refute with a printed trace: the reaper's margin set to 0, and the fence's stop removed.
//!
//! **A race the model found in the code, now closed**: the reaper judges every claimant first
//! (`Reaper::find_dead`) and resets their rows afterwards (`reset_claim`). While the reset checked only
//! the token and `state = 'running'`, a claimant judged gone that reconnected, heartbeat, finished its
//! fenced copy and claimed the job again between the two had that fresh claim reset, and another
//! worker ran the job beside it. The reset now locks the claimant's registry row and goes ahead only if
//! it still shows the heartbeat the verdict was made on (`ResetIf` in `src/db/reap.rs`; tested against
//! the server by `reaper::a_reset_leaves_a_claimant_alone_that_heartbeat_after_its_verdict`), which the
//! checked instance models as judging and resetting in one step (`atomic_reap`). The old two-step reset
//! is a third broken variant: `a_reset_acting_on_an_earlier_judgement_can_overtake_a_reconnect`.

mod properties;
mod protocol;
mod state;

use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model, Path};

use properties::{LIVE_NOT_RESET, ONE_COPY};
use protocol::{Action, Protocol};
use state::{Instance, State, Timing};

/// The instance the protocol must pass: two workers, one job, two faults, the code's own timing.
fn instance() -> Instance {
    Instance {
        timing: Timing::from_code(),
        workers: 2,
        jobs: 1,
        max_attempts: 2,
        faults_until: 3,
        fault_budget: 2,
        drift: 1,
        same_host: true,
        fence: true,
        atomic_reap: true,
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Checks every reachable state, or stops at the first counterexample of `property`.
fn check(inst: Instance, until: Option<&'static str>) -> impl Checker<Protocol> {
    let started = Instant::now();
    let mut builder = Protocol(inst).checker().threads(threads());
    if let Some(p) = until {
        builder = builder.finish_when(HasDiscoveries::AnyOf([p].into()));
    }
    let checker = builder.spawn_bfs().join();
    eprintln!(
        "{} states ({} unique), depth {}, in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

/// The steps of a counterexample, one a line with the tick it happened at. Ticks, and reaper passes
/// that found nobody gone, are left out: they only pace the run.
fn trace(path: Path<State, Action>) -> String {
    let steps = path.into_vec();
    steps
        .windows(2)
        .filter_map(|pair| {
            let [(before, Some(action)), (after, _)] = pair else {
                return None;
            };
            let idle_pass = *action == Action::ReaperJudges
                && before.jobs == after.jobs
                && after.reaper.judged.is_empty();
            (*action != Action::Tick && !idle_pass)
                .then(|| format!("  t={:>2}  {action:?}", before.now))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts the checker finds a counterexample to `property` and prints it.
fn counterexample(inst: Instance, property: &'static str) -> String {
    let checker = check(inst, Some(property));
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("no counterexample to {property:?}"));
    let steps = trace(path);
    eprintln!("counterexample to {property:?}:\n{steps}");
    steps
}

#[test]
fn the_protocol_keeps_its_properties() {
    let inst = instance();
    eprintln!("{:?}, horizon {}", inst.timing, inst.horizon());
    check(inst, None).assert_properties();
}

#[test]
fn without_the_margin_a_reset_overtakes_the_fence() {
    let mut inst = instance();
    inst.timing.margin = 0;
    let steps = counterexample(inst, ONE_COPY);
    assert!(steps.contains("ReaperJudges"), "{steps}");
}

#[test]
fn without_the_fence_a_cut_off_worker_runs_on() {
    let inst = Instance {
        fence: false,
        ..instance()
    };
    let steps = counterexample(inst, ONE_COPY);
    assert!(!steps.contains("FenceTrips"), "{steps}");
}

/// The race described in the module docs, as the reset was before it re-checked the heartbeat: with
/// judging and resetting as two steps, the reset can hit a claimant that has since confirmed it is alive (three attempts, so the reclaimed job is queued
/// again rather than dead).
#[test]
fn a_reset_acting_on_an_earlier_judgement_can_overtake_a_reconnect() {
    let inst = Instance {
        atomic_reap: false,
        max_attempts: 3,
        ..instance()
    };
    counterexample(inst.clone(), ONE_COPY);
    counterexample(inst, LIVE_NOT_RESET);
}
