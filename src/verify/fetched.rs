//! Keys a sender publishes at a URL (AWS SNS's `SigningCertURL`, PayPal's
//! `PAYPAL-CERT-URL`, a described sender's `key_url`): fetched over
//! verified HTTPS, only from the hosts the route allows, and kept for as
//! long as the response's `Cache-Control` says (a minute to a day) so one
//! key is fetched once, not per delivery (docs/guide/senders.md,
//! "Supported senders", "Keys fetched from the sender").
//!
//! The URL comes from the unverified body, so it is checked before anything
//! is fetched: `https`, no user or password, a host on the allowlist (and
//! port 443 unless the entry names one). A fetch is bounded in time and
//! size, and at most four run at once; concurrent deliveries naming the
//! same URL wait on one fetch. A fetch that fails is not kept: the delivery
//! gets 503 `sender_unreachable`, and so does every delivery naming that
//! URL for the next 10 seconds, without another fetch — a forged delivery
//! cannot make the gateway fetch faster than that — after which the
//! sender's retry fetches again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use tokio::sync::OnceCell;

use super::VerifyError;

/// How long one fetch may take, connect to last byte.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest document read; a certificate is about 2 KiB.
const MAX_FETCHED_BYTES: usize = 64 << 10;
/// How long a fetched document is kept when its response does not say
/// (`Cache-Control: max-age`), and the longest it is kept when it does.
/// SNS names a new certificate URL when it rotates, so an entry is never
/// stale in meaning; the bound keeps a revoked one from living for ever.
const KEEP_FOR: Duration = Duration::from_secs(24 * 3600);
/// The shortest a fetched document is kept, whatever its response says: a
/// `max-age=0` must not turn every delivery into a fetch.
const KEEP_AT_LEAST: Duration = Duration::from_secs(60);
/// Most URLs kept at once: SNS has one certificate per region.
const MAX_KEPT: usize = 64;
/// Fetches at once, per route.
const MAX_FETCHES: usize = 4;
/// How long a URL whose fetch failed is answered 503 without a new fetch.
const FAILED_FOR: Duration = Duration::from_secs(10);

/// A host a key may be fetched from: `sns.*.amazonaws.com` (`*` is one DNS
/// label), optionally with `:port` (else only 443).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    labels: Vec<String>,
    port: u16,
}

impl HostPattern {
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => {
                let port = (port.parse::<u16>().ok().filter(|port| *port > 0))
                    .ok_or_else(|| format!("{text:?}: {port:?} is not a port"))?;
                (host, port)
            }
            None => (text, 443),
        };
        let labels: Vec<String> = host.split('.').map(str::to_ascii_lowercase).collect();
        let label_ok = |label: &String| {
            label == "*"
                || (!label.is_empty()
                    && (label.bytes()).all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        };
        if labels.len() < 2 && host != "localhost" || !labels.iter().all(label_ok) {
            return Err(format!(
                "{text:?} is not a host name (like \"sns.*.amazonaws.com\", `*` for one label)"
            ));
        }
        Ok(HostPattern { labels, port })
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        let labels: Vec<&str> = host.split('.').collect();
        port == self.port
            && labels.len() == self.labels.len()
            && (self.labels.iter().zip(&labels))
                .all(|(want, got)| want == "*" && !got.is_empty() || want.eq_ignore_ascii_case(got))
    }
}

/// AWS SNS's own hosts: `sns.<region>.amazonaws.com` and, in China,
/// `sns.<region>.amazonaws.com.cn`.
pub fn sns_hosts() -> Vec<HostPattern> {
    ["sns.*.amazonaws.com", "sns.*.amazonaws.com.cn"]
        .iter()
        .map(|text| HostPattern::parse(text).expect("valid"))
        .collect()
}

/// Where a route's fetched keys may come from, as configured.
#[derive(Debug, Clone)]
pub struct FetchSpec {
    pub hosts: Vec<HostPattern>,
    /// Trusted beyond the Mozilla roots (`cert_ca`).
    pub roots: Vec<CertificateDer<'static>>,
}

/// A document, and until when it is kept.
type Fetched = (Bytes, tokio::time::Instant);

struct Kept {
    cell: Arc<OnceCell<Fetched>>,
    /// Until when a failed fetch is not tried again.
    failed_until: Option<tokio::time::Instant>,
}

