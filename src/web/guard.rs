//! What stands in front of every route: credentials, the CSRF check on changes, read-only mode, and the
//! security headers of every response.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use subtle::ConstantTimeEq;

use super::App;
use super::json_errors::{content_type, is_json_type};

/// Who may use the dashboard. With neither set, everyone may.
#[derive(Clone, Default)]
pub struct Credentials {
    /// HTTP basic auth: user name and password.
    pub basic: Option<(String, String)>,
    /// A bearer token (`Authorization: Bearer …`), for scripts.
    pub token: Option<String>,
}

impl Credentials {
    /// No credentials: everyone is let in.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether any credential is set.
    pub fn any(&self) -> bool {
        self.basic.is_some() || self.token.is_some()
    }
}

impl std::fmt::Debug for Credentials {
    /// Never the secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("basic_user", &self.basic.as_ref().map(|(u, _)| u))
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Who made a request, for the audit table.
#[derive(Debug, Clone)]
pub(super) struct Actor {
    /// The basic-auth user, `token`, or `local`.
    pub(super) name: String,
    /// Authenticated by a bearer token: exempt from the CSRF check.
    pub(super) bearer: bool,
}

/// The request's CSRF token (from its cookie, or a new one the response sets).
#[derive(Debug, Clone)]
pub(super) struct CsrfToken(pub(super) String);

/// The cookie holding the CSRF token.
const CSRF_COOKIE: &str = "jobq_csrf";
/// The form field and header that must repeat it.
pub(super) const CSRF_FIELD: &str = "csrf";
const CSRF_HEADER: &str = "x-csrf-token";
/// Largest form or JSON body accepted (a bulk action naming a page of ids is a few kB).
const MAX_BODY: usize = 1 << 20;

/// Scripts, frames, plug-ins, other origins: none. Styles from the embedded sheet only; forms post only
/// to the dashboard.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(super) async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    with_headers(checked(&app, req, next).await)
}

/// The checks, in order: a locked-out address, credentials, the body (its deadline and size, JSON under
/// `/api`), then read-only mode and CSRF for changes.
// Long on purpose: the checks in the order they must run, each returning its refusal, audited in one place.
async fn checked(app: &App, req: Request, next: Next) -> Response {
    let client = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let creds = &app.cfg.credentials;
    if creds.any()
        && let Some(ip) = client
        && let Some(left) = app.throttle.locked(ip, Instant::now())
    {
        let mut resp = refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "too many failed logins from your address; try again later",
        );
        let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return resp;
    }
    let Some(actor) = authenticate(creds, req.headers()) else {
        if let Some(user) = presented_user(req.headers()) {
            login_failed(app, &user, client);
        }
        let mut resp = refuse(StatusCode::UNAUTHORIZED, "credentials required");
        if creds.basic.is_some() {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"jobq\", charset=\"UTF-8\""),
            );
        }
        return resp;
    };
    if creds.any()
        && let Some(ip) = client
    {
        app.throttle.succeeded(ip);
    }
    let (parts, body) = req.into_parts();
    let bytes = match read_body(body, app.cfg.body_timeout).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    if parts.uri.path().starts_with("/api/")
        && !bytes.is_empty()
        && !content_type(&parts.headers).is_some_and(is_json_type)
    {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the API takes JSON bodies: send Content-Type: application/json",
        );
    }
    let cookie = cookie(&parts.headers, CSRF_COOKIE).filter(|t| is_token(t));
    let token = cookie.clone().unwrap_or_else(new_token);
    if parts.method != Method::GET && parts.method != Method::HEAD {
        if app.cfg.read_only {
            return refuse(
                StatusCode::FORBIDDEN,
                "this dashboard is read-only (--read-only)",
            );
        }
        if !actor.bearer {
            if let Err(why) = same_origin(&parts.headers) {
                return refuse(StatusCode::FORBIDDEN, why);
            }
            let presented = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .or_else(|| form_field(&bytes, CSRF_FIELD));
            let valid = matches!((&cookie, &presented),
                (Some(c), Some(p)) if bool::from(c.as_bytes().ct_eq(p.as_bytes())));
            if !valid {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "missing or wrong CSRF token: reload the page and try again",
                );
            }
        }
    }
    let mut req = Request::from_parts(parts, Body::from(bytes));
    req.extensions_mut().insert(actor);
    req.extensions_mut().insert(CsrfToken(token.clone()));
    let mut resp = next.run(req).await;
    if cookie.is_none() {
        let path = if app.cfg.prefix.is_empty() {
            "/"
        } else {
            &app.cfg.prefix
        };
        let set = format!("{CSRF_COOKIE}={token}; Path={path}; HttpOnly; SameSite=Strict");
        if let Ok(v) = HeaderValue::from_str(&set) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    resp
}

/// The whole body, read within `deadline` of the headers (a client sending it a byte at a time holds
/// a connection no longer than that) and at most [`MAX_BODY`] long; else the refusal to send.
async fn read_body(body: Body, deadline: Duration) -> Result<Bytes, Response> {
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => Err(if e.into_inner().is::<http_body_util::LengthLimitError>() {
            refuse(StatusCode::PAYLOAD_TOO_LARGE, "request body over 1 MiB")
        } else {
            refuse(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            )
        }),
        Err(_) => {
            let mut resp = refuse(
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the request body did not arrive within {}",
                    humantime::format_duration(deadline)
                ),
            );
            // The rest of the body may still be on its way: the connection cannot be reused.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Err(resp)
        }
    }
}

