//! The admin listener's endpoints as one table: each one's method, path
//! pattern, who may call it, its handler and a line of what it does.
//! Routing, `404`, `405` with its `Allow`, the read token's `403` and
//! docs/reference/admin-api.md (a test keeps it equal to [`reference`]) all come
//! from [`ENDPOINTS`]: a new admin action is one row here, one handler
//! and the operator's verb it calls (`ops::Operator`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;

use super::Admin;
use crate::access::Role;
use crate::error::AdminError;
use crate::ops::bulk::Action;

/// What an endpoint's handler answers.
pub(super) type Answer = Result<Response<Full<Bytes>>, AdminError>;

/// An endpoint's handler: the admin and the call, to its answer.
pub(super) type Handler =
    for<'a> fn(&'a Admin, Call<'a>) -> Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;

/// Who may call an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Who {
    /// No token: the scraper and the probes.
    Anyone,
    /// `admin.read_token` or `admin.token` (or a console session).
    Holder(Role),
}

/// One row of the admin API.
pub(super) struct Endpoint {
    pub method: Method,
    /// `/`-separated; `{name}` takes one segment, as [`Call::param`] reads it.
    pub path: &'static str,
    pub who: Who,
    pub handler: Handler,
    /// One line for docs/reference/admin-api.md.
    pub what: &'static str,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

/// The endpoint a request found, with its path's parameters.
pub(super) type Found<'a> = (&'static Endpoint, Vec<(&'static str, &'a str)>);

/// An admin request that found its endpoint, with who made it.
pub(super) struct Call<'a> {
    pub request: &'a Request<Incoming>,
    pub peer: SocketAddr,
    /// `token`, `console` or `none`.
    pub via: &'static str,
    /// `operator`, `reader` or `anonymous`.
    pub role: &'static str,
    params: Vec<(&'static str, &'a str)>,
}

impl<'a> Call<'a> {
    /// The path segment the endpoint's pattern names `{name}`.
    pub fn param(&self, name: &str) -> &'a str {
        let found = self.params.iter().find(|(named, _)| *named == name);
        found
            .map(|(_, value)| *value)
            .expect("the handler reads a parameter its row's path names")
    }

    /// Who asked, for a bulk action's record and the log.
    pub fn by(&self) -> String {
        format!("{} via {} as {}", self.peer, self.via, self.role)
    }
}

use Role::{Operator, Reader};
use Who::{Anyone, Holder};

