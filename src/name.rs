//! The names jobq stores: queues, job kinds and schedules. Their charset and widths are the schema's
//! (migrations 0001 and 0004: `VARCHAR(64)` queues, `VARCHAR(128)` kinds and schedule names, ASCII with
//! a binary collation), so they are checked here, once, before a statement would fail on them or a
//! worker could never claim what was stored. A job's unique key (0012, `VARBINARY(255)`) is checked here
//! for the same reason.

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

/// The longest unique key `job_queue.unique_key` holds, in bytes (`VARBINARY(255)`, migration 0012).
pub(crate) const UNIQUE_KEY_MAX_BYTES: usize = 255;

/// `Ok` when `key` can be a job's unique key: not empty, and at most [`UNIQUE_KEY_MAX_BYTES`] bytes of
/// UTF-8. Any text is allowed otherwise: the column is binary, compared byte for byte without padding,
/// so keys built from e-mail addresses or paths need no escaping.
///
/// # Errors
/// [`Error::Invalid`] for `unique key`, saying the length found and allowed.
pub(crate) fn check_unique_key(key: &str) -> Result<()> {
    check_key("unique key", key)
}

/// `Ok` when `key` fits a key column of `job_queue` (`unique_key`, `debounce_key`, `order_key`: all
/// `VARBINARY(255)`); `what` names the key in the error (`unique key`, `order key`).
pub(crate) fn check_key(what: &'static str, key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid(what, "must not be empty"));
    }
    if key.len() > UNIQUE_KEY_MAX_BYTES {
        return Err(Error::invalid(
            what,
            format!(
                "is {} bytes long; the {} column holds at most {UNIQUE_KEY_MAX_BYTES}",
                key.len(),
                what.replace(' ', "_")
            ),
        ));
    }
    Ok(())
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

    #[test]
    fn unique_keys_are_checked_against_their_column_in_bytes() {
        assert!(check_unique_key("user:42 ada@example.com").is_ok());
        assert!(check_unique_key(&"k".repeat(UNIQUE_KEY_MAX_BYTES)).is_ok());
        let e = check_unique_key(&"k".repeat(256)).unwrap_err().to_string();
        assert!(e.starts_with("invalid unique key: is 256 bytes"), "{e}");
        // 128 two-byte characters: 256 bytes, over the column though only 128 characters.
        assert!(check_unique_key(&"é".repeat(128)).is_err());
        assert!(check_unique_key("").is_err());
    }
}
