//! The operator console: `/ui` on the admin listener (never the public
//! port), one page embedded in the binary that calls the admin API.
//!
//! This module owns the console's sessions and its few server-rendered
//! pieces; everything the page does goes through the admin API
//! ([`crate::admin`]), so the audit log sees every action.
//!
//! - `GET /ui` — the login form, or the console once logged in.
//! - `POST /ui/login` — the admin token or the read token, once: a
//!   session cookie (`HttpOnly`, `SameSite=Strict`, 12 h) and a CSRF token
//!   in the page. A session holds its token's [`Role`]: one logged in with
//!   the read token sees every page and no action button, and the admin
//!   API refuses it any change (403 `read_only`).
//! - `POST /ui/logout` — ends the session (CSRF token in the form).
//! - `GET /ui/console.js`, `/ui/console.css` — the page's script and style.
//!
//! The admin API takes the session cookie in place of the bearer token;
//! with the cookie, every request but `GET` must also carry the session's
//! CSRF token in `X-CSRF-Token`. Every `/ui` response carries a strict
//! Content-Security-Policy (scripts and styles from the console itself,
//! nothing inline, no framing). Sessions live in this process: each
//! instance of a fleet has its own console.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use subtle::ConstantTimeEq;

use crate::access::{Role, Tokens};

/// The session cookie's name.
const COOKIE: &str = "hookgate_console";
/// How long a session lasts after logging in.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at most; the oldest goes first.
const MAX_SESSIONS: usize = 256;
/// How long a login with a wrong token waits before it is answered.
const WRONG_TOKEN_PAUSE: Duration = Duration::from_millis(500);
/// A login form is a token and nothing else.
const MAX_FORM_BYTES: usize = 4096;

const PAGE: &str = include_str!("console/console.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// Scripts and styles from the console itself, nothing inline or framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Who made an admin request, as far as the console is concerned.
pub enum Caller {
    /// A logged-in console session whose CSRF token matched (or a `GET`),
    /// with its role.
    Console(Role),
    /// A session (with its role) on a state-changing request without its
    /// CSRF token.
    CsrfMissing(Role),
    /// No valid session.
    Nobody,
}

struct Session {
    csrf: String,
    role: Role,
    expires: Instant,
}

#[derive(Default)]
pub struct Console {
    sessions: Mutex<HashMap<String, Session>>,
}

impl Console {
    /// Serve a `/ui` path. The console is off (404) without an admin
    /// token.
    pub async fn handle(
        &self,
        request: Request<Incoming>,
        tokens: &Tokens,
        peer: std::net::SocketAddr,
    ) -> Response<Full<Bytes>> {
        if !tokens.on() {
            return secured(page(
                StatusCode::NOT_FOUND,
                TEXT,
                "the console is off (no admin.token)\n",
            ));
        };
        let path = request.uri().path().to_owned();
        let method = request.method().clone();
        let response = match (method, path.as_str()) {
            (Method::GET, "/ui/console.js") => {
                page(StatusCode::OK, "text/javascript; charset=utf-8", SCRIPT)
            }
            (Method::GET, "/ui/console.css") => {
                page(StatusCode::OK, "text/css; charset=utf-8", STYLE)
            }
            (Method::GET, "/ui" | "/ui/") => match self.session(request.headers()) {
                Some((csrf, role)) => page(
                    StatusCode::OK,
                    HTML,
                    &PAGE
                        .replace("{CSRF}", &csrf)
                        .replace("{ROLE}", role.as_str()),
                ),
                None => login_page(StatusCode::OK, None),
            },
            (Method::POST, "/ui/login") => self.login(request, tokens, peer).await,
            (Method::POST, "/ui/logout") => self.logout(request).await,
            (Method::GET | Method::POST, _) => page(StatusCode::NOT_FOUND, TEXT, "not found\n"),
            _ => page(StatusCode::METHOD_NOT_ALLOWED, TEXT, "method not allowed\n"),
        };
        secured(response)
    }

    /// Whether an admin API request comes from a console session, and with
    /// its CSRF token where one is needed.
    pub fn caller(&self, method: &Method, headers: &HeaderMap) -> Caller {
        let Some((csrf, role)) = self.session(headers) else {
            return Caller::Nobody;
        };
        if method == Method::GET || method == Method::HEAD {
            return Caller::Console(role);
        }
        let presented = headers
            .get("x-csrf-token")
            .map(HeaderValue::as_bytes)
            .unwrap_or_default();
        if bool::from(presented.ct_eq(csrf.as_bytes())) {
            Caller::Console(role)
        } else {
            Caller::CsrfMissing(role)
        }
    }

    /// The CSRF token and role of the live session the request's cookie
    /// names.
    fn session(&self, headers: &HeaderMap) -> Option<(String, Role)> {
        let id = cookie(headers)?;
        let mut sessions = self.sessions.lock().expect("not poisoned");
        let now = Instant::now();
        // The id is 256 random bits found by its (randomly keyed) hash: a
        // guess meets a stored id's bytes only on a hash collision.
        match sessions.get(&id) {
            Some(session) if session.expires > now => Some((session.csrf.clone(), session.role)),
            Some(_) => {
                sessions.remove(&id);
                None
            }
            None => None,
        }
    }

    async fn login(
        &self,
        request: Request<Incoming>,
        tokens: &Tokens,
        peer: std::net::SocketAddr,
    ) -> Response<Full<Bytes>> {
        let Some(presented) = form_field(request, "token").await else {
            return login_page(StatusCode::PAYLOAD_TOO_LARGE, Some("That is not a token."));
        };
        let Some(role) = tokens.role_of(presented.as_bytes()) else {
            tracing::warn!(target: "hookgate::admin", %peer, "console login with a wrong token");
            // Guessing is slow: each wrong try costs its connection a pause.
            tokio::time::sleep(WRONG_TOKEN_PAUSE).await;
            return login_page(StatusCode::UNAUTHORIZED, Some("Wrong token."));
        };
        let id = hex::encode(rand::random::<[u8; 32]>());
        let csrf = hex::encode(rand::random::<[u8; 32]>());
        {
            let mut sessions = self.sessions.lock().expect("not poisoned");
            let now = Instant::now();
            sessions.retain(|_, session| session.expires > now);
            if sessions.len() >= MAX_SESSIONS {
                let oldest = sessions
                    .iter()
                    .min_by_key(|(_, session)| session.expires)
                    .map(|(id, _)| id.clone());
                if let Some(oldest) = oldest {
                    sessions.remove(&oldest);
                }
            }
            sessions.insert(
                id.clone(),
                Session {
                    csrf,
                    role,
                    expires: now + SESSION_TTL,
                },
            );
        }
        tracing::info!(target: "hookgate::admin", %peer, role = role.as_str(), "console login");
        let mut response = redirect("/ui");
        let cookie = format!(
            "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
            SESSION_TTL.as_secs()
        );
        response.headers_mut().insert(
            header::SET_COOKIE,
            HeaderValue::from_str(&cookie).expect("hex and ASCII"),
        );
        response
    }

    async fn logout(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let id = cookie(request.headers());
        let csrf = self.session(request.headers()).map(|(csrf, _)| csrf);
        let Some(presented) = form_field(request, "csrf").await else {
            return page(StatusCode::PAYLOAD_TOO_LARGE, TEXT, "too large\n");
        };
        match (id, csrf) {
            (Some(id), Some(csrf)) if bool::from(presented.as_bytes().ct_eq(csrf.as_bytes())) => {
                self.sessions.lock().expect("not poisoned").remove(&id);
                let mut response = redirect("/ui");
                response.headers_mut().insert(
                    header::SET_COOKIE,
                    HeaderValue::from_static(
                        "hookgate_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
                    ),
                );
                response
            }
            _ => page(StatusCode::FORBIDDEN, TEXT, "missing or wrong CSRF token\n"),
        }
    }
}

/// Field `name` of a urlencoded form body (empty when absent); `None` for a
/// body over [`MAX_FORM_BYTES`] or one that broke off.
async fn form_field(request: Request<Incoming>, name: &str) -> Option<String> {
    let body = Limited::new(request.into_body(), MAX_FORM_BYTES)
        .collect()
        .await
        .ok()?
        .to_bytes();
    let value = form_urlencoded::parse(&body)
        .find(|(field, _)| field == name)
        .map(|(_, value)| value.into_owned());
    Some(value.unwrap_or_default())
}

/// The session id in the request's `Cookie` header.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, id)| id.to_owned())
        .filter(|id| !id.is_empty())
}

