//! What an HTTP handler makes of the application's answer: a pure decision over the status, two
//! headers and the start of the body, one test per rule.
//!
//! | answer | outcome |
//! |---|---|
//! | 2xx | done; a JSON body `{"finished": true}`: the application finished the job itself; `"output"` in it: the output the job leaves |
//! | 429 or 503 with `Retry-After` (seconds or an HTTP date) | snoozed for that long (no attempt used) |
//! | 429 without `Retry-After` | snoozed for [`DEFAULT_429_SNOOZE`] |
//! | 3xx | failed (redirects are not followed), naming the `Location` |
//! | 408, 5xx (503 without `Retry-After`) | failed: retried with backoff |
//! | any other 4xx | dead at once, unless listed in `retry_statuses` (then failed and retried) |

use std::time::Duration;

use hyper::StatusCode;

/// How long a 429 without `Retry-After` snoozes the job: the application said "too many", not when to
/// come back, and half a minute lets a per-minute rate limit refill without hammering it meanwhile.
pub const DEFAULT_429_SNOOZE: Duration = Duration::from_secs(30);

/// The shortest snooze a `Retry-After` gives: a date already past, or `0`, still waits a second, so
/// that a job is not claimed again in a tight loop.
const MIN_SNOOZE: Duration = Duration::from_secs(1);

/// How many bytes of the body an error message quotes.
pub(crate) const BODY_EXCERPT: usize = 200;

/// The parts of an answer the decision reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer<'a> {
    pub(crate) status: StatusCode,
    /// The reason phrase the server sent, if any (else the status's standard one is used).
    pub(crate) reason: Option<&'a str>,
    pub(crate) retry_after: Option<&'a str>,
    pub(crate) location: Option<&'a str>,
    /// The start of the body (at least [`BODY_EXCERPT`] bytes when the body was longer).
    pub(crate) body: &'a [u8],
}

/// What the handler returns for an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// 2xx: the worker finishes the job.
    Done,
    /// 2xx with `{"finished": true}`: the application finished the job; the worker checks the row.
    FinishedByApplication,
    /// Run again after this long, without using an attempt.
    Snooze(Duration),
    /// A failed attempt: retried with backoff.
    Retry(String),
    /// Dead at once.
    Fatal(String),
}

/// Decides what `answer` means, `now` being the time (for a `Retry-After` date) and `retry_statuses`
/// the 4xx the handler retries.
pub(crate) fn judge(
    answer: &Answer<'_>,
    retry_statuses: &[u16],
    now: chrono::DateTime<chrono::Utc>,
) -> Verdict {
    let status = answer.status;
    let code = status.as_u16();
    if status.is_success() {
        return if says_finished(answer.body) {
            Verdict::FinishedByApplication
        } else {
            Verdict::Done
        };
    }
    let retry_after = answer.retry_after.and_then(|v| retry_after(v, now));
    match code {
        429 | 503 if retry_after.is_some() => {
            Verdict::Snooze(retry_after.unwrap_or(DEFAULT_429_SNOOZE))
        }
        429 => Verdict::Snooze(DEFAULT_429_SNOOZE),
        300..=399 => Verdict::Retry(format!(
            "{}; redirects are not followed (Location: {}){}",
            describe(answer),
            answer.location.unwrap_or("none"),
            body_part(answer.body)
        )),
        408 | 500..=599 => {
            Verdict::Retry(format!("{}{}", describe(answer), body_part(answer.body)))
        }
        400..=499 if retry_statuses.contains(&code) => {
            Verdict::Retry(format!("{}{}", describe(answer), body_part(answer.body)))
        }
        400..=499 => Verdict::Fatal(format!(
            "{} (a 4xx is not retried unless listed in retry_statuses){}",
            describe(answer),
            body_part(answer.body)
        )),
        _ => Verdict::Retry(format!("{}{}", describe(answer), body_part(answer.body))),
    }
}

