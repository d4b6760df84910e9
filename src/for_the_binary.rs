//! For the jobq binary; no stability promise. What `bin/jobq` needs from the library that no program
//! using jobq as a library should: names here change or go without notice.

pub use crate::db::check_ca_file;
pub use crate::handler::program::find_program;
pub use crate::supervisor::{SUPERVISOR_PID_ENV, SUPERVISOR_SLOT_ENV};

/// Sends SIGKILL to every command handler's program this process is running: called before a forced
/// exit, so that no command goes on doing a job the reaper is about to hand to another worker.
pub fn kill_all_running() {
    crate::handler::command::kill_all_running();
}