/// Logs a failed login (who it claimed to be and where from, never what it tried) and counts it
/// against the address.
fn login_failed(app: &App, user: &str, client: Option<IpAddr>) {
    let shown = client.map_or_else(|| "unknown".to_string(), |ip| ip.to_string());
    tracing::warn!(user, client = %shown, "dashboard login failed");
    if let Some(ip) = client
        && let (failures, Some(lock)) = app.throttle.failed(ip, Instant::now())
    {
        tracing::warn!(
            client = %shown,
            failures,
            "dashboard logins from this address refused for {}",
            humantime::format_duration(lock)
        );
    }
}

/// The user a request tried to log in as: the basic-auth user name, `(token)` for a bearer token, or
/// `(unreadable)`; `None` when it sent no credentials at all (a browser's first request, which the
/// 401 asks for them). At most 64 characters, control characters replaced.
fn presented_user(headers: &HeaderMap) -> Option<String> {
    let given = headers.get(header::AUTHORIZATION)?;
    let given = given.to_str().unwrap_or("");
    let user = if given.starts_with("Bearer ") {
        "(token)".to_string()
    } else {
        given
            .strip_prefix("Basic ")
            .and_then(|b| {
                base64::engine::general_purpose::STANDARD
                    .decode(b.trim())
                    .ok()
            })
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|d| d.split_once(':').map(|(u, _)| u.to_string()))
            .unwrap_or_else(|| "(unreadable)".to_string())
    };
    Some(
        user.chars()
            .take(64)
            .map(|c| if c.is_control() { '?' } else { c })
            .collect(),
    )
}

/// Who the request's credentials name, if they are the configured ones (anyone, when none are).
fn authenticate(creds: &Credentials, headers: &HeaderMap) -> Option<Actor> {
    if !creds.any() {
        return Some(Actor {
            name: "local".into(),
            bearer: false,
        });
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let (Some(want), Some(got)) = (&creds.token, given.strip_prefix("Bearer "))
        && bool::from(want.as_bytes().ct_eq(got.trim().as_bytes()))
    {
        return Some(Actor {
            name: "token".into(),
            bearer: true,
        });
    }
    if let (Some((user, password)), Some(got)) = (&creds.basic, given.strip_prefix("Basic ")) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(got.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        if let Some((u, p)) = decoded.as_deref().and_then(|d| d.split_once(':')) {
            let user_ok = u.as_bytes().ct_eq(user.as_bytes());
            let password_ok = p.as_bytes().ct_eq(password.as_bytes());
            if bool::from(user_ok & password_ok) {
                return Some(Actor {
                    name: u.to_string(),
                    bearer: false,
                });
            }
        }
    }
    None
}

/// A browser says where a request came from: `Sec-Fetch-Site` (all current browsers), else `Origin`,
/// which must name the host the request was sent to. Clients that send neither (curl, scripts) are
/// judged by the CSRF token alone.
fn same_origin(headers: &HeaderMap) -> Result<(), &'static str> {
    let get = |h: &str| headers.get(h).and_then(|v| v.to_str().ok());
    if let Some(site) = get("sec-fetch-site") {
        return match site {
            "same-origin" | "none" => Ok(()),
            _ => Err("cross-site request refused"),
        };
    }
    if let (Some(origin), Some(host)) = (get("origin"), get("host")) {
        let origin_host = origin.split_once("://").map_or(origin, |(_, h)| h);
        if origin_host != host {
            return Err("cross-origin request refused");
        }
    }
    Ok(())
}

/// A cookie's value.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// 32 hex digits: what [`new_token`] makes, and all a cookie may hold to be used.
fn is_token(t: &str) -> bool {
    t.len() == 32 && t.bytes().all(|b| b.is_ascii_hexdigit())
}

fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The first value of `name` in a url-encoded form body.
pub(super) fn form_field(body: &Bytes, name: &str) -> Option<String> {
    url::form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// A plain-text refusal.
fn refuse(status: StatusCode, why: &str) -> Response {
    (status, format!("{why}\n")).into_response()
}

/// The headers every response carries.
pub(super) fn with_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_checks() {
        let mut h = HeaderMap::new();
        assert!(same_origin(&h).is_ok());
        h.insert("origin", HeaderValue::from_static("http://evil.example"));
        h.insert("host", HeaderValue::from_static("127.0.0.1:8080"));
        assert!(same_origin(&h).is_err());
        h.insert("origin", HeaderValue::from_static("http://127.0.0.1:8080"));
        assert!(same_origin(&h).is_ok());
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(same_origin(&h).is_err());
    }

    #[test]
    fn cookies_and_tokens() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; jobq_csrf=00ff; b=2"),
        );
        assert_eq!(cookie(&h, "jobq_csrf").as_deref(), Some("00ff"));
        assert!(!is_token("00ff"));
        assert!(is_token(&new_token()));
    }
}
