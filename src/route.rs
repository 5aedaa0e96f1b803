//! Route matching (SPEC §4 step 1: exact path, query ignored, then method),
//! and each route's runtime companion: its pooled upstream client.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;

use http::Method;

use crate::config::RouteConfig;
use crate::error::GatewayError;
use crate::upstream::Upstream;

/// A configured route, ready to forward.
pub struct Route {
    pub config: Arc<RouteConfig>,
    /// Shared by every route with the same TLS roots, so keep-alive
    /// connections are pooled across them.
    pub upstream: Upstream,
}

impl Deref for Route {
    type Target = RouteConfig;

    fn deref(&self) -> &RouteConfig {
        &self.config
    }
}

/// Routes by exact path; built once per loaded (or reloaded) config.
pub struct RouteTable {
    by_path: HashMap<String, Arc<Route>>,
}

impl RouteTable {
    pub fn new(routes: &[Arc<RouteConfig>]) -> Self {
        let mut clients: Vec<(Arc<rustls::ClientConfig>, Upstream)> = Vec::new();
        let mut by_path = HashMap::new();
        for config in routes {
            let upstream = match clients
                .iter()
                .find(|(tls, _)| Arc::ptr_eq(tls, &config.upstream_tls))
            {
                Some((_, upstream)) => upstream.clone(),
                None => {
                    let upstream = Upstream::new(Arc::clone(&config.upstream_tls));
                    clients.push((Arc::clone(&config.upstream_tls), upstream.clone()));
                    upstream
                }
            };
            let route = Route {
                config: Arc::clone(config),
                upstream,
            };
            by_path.insert(config.path.clone(), Arc::new(route));
        }
        Self { by_path }
    }

    /// The route named `name` (admin API).
    pub fn named(&self, name: &str) -> Option<&Arc<Route>> {
        self.by_path.values().find(|route| route.name == name)
    }

    /// The route for `path`, if `method` is one it accepts.
    pub fn resolve(&self, path: &str, method: &Method) -> Result<&Arc<Route>, GatewayError> {
        let route = self.by_path.get(path).ok_or(GatewayError::RouteNotFound)?;
        if route.methods.contains(method) {
            Ok(route)
        } else {
            Err(GatewayError::MethodNotAllowed {
                allowed: route.methods.clone(),
            })
        }
    }
}