/// `HTTP 500 Internal Server Error`, with the server's own reason phrase when it sent one.
fn describe(answer: &Answer<'_>) -> String {
    let reason = answer
        .reason
        .filter(|r| !r.trim().is_empty())
        .or(answer.status.canonical_reason())
        .unwrap_or("");
    format!("HTTP {} {reason}", answer.status.as_u16())
        .trim_end()
        .to_string()
}

/// `: ` and the body's excerpt, or nothing for an empty body.
fn body_part(body: &[u8]) -> String {
    let excerpt = excerpt(body);
    if excerpt.is_empty() {
        String::new()
    } else {
        format!(": {excerpt}")
    }
}

/// The first [`BODY_EXCERPT`] bytes of `body` as text (invalid UTF-8 replaced, a character cut at the
/// end dropped), trimmed.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let mut head = &body[..body.len().min(BODY_EXCERPT)];
    // A multi-byte character cut by the limit is dropped rather than shown as a replacement.
    if let Err(e) = std::str::from_utf8(head)
        && e.error_len().is_none()
    {
        head = &head[..e.valid_up_to()];
    }
    let text = String::from_utf8_lossy(head);
    let text = text.trim();
    if body.len() > BODY_EXCERPT {
        format!("{text}…")
    } else {
        text.to_string()
    }
}

/// The `output` of a 2xx body that is a JSON object holding one (`{"output": {...}}`): what the job
/// leaves on its row.
pub(crate) fn output(body: &[u8]) -> Option<serde_json::Value> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(mut m)) => m.remove("output"),
        _ => None,
    }
}

/// True when `body` is a JSON object whose `finished` is `true`.
fn says_finished(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Finished {
        finished: Option<bool>,
    }
    serde_json::from_slice::<Finished>(body).is_ok_and(|f| f.finished == Some(true))
}

