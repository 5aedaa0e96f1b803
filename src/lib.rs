//! hookgate: a reverse proxy that gives existing webhook endpoints
//! exactly-once processing.
//!
//! # Layout
//!
//! The modules follow the life of a delivery (SPEC §4), and
//! [`pipeline::Gateway::handle`] walks through them in order:
//!
//! - [`config`] — the TOML file, validated into typed settings.
//! - [`server`] — accept, connection limits, HTTP/1.1 + h2c, graceful drain.
//! - [`route`] — exact-path and method matching.
//! - [`verify`] — signature schemes, on the raw body, before anything else.
//! - [`key`] — the idempotency key from a header, a JSON pointer or the body.
//! - [`store`] — atomic claims with fenced leases (`memory`, `redis`).
//! - [`lease`] — renewal while the upstream runs; claims held at shutdown.
//! - [`upstream`] — the forwarded request and the pooled client.
//! - [`replay`] — recorded responses and their replay.
//! - [`error`] — every response hookgate writes itself, status and code.
//! - [`headers`] — header names and hop-by-hop rules.
//!
//! [`run`] wires them together for the binary; tests use the same pieces.

#![forbid(unsafe_code)]

pub mod config;
pub mod error;
pub mod headers;
pub mod key;
pub mod lease;
pub mod pipeline;
pub mod replay;
pub mod route;
pub mod server;
pub mod store;
pub mod upstream;
pub mod verify;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::pipeline::Gateway;
use crate::store::Store;

/// Run a gateway for `config` on an already bound `listener` until
/// `shutdown` resolves, then drain.
pub async fn run(
    config: &Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), store::StoreError> {
    let store = Store::open(&config.store)?;
    let gateway = Arc::new(Gateway::new(config, store));
    server::serve(listener, gateway, &config.server, shutdown).await;
    Ok(())
}
