//! Global concurrency limits: "at most N jobs of this kind (or queue) run at once, on every worker of
//! every host".

use sqlx::MySqlPool;

use crate::db::limits;
pub use crate::db::limits::{Limit, LimitScope};
use crate::error::{Error, Result};
use crate::name::Name;

/// Sets, removes and lists concurrency limits. Workers read them at most a second old when they claim,
/// and claim a limited kind or queue only as far as its limit leaves room, counting the jobs running
/// everywhere. A limit of 0 holds the kind or queue: nothing more of it starts until the limit is raised
/// or removed; what runs finishes.
#[derive(Debug, Clone)]
pub struct ConcurrencyLimits {
    pool: MySqlPool,
}

impl ConcurrencyLimits {
    /// The highest limit: more than any fleet of workers runs at once.
    pub const MAX: u32 = 1_000_000;

    /// Limits stored in `pool`'s database.
    pub fn new(pool: MySqlPool) -> Self {
        Self { pool }
    }

    /// At most `max_running` jobs of `name` (a kind or a queue, as `scope` says) run at once from now
    /// on (within a second). `by` says who asked.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a name the schema cannot hold or a limit above [`Self::MAX`], with
    /// nothing written; a database error.
    pub async fn set(
        &self,
        scope: LimitScope,
        name: &str,
        max_running: u32,
        by: &str,
    ) -> Result<()> {
        check(scope, name)?;
        if max_running > Self::MAX {
            return Err(Error::invalid(
                "limit",
                format!("{max_running} is more than {}", Self::MAX),
            ));
        }
        let by: String = by.chars().take(255).collect();
        limits::set(&self.pool, scope, name, max_running, &by).await
    }

    /// Removes the limit on `name`; false when there was none.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a name the schema cannot hold; a database error.
    pub async fn remove(&self, scope: LimitScope, name: &str) -> Result<bool> {
        check(scope, name)?;
        limits::remove(&self.pool, scope, name).await
    }

    /// Every limit, kinds first.
    ///
    /// # Errors
    /// A database error.
    pub async fn list(&self) -> Result<Vec<Limit>> {
        limits::all(&self.pool).await
    }
}

fn check(scope: LimitScope, name: &str) -> Result<()> {
    match scope {
        LimitScope::Kind => Name::Kind.check(name),
        LimitScope::Queue => Name::Queue.check(name),
    }
}
