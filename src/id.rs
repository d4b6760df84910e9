//! Row ids as types of their own. A leaf: the error type and the job rows both name them.

use std::fmt;
use std::str::FromStr;

/// A job's id: its row's `id`, as [`crate::enqueue`] returns it and as `jobq jobs` prints it.
///
/// A type of its own so that an id cannot be passed where a count, an attempt or a schedule's id is
/// meant. It converts from and to `u64`, binds and decodes as the column's `BIGINT UNSIGNED`, and
/// prints as the bare number.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    sqlx::Type,
    serde::Serialize,
    serde::Deserialize,
)]
#[sqlx(transparent)]
#[serde(transparent)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<u64> for JobId {
    fn from(id: u64) -> Self {
        JobId(id)
    }
}

impl From<JobId> for u64 {
    fn from(id: JobId) -> Self {
        id.0
    }
}

impl FromStr for JobId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim().parse().map(JobId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_id_prints_parses_and_serializes_as_its_number() {
        let id = JobId(42);
        assert_eq!(id.to_string(), "42");
        assert_eq!(" 42".parse::<JobId>().unwrap(), id);
        assert!("forty-two".parse::<JobId>().is_err());
        assert_eq!(serde_json::to_string(&id).unwrap(), "42");
        assert_eq!(serde_json::from_str::<JobId>("42").unwrap(), id);
        assert_eq!(u64::from(id), 42);
    }
}
