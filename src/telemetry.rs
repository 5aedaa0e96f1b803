//! Optional OpenTelemetry tracing (`[telemetry]`, a hookgate extension): a
//! span per delivery — and per async attempt — exported over OTLP/HTTP
//! (protobuf), and the W3C `traceparent` of that span sent upstream, so the
//! legacy consumer's own traces join the gateway's.
//!
//! A span carries the route, the outcome, the answered status and the store
//! and upstream timings; the idempotency key only with `record_keys` (a key
//! can be a customer's order number). A sender's `traceparent`, when it
//! sends one, makes the delivery span its child.
//!
//! Spans leave in batches from the SDK's own thread; the HTTP calls run on
//! the gateway's tokio runtime through its hyper client. Without
//! `[telemetry]` nothing here runs and forwarded requests are untouched.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::config::TelemetrySettings;

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The tracer, when `[telemetry]` is configured.
pub struct Telemetry {
    inner: Option<Inner>,
}

struct Inner {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
    record_keys: bool,
}

/// One delivery's span (a no-op without `[telemetry]`).
pub struct DeliverySpan {
    inner: Option<(Context, bool)>,
}

/// What a finished delivery span records.
pub struct SpanFacts<'a> {
    pub route: &'a str,
    pub outcome: &'a str,
    pub status: Option<u16>,
    pub key: Option<&'a str>,
    pub store: Option<Duration>,
    pub upstream: Option<Duration>,
}

impl Telemetry {
    pub fn off() -> Self {
        Self { inner: None }
    }

    /// Start exporting to `settings.otlp_endpoint`; must run inside the
    /// gateway's tokio runtime (the exporter's HTTP calls run there).
    pub fn start(settings: &TelemetrySettings) -> Result<Self, String> {
        let client = RuntimeClient {
            client: Client::builder(TokioExecutor::new()).build_http(),
            runtime: tokio::runtime::Handle::current(),
        };
        let exporter = SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(settings.otlp_endpoint.to_string())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|error| format!("cannot build the OTLP exporter: {error}"))?;
        let sampler =
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(settings.sample_ratio)));
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(sampler)
            .with_resource(
                Resource::builder()
                    .with_service_name(settings.service_name.clone())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("hookgate");
        Ok(Self {
            inner: Some(Inner {
                provider,
                tracer,
                propagator: TraceContextPropagator::new(),
                record_keys: settings.record_keys,
            }),
        })
    }

    /// Begin a span named `name`, the child of the sender's `traceparent`
    /// in `incoming` when there is one.
    pub fn delivery(&self, name: &'static str, incoming: &HeaderMap) -> DeliverySpan {
        let Some(inner) = &self.inner else {
            return DeliverySpan { inner: None };
        };
        let parent = inner.propagator.extract(&Headers(incoming));
        let span = inner
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .start_with_context(&inner.tracer, &parent);
        DeliverySpan {
            inner: Some((parent.with_span(span), inner.record_keys)),
        }
    }

    /// Export what is still buffered and stop (at shutdown). Blocks while it
    /// exports, on a blocking thread so the runtime can make the calls.
    pub async fn shutdown(&self) {
        let Some(inner) = &self.inner else { return };
        let provider = inner.provider.clone();
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = done {
            tracing::warn!(%error, "could not flush the last spans");
        }
    }
}

impl DeliverySpan {
    /// No span (a placeholder once the real one is finished).
    pub fn none() -> Self {
        Self { inner: None }
    }

    /// The span's `traceparent` (and `tracestate`) headers, to send
    /// upstream; none without `[telemetry]`.
    pub fn headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        let Some((context, _)) = &self.inner else {
            return Vec::new();
        };
        let mut carrier = Carrier(Vec::new());
        TraceContextPropagator::new().inject_context(context, &mut carrier);
        carrier.0
    }

    /// Put the span's trace context on an upstream request, replacing what
    /// the sender sent.
    pub fn inject(&self, headers: &mut HeaderMap) {
        for (name, value) in self.headers() {
            headers.insert(name, value);
        }
    }

    /// Record what happened and end the span.
    pub fn finish(self, facts: SpanFacts<'_>) {
        let Some((context, record_keys)) = self.inner else {
            return;
        };
        let span = context.span();
        let ms = |duration: Duration| duration.as_secs_f64() * 1e3;
        span.set_attribute(KeyValue::new("hookgate.route", facts.route.to_owned()));
        span.set_attribute(KeyValue::new("hookgate.outcome", facts.outcome.to_owned()));
        if let Some(status) = facts.status {
            span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
        }
        if let Some(store) = facts.store {
            span.set_attribute(KeyValue::new("hookgate.store_ms", ms(store)));
        }
        if let Some(upstream) = facts.upstream {
            span.set_attribute(KeyValue::new("hookgate.upstream_ms", ms(upstream)));
        }
        if let (true, Some(key)) = (record_keys, facts.key) {
            span.set_attribute(KeyValue::new("hookgate.key", key.to_owned()));
        }
        span.end();
    }
}

/// Reads a sender's trace context from its headers.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// Collects the headers the propagator writes.
struct Carrier(Vec<(HeaderName, HeaderValue)>);

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.push((name, value));
        }
    }
}

/// The exporter's HTTP client: hyper on the gateway's runtime. The SDK
/// exports from a thread of its own, so each call is spawned onto the
/// runtime and awaited from there.
#[derive(Debug)]
struct RuntimeClient {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

type Sent = Result<http::Response<Bytes>, opentelemetry_http::HttpError>;

impl opentelemetry_http::HttpClient for RuntimeClient {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: http::Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Sent> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        let client = self.client.clone();
        let call = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let response = tokio::time::timeout(
                EXPORT_TIMEOUT,
                client.request(http::Request::from_parts(parts, Full::new(body))),
            )
            .await
            .map_err(|_| "the OTLP export timed out")??;
            let (parts, body) = response.into_parts();
            let body = body.collect().await?.to_bytes();
            Ok::<_, opentelemetry_http::HttpError>(http::Response::from_parts(parts, body))
        });
        Box::pin(async move { call.await? })
    }
}
