//! The checker on hand-made histories (no database): each rule catches what it is for, and a clean
//! history with a killed claimant's rerun passes.

use super::{
    At, Clock, CopyRow, Event, Expectations, History, Kind, LibraryCopies, Rule, Source,
    SqlEffectRow, check,
};

const A: &str = "vm:100:1:boot:a";
const B: &str = "vm:200:1:boot:b";

fn ev(attempt: u16, kind: Kind, secs: f64, claimant: &str) -> Event {
    Event {
        job: 1,
        attempt,
        kind,
        at: At::host((secs * 1e6) as i64),
        claimant: Some(claimant.to_string()),
        source: Source::Effects,
    }
}

fn done(attempt: u16, secs: f64, claimant: &str) -> Event {
    Event {
        source: Source::JobRow,
        ..ev(
            attempt,
            Kind::FinishAccepted {
                outcome: "done".into(),
            },
            secs,
            claimant,
        )
    }
}

/// Attempt 1 by A, killed and seen gone at 5 s, reset at 13 s; attempt 2 by B runs 14–15 s, done.
fn rerun_after_a_kill() -> History {
    let mut h = History {
        events: vec![
            ev(1, Kind::Claimed, 0.0, A),
            ev(1, Kind::HandlerStarted { pid: 10 }, 0.1, A),
            ev(1, Kind::Gone { pid: 10 }, 5.0, A),
            ev(1, Kind::Reset, 13.0, A),
            ev(2, Kind::Claimed, 14.0, B),
            ev(2, Kind::HandlerStarted { pid: 20 }, 14.1, B),
            ev(2, Kind::HandlerEnded { pid: 20 }, 15.0, B),
            done(2, 15.1, B),
        ],
        ..History::default()
    };
    h.final_states.insert(1, "done".into());
    h
}

fn rules(h: &History, expect: &Expectations) -> Vec<Rule> {
    check(h, expect)
        .expect_err("a violation")
        .iter()
        .map(|v| v.rule)
        .collect()
}

#[test]
fn a_rerun_after_the_test_killed_its_claimant_passes() {
    let summary = check(&rerun_after_a_kill(), &Expectations::no_faults().lost(A)).unwrap();
    assert_eq!(
        (summary.jobs, summary.copies, summary.rerun, summary.done),
        (1, 2, 1, 1)
    );
}

#[test]
fn a_rerun_whose_claimant_the_test_did_not_lose_is_caught() {
    let h = rerun_after_a_kill();
    assert_eq!(
        rules(&h, &Expectations::no_faults()),
        [Rule::UnexplainedRerun]
    );
    assert_eq!(
        rules(&h, &Expectations::no_faults().lost(B)),
        [Rule::UnexplainedRerun]
    );
}

#[test]
fn a_start_before_the_earlier_copy_ended_is_an_overlap() {
    let mut h = rerun_after_a_kill();
    // Attempt 1's copy was seen gone only after attempt 2 had started.
    h.events[2].at.micros = 14_500_000;
    assert_eq!(
        rules(&h, &Expectations::no_faults().lost(A)),
        [Rule::Overlap]
    );
}

#[test]
fn a_copy_that_met_the_lock_taken_is_an_overlap() {
    let mut h = rerun_after_a_kill();
    h.events.push(ev(2, Kind::LockTaken { pid: 21 }, 14.2, B));
    assert_eq!(
        rules(&h, &Expectations::no_faults().lost(A)),
        [Rule::Overlap]
    );
}

#[test]
fn an_attempt_going_back_is_caught() {
    let mut h = rerun_after_a_kill();
    h.events.push(ev(1, Kind::Claimed, 14.05, A));
    assert_eq!(
        rules(&h, &Expectations::no_faults().lost(A)),
        [Rule::AttemptWentBack]
    );
}

#[test]
fn a_lost_claimants_copy_may_start_after_the_next_claim_but_not_after_the_next_copy() {
    // Attempt 1's statement begins on the server after its claimant's death, the reset and
    // attempt 2's claim (14 s), but before attempt 2's copy: it is gone when that one starts.
    let mut h = rerun_after_a_kill();
    h.events[1].at.micros = 14_020_000;
    h.events[2].at.micros = 14_050_000;
    check(&h, &Expectations::no_faults().lost(A)).unwrap();
    // The same from a claimant the test did not lose: a copy started for a row no longer its own.
    let r = rules(&h, &Expectations::no_faults().lost(B));
    assert!(r.contains(&Rule::AttemptWentBack), "{r:?}");
    // After attempt 2's copy began, even a lost claimant's copy is out of order.
    h.events[1].at.micros = 14_200_000;
    h.events[2].at.micros = 14_900_000;
    let r = rules(&h, &Expectations::no_faults().lost(A));
    assert!(r.contains(&Rule::AttemptWentBack), "{r:?}");
}

