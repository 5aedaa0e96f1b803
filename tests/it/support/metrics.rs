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