/// A route's fetcher: the allowlist, one HTTPS client, and what it fetched.
pub struct Fetcher {
    hosts: Vec<HostPattern>,
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    kept: Mutex<HashMap<String, Kept>>,
    fetches: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

impl Fetcher {
    pub fn new(spec: &FetchSpec) -> Result<Fetcher, String> {
        let tls = crate::tls::client_config(&spec.roots)?;
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(FETCH_TIMEOUT));
        http.enforce_http(false);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_only()
            .enable_http1()
            .wrap_connector(http);
        Ok(Fetcher {
            hosts: spec.hosts.clone(),
            client: Client::builder(TokioExecutor::new()).build(connector),
            kept: Mutex::default(),
            fetches: tokio::sync::Semaphore::new(MAX_FETCHES),
        })
    }

    /// `url`, parsed, when it may be fetched: `https`, no user info, an
    /// allowed host and port.
    pub fn allowed(&self, url: &str) -> Option<Uri> {
        let uri: Uri = url.parse().ok()?;
        let authority = uri.authority()?;
        let allowed = uri.scheme_str() == Some("https")
            && !authority.as_str().contains('@')
            && (self.hosts.iter())
                .any(|host| host.matches(authority.host(), authority.port_u16().unwrap_or(443)));
        allowed.then_some(uri)
    }

    /// The document at `url` (an allowed one): kept from an earlier fetch,
    /// or fetched now, once for every delivery waiting on it.
    pub async fn document(&self, url: &Uri) -> Result<Bytes, VerifyError> {
        let key = url.to_string();
        let cell = {
            let mut kept = self.kept.lock().expect("poisoned");
            let fresh = |kept: &Kept| (kept.cell.get()).is_none_or(|(_, until)| *until > now());
            if kept.get(&key).is_some_and(|entry| !fresh(entry)) {
                kept.remove(&key);
            }
            if kept.len() >= MAX_KEPT && !kept.contains_key(&key) {
                kept.retain(|_, entry| entry.cell.get().is_some() && fresh(entry));
                if kept.len() >= MAX_KEPT {
                    kept.clear();
                }
            }
            let entry = kept.entry(key.clone()).or_insert_with(|| Kept {
                cell: Arc::default(),
                failed_until: None,
            });
            if entry
                .failed_until
                .is_some_and(|until| until > tokio::time::Instant::now())
            {
                return Err(VerifyError::SenderUnreachable);
            }
            entry.cell.clone()
        };
        let fetched = cell
            .get_or_try_init(|| async {
                let (document, keep) = self.fetch(url).await?;
                Ok::<_, VerifyError>((document, now() + keep))
            })
            .await;
        match fetched {
            Ok((document, _)) => Ok(document.clone()),
            Err(error) => {
                let until = tokio::time::Instant::now() + FAILED_FOR;
                if let Some(entry) = self.kept.lock().expect("poisoned").get_mut(&key) {
                    entry.failed_until = Some(until);
                }
                Err(error)
            }
        }
    }

    /// The document at `url` if it was fetched and is still kept.
    pub fn kept(&self, url: &Uri) -> Option<Bytes> {
        let kept = self.kept.lock().expect("poisoned");
        let (document, until) = kept.get(&url.to_string())?.cell.get()?;
        (*until > now()).then(|| document.clone())
    }

    /// Keep `document` as if fetched from `url` (tests).
    #[cfg(test)]
    pub fn keep(&self, url: &Uri, document: &str) {
        let cell = Arc::new(OnceCell::new());
        let _ = cell.set((Bytes::from(document.to_owned()), now() + KEEP_FOR));
        let mut kept = self.kept.lock().expect("poisoned");
        let failed_until = None;
        kept.insert(url.to_string(), Kept { cell, failed_until });
    }

    /// Drop what was kept for `url` (it turned out unusable): the next
    /// delivery fetches it again.
    pub fn forget(&self, url: &Uri) {
        self.kept.lock().expect("poisoned").remove(&url.to_string());
    }

    /// GET `url` (an allowed one), uncached: its body on a 200.
    pub async fn get(&self, url: &Uri) -> Result<Bytes, VerifyError> {
        Ok(self.fetch(url).await?.0)
    }

    /// GET `url`: its body, and how long it may be kept — the response's
    /// `Cache-Control: max-age`, between a minute and a day, else a day.
    async fn fetch(&self, url: &Uri) -> Result<(Bytes, Duration), VerifyError> {
        let fail = |why: String| {
            tracing::warn!(url = %url, error = %why, "fetch from the sender failed");
            VerifyError::SenderUnreachable
        };
        let request = Request::get(url.clone())
            .header(http::header::USER_AGENT, "hookgate")
            .body(Empty::new())
            .map_err(|e| fail(e.to_string()))?;
        let fetch = async {
            let _turn = self
                .fetches
                .acquire()
                .await
                .map_err(|e| fail(e.to_string()))?;
            let response = (self.client.request(request).await).map_err(|e| fail(e.to_string()))?;
            if response.status() != StatusCode::OK {
                return Err(fail(format!("answered {}", response.status())));
            }
            let keep = (response.headers().get(http::header::CACHE_CONTROL))
                .and_then(|value| max_age(value.to_str().ok()?))
                .map_or(KEEP_FOR, |age| age.clamp(KEEP_AT_LEAST, KEEP_FOR));
            let body = Limited::new(response.into_body(), MAX_FETCHED_BYTES);
            let body = (body.collect().await).map_err(|e| fail(e.to_string()))?;
            Ok((body.to_bytes(), keep))
        };
        tokio::time::timeout(FETCH_TIMEOUT, fetch)
            .await
            .map_err(|_| fail("timed out".into()))?
    }
}

