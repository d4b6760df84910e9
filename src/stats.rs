//! The figures jobq reads about its queues, as [`Jobs::stats`](crate::Jobs::stats) and the dashboard
//! show them: [`Stats`] with its rows ([`QueueCount`], [`QueueLag`], [`KindLag`], [`ProcessRow`],
//! [`RunningCount`], [`Unserved`], [`HeldGroup`] and its [`Hold`]), the cheap figures of the
//! dashboard ([`StateCount`], [`QueueSummary`], [`MinuteCount`], [`QueueStateCount`]), and
//! [`human_age`], which spells a wait the way `jobq` and the dashboard do. [`registrations`] says which
//! services of this process are registered and live ([`RegistrationHealth`]), for a readiness probe.

pub use crate::db::admin::{
    HeldGroup, Hold, KindLag, MinuteCount, ProcessRow, QueueCount, QueueLag, QueueSummary,
    RunningCount, StateCount, Stats, Unserved,
};
pub use crate::db::gauges::QueueStateCount;
pub use crate::duration::human_age;
pub use crate::service::{RegistrationHealth, registrations};
