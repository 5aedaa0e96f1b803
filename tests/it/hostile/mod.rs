//! Attacks and broken peers, played against the real gateway: upstreams
//! that time out, hang up or cut their answer short; senders that try to
//! slip a second delivery past the claim or forge where they come from;
//! operators who forget a key mid-call; and sockets, disks and replicas that
//! try to starve the gateway. Every test counts what the upstream saw.

mod senders;
mod starvation;
mod upstreams;

use crate::support::*;

fn route_config(upstream: &str, route_extra: &str) -> String {
    config_text(upstream, &Backend::Memory, route_extra, "")
}