/// Every endpoint of the admin listener but the console's (`/ui`), in the
/// order docs/reference/admin-api.md lists them.
pub(super) static ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        method: Method::GET,
        path: "/metrics",
        who: Anyone,
        handler: |admin, _| Box::pin(admin.metrics()),
        what: "Prometheus text format.",
    },
    Endpoint {
        method: Method::GET,
        path: "/healthz",
        who: Anyone,
        handler: |_, _| Box::pin(async { Ok(super::views::text(http::StatusCode::OK, "ok\n".into())) }),
        what: "200 while the process serves.",
    },
    Endpoint {
        method: Method::GET,
        path: "/readyz",
        who: Anyone,
        handler: |admin, _| Box::pin(admin.readyz()),
        what: "200 when the config is loaded, the listeners are up, shutdown has not begun and an embedded store takes a write; the body says how the store is.",
    },
    Endpoint {
        method: Method::GET,
        path: "/admin/api",
        who: Holder(Reader),
        handler: |admin, _| Box::pin(admin.api()),
        what: "This table: every endpoint, who may call it and what it does.",
    },
    Endpoint {
        method: Method::GET,
        path: "/admin/events",
        who: Holder(Reader),
        handler: |admin, call| Box::pin(admin.events(call)),
        what: "Records, newest first, a page at a time: `route`, `destination`, `state`, `since`, `until`, `status`, `error`, `q`, `limit`, `cursor`.",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/events/redeliver",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.bulk_start(call, Action::Redeliver)),
        what: "A bulk action: send every matching record again under its key (the listing's filters; `rate`; `dry_run=true` counts).",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/events/replay",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.bulk_start(call, Action::Replay)),
        what: "A bulk action: send every matching record again as a new event under a new key.",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/events/forget",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.bulk_start(call, Action::Forget)),
        what: "A bulk action: forget every matching record (needs a route, a state or a filter).",
    },
    Endpoint {
        method: Method::GET,
        path: "/admin/bulk",
        who: Holder(Reader),
        handler: |admin, _| Box::pin(admin.bulk_list()),
        what: "The bulk actions this instance took.",
    },
    Endpoint {
        method: Method::GET,
        path: "/admin/bulk/{id}",
        who: Holder(Reader),
        handler: |admin, call| Box::pin(admin.bulk_show(call)),
        what: "One bulk action's progress.",
    },
    Endpoint {
        method: Method::DELETE,
        path: "/admin/bulk/{id}",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.bulk_cancel(call)),
        what: "Cancels a bulk action.",
    },
    Endpoint {
        method: Method::GET,
        path: "/admin/routes",
        who: Holder(Reader),
        handler: |admin, _| Box::pin(admin.routes()),
        what: "Every route with its traffic controls and counts.",
    },
    Endpoint {
        method: Method::GET,
        path: "/admin/routes/{route}/keys/{key}",
        who: Holder(Reader),
        handler: |admin, call| Box::pin(admin.show(call)),
        what: "An event's record (its request too with `body=true`), and its state at each destination.",
    },
    Endpoint {
        method: Method::DELETE,
        path: "/admin/routes/{route}/keys/{key}",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.forget(call)),
        what: "Forgets the record: the next delivery of the key is processed again (`force=true` while in flight or queued).",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/routes/{route}/keys/{key}/release",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.release(call)),
        what: "Force-releases a stuck in-flight claim.",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/routes/{route}/keys/{key}/redeliver",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.redeliver(call)),
        what: "Sends the stored request again under the same key, and answers with the upstream's answer.",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/routes/{route}/keys/{key}/replay",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.replay(call)),
        what: "Sends the stored request again as a new event under a new key.",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/routes/{route}/dead-letters/redeliver",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.redrive(call)),
        what: "Redelivers every dead letter of the route as one bulk action (`rate`; `wait=false` answers 202 at once).",
    },
    Endpoint {
        method: Method::GET,
        path: "/admin/routes/{route}/blocked",
        who: Holder(Reader),
        handler: |admin, call| Box::pin(admin.blocked(call)),
        what: "The entities of an ordered route waiting behind a dead event (`limit`).",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/routes/{route}/pause",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.pause(call, true)),
        what: "Pauses the route for the whole fleet (`by`, `reason`).",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/routes/{route}/resume",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.pause(call, false)),
        what: "Resumes a paused route.",
    },
    Endpoint {
        method: Method::GET,
        path: "/admin/routes/{route}/reconcile",
        who: Holder(Reader),
        handler: |admin, call| Box::pin(admin.reconcile_status(call)),
        what: "The route's reconciliation with its sender, as the fleet last recorded it.",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/routes/{route}/reconcile",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.reconcile_now(call)),
        what: "One reconciliation pass now (`since=2d`; `dry_run=true` lists what is missing and changes nothing).",
    },
    Endpoint {
        method: Method::GET,
        path: "/admin/audit",
        who: Holder(Reader),
        handler: |admin, _| Box::pin(admin.audit()),
        what: "The operator actions asked of this instance.",
    },
    Endpoint {
        method: Method::GET,
        path: "/admin/history",
        who: Holder(Reader),
        handler: |admin, _| Box::pin(admin.history()),
        what: "Each route's outcomes over the last 24 hours.",
    },
    Endpoint {
        method: Method::POST,
        path: "/admin/reload",
        who: Holder(Operator),
        handler: |admin, call| Box::pin(admin.reload(call)),
        what: "Reloads the config file as SIGHUP does; 422 `config_invalid` with the problems when it is not applied.",
    },
];

/// The endpoint `method` and `path` ask for, with the path's parameters;
/// 404 when no row has the path, 405 (with the methods it has) when none
/// has the method.
pub(super) fn find<'a>(method: &Method, path: &'a str) -> Result<Found<'a>, AdminError> {
    let mut allowed = Vec::new();
    for endpoint in ENDPOINTS {
        let Some(params) = matches(endpoint.path, path) else {
            continue;
        };
        if endpoint.method == method {
            return Ok((endpoint, params));
        }
        allowed.push(endpoint.method.clone());
    }
    match allowed.is_empty() {
        true => Err(AdminError::NotFound),
        false => Err(AdminError::MethodNotAllowed { allowed }),
    }
}

