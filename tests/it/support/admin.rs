//! Talking to the admin listener: a config with `[admin]`, and bearer-token
//! requests to it.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;

use super::{Answer, Sender};

pub const ADMIN_TOKEN: &str = "admin-token-0123456789";

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

pub async fn get(url: &str, token: Option<&str>) -> Answer {
    request(Method::GET, url, token).await
}

pub async fn request(method: Method, url: &str, token: Option<&str>) -> Answer {
    let mut builder = Request::builder().method(method).uri(url);
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    Sender::new()
        .send(builder.body(Full::new(Bytes::new())).unwrap())
        .await
}
