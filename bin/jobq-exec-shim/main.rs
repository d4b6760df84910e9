//! `jobq-exec-shim PARENT_PID PROGRAM [ARGS…]`: what a worker starts each command handler through, so
//! the command dies with the worker (see `shim.rs`). A binary of its own because it runs once per
//! command job: a twentieth of `jobq`'s code, so starting it costs about what starting the command does.

// A binary exports nothing.
#![allow(unreachable_pub)]

mod shim;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(shim::run(args));
}
