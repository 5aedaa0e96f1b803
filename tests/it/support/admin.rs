//! Talking to the admin listener: a config with `[admin]`, and bearer-token
//! requests to it.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;

use super::{Answer, Sender};

pub const ADMIN_TOKEN: &str = "admin-token-0123456789";
/// `[admin] read_token` where a test sets one ([`with_read_token`]).
pub const READ_TOKEN: &str = "reader-token-0123456789";

/// `text` with an `[admin]` listener on a free port, with the token or not.
pub fn with_admin(text: &str, token: bool) -> String {
    let token = if token {
        format!("token = \"{ADMIN_TOKEN}\"\n")
    } else {
        String::new()
    };
    text.replace(
        "[store]",
        &format!("[admin]\nlisten = \"127.0.0.1:0\"\n{token}\n[store]"),
    )
}

/// `with_admin` on a fixed `port`, for a gateway whose admin address the
/// test must know before it starts (a process of its own).
pub fn with_admin_on(text: &str, port: u16) -> String {
    with_admin(text, true).replace(
        "[admin]\nlisten = \"127.0.0.1:0\"",
        &format!("[admin]\nlisten = \"127.0.0.1:{port}\""),
    )
}

pub async fn get(url: &str, token: Option<&str>) -> Answer {
    request(Method::GET, url, token).await
}

pub async fn request(method: Method, url: &str, token: Option<&str>) -> Answer {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|bearer| ("authorization", bearer.as_str()))
        .collect();
    send(method, url, &headers, "").await
}

/// `method url` with `headers` and `body`, as any client sends it.
pub async fn send(method: Method, url: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut builder = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let body = Full::new(Bytes::from(body.to_owned()));
    Sender::new().send(builder.body(body).unwrap()).await
}

/// `with_admin(text, true)` plus the read token.
pub fn with_read_token(text: &str) -> String {
    with_admin(text, true).replace(
        &format!("token = \"{ADMIN_TOKEN}\"\n"),
        &format!("token = \"{ADMIN_TOKEN}\"\nread_token = \"{READ_TOKEN}\"\n"),
    )
}

/// `hookgate events ARGS` (the real binary) against `gateway`'s admin
/// listener, with the admin token.
pub fn events_cli(gateway: &super::TestGateway, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .arg("events")
        .args(args)
        .args(["--admin", &gateway.admin_url("")])
        .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap()
}