#[test]
fn a_done_job_without_exactly_one_accepted_done_is_caught() {
    let mut twice = rerun_after_a_kill();
    twice.events.push(done(1, 13.5, A));
    let r = rules(&twice, &Expectations::no_faults().lost(A));
    assert!(
        r.iter().all(|r| *r == Rule::Finish) && !r.is_empty(),
        "{r:?}"
    );

    let mut never = rerun_after_a_kill();
    never.events.pop();
    // Attempt 2 is now also a copy without an accepted outcome: a rerun by B.
    let r = rules(&never, &Expectations::no_faults().lost(A).lost(B));
    assert_eq!(r, [Rule::Finish]);
}

#[test]
fn a_copy_or_row_left_running_is_caught() {
    let mut h = rerun_after_a_kill();
    h.events.retain(|e| e.kind != Kind::Gone { pid: 10 });
    let r = rules(&h, &Expectations::no_faults().lost(A));
    // Never seen gone: it may still run beside attempt 2.
    assert_eq!(r, [Rule::Overlap, Rule::LeftRunning]);

    let mut running = History {
        events: vec![ev(1, Kind::Claimed, 0.0, A)],
        ..History::default()
    };
    running.final_states.insert(1, "running".into());
    assert_eq!(
        rules(&running, &Expectations::no_faults()),
        [Rule::LeftRunning]
    );
}

#[test]
fn a_violation_shows_the_jobs_timeline() {
    let v = check(&rerun_after_a_kill(), &Expectations::no_faults()).unwrap_err();
    let text = v[0].to_string();
    assert!(
        text.starts_with("job 1 (UnexplainedRerun): attempt 1 (pid 10"),
        "{text}"
    );
    assert!(
        text.contains("+14.100s host Effects   attempt 2 handler started (pid 20)"),
        "{text}"
    );
    assert!(text.ends_with("at the end the row is done\n"), "{text}");
}

#[test]
fn effect_lines_and_log_lines_are_read() {
    let mut h = History::default();
    h.read_effects(
        "start job=3 attempt=1 pid=7 at=1000000 claim=vm:7:x\n\
         end job=3 attempt=1 pid=7 at=2500000 claim=vm:7:x\n",
    );
    h.read_worker_log(
        "2026-01-01T00:00:03.000001Z  WARN claim lost: the row no longer carries this worker's \
         token and attempt; leaving it alone job_id=3 kind=k attempt=1 claim=vm:7:x\n",
    );
    let copies = h.copies(3);
    assert_eq!(copies.len(), 1);
    assert!(copies[0].ran_to_end && copies[0].claimant.as_deref() == Some("vm:7:x"));
    assert_eq!(copies[0].end.unwrap().micros, 2_500_000);
    let refused = &h.events[2];
    assert_eq!((refused.job, refused.attempt), (3, 1));
    assert_eq!(refused.kind, Kind::FinishRefused);
    assert_eq!(refused.at.micros, 1_767_225_603_000_001);
}

fn row(attempt: u16, what: &str, conn: u32, secs: f64, claim: &str) -> SqlEffectRow {
    SqlEffectRow {
        job: 1,
        attempt,
        what: what.into(),
        conn,
        claim: Some(claim.into()),
        at: (secs * 1e6) as i64,
    }
}

/// An SQL job whose first copy (session 41) is cut off: the next copy records it gone on the
/// server, then runs to its end.
fn sql_rerun(gone_at: f64) -> History {
    let mut h = History::default();
    h.read_sql_effect_rows(&[
        row(1, "start", 41, 0.1, A),
        row(1, "gone", 41, gone_at, A),
        row(2, "start", 57, 14.1, B),
        row(2, "end", 57, 15.0, B),
    ]);
    h.events.push(done(2, 15.1, B));
    h.final_states.insert(1, "done".into());
    h
}

