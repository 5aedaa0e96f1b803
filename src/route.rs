//! Route matching: exact path (query ignored), then method (SPEC §4 step 1).

use std::collections::HashMap;
use std::sync::Arc;

use http::Method;

use crate::config::RouteConfig;
use crate::error::GatewayError;

/// Routes by exact path; built once per loaded config.
pub struct RouteTable {
    by_path: HashMap<String, Arc<RouteConfig>>,
}

impl RouteTable {
    pub fn new(routes: &[Arc<RouteConfig>]) -> Self {
        let by_path = routes
            .iter()
            .map(|route| (route.path.clone(), Arc::clone(route)))
            .collect();
        Self { by_path }
    }

    /// The route named `name` (admin API).
    pub fn named(&self, name: &str) -> Option<&Arc<RouteConfig>> {
        self.by_path.values().find(|route| route.name == name)
    }

    /// Every route, in no particular order.
    pub fn all(&self) -> impl Iterator<Item = &Arc<RouteConfig>> {
        self.by_path.values()
    }

    /// The route for `path`, if `method` is one it accepts.
    pub fn resolve(&self, path: &str, method: &Method) -> Result<&Arc<RouteConfig>, GatewayError> {
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
