//! W3C trace context: the `traceparent` a job carries from its enqueue to its handlers
//! (<https://www.w3.org/TR/trace-context/#traceparent-header>), as a checked value. Pure: no I/O.
//!
//! Only version `00` is taken. The spec lets a reader accept a later version by its first four fields,
//! but a job's traceparent is stored, not forwarded at once: a value jobq cannot vouch for would be
//! handed to every attempt's handlers and exporters, possibly long after. The column itself takes
//! anything (schema 25 says why it has no CHECK), so a row that plain SQL wrote with a malformed value
//! runs without a parent, and the worker says so once per attempt (see `worker::trace`).

use std::fmt;
use std::str::FromStr;

/// The length of a version-00 traceparent: `00-` + 32 + `-` + 16 + `-` + 2.
pub(crate) const LEN: usize = 55;

/// A valid version-00 `traceparent`: the trace it belongs to, the span that is its parent, and the
/// trace flags (bit 0: sampled). Displays as the header's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Traceparent {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

/// Why a text is not a valid `traceparent`. Each message says what the field should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceparentError {
    /// Not 55 characters.
    #[error(
        "{0} characters; a traceparent is 55: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"
    )]
    Length(usize),
    /// The four fields are not separated by `-` where they should be.
    #[error("not of the form 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>")]
    Shape,
    /// A version other than `00`.
    #[error("version {0:?}; only version 00 is taken")]
    Version(String),
    /// A field holds something other than lowercase hex digits.
    #[error("the {0} is not lowercase hex")]
    NotHex(&'static str),
    /// The trace id or span id is all zeros, which the spec calls invalid.
    #[error("the {0} is all zeros, which W3C trace context calls invalid")]
    Zero(&'static str),
}

impl Traceparent {
    /// A traceparent of these ids and flags.
    ///
    /// # Errors
    /// [`TraceparentError::Zero`] when an id is all zeros.
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> Result<Self, TraceparentError> {
        if trace_id == [0; 16] {
            return Err(TraceparentError::Zero("trace id"));
        }
        if span_id == [0; 8] {
            return Err(TraceparentError::Zero("span id"));
        }
        Ok(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The trace id's 16 bytes.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The parent span id's 8 bytes.
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// The trace flags (bit 0: the caller sampled the trace).
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The parent span id as 16 lowercase hex digits.
    pub fn span_id_hex(&self) -> String {
        hex(&self.span_id)
    }
}

impl FromStr for Traceparent {
    type Err = TraceparentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != LEN {
            return Err(TraceparentError::Length(s.chars().count()));
        }
        let b = s.as_bytes();
        if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return Err(TraceparentError::Shape);
        }
        // Length and dashes checked on bytes; a multi-byte character elsewhere fails the hex check.
        let field = |from: usize, to: usize| s.get(from..to).ok_or(TraceparentError::Shape);
        let version = field(0, 2)?;
        if version != "00" {
            return Err(TraceparentError::Version(version.to_string()));
        }
        let mut trace_id = [0; 16];
        let mut span_id = [0; 8];
        let mut flags = [0; 1];
        unhex(field(3, 35)?, &mut trace_id).ok_or(TraceparentError::NotHex("trace id"))?;
        unhex(field(36, 52)?, &mut span_id).ok_or(TraceparentError::NotHex("span id"))?;
        unhex(field(53, 55)?, &mut flags).ok_or(TraceparentError::NotHex("flags field"))?;
        Self::new(trace_id, span_id, flags[0])
    }
}

impl fmt::Display for Traceparent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            self.trace_id_hex(),
            self.span_id_hex(),
            self.flags
        )
    }
}

impl serde::Serialize for Traceparent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lowercase hex only: the spec's ABNF is `HEXDIGLC`, and the column compares byte for byte.
fn unhex(text: &str, out: &mut [u8]) -> Option<()> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let t = text.as_bytes();
    if t.len() != out.len() * 2 {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = (digit(t[2 * i])? << 4) | digit(t[2 * i + 1])?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_valid_value_round_trips() {
        let t: Traceparent = GOOD.parse().unwrap();
        assert_eq!(t.to_string(), GOOD);
        assert_eq!(t.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(t.span_id_hex(), "b7ad6b7169203331");
        assert_eq!(t.flags(), 1);
    }

    #[test]
    fn each_rule_has_its_error() {
        let bad = |s: &str| s.parse::<Traceparent>().unwrap_err();
        assert_eq!(bad("00-abc"), TraceparentError::Length(6));
        assert_eq!(bad(&GOOD.replace("-b7", "_b7")), TraceparentError::Shape);
        assert_eq!(
            bad(&format!("01{}", &GOOD[2..])),
            TraceparentError::Version("01".into())
        );
        assert_eq!(
            bad(&GOOD.to_uppercase()),
            TraceparentError::NotHex("trace id")
        );
        assert_eq!(
            bad("00-00000000000000000000000000000000-b7ad6b7169203331-01"),
            TraceparentError::Zero("trace id")
        );
        assert_eq!(
            bad("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"),
            TraceparentError::Zero("span id")
        );
        assert_eq!(
            bad(&GOOD.replace("-01", "-0x")),
            TraceparentError::NotHex("flags field")
        );
        // Multi-byte characters: the right byte length, but not hex (and no panic on a char boundary).
        let wide = format!("00-{}é-b7ad6b7169203331-01", "a".repeat(30));
        assert_eq!(wide.len(), LEN);
        assert_eq!(bad(&wide), TraceparentError::NotHex("trace id"));
    }
}
