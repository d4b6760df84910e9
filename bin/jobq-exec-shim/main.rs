//! `jobq-exec-shim PARENT_PID PROGRAM [ARGS…]`: what a worker starts each command handler through, so
//! the command dies with the worker (see `jobq::handler::shim`). A binary of its own because it runs
//! once per command job: it is a fraction of `jobq`'s size, and starting it costs about what starting
//! the command does.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(jobq::handler::shim::run(args));
}
