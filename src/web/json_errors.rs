//! Every error under `/api` is JSON: `{"error": "..."}` with its status.
//!
//! The handlers answer their own errors in JSON, but much is answered before or around them in plain
//! text or not at all: axum's rejections (a query or path that does not parse, a body that is not
//! JSON), the guard's 401, 403, 408, 413, 415 and 429, the host check's 421, the 404 of a path no route
//! serves and the empty 405 of a wrong method. One layer over the whole router turns each into JSON,
//! keeping its status, its headers (`WWW-Authenticate`, `Retry-After`; axum adds a 405's `Allow` after) and its message, so
//! a script never has to parse HTML or guess.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

/// Most bytes of a plain-text error read to become the message; errors are one line.
const MAX_MESSAGE: usize = 64 << 10;

/// The middleware; its state is the path the API is served under (`{prefix}/api`).
pub(super) async fn json_errors(State(api): State<Arc<str>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let under_api = path
        .strip_prefix(&*api)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    if !under_api {
        return next.run(req).await;
    }
    let method = req.method().clone();
    let path = path.to_string();
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&resp) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = if is_plain_text(&parts.headers) {
        axum::body::to_bytes(body, MAX_MESSAGE)
            .await
            .ok()
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .filter(|t| !t.is_empty())
    } else {
        // An HTML page (the pages' 404) or nothing at all (axum's 405): say it in words.
        None
    };
    let message = text.unwrap_or_else(|| describe(status, &method, &path));
    let body = serde_json::json!({ "error": message }).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body))
}

/// The message of an error that came without one. (A 405's `Allow` header, which names the methods
/// that are, is added by axum after every layer, so it cannot be quoted here; the response carries it.)
fn describe(status: StatusCode, method: &Method, path: &str) -> String {
    match status {
        StatusCode::NOT_FOUND => format!("no such API endpoint: {method} {path}"),
        StatusCode::METHOD_NOT_ALLOWED => format!("{method} is not allowed on {path}"),
        s => s.canonical_reason().unwrap_or("error").to_ascii_lowercase(),
    }
}

fn is_json(resp: &Response) -> bool {
    content_type(resp.headers()).is_some_and(is_json_type)
}

fn is_plain_text(headers: &axum::http::HeaderMap) -> bool {
    content_type(headers).is_some_and(|t| t.eq_ignore_ascii_case("text/plain"))
}

/// The media type of `Content-Type`, without its parameters.
pub(super) fn content_type(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|t| t.split(';').next().unwrap_or("").trim())
}

/// `application/json` or a `+json` type.
pub(super) fn is_json_type(t: &str) -> bool {
    let t = t.to_ascii_lowercase();
    t == "application/json" || (t.starts_with("application/") && t.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_without_a_message_are_described() {
        assert_eq!(
            describe(StatusCode::NOT_FOUND, &Method::GET, "/api/nope"),
            "no such API endpoint: GET /api/nope"
        );
        assert_eq!(
            describe(
                StatusCode::METHOD_NOT_ALLOWED,
                &Method::GET,
                "/api/jobs/bulk"
            ),
            "GET is not allowed on /api/jobs/bulk"
        );
        assert_eq!(
            describe(StatusCode::BAD_GATEWAY, &Method::GET, "/api"),
            "bad gateway"
        );
        assert!(is_json_type("application/problem+json"));
        assert!(is_json_type("Application/JSON"));
        assert!(!is_json_type("text/json+html"));
    }
}
