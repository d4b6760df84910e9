//! Who a claimant is, when it must stop itself, and when others may call it gone: pure rules and the
//! watchdog thread that applies one of them, no SQL.
//!
//! - [`token`]: the claim token, which names the claimant (host, pid, boot, MySQL session).
//! - [`fence`]: self-fencing, a worker that cannot confirm it is alive stops its jobs before any
//!   reaper may hand them on.
//! - [`liveness`]: is a claimant alive? A pure decision over what a reaper can see of it (its process,
//!   its session, its heartbeat), with the margin that keeps it behind the fence.

pub(crate) mod fence;
pub(crate) mod liveness;
pub(crate) mod token;
