//! The `Jobq-Signature` header of HTTP handlers: `t=UNIXTIME,v1=HEX`, where HEX is the lowercase hex of
//! HMAC-SHA256(secret, "UNIXTIME." + body), the scheme Stripe's webhooks use. The application recomputes
//! the HMAC over the exact bytes it received, compares in constant time, and refuses a `t` too far from
//! its own clock, so that a forged call fails the HMAC and a replayed one fails the time check
//! (`clients/<language>/verify_signature.*` do it in four languages).
//!
//! The time is in the signed text, so it cannot be changed without breaking the HMAC; `v1` names the
//! scheme, so that a later one can be sent beside it while applications move over.

use ring::hmac;

/// The header's name.
pub const HEADER: &str = "Jobq-Signature";

/// How far from its own clock an application should accept `t`, as the docs and the example verifiers
/// use it: five minutes, Stripe's default tolerance.
pub const DEFAULT_TOLERANCE_SECS: i64 = 300;

/// The header value for `body` sent at `unix_time` and signed with `secret`.
pub fn signature(secret: &[u8], unix_time: i64, body: &[u8]) -> String {
    format!("t={unix_time},v1={}", hmac_hex(secret, unix_time, body))
}

/// Whether `header` (a `Jobq-Signature` value) signs `body` with `secret`, with a `t` no further than
/// `tolerance_secs` from `now`: what an application written in Rust would run. Compared in constant
/// time (ring's `verify`).
pub fn verify(secret: &[u8], header: &str, body: &[u8], now: i64, tolerance_secs: i64) -> bool {
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => sigs.push(v),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    if (now - t).abs() > tolerance_secs {
        return false;
    }
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let signed = signed_text(t, body);
    sigs.iter()
        .any(|hex| decode_hex(hex).is_some_and(|tag| hmac::verify(&key, &signed, &tag).is_ok()))
}

/// `UNIXTIME.` followed by the body: the text the HMAC covers.
fn signed_text(unix_time: i64, body: &[u8]) -> Vec<u8> {
    let mut text = format!("{unix_time}.").into_bytes();
    text.extend_from_slice(body);
    text
}

fn hmac_hex(secret: &[u8], unix_time: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hex(hmac::sign(&key, &signed_text(unix_time, body)).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hmac_is_rfc_4231s() {
        // RFC 4231, test case 2 (key "Jefe"), through the same ring call the signer makes.
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"Jefe");
        assert_eq!(
            hex(hmac::sign(&key, b"what do ya want for nothing?").as_ref()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn the_header_signs_time_dot_body() {
        // Computed independently: Python's hmac.new(b"whsec_test", b'1700000000.{"id":1}', sha256).
        assert_eq!(
            signature(b"whsec_test", 1_700_000_000, br#"{"id":1}"#),
            "t=1700000000,v1=2f441ba4b3b2d50d28a9ab9d9fd8880376ecd1eb5d0435401553f5d8d0a5dcf8"
        );
    }

    #[test]
    fn verify_refuses_forgeries_and_replays() {
        let (secret, t, body) = (b"k".as_slice(), 1_700_000_000, br#"{"id":1}"#.as_slice());
        let h = signature(secret, t, body);
        assert!(verify(secret, &h, body, t + 10, DEFAULT_TOLERANCE_SECS));
        assert!(!verify(b"other", &h, body, t, DEFAULT_TOLERANCE_SECS));
        assert!(!verify(
            secret,
            &h,
            br#"{"id":2}"#,
            t,
            DEFAULT_TOLERANCE_SECS
        ));
        assert!(!verify(secret, &h, body, t + 301, DEFAULT_TOLERANCE_SECS));
        // The time is signed: moving it forward breaks the HMAC.
        let moved = h.replace("t=1700000000", "t=1700000400");
        assert!(!verify(
            secret,
            &moved,
            body,
            t + 400,
            DEFAULT_TOLERANCE_SECS
        ));
        assert!(!verify(secret, "v1=00", body, t, DEFAULT_TOLERANCE_SECS));
        assert!(!verify(
            secret,
            "t=1700000000,v1=zz",
            body,
            t,
            DEFAULT_TOLERANCE_SECS
        ));
    }
}