const HTML: &str = "text/html; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

fn page(status: StatusCode, kind: &'static str, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    response
}

fn redirect(to: &'static str) -> Response<Full<Bytes>> {
    let mut response = page(StatusCode::SEE_OTHER, TEXT, "");
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    response
}

/// The login form; `problem` is one of a few fixed sentences.
fn login_page(status: StatusCode, problem: Option<&'static str>) -> Response<Full<Bytes>> {
    let problem = problem
        .map(|text| format!(r#"<p class="error" role="alert">{text}</p>"#))
        .unwrap_or_default();
    let html = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>hookgate console: log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/ui/console.css"></head>
<body><header><h1>hookgate</h1></header>
<main><section class="login"><h2>Operator console</h2>
<p>Log in with the gateway's admin token (<code>admin.token</code>), or its read token (<code>admin.read_token</code>) to look without changing anything.</p>{problem}
<form method="post" action="/ui/login">
<label>Admin token <input type="password" name="token" id="token" autocomplete="current-password" required autofocus></label>
<button class="primary" type="submit" id="login">Log in</button>
</form></section></main></body></html>
"#
    );
    page(status, HTML, &html)
}

/// The headers every console response carries.
fn secured(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_session_cookie_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; hookgate_console=abc; b=2"),
        );
        assert_eq!(cookie(&headers).as_deref(), Some("abc"));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("hookgate_console="),
        );
        assert_eq!(cookie(&headers), None);
    }

    #[test]
    fn the_page_has_no_inline_script_or_style() {
        assert!(!PAGE.contains("<script>"));
        assert!(!PAGE.contains("style="));
        assert!(!PAGE.contains("onclick"));
        assert!(
            !SCRIPT.contains("innerHTML"),
            "sender data is shown as text only"
        );
    }
}
