//! How records serialize (`jobq … --json`, and programs that serialize them): durations as seconds,
//! and a payload, stored as JSON text, as the JSON it holds rather than as a string of it.

use std::time::Duration;

use serde::Serializer;
use serde::ser::Serialize;

/// A JSON text as the value it holds; text that does not parse (a row written by hand) as a string.
pub(crate) fn embedded<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => v.serialize(s),
        Err(_) => s.serialize_str(text),
    }
}

/// A duration as seconds (fractional).
pub(crate) fn secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// An optional duration as seconds, or null.
pub(crate) fn opt_secs<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize)]
    struct R {
        #[serde(serialize_with = "super::embedded")]
        payload: String,
        #[serde(serialize_with = "super::opt_secs")]
        timeout: Option<std::time::Duration>,
    }

    #[test]
    fn payloads_embed_and_durations_are_seconds() {
        let r = R {
            payload: r#"{"id":7}"#.into(),
            timeout: Some(std::time::Duration::from_millis(1500)),
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"payload":{"id":7},"timeout":1.5}"#
        );
        let r = R {
            payload: "not json".into(),
            timeout: None,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"payload":"not json","timeout":null}"#
        );
    }
}
