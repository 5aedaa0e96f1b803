//! OpenTelemetry tracing against a real OTLP/HTTP receiver: a span per
//! delivery with the route, the outcome and the timings, never the key
//! unless asked, the sender's trace continued, and `traceparent` sent
//! upstream so the consumer's spans join the gateway's.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;

use crate::support::*;

/// A minimal OTLP/HTTP trace receiver: decodes every export, keeps the spans
/// with their resource's service name.
struct Receiver {
    port: u16,
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans: Arc<Mutex<Vec<(String, Span)>>> = Arc::default();
        let kept = Arc::clone(&spans);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let kept = Arc::clone(&kept);
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let kept = Arc::clone(&kept);
                        async move {
                            assert_eq!(request.uri().path(), "/v1/traces");
                            let body = request.into_body().collect().await.unwrap().to_bytes();
                            let export = ExportTraceServiceRequest::decode(body).unwrap();
                            for resource in export.resource_spans {
                                let service = (resource.resource.iter())
                                    .flat_map(|r| &r.attributes)
                                    .find(|kv| kv.key == "service.name")
                                    .and_then(|kv| text(kv.value.as_ref()?.value.as_ref()?))
                                    .unwrap_or_default();
                                for scope in resource.scope_spans {
                                    for span in scope.spans {
                                        kept.lock().unwrap().push((service.clone(), span));
                                    }
                                }
                            }
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver { port, spans }
    }

    fn spans(&self) -> Vec<(String, Span)> {
        self.spans.lock().unwrap().clone()
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::StringValue(text) => Some(text.clone()),
        _ => None,
    }
}

/// The span attribute `key` as text (strings) or a number.
fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    Some(match value {
        Value::StringValue(text) => text.clone(),
        Value::IntValue(n) => n.to_string(),
        Value::DoubleValue(x) => x.to_string(),
        other => format!("{other:?}"),
    })
}

const SENDER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SENDER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_delivery_is_a_span_and_its_trace_reaches_the_upstream() {
    let receiver = Receiver::start().await;
    let upstream = Upstream::start().await;
    let telemetry = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\nservice_name = \"hookgate-test\"\n\n[store]",
        receiver.port
    );
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, "", "")
        .replacen("[store]", &telemetry, 1);
    let gateway = TestGateway::start(&text).await;
    let url = gateway.url("/hook");
    let mut traced = signed(&url, &event("evt_trace_1"));
    traced.headers_mut().insert(
        "traceparent",
        format!("00-{SENDER_TRACE}-{SENDER_SPAN}-01")
            .parse()
            .unwrap(),
    );
    let sender = Sender::new();
    assert_eq!(sender.send(traced).await.status, StatusCode::OK);
    assert!(sender.deliver(&url, &event("evt_trace_1")).await.replayed());
    assert_eq!(
        sender.deliver(&url, &event("evt_trace_2")).await.status,
        StatusCode::OK
    );
    gateway.shutdown().await; // flushes the spans

    // The upstream got our span's trace context, continuing the sender's.
    let seen = upstream.seen();
    let traceparent = |key: &str| {
        let seen = seen.iter().find(|s| s.key() == key).unwrap();
        seen.headers["traceparent"].to_str().unwrap().to_owned()
    };
    let first = traceparent("evt_trace_1");
    let parts: Vec<&str> = first.split('-').collect();
    assert_eq!(
        parts[1], SENDER_TRACE,
        "the sender's trace goes on: {first}"
    );
    assert_ne!(
        parts[2], SENDER_SPAN,
        "the gateway's span is the upstream's parent"
    );
    assert_ne!(
        traceparent("evt_trace_2").split('-').nth(1).unwrap(),
        SENDER_TRACE
    );

    let spans = receiver.spans();
    assert_eq!(spans.len(), 3, "one span per delivery: {spans:?}");
    assert!(spans.iter().all(|(service, _)| service == "hookgate-test"));
    let forwarded: Vec<&Span> = spans
        .iter()
        .map(|(_, span)| span)
        .filter(|span| attribute(span, "hookgate.outcome").as_deref() == Some("forwarded"))
        .collect();
    assert_eq!(forwarded.len(), 2);
    let continued = forwarded
        .iter()
        .find(|span| hex::encode(&span.trace_id) == SENDER_TRACE)
        .expect("the sender's trace was continued");
    assert_eq!(hex::encode(&continued.parent_span_id), SENDER_SPAN);
    assert_eq!(
        hex::encode(&continued.span_id),
        parts[2],
        "the upstream's parent is this span"
    );
    assert_eq!(
        attribute(continued, "hookgate.route").as_deref(),
        Some("hook")
    );
    assert_eq!(
        attribute(continued, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert!(attribute(continued, "hookgate.upstream_ms").is_some());
    assert!(attribute(continued, "hookgate.store_ms").is_some());
    let replayed = spans
        .iter()
        .find(|(_, span)| attribute(span, "hookgate.outcome").as_deref() == Some("replayed"))
        .expect("the duplicate has its span");
    assert!(
        attribute(&replayed.1, "hookgate.upstream_ms").is_none(),
        "no upstream call"
    );
    assert!(
        spans
            .iter()
            .all(|(_, span)| attribute(span, "hookgate.key").is_none()),
        "keys stay out of spans unless record_keys"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_keys_puts_the_key_on_the_span_and_async_attempts_are_traced() {
    let receiver = Receiver::start().await;
    let upstream = Upstream::start().await;
    let telemetry = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}/v1/traces\"\nrecord_keys = true\n\n[store]",
        receiver.port
    );
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "delivery = \"async\"",
        "",
    )
    .replacen("[store]", &telemetry, 1);
    let gateway = TestGateway::start(&text).await;
    accept_all(&gateway.url("/hook"), &["evt_trace_async".to_owned()]).await;
    assert!(
        upstream
            .all_reached(
                &["evt_trace_async".to_owned()],
                std::time::Duration::from_secs(10)
            )
            .await
    );
    gateway.shutdown().await;
    let spans = receiver.spans();
    let outcomes: Vec<String> = spans
        .iter()
        .filter_map(|(_, span)| attribute(span, "hookgate.outcome"))
        .collect();
    assert!(outcomes.contains(&"accepted".to_owned()), "{outcomes:?}");
    assert!(
        outcomes.contains(&"completed".to_owned()),
        "the worker's attempt: {outcomes:?}"
    );
    assert!(spans
        .iter()
        .all(|(_, span)| attribute(span, "hookgate.key").as_deref() == Some("evt_trace_async")));
    let attempt = &spans
        .iter()
        .find(|(_, span)| attribute(span, "hookgate.outcome").as_deref() == Some("completed"))
        .unwrap()
        .1;
    let seen = upstream.seen();
    let traceparent = seen[0].headers["traceparent"].to_str().unwrap();
    assert_eq!(
        traceparent.split('-').nth(2).unwrap(),
        hex::encode(&attempt.span_id)
    );
}