/// `path`'s parameters if it has `pattern`'s shape.
fn matches<'a>(pattern: &'static str, path: &'a str) -> Option<Vec<(&'static str, &'a str)>> {
    let (mut wanted, mut given) = (pattern.split('/'), path.split('/'));
    let mut params = Vec::new();
    loop {
        match (wanted.next(), given.next()) {
            (None, None) => return Some(params),
            (Some(part), Some(segment)) => match part.strip_prefix('{') {
                Some(name) if !segment.is_empty() => {
                    params.push((name.trim_end_matches('}'), segment))
                }
                Some(_) => return None,
                None if part == segment => {}
                None => return None,
            },
            _ => return None,
        }
    }
}

impl<'a> Call<'a> {
    pub(super) fn new(
        request: &'a Request<Incoming>,
        peer: SocketAddr,
        (via, role): (&'static str, &'static str),
        params: Vec<(&'static str, &'a str)>,
    ) -> Self {
        Self {
            request,
            peer,
            via,
            role,
            params,
        }
    }
}

/// [`ENDPOINTS`] as `GET /admin/api` answers it.
pub(super) fn json() -> serde_json::Value {
    let endpoints: Vec<_> = (ENDPOINTS.iter())
        .map(|endpoint| {
            serde_json::json!({
                "method": endpoint.method.as_str(),
                "path": endpoint.path,
                "who": who(endpoint.who),
                "what": endpoint.what,
            })
        })
        .collect();
    serde_json::json!({ "endpoints": endpoints })
}

/// As docs/reference/admin-api.md and `GET /admin/api` name who may call.
fn who(who: Who) -> &'static str {
    match who {
        Anyone => "anyone",
        Holder(Reader) => "reader",
        Holder(Operator) => "operator",
    }
}

/// docs/reference/admin-api.md's table of endpoints.
#[cfg(test)]
fn reference() -> String {
    let mut table =
        String::from("| Method | Path | Who | What it does |\n| --- | --- | --- | --- |\n");
    for endpoint in ENDPOINTS {
        table += &format!(
            "| `{}` | `{}` | {} | {} |\n",
            endpoint.method,
            endpoint.path,
            who(endpoint.who),
            endpoint.what
        );
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_finds_its_row_and_its_parameters() {
        let (endpoint, params) =
            find(&Method::POST, "/admin/routes/stripe/keys/evt_1/redeliver").unwrap();
        assert_eq!(endpoint.path, "/admin/routes/{route}/keys/{key}/redeliver");
        assert_eq!(params, [("route", "stripe"), ("key", "evt_1")]);
        let (endpoint, _) = find(&Method::DELETE, "/admin/bulk/b-1").unwrap();
        assert_eq!(endpoint.who, Holder(Operator));
    }

    #[test]
    fn a_path_without_its_method_is_405_with_the_methods_it_has() {
        let refused = find(&Method::PUT, "/admin/routes/stripe/keys/evt_1").unwrap_err();
        assert_eq!(
            refused,
            AdminError::MethodNotAllowed {
                allowed: vec![Method::GET, Method::DELETE]
            }
        );
        assert_eq!(refused.to_response().headers()["allow"], "GET, DELETE");
        for unknown in [
            "/admin/routes/stripe/keys",
            "/admin/routes//blocked",
            "/admin/events/bogus",
            "/admin/routes/a/keys/b/c/d",
        ] {
            assert_eq!(
                find(&Method::GET, unknown).unwrap_err(),
                AdminError::NotFound,
                "{unknown}"
            );
        }
    }

    #[test]
    fn rows_are_one_per_method_and_path_and_a_reader_changes_nothing() {
        for (i, endpoint) in ENDPOINTS.iter().enumerate() {
            let same = ENDPOINTS[..i]
                .iter()
                .any(|before| before.method == endpoint.method && before.path == endpoint.path);
            assert!(!same, "{} {} twice", endpoint.method, endpoint.path);
            if endpoint.method != Method::GET {
                assert_eq!(
                    endpoint.who,
                    Holder(Operator),
                    "{} {}",
                    endpoint.method,
                    endpoint.path
                );
            }
            assert_eq!(
                endpoint.who == Anyone,
                !endpoint.path.starts_with("/admin/")
            );
        }
    }

    #[test]
    fn docs_list_every_endpoint() {
        let docs = include_str!("../../docs/reference/admin-api.md");
        let table = reference();
        assert!(
            docs.contains(&table),
            "docs/reference/admin-api.md is stale; its endpoint table is:\n{table}"
        );
    }
}
