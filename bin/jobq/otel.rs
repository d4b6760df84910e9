//! Exporting job spans over OTLP/HTTP (the `otel` feature; docs/traces.md).
//!
//! Configured the way every OpenTelemetry SDK is, by the standard variables, so that one deployment's
//! settings serve jobq and the application alike: export is on when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! (the full URL, used as it is) or `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL; `/v1/traces` is
//! appended) is set, and off when `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
//! `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name the service (default `jobq`), and
//! `OTEL_EXPORTER_OTLP_HEADERS` / `_TRACES_HEADERS` add headers (an API key), as the SDK reads them.
//! A supervisor's workers inherit the variables, so each of them exports its own spans.
//!
//! Spans leave in batches from a tokio task (the SDK's batch processor on jobq's runtime); at exit
//! [`Export::shutdown`] flushes what is left, bounded, so a worker that drains and exits still sends
//! its last jobs' spans.

#[cfg(feature = "otel")]
pub use enabled::install;

#[cfg(not(feature = "otel"))]
pub use disabled::install;

/// The variables that ask for export.
const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The endpoint variable that is set, if export is asked for and not turned off.
fn asked_for() -> Option<&'static str> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return None;
    }
    ENDPOINT_VARS.into_iter().find(|name| var(name).is_some())
}

#[cfg(feature = "otel")]
mod enabled {
    use std::time::Duration;

    use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;

    /// How long one export request may take before it is given up (the SDK's default, 10 s).
    const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
    /// How long exiting waits for the last spans to leave: a collector that is down must not keep a
    /// drained worker from exiting.
    const FLUSH_LIMIT: Duration = Duration::from_secs(5);

    /// The installed exporter, to flush at exit.
    #[derive(Debug)]
    pub struct Export(Option<SdkTracerProvider>);

    /// Installs the OTLP exporter as OpenTelemetry's global tracer provider when the environment asks
    /// for one (see the module docs). Call inside the runtime: the batch processor is a tokio task.
    ///
    /// # Errors
    /// When the exporter cannot be built (a malformed endpoint URL): asking for export and silently
    /// getting none would leave the operator looking for spans that never come.
    pub fn install() -> anyhow::Result<Export> {
        let Some(var) = super::asked_for() else {
            return Ok(Export(None));
        };
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        })
        .with_no_client_auth();
        // The TLS stack jobq's HTTP handlers use (rustls on ring, Mozilla's roots), for an https
        // collector; plain http works through the same connector.
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client = opentelemetry_http::hyper::HyperClient::new(connector, EXPORT_TIMEOUT, None);
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_http_client(client)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| anyhow::anyhow!("{var}: cannot set up the OTLP exporter: {e}"))?;
        let processor =
            BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("jobq");
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.build())
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        tracing::debug!(from = var, "exporting job spans over OTLP/HTTP");
        Ok(Export(Some(provider)))
    }

    impl Export {
        /// Flushes the spans not sent yet and stops the exporter, waiting at most [`FLUSH_LIMIT`].
        /// The SDK's shutdown blocks its thread until the batch task answers, and that task runs on
        /// this runtime: so it blocks a thread of its own, not a runtime worker.
        pub async fn shutdown(self) {
            let Some(provider) = self.0 else {
                return;
            };
            let flushed = tokio::task::spawn_blocking(move || provider.shutdown());
            match tokio::time::timeout(FLUSH_LIMIT, flushed).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "could not flush the last spans"),
                Ok(Err(e)) => tracing::warn!(error = %e, "could not flush the last spans"),
                Err(_) => tracing::warn!(
                    "the OTLP collector did not take the last spans within {}s; exiting without them",
                    FLUSH_LIMIT.as_secs()
                ),
            }
        }
    }
}

#[cfg(not(feature = "otel"))]
mod disabled {
    /// Nothing installed: this jobq was built without the `otel` feature.
    #[derive(Debug)]
    pub struct Export;

    /// Says once that export was asked for and cannot happen, rather than staying silent about it.
    pub fn install() -> anyhow::Result<Export> {
        if let Some(var) = super::asked_for() {
            tracing::warn!(
                "{var} is set, but this jobq was built without the `otel` feature: job spans are \
                 not exported (build with `--features otel`); handlers still get the traceparent"
            );
        }
        Ok(Export)
    }

    impl Export {
        /// Nothing to flush.
        pub async fn shutdown(self) {}
    }
}