/// A `Retry-After` value as a delay from `now`: delta-seconds, or an HTTP date (RFC 9110 §10.2.3).
/// None when it is neither.
pub(crate) fn retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    let delay = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        // IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") is RFC 2822's form with the zone GMT.
        let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
        (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO)
    };
    Some(delay.max(MIN_SNOOZE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> chrono::DateTime<chrono::Utc> {
        "2026-01-01T12:00:00Z".parse().unwrap()
    }

    fn answer(code: u16) -> Answer<'static> {
        Answer {
            status: StatusCode::from_u16(code).unwrap(),
            reason: None,
            retry_after: None,
            location: None,
            body: b"",
        }
    }

    fn judge_it(a: Answer<'_>) -> Verdict {
        judge(&a, &[409], now())
    }

    #[test]
    fn an_output_is_read_from_a_json_object_body_only() {
        assert_eq!(
            output(br#"{"output": {"rows": 3}, "finished": true}"#),
            Some(serde_json::json!({"rows": 3}))
        );
        assert_eq!(
            output(br#"{"output": null}"#),
            Some(serde_json::Value::Null)
        );
        assert_eq!(output(br#"{"finished": true}"#), None);
        assert_eq!(output(br#"[{"output": 1}]"#), None);
        assert_eq!(output(b"<html>output</html>"), None);
    }

    #[test]
    fn two_hundreds_are_done_and_finished_only_when_the_body_says_so() {
        assert_eq!(judge_it(answer(200)), Verdict::Done);
        assert_eq!(judge_it(answer(204)), Verdict::Done);
        let finished = |body: &'static [u8]| {
            judge_it(Answer {
                body,
                ..answer(200)
            })
        };
        assert_eq!(
            finished(br#"{"finished": true}"#),
            Verdict::FinishedByApplication
        );
        assert_eq!(finished(br#"{"finished": false}"#), Verdict::Done);
        assert_eq!(finished(br#"{"finished": "yes"}"#), Verdict::Done);
        assert_eq!(finished(br#"{"output": 1}"#), Verdict::Done);
        assert_eq!(finished(b"finished"), Verdict::Done);
    }

    #[test]
    fn retry_after_snoozes_429_and_503() {
        for code in [429, 503] {
            let a = Answer {
                retry_after: Some("120"),
                ..answer(code)
            };
            assert_eq!(judge_it(a), Verdict::Snooze(Duration::from_secs(120)));
            let a = Answer {
                retry_after: Some("Thu, 01 Jan 2026 12:05:00 GMT"),
                ..answer(code)
            };
            assert_eq!(judge_it(a), Verdict::Snooze(Duration::from_secs(300)));
        }
        assert_eq!(
            judge_it(answer(429)),
            Verdict::Snooze(DEFAULT_429_SNOOZE),
            "429 without Retry-After"
        );
        assert!(
            matches!(judge_it(answer(503)), Verdict::Retry(m) if m == "HTTP 503 Service Unavailable")
        );
        // Retry-After on another status changes nothing.
        let a = Answer {
            retry_after: Some("120"),
            ..answer(500)
        };
        assert!(matches!(judge_it(a), Verdict::Retry(_)));
    }

    #[test]
    fn retry_after_values() {
        assert_eq!(retry_after("0", now()), Some(MIN_SNOOZE));
        assert_eq!(retry_after(" 7 ", now()), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now()),
            Some(MIN_SNOOZE),
            "a date in the past"
        );
        assert_eq!(retry_after("soon", now()), None);
        assert_eq!(retry_after("-5", now()), None);
        // An unreadable Retry-After is no Retry-After: a 503 then fails the attempt.
        let a = Answer {
            retry_after: Some("soon"),
            ..answer(503)
        };
        assert!(matches!(judge_it(a), Verdict::Retry(_)));
    }

    #[test]
    fn failures_name_the_status_and_the_start_of_the_body() {
        let a = Answer {
            body: b"  database is down\n",
            ..answer(500)
        };
        assert_eq!(
            judge_it(a),
            Verdict::Retry("HTTP 500 Internal Server Error: database is down".into())
        );
        let a = Answer {
            reason: Some("Busy Now"),
            ..answer(502)
        };
        assert_eq!(judge_it(a), Verdict::Retry("HTTP 502 Busy Now".into()));
        assert!(matches!(judge_it(answer(408)), Verdict::Retry(_)));
        assert!(matches!(judge_it(answer(599)), Verdict::Retry(_)));
    }

    #[test]
    fn other_4xx_are_fatal_unless_listed() {
        let a = Answer {
            body: b"no such image",
            ..answer(404)
        };
        assert!(
            matches!(judge_it(a), Verdict::Fatal(m) if m.starts_with("HTTP 404 Not Found") && m.ends_with(": no such image"))
        );
        assert!(matches!(judge_it(answer(409)), Verdict::Retry(m) if m == "HTTP 409 Conflict"));
        assert!(matches!(judge_it(answer(400)), Verdict::Fatal(_)));
    }

    #[test]
    fn redirects_fail_naming_the_location() {
        let a = Answer {
            location: Some("https://elsewhere/jobs"),
            ..answer(302)
        };
        assert_eq!(
            judge_it(a),
            Verdict::Retry(
                "HTTP 302 Found; redirects are not followed (Location: https://elsewhere/jobs)"
                    .into()
            )
        );
    }

    #[test]
    fn excerpts_are_bounded_text() {
        assert_eq!(excerpt(b""), "");
        let long = "é".repeat(150); // 300 bytes; byte 200 falls between characters
        let e = excerpt(long.as_bytes());
        assert_eq!(e, format!("{}…", "é".repeat(100)));
        let long = format!("a{}", "é".repeat(150)); // byte 200 cuts a character in two
        let e = excerpt(long.as_bytes());
        assert_eq!(e, format!("a{}…", "é".repeat(99)));
        assert_eq!(excerpt(b"\xff ok"), "\u{fffd} ok");
    }
}
