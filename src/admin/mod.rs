//! What an operator can do, one facade per subject, for the CLI, the dashboard and the library alike:
//! jobs ([`Jobs`]: get, list, retry, cancel, delete, prune, statistics), queues ([`Queues`]: pause,
//! resume, pin to hosts, age priorities), limits ([`JobLimits`]) and the worker counts supervisors
//! keep ([`Scale`]).
//! Each checks what it is given and names what is wrong; the SQL is in `db/`. Named with
//! `by(actor)`, each records the changes it makes in the audit trail (`audit.rs`).
//!
//! The facades are also at the crate root. Here besides them: what they take and give back, such as
//! [`JobAction`], [`BulkOutcome`] and [`CancelOutcome`], a job's [`AttemptRecord`]s and [`Dependencies`], a queue's
//! [`Paused`] state, [`QueuePin`] and [`QueueAging`], a [`Limit`], a [`ScaleSetting`]. The figures of
//! [`Jobs::stats`] and the dashboard are in [`crate::stats`].

mod aging;
pub(crate) mod audit;
mod bulk;
pub(crate) mod jobs;
pub(crate) mod limits;
mod minutes;
pub(crate) mod queues;
pub(crate) mod scale;

pub use crate::db::admin::{CancelOutcome, JobFilter};
pub use crate::db::aging::QueueAging;
pub use crate::db::attempts::AttemptRecord;
pub use crate::db::deps::{Dependencies, Link, LongWaiting};
pub use crate::db::scale::ScaleSetting;
pub use crate::job::{DEFAULT_MAX_ATTEMPTS, Progress};
pub use bulk::BulkOutcome;
pub use jobs::{JobAction, Jobs};
pub use limits::{JobLimits, Limit, LimitScope};
pub use queues::{Paused, PausedQueue, QueuePin, Queues};
pub use scale::Scale;
