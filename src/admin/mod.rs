//! What an operator can do, one facade per subject, for the CLI, the dashboard and the library alike:
//! jobs ([`jobs::Jobs`]: get, list, retry, cancel, delete, prune, statistics), queues
//! ([`queues::Queues`]: pause, resume, pin to hosts), limits ([`limits::JobLimits`]) and the worker
//! counts supervisors keep ([`scale::Scale`]). Each checks what it is given and names what is wrong;
//! the SQL is in `db/`. Named with `by(actor)`, each records the changes it makes in the audit
//! trail (`audit.rs`).

pub(crate) mod audit;
pub(crate) mod jobs;
pub(crate) mod limits;
mod minutes;
pub(crate) mod queues;
pub(crate) mod scale;
