//! jobq's tables, views and procedures in the database: [`migrate`] creates and upgrades them
//! ([`MigrateReport`]) up to [`latest_version`], [`ensure_migrated`] checks that they are current, and
//! [`uninstall`] removes them ([`Uninstalled`]). `migrate`, `ensure_migrated` and `uninstall` are also
//! at the crate root.

pub use crate::db::migrate::{MigrateReport, ensure_migrated, latest_version, migrate};
pub use crate::db::uninstall::{Uninstalled, uninstall};
