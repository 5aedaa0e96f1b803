//! Reading `/metrics` as Prometheus would.

use bytes::Bytes;
use http::Request;
use http_body_util::Full;

use super::Sender;

/// The Prometheus text an admin listener serves at `url`.
pub async fn scrape(url: &str) -> String {
    let answer = Sender::new()
        .send(Request::get(url).body(Full::new(Bytes::new())).unwrap())
        .await;
    String::from_utf8(answer.body.to_vec()).unwrap()
}

/// The value of one sample of `name` whose labels include all of `labels`.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} "))
        })
        .find(|line| {
            labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// Wait until the gateway whose admin listener serves `metrics_url` has
/// made `n` more worker passes over its queues
/// (`hookgate_worker_passes_total`): what a check then sees, those passes
/// did. The gateway's own count, not a guess at how long it takes.
pub async fn worker_passes_at(metrics_url: &str, n: u64) {
    let passes = || async {
        sample(
            &scrape(metrics_url).await,
            "hookgate_worker_passes_total",
            &[],
        )
    };
    let from = passes()
        .await
        .expect("hookgate_worker_passes_total is served");
    let passed = super::eventually(std::time::Duration::from_secs(15), || async {
        passes().await.is_some_and(|now| now >= from + n as f64)
    })
    .await;
    assert!(passed, "the workers made no {n} passes");
}
