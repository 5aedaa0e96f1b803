//! The sender's side: signing, delivering, and retrying like a webhook
//! sender does.

use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sha2::Sha256;

use super::SECRET;

pub fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A response as a sender sees it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The `error.code` of a hookgate error body.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    }

    /// The test upstream's own answer (its `x-upstream` header, forwarded
    /// or replayed), not one the gateway gave itself.
    pub fn by_upstream(&self) -> bool {
        self.headers.contains_key("x-upstream")
    }
}

#[derive(Clone)]
pub struct Sender {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for Sender {
    fn default() -> Self {
        Self::new()
    }
}

impl Sender {
    pub fn new() -> Sender {
        Sender {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    pub fn h2c() -> Sender {
        Sender {
            client: Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
        }
    }

    pub async fn send(&self, request: Request<Full<Bytes>>) -> Answer {
        self.try_send(request).await.expect("request failed")
    }

    /// Send, or the transport error.
    pub async fn try_send(&self, request: Request<Full<Bytes>>) -> Result<Answer, String> {
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.map_err(|e| e.to_string())?.to_bytes(),
        })
    }

    /// POST a correctly signed `body`.
    pub async fn deliver(&self, url: &str, body: &str) -> Answer {
        self.send(signed(url, body)).await
    }

    /// Deliver like a webhook sender: retry on 409/503 until an answer sticks.
    pub async fn deliver_until_settled(&self, url: &str, body: &str) -> Answer {
        self.send_until_settled(|| signed(url, body)).await
    }

    /// Deliver until the upstream's own answer comes back, whatever its
    /// status: the gateway's own answers (a 503 when a claim outlasts the
    /// store's deadline on a loaded machine, a 409 while it is in flight)
    /// are retried, as a sender would, where a test needs every event to
    /// have reached the upstream. Panics if none did within 60 s.
    pub async fn deliver_to_upstream(&self, url: &str, body: &str) -> Answer {
        let answer = self
            .send_until(|| signed(url, body), Answer::by_upstream)
            .await;
        assert!(answer.by_upstream(), "{} {}", answer.status, answer.code());
        answer
    }

    /// Send what `request` makes as a webhook sender does, until an answer
    /// sticks: again on a 409 (in flight), a 503 or a connection the
    /// gateway dropped, backing off as senders do (doubling to 1 s, with
    /// jitter, so that many retrying at once do not overload the machine).
    /// Within 60 s — past the default 30 s `processing_ttl`: a claim whose
    /// recording failed (a store deadline on a loaded machine) answers 409
    /// until its lease runs out.
    pub async fn send_until_settled(&self, request: impl Fn() -> Request<Full<Bytes>>) -> Answer {
        let settled = |answer: &Answer| !matches!(answer.status.as_u16(), 409 | 503);
        self.send_until(request, settled).await
    }

    /// [`Sender::send_until_settled`], with what counts as settled given:
    /// again, backing off, until an answer is `settled` (or 60 s pass,
    /// when the last answer is returned).
    pub async fn send_until(
        &self,
        request: impl Fn() -> Request<Full<Bytes>>,
        settled: impl Fn(&Answer) -> bool,
    ) -> Answer {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut backoff = Backoff::default();
        loop {
            let answer = self.try_send(request()).await;
            let settled = answer.as_ref().is_ok_and(&settled);
            if settled || Instant::now() > deadline {
                return answer.unwrap_or_else(|error| panic!("{error}"));
            }
            backoff.wait().await;
        }
    }
}

/// A sender's pause between retries: doubling from 20 ms to 1 s, each
/// drawn from its upper half.
#[derive(Default)]
struct Backoff {
    ceiling_ms: u64,
}

impl Backoff {
    async fn wait(&mut self) {
        self.ceiling_ms = (self.ceiling_ms * 2).clamp(20, 1_000);
        let ms = self.ceiling_ms / 2 + rand::random::<u64>() % (self.ceiling_ms / 2);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

pub fn signed(url: &str, body: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/json")
        .header("x-signature", sign(body.as_bytes()))
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

pub fn event(id: &str) -> String {
    format!(r#"{{"id":"{id}","type":"order.paid","amount":4200}}"#)
}

/// Deliver each of `ids` once to an async route at `url`; each must be
/// accepted (202).
pub async fn accept_all(url: &str, ids: &[String]) {
    let sender = Sender::new();
    for id in ids {
        let answer = sender.deliver(url, &event(id)).await;
        assert_eq!(
            answer.status,
            StatusCode::ACCEPTED,
            "{id}: {:?}",
            answer.json()
        );
    }
}

/// Events `0..n` (bodies by `body`), each delivered `times` times at once to
/// `urls` in turn and retried like a sender until settled: the answers per
/// event.
pub async fn deliver_concurrently(
    urls: &[String],
    n: usize,
    times: usize,
    body: fn(usize) -> String,
) -> std::collections::HashMap<usize, Vec<Answer>> {
    let mut all = tokio::task::JoinSet::new();
    for i in 0..n {
        for t in 0..times {
            let (url, sender) = (urls[(i + t) % urls.len()].clone(), Sender::new());
            all.spawn(async move { (i, sender.deliver_until_settled(&url, &body(i)).await) });
        }
    }
    let mut answers: std::collections::HashMap<usize, Vec<Answer>> = Default::default();
    while let Some(done) = all.join_next().await {
        let (i, answer) = done.unwrap();
        answers.entry(i).or_default().push(answer);
    }
    answers
}

/// Deliver `events` through `urls` like senders do — retrying on 409, 503
/// and connection errors until a 2xx (or the other gateway, when one is
/// gone) — 15 ms apart, so that a disruption a test starts midway lands in
/// the middle of the stream. Each event's id and its final status.
pub async fn deliver_paced(
    urls: &[String],
    events: usize,
    prefix: &str,
) -> HashMap<String, StatusCode> {
    deliver_every(urls, events, prefix, Duration::from_millis(15)).await
}

/// [`deliver_paced`], one event started every `every`.
pub async fn deliver_every(
    urls: &[String],
    events: usize,
    prefix: &str,
    every: Duration,
) -> HashMap<String, StatusCode> {
    let sender = Sender::new();
    let mut tasks = Vec::new();
    for i in 0..events {
        let url = urls[i % urls.len()].clone();
        let other = urls[(i + 1) % urls.len()].clone();
        let (sender, id) = (sender.clone(), format!("{prefix}_{i}"));
        tasks.push(tokio::spawn(async move {
            // Pace the stream so the disruption lands in the middle of it.
            tokio::time::sleep(every * i as u32).await;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
            let mut target = url;
            loop {
                match sender.try_send(signed(&target, &event(&id))).await {
                    Ok(answer) if answer.status.is_success() => return (id, answer.status),
                    Ok(_) => {}
                    Err(_) => target = other.clone(), // that gateway is gone
                }
                assert!(tokio::time::Instant::now() < deadline, "{id} never settled");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    let mut settled = HashMap::new();
    for task in tasks {
        let (id, status) = task.await.unwrap();
        settled.insert(id, status);
    }
    settled
}
