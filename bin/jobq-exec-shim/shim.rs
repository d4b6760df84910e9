//! The exec shim (`jobq-exec-shim PARENT_PID PROGRAM [ARGS…]`): makes a command handler die with the worker that started it, whatever kills the
//! worker (SIGKILL, the OOM killer, a panic that aborts).
//!
//! A worker runs each command in a process group of its own and stops the group when the job ends, but a
//! SIGKILLed worker runs no code: its commands would be re-parented to init and go on doing the job
//! while a reaper hands the job to another worker. Linux can signal a process when its parent dies
//! (`PR_SET_PDEATHSIG`), but that must be asked for by the child itself, between fork and exec, which in
//! Rust needs `unsafe` `pre_exec` (jobq forbids `unsafe`). So the worker starts this small program
//! instead, which is safe code from `main` on (`jobq` itself can play it too: `jobq __jobq-exec-shim`,
//! see its `main`):
//!
//! 1. The shim blocks the signals it cares about (they queue for `sigwait` instead of killing it), asks
//!    for SIGUSR2 when its parent dies, and checks that the parent is still the worker that started it
//!    (it may have died before the request was made).
//! 2. It starts the program as its own child, in the shim's process group (the worker made the shim a
//!    group leader). The standard library resets the child's signal mask, so the program sees signals
//!    as usual.
//! 3. When the worker dies, the shim SIGKILLs its whole process group: the program and everything the
//!    program started that stayed in the group. A thread also polls the parent pid every 100 ms, in
//!    case the death signal was lost.
//! 4. Otherwise it waits for the program and ends the same way: the same exit code, or the same signal
//!    (unblocked, then raised on itself). SIGTERM and the like sent to the group reach the program
//!    directly; the shim, having them blocked, outlives the program to report its status.
//!
//! The death signal fires when the parent *thread* that started the shim ends, not only the process;
//! the shim therefore acts only when its parent pid has actually changed.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal, killpg, raise};
use nix::unistd::{Pid, getpgrp, getppid};

/// The first argument that puts the binary in shim mode.
pub const SHIM_ARG: &str = "__jobq-exec-shim";

/// Exit status when the worker was gone before the program could start.
const PARENT_GONE: i32 = 125;
/// Exit status when the program cannot be started (as a shell would say).
const CANNOT_START: i32 = 127;

fn handled() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR2,
    ] {
        set.add(s);
    }
    set
}

/// The shim itself: `rest` is `PARENT_PID PROGRAM ARGS…`. Returns the exit status to use (the
/// program's), unless the process ends by the program's signal first.
pub fn run(rest: Vec<OsString>) -> i32 {
    let mut rest = rest.into_iter();
    let parent: Option<i32> = rest
        .next()
        .and_then(|p| p.to_str().and_then(|p| p.parse().ok()));
    let (Some(parent), Some(program)) = (parent, rest.next()) else {
        eprintln!("jobq exec shim: usage: {SHIM_ARG} PARENT_PID PROGRAM [ARGS…]");
        return 2;
    };
    let set = handled();
    // Before any thread starts, so every thread inherits the mask.
    if let Err(e) = set.thread_block() {
        eprintln!("jobq exec shim: cannot block signals: {e}");
        return CANNOT_START;
    }
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGUSR2) {
        eprintln!("jobq exec shim: cannot ask for a parent-death signal: {e}");
        return CANNOT_START;
    }
    if getppid().as_raw() != parent {
        return PARENT_GONE;
    }
    let mut child = match std::process::Command::new(&program).args(rest).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot start {}: {e}", program.to_string_lossy());
            return CANNOT_START;
        }
    };
    let kill_group = move || {
        let _ = killpg(getpgrp(), Signal::SIGKILL);
    };
    std::thread::spawn(move || {
        loop {
            // Other signals were meant for the program, which got its own copy from the group.
            if let Ok(Signal::SIGUSR2) = set.wait()
                && getppid().as_raw() != parent
            {
                kill_group();
            }
        }
    });
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(100));
            if getppid().as_raw() != parent {
                kill_group();
            }
        }
    });
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("jobq exec shim: waiting for the program failed: {e}");
            return CANNOT_START;
        }
    };
    if let Some(code) = status.code() {
        return code;
    }
    if let Some(sig) = status.signal().and_then(|s| Signal::try_from(s).ok()) {
        let mut one = SigSet::empty();
        one.add(sig);
        let _ = one.thread_unblock();
        let _ = raise(sig);
        // Still here: a signal whose default is not to terminate, or one another thread has blocked.
        if sig == Signal::SIGKILL {
            let _ = nix::sys::signal::kill(Pid::this(), Signal::SIGKILL);
        }
        return 128 + sig as i32;
    }
    CANNOT_START
}
