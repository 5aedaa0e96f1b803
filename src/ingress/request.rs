//! What the sender sent, read within bounds: the body (bounded in size and
//! time), the client's address (through `trusted_proxies`), the request id.

use std::net::IpAddr;

use bytes::Bytes;
use http::header::HeaderValue;
use http::HeaderMap;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::cidr::Cidr;
use crate::config::RequestLimits;
use crate::error::GatewayError;
use crate::headers::{new_request_id, X_FORWARDED_FOR, X_REQUEST_ID};

/// Read the whole body, bounded in size (checked while streaming; a
/// declared Content-Length over the limit fails at once) and in time.
pub(super) async fn read_body(
    body: Incoming,
    headers: &HeaderMap,
    limits: RequestLimits,
) -> Result<Bytes, GatewayError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limits.max_body_bytes as u64) {
        return Err(GatewayError::BodyTooLarge);
    }
    let read = Limited::new(body, limits.max_body_bytes).collect();
    match tokio::time::timeout(limits.body_read_timeout, read).await {
        Err(_) => Err(GatewayError::BodyTimeout),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => {
            Err(GatewayError::BodyTooLarge)
        }
        Ok(Err(_)) => Err(GatewayError::BodyUnreadable),
    }
}

/// The client's address: the peer's, or — when the peer is one of
/// `trusted_proxies` — the rightmost `X-Forwarded-For` entry that is not a
/// trusted proxy itself (entries left of it were written by the client and
/// prove nothing). An unreadable entry ends the walk at the last address
/// known good.
pub(super) fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[Cidr]) -> IpAddr {
    let is_trusted = |address: IpAddr| trusted.iter().any(|range| range.contains(address));
    if !is_trusted(peer) {
        return peer;
    }
    let chain: Vec<&str> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|list| list.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for entry in chain.iter().rev() {
        match entry.parse::<IpAddr>() {
            Ok(address) => {
                client = address;
                if !is_trusted(address) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    client
}

/// The sender's `X-Request-Id` when it is a sane token, else a fresh one.
pub(super) fn request_id(headers: &HeaderMap) -> HeaderValue {
    headers
        .get(X_REQUEST_ID)
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 128
                && v.as_bytes().iter().all(|b| (0x21..=0x7e).contains(b))
        })
        .cloned()
        .unwrap_or_else(new_request_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_is_the_first_untrusted_hop_from_the_right() {
        let trusted: Vec<Cidr> = vec!["10.0.0.0/8".parse().unwrap()];
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let headers = |chain: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(X_FORWARDED_FOR, HeaderValue::from_str(chain).unwrap());
            headers
        };
        let client = |peer: IpAddr, chain: &str| client_address(peer, &headers(chain), &trusted);
        assert_eq!(
            client(peer, "203.0.113.9"),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            client(peer, "198.51.100.1, 203.0.113.9, 10.0.0.7"),
            "203.0.113.9".parse::<IpAddr>().unwrap(),
            "a forged left part is ignored; trusted hops are skipped"
        );
        let stranger: IpAddr = "192.0.2.5".parse().unwrap();
        assert_eq!(
            client(stranger, "10.0.0.9"),
            stranger,
            "only trusted peers' headers count"
        );
        assert_eq!(client(peer, "garbage"), peer);
        assert_eq!(client_address(peer, &HeaderMap::new(), &trusted), peer);
    }
}