#[test]
fn effect_rows_are_read_as_copies_on_the_database_clock() {
    let h = sql_rerun(14.0);
    let copies = h.copies(1);
    assert_eq!(copies.len(), 2);
    assert_eq!((copies[0].pid, copies[0].ran_to_end), (41, false));
    assert_eq!(copies[0].end.unwrap().micros, 14_000_000);
    assert_eq!((copies[1].pid, copies[1].ran_to_end), (57, true));
    assert_eq!(copies[1].claimant.as_deref(), Some(B));
    assert!(
        h.events
            .iter()
            .filter(|e| e.source == Source::Effects)
            .all(|e| e.at.clock == Clock::Database)
    );
    let summary = check(&h, &Expectations::no_faults().lost(A)).unwrap();
    assert_eq!((summary.copies, summary.rerun), (2, 1));
}

#[test]
fn an_sql_copy_gone_only_after_the_next_started_or_an_overlap_row_is_an_overlap() {
    let late = sql_rerun(14.5);
    assert_eq!(
        rules(&late, &Expectations::no_faults().lost(A)),
        [Rule::Overlap]
    );
    let mut met = sql_rerun(14.0);
    met.read_sql_effect_rows(&[row(2, "overlap", 57, 14.05, B)]);
    assert_eq!(
        rules(&met, &Expectations::no_faults().lost(A)),
        [Rule::Overlap]
    );
}

#[test]
#[should_panic(expected = "unknown effect row")]
fn an_unknown_effect_row_is_an_error() {
    History::default().read_sql_effect_rows(&[row(1, "begin", 1, 0.0, A)]);
}

#[test]
fn every_copy_started_before_a_stop_is_seen_gone_then_and_no_later_one() {
    let mut h = History::default();
    h.read_sql_effect_rows(&[
        row(1, "start", 5, 1.0, A),
        row(1, "start", 6, 2.0, A),
        row(1, "end", 6, 2.5, A),
        row(1, "start", 7, 4.0, A),
    ]);
    let stop = At::host(3_000_000);
    h.saw_every_copy_gone(stop);
    let ends: Vec<(u32, Option<i64>, bool)> = h
        .copies(1)
        .iter()
        .map(|c| (c.pid, c.end.map(|e| e.micros), c.ran_to_end))
        .collect();
    assert_eq!(
        ends,
        [
            (5, Some(3_000_000), false),
            (6, Some(2_500_000), true),
            (7, None, false)
        ]
    );
}

#[test]
fn a_loss_explains_only_the_copies_its_claimant_started_by_then() {
    let h = rerun_after_a_kill();
    let at = |secs: f64| At::host((secs * 1e6) as i64);
    assert!(check(&h, &Expectations::no_faults().lost_until(A, at(0.1))).is_ok());
    // A fault struck after the copy had started: the later of two losses is kept.
    let twice = Expectations::no_faults()
        .lost_until(A, at(0.05))
        .lost_until(A, at(3.0));
    assert!(check(&h, &twice).is_ok());
    // The claimant was lost, but had recovered before this copy started.
    assert_eq!(
        rules(&h, &Expectations::no_faults().lost_until(A, at(0.05))),
        [Rule::UnexplainedRerun]
    );
}

#[test]
fn a_copy_cut_short_whose_attempt_took_a_failure_is_a_retry_not_a_duplicate() {
    let mut h = rerun_after_a_kill();
    // The session under attempt 1 was killed; its worker recorded the error and a retry.
    h.events.retain(|e| e.kind != Kind::Reset);
    h.events.push(Event {
        source: Source::Attempts,
        ..ev(
            1,
            Kind::FinishAccepted {
                outcome: "retry".into(),
            },
            5.5,
            A,
        )
    });
    let summary = check(&h, &Expectations::no_faults()).unwrap();
    assert_eq!((summary.copies, summary.rerun, summary.failed), (2, 0, 1));
    // Released by a reaper instead, it is a duplicate that needs its claimant lost.
    assert_eq!(
        rules(&rerun_after_a_kill(), &Expectations::no_faults()),
        [Rule::UnexplainedRerun]
    );
}

#[test]
fn a_copy_without_an_end_is_gone_when_the_next_copy_takes_the_lock() {
    let mut h = rerun_after_a_kill();
    h.events.retain(|e| !matches!(e.kind, Kind::Gone { .. }));
    assert_eq!(
        rules(&h, &Expectations::no_faults().lost(A)),
        [Rule::Overlap, Rule::LeftRunning]
    );
    h.saw_gone_at_lock_handoffs();
    let gone = h.copies(1)[0].end.expect("seen gone");
    assert_eq!(gone, h.copies(1)[1].start);
    assert!(check(&h, &Expectations::no_faults().lost(A)).is_ok());
}

