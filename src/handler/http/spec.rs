//! `[handlers.KIND] url = …` and its keys, checked ([`HttpSpec::check`]), and built into a handler
//! with its files read and its pooled client made ([`HttpSpec::build`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::Uri;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;

use super::{DEFAULT_MAX_CONNECTIONS, HttpHandler, Inner, POOL_IDLE_TIMEOUT};

/// Headers jobq sets itself, which `headers` may not replace.
const OWN_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "host",
];

/// An HTTP handler as configured: `[handlers.KIND] url = …` and its keys, checked but not yet loaded
/// (the files are read by [`HttpSpec::build`]).
#[derive(Clone, PartialEq, Eq)]
pub struct HttpSpec {
    /// The endpoint: `http://` or `https://`, without user info.
    pub url: String,
    /// Headers sent with every request (an `Authorization`, say).
    pub headers: BTreeMap<String, String>,
    /// A file whose content (less trailing white space) is the signing secret.
    pub secret_file: Option<PathBuf>,
    /// A PEM file of the CAs to trust instead of the public ones (a private CA).
    pub ca_file: Option<PathBuf>,
    /// Requests in flight at most ([`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// 4xx statuses that fail the attempt (retried) instead of killing the job.
    pub retry_statuses: Vec<u16>,
}

impl std::fmt::Debug for HttpSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header names only: their values are credentials (an Authorization).
        f.debug_struct("HttpSpec")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("secret_file", &self.secret_file)
            .field("ca_file", &self.ca_file)
            .field("max_connections", &self.max_connections)
            .field("retry_statuses", &self.retry_statuses)
            .finish()
    }
}

impl HttpSpec {
    /// A handler POSTing to `url`, with the defaults for everything else.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: BTreeMap::new(),
            secret_file: None,
            ca_file: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            retry_statuses: Vec::new(),
        }
    }

    /// Checks what can be checked without reading files; the message names the key.
    ///
    /// # Errors
    /// A URL that is not `http(s)://host…` or has user info, a header jobq sets itself or one that is
    /// not a valid header, `max_connections` of 0, a retry status outside 400–499.
    pub fn check(&self) -> std::result::Result<(), String> {
        self.uri()?;
        self.header_map()?;
        if self.max_connections == 0 {
            return Err("max_connections must be at least 1".into());
        }
        if let Some(s) = self
            .retry_statuses
            .iter()
            .find(|s| !(400..=499).contains(*s))
        {
            return Err(format!(
                "retry_statuses: {s} is not a 4xx status (5xx, 408 and 429 are retried or snoozed anyway)"
            ));
        }
        Ok(())
    }

    /// Reads the secret and CA files and builds the handler: what a worker does when it starts, so a
    /// missing file is one clear error then.
    ///
    /// # Errors
    /// What [`HttpSpec::check`] refuses; a secret file that cannot be read or is empty; a CA file that
    /// cannot be read or holds no certificate. The message names the key and the path.
    pub fn build(&self) -> std::result::Result<HttpHandler, String> {
        self.check()?;
        let url = self.uri()?;
        let secret = self.secret_file.as_deref().map(read_secret).transpose()?;
        let tls = tls_config(self.ca_file.as_deref())?;
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(self.max_connections)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
        Ok(HttpHandler {
            inner: Arc::new(Inner {
                shown: shown(&url),
                url,
                headers: self.header_map()?,
                secret,
                client,
                slots: Arc::new(Semaphore::new(self.max_connections)),
                retry_statuses: self.retry_statuses.clone(),
            }),
        })
    }

    fn uri(&self) -> std::result::Result<Uri, String> {
        let parsed = url::Url::parse(&self.url).map_err(|e| format!("url {:?}: {e}", self.url))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "url {:?}: the scheme must be http or https, not {}",
                self.url,
                parsed.scheme()
            ));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(
                "url: user info (user:password@) is not allowed in the URL; send credentials with \
                 `headers = { Authorization = \"…\" }`"
                    .into(),
            );
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(format!("url {:?}: no host", self.url));
        }
        if parsed.fragment().is_some() {
            return Err(format!(
                "url {:?}: a #fragment is never sent; leave it out",
                self.url
            ));
        }
        parsed
            .as_str()
            .parse::<Uri>()
            .map_err(|e| format!("url {:?}: {e}", self.url))
    }

    fn header_map(&self) -> std::result::Result<HeaderMap, String> {
        let mut map = HeaderMap::new();
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            if lower.starts_with("jobq-") || OWN_HEADERS.contains(&lower.as_str()) {
                return Err(format!("headers: {name} is set by jobq itself"));
            }
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("headers: {name:?} is not a valid header name"))?;
            let v = HeaderValue::from_str(value)
                .map_err(|_| format!("headers: the value of {name} is not a valid header value"))?;
            map.insert(n, v);
        }
        Ok(map)
    }
}

