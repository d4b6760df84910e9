//! What stands in front of every route: credentials, the CSRF check on changes, read-only mode, and the
//! security headers of every response.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use subtle::ConstantTimeEq;

use super::App;

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

pub(super) async fn guard(State(app): State<App>, mut req: Request, next: Next) -> Response {
    let Some(actor) = authenticate(&app.cfg.credentials, req.headers()) else {
        let mut resp = refuse(StatusCode::UNAUTHORIZED, "credentials required");
        if app.cfg.credentials.basic.is_some() {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"jobq\", charset=\"UTF-8\""),
            );
        }
        return with_headers(resp);
    };
    let cookie = cookie(req.headers(), CSRF_COOKIE).filter(|t| is_token(t));
    let token = cookie.clone().unwrap_or_else(new_token);
    if req.method() != Method::GET && req.method() != Method::HEAD {
        if app.cfg.read_only {
            return with_headers(refuse(
                StatusCode::FORBIDDEN,
                "this dashboard is read-only (--read-only)",
            ));
        }
        if !actor.bearer {
            if let Err(why) = same_origin(req.headers()) {
                return with_headers(refuse(StatusCode::FORBIDDEN, why));
            }
            let (parts, body) = req.into_parts();
            let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
                Ok(b) => b,
                Err(_) => {
                    return with_headers(refuse(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "request body over 1 MiB",
                    ));
                }
            };
            let presented = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .or_else(|| form_field(&bytes, CSRF_FIELD));
            let valid = matches!((&cookie, &presented),
                (Some(c), Some(p)) if bool::from(c.as_bytes().ct_eq(p.as_bytes())));
            if !valid {
                return with_headers(refuse(
                    StatusCode::FORBIDDEN,
                    "missing or wrong CSRF token: reload the page and try again",
                ));
            }
            req = Request::from_parts(parts, Body::from(bytes));
        }
    }
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
    with_headers(resp)
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
fn with_headers(mut resp: Response) -> Response {
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
