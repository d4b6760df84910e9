//! The names jobq stores: queues, job kinds and schedules. Their charset and widths are the schema's
//! (migrations 0001 and 0004: `VARCHAR(64)` queues, `VARCHAR(128)` kinds and schedule names, ASCII with
//! a binary collation), so they are checked here, once, before a statement would fail on them or a
//! worker could never claim what was stored.

use crate::error::{Error, Result};

/// What a name names. Each knows its column's width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Name {
    /// A queue (`job_queue.queue`).
    Queue,
    /// A job kind (`job_queue.kind`): picks the handler.
    Kind,
    /// A schedule (`jobq_schedules.name`).
    Schedule,
}

impl Name {
    /// The longest name the column holds, in characters (all ASCII, so also bytes).
    pub(crate) const fn max_len(self) -> usize {
        match self {
            Name::Queue => 64,
            Name::Kind | Name::Schedule => 128,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Name::Queue => "queue",
            Name::Kind => "kind",
            Name::Schedule => "schedule name",
        }
    }

    /// `Ok` when `name` is non-empty, fits the column, and uses only letters, digits and `_ - . : /`
    /// (no spaces: workers claim exact kinds, and a trailing space would compare equal under the
    /// PAD SPACE collations a column could be given).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming what the name is for and the offending character or length.
    pub(crate) fn check(self, name: &str) -> Result<()> {
        let (what, max) = (self.what(), self.max_len());
        if name.is_empty() {
            return Err(Error::invalid(what, "must not be empty"));
        }
        if name.len() > max {
            return Err(Error::invalid(
                what,
                format!("{name:?} is longer than {max} characters"),
            ));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/')))
        {
            return Err(Error::invalid(
                what,
                format!("{name:?} contains {c:?}; use letters, digits and _ - . : /"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_against_their_column() {
        assert!(Name::Kind.check("email.send").is_ok());
        let e = Name::Queue.check("a b").unwrap_err().to_string();
        assert!(e.contains("' '") && e.starts_with("invalid queue: "), "{e}");
        assert!(Name::Kind.check("").is_err());
        assert!(Name::Queue.check(&"q".repeat(64)).is_ok());
        assert!(Name::Queue.check(&"q".repeat(65)).is_err());
        assert!(Name::Kind.check(&"k".repeat(128)).is_ok());
        assert!(Name::Schedule.check(&"s".repeat(129)).is_err());
        let e = Name::Schedule.check("é").unwrap_err().to_string();
        assert!(e.starts_with("invalid schedule name: "), "{e}");
    }
}