#[test]
fn a_rerun_of_an_attempt_whose_row_the_test_took_passes_and_no_other() {
    let h = rerun_after_a_kill();
    let summary = check(&h, &Expectations::no_faults().taken(1, 1)).unwrap();
    assert_eq!((summary.copies, summary.rerun), (2, 1));
    assert_eq!(
        rules(&h, &Expectations::no_faults().taken(1, 2)),
        [Rule::UnexplainedRerun]
    );
    assert_eq!(
        rules(&h, &Expectations::no_faults().taken(2, 1)),
        [Rule::UnexplainedRerun]
    );
}

#[test]
fn library_copies_end_or_are_gone_when_dropped() {
    let copies = LibraryCopies::new();
    let mut job = jobq::JobContext::for_test("k", "{}");
    job.claim = A.into();
    drop(copies.start(&job));
    job.attempt = 2;
    job.claim = B.into();
    copies.start(&job).ended();
    let mut h = History::default();
    h.read_library_copies(&copies);
    h.events.push(done(2, 1e9, B));
    h.final_states.insert(1, "done".into());
    let c = h.copies(1);
    assert_eq!(
        c.iter()
            .map(|c| (c.attempt, c.pid, c.ran_to_end, c.end.is_some()))
            .collect::<Vec<_>>(),
        [(1, 1, false, true), (2, 2, true, true)]
    );
    assert_eq!(c[1].claimant.as_deref(), Some(B));
    assert!(c[0].end.unwrap().micros <= c[1].start.micros);
    let summary = check(&h, &Expectations::no_faults().taken(1, 1)).unwrap();
    assert_eq!((summary.copies, summary.rerun), (2, 1));
}

#[test]
fn a_copy_started_from_what_a_request_names_is_recorded_like_a_library_handlers() {
    let copies = LibraryCopies::new();
    drop(copies.start_attempt(7, 1, A));
    copies.start_attempt(7, 2, B).ended();
    let mut h = History::default();
    h.read_library_copies(&copies);
    let c = h.copies(7);
    assert_eq!(
        c.iter()
            .map(|c| (c.attempt, c.pid, c.claimant.as_deref(), c.ran_to_end))
            .collect::<Vec<_>>(),
        [(1, 1, Some(A), false), (2, 2, Some(B), true)]
    );
    assert!(c.iter().all(|c| c.end.is_some()));
}

fn copy_row(attempt: u16, conn: u32, started: f64, ended: f64, claim: &str) -> CopyRow {
    CopyRow {
        job: 1,
        attempt,
        conn,
        claim: Some(claim.into()),
        started: (started * 1e6) as i64,
        ended: (ended * 1e6) as i64,
    }
}

#[test]
fn copy_rows_are_copies_that_ran_to_their_end() {
    let mut h = History::default();
    h.read_copy_rows(&[copy_row(1, 7, 1.0, 1.01, A)]);
    h.events.push(done(1, 1.02, A));
    h.final_states.insert(1, "done".into());
    let c = h.copies(1);
    assert_eq!(c.len(), 1);
    assert!(c[0].ran_to_end && c[0].start.clock == Clock::Database);
    assert_eq!(c[0].end.unwrap().micros - c[0].start.micros, 10_000);
    check(&h, &Expectations::no_faults()).unwrap();

    // A second committed copy: a rerun, explained only by its claimant's loss; at the same time as
    // the first, an overlap whatever the test lost.
    let mut twice = h.clone();
    twice.read_copy_rows(&[copy_row(2, 9, 3.0, 3.01, B)]);
    twice.events.retain(|e| e.source != Source::JobRow);
    twice.events.push(done(2, 3.02, B));
    assert_eq!(
        rules(&twice, &Expectations::no_faults()),
        [Rule::UnexplainedRerun]
    );
    check(&twice, &Expectations::no_faults().lost(A)).unwrap();
    let mut beside = h.clone();
    beside.read_copy_rows(&[copy_row(2, 9, 1.005, 1.015, B)]);
    assert_eq!(
        rules(&beside, &Expectations::no_faults().lost(A).lost(B)),
        [Rule::Overlap]
    );
}