fn now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// The `max-age` of a `Cache-Control` value; `no-store` and `no-cache`
/// are an age of zero.
fn max_age(value: &str) -> Option<Duration> {
    value.split(',').map(str::trim).find_map(|directive| {
        let lower = directive.to_ascii_lowercase();
        match lower.split_once('=') {
            Some(("max-age", seconds)) => seconds
                .trim_matches('"')
                .parse()
                .ok()
                .map(Duration::from_secs),
            None if lower == "no-store" || lower == "no-cache" => Some(Duration::ZERO),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_documents_cache_rules_are_read() {
        for (value, age) in [
            ("public, max-age=3600", Some(3600)),
            ("max-age=\"60\"", Some(60)),
            ("no-store", Some(0)),
            ("private", None),
            ("max-age=soon", None),
        ] {
            assert_eq!(max_age(value), age.map(Duration::from_secs), "{value}");
        }
    }

    fn fetcher(hosts: &[&str]) -> Fetcher {
        let hosts = hosts
            .iter()
            .map(|h| HostPattern::parse(h).unwrap())
            .collect();
        Fetcher::new(&FetchSpec {
            hosts,
            roots: vec![],
        })
        .unwrap()
    }

    #[test]
    fn only_https_urls_on_allowed_hosts_are_fetched() {
        let sns = Fetcher::new(&FetchSpec {
            hosts: sns_hosts(),
            roots: vec![],
        })
        .unwrap();
        for (url, ok) in [
            (
                "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-1.pem",
                true,
            ),
            ("https://SNS.eu-west-1.amazonaws.com/a.pem", true),
            ("https://sns.cn-north-1.amazonaws.com.cn/a.pem", true),
            ("https://sns.us-east-1.amazonaws.com:443/a.pem", true),
            ("http://sns.us-east-1.amazonaws.com/a.pem", false),
            ("https://sns.us-east-1.amazonaws.com:8443/a.pem", false),
            (
                "https://sns.us-east-1.amazonaws.com.evil.example/a.pem",
                false,
            ),
            (
                "https://evil.example/sns.us-east-1.amazonaws.com/a.pem",
                false,
            ),
            ("https://x@sns.us-east-1.amazonaws.com/a.pem", false),
            ("https://sns..amazonaws.com/a.pem", false),
            ("https://s3.us-east-1.amazonaws.com/a.pem", false),
            ("https://a.sns.us-east-1.amazonaws.com/a.pem", false),
            ("not a url", false),
        ] {
            assert_eq!(sns.allowed(url).is_some(), ok, "{url}");
        }
        let local = fetcher(&["localhost:8443"]);
        assert!(local.allowed("https://localhost:8443/c.pem").is_some());
        assert!(local.allowed("https://localhost/c.pem").is_none());
    }

    /// A fetch that failed is not tried again for a while: a run of forged
    /// deliveries naming a dead URL costs one fetch, not one each.
    #[tokio::test]
    async fn a_failed_fetch_is_not_repeated_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let tries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&tries);
        tokio::spawn(async move {
            // Accepts and hangs up: every TLS handshake fails.
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(socket);
            }
        });
        let local = fetcher(&[&format!("localhost:{port}")]);
        let url = local
            .allowed(&format!("https://localhost:{port}/c.pem"))
            .unwrap();
        for _ in 0..3 {
            assert_eq!(
                local.document(&url).await,
                Err(VerifyError::SenderUnreachable)
            );
        }
        assert_eq!(tries.load(std::sync::atomic::Ordering::SeqCst), 1);
        let other = local
            .allowed(&format!("https://localhost:{port}/d.pem"))
            .unwrap();
        assert_eq!(
            local.document(&other).await,
            Err(VerifyError::SenderUnreachable)
        );
        assert_eq!(
            tries.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "per URL"
        );
    }

    #[test]
    fn a_host_pattern_is_a_host_name() {
        for bad in [
            "",
            "*",
            "com",
            "sns.*.amazonaws.com:0",
            "a b.com",
            "x.com:http",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }
}
