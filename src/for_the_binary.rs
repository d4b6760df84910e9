//! For the jobq binary; no stability promise. What `bin/jobq` and `bin/jobq-exec-shim` need from the
//! library that no program using jobq as a library should: names here change or go without notice.

pub use crate::db::check_ca_file;