/// The signing secret: the file's content less trailing white space (the newline an editor or `echo`
/// leaves is not part of the key).
fn read_secret(path: &Path) -> std::result::Result<Vec<u8>, String> {
    let mut bytes = std::fs::read(path).map_err(|e| {
        format!(
            "secret_file {:?} cannot be read: {e}",
            path.display().to_string()
        )
    })?;
    while bytes.last().is_some_and(u8::is_ascii_whitespace) {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(format!(
            "secret_file {:?} is empty; put the signing secret in it",
            path.display().to_string()
        ));
    }
    Ok(bytes)
}

/// rustls on ring (the provider the database connections use), trusting `ca_file`'s certificates only
/// when one is given (a private CA), else the public web's (Mozilla's list, compiled in).
fn tls_config(ca_file: Option<&Path>) -> std::result::Result<rustls::ClientConfig, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let shown = path.display().to_string();
            let pem = std::fs::read(path)
                .map_err(|e| format!("ca_file {shown:?} cannot be read: {e}"))?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("ca_file {shown:?}: not PEM certificates: {e}"))?;
            if certs.is_empty() {
                return Err(format!(
                    "ca_file {shown:?} holds no certificate (-----BEGIN CERTIFICATE-----)"
                ));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("ca_file {shown:?}: {e}"))?;
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The URL as error messages show it: without its query, which may carry a token.
fn shown(url: &Uri) -> String {
    format!(
        "{}://{}{}",
        url.scheme_str().unwrap_or("http"),
        url.authority().map_or("", |a| a.as_str()),
        url.path()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        let err = |url: &str| HttpSpec::new(url).check().unwrap_err();
        assert!(
            HttpSpec::new("https://app.internal/jobs/resize")
                .check()
                .is_ok()
        );
        assert!(
            HttpSpec::new("http://127.0.0.1:8080/x?token=1")
                .check()
                .is_ok()
        );
        assert!(err("ftp://files/x").contains("must be http or https, not ftp"));
        assert!(err("https://user:pw@app/x").contains("user info"));
        assert!(err("https://user@app/x").contains("user info"));
        assert!(err("app.internal/jobs").contains("url"));
        assert!(err("https://app/x#frag").contains("fragment"));
    }

    #[test]
    fn headers_statuses_and_connections_are_checked() {
        let mut s = HttpSpec::new("https://app/x");
        s.headers.insert("Jobq-Claim".into(), "x".into());
        assert!(s.check().unwrap_err().contains("Jobq-Claim is set by jobq"));
        s.headers = [("Bad Name".to_string(), "x".to_string())].into();
        assert!(s.check().unwrap_err().contains("not a valid header name"));
        s.headers = [("Authorization".to_string(), "Bearer t".to_string())].into();
        assert!(s.check().is_ok());
        s.retry_statuses = vec![409, 500];
        assert!(s.check().unwrap_err().contains("500 is not a 4xx"));
        s.retry_statuses = vec![409];
        s.max_connections = 0;
        assert!(s.check().unwrap_err().contains("max_connections"));
    }

    #[test]
    fn files_are_read_at_build() {
        let dir = std::env::temp_dir().join(format!("jobq-http-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = HttpSpec::new("https://app/x");
        s.secret_file = Some(dir.join("missing.key"));
        let e = s.build().unwrap_err();
        assert!(
            e.contains("secret_file") && e.contains("missing.key"),
            "{e}"
        );
        std::fs::write(dir.join("empty.key"), "\n").unwrap();
        s.secret_file = Some(dir.join("empty.key"));
        assert!(s.build().unwrap_err().contains("is empty"));
        std::fs::write(dir.join("k.key"), "s3cret\n").unwrap();
        s.secret_file = Some(dir.join("k.key"));
        assert!(s.build().is_ok());
        std::fs::write(dir.join("ca.pem"), "not a certificate").unwrap();
        s.ca_file = Some(dir.join("ca.pem"));
        assert!(s.build().unwrap_err().contains("holds no certificate"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
