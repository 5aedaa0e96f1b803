//! [`Fleet`]: route controls, kept fleet-wide.

use super::Fleet;
use crate::store::backend;
use crate::store::backends::on;
use crate::store::StoreError;

impl Fleet<'_> {
    /// Set or clear `route`'s control value, for every gateway sharing this
    /// store and key prefix.
    pub async fn set_control(&self, route: &str, value: Option<&str>) -> Result<(), StoreError> {
        let op = async {
            on!(self.store.backend, b => backend::Fleet::set_control(b, &self.store.key_prefix, route, value).await)
        };
        self.store.deadline("set_control", op).await
    }

    /// Every route control set under this key prefix.
    pub async fn controls(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.store.deadline("controls", async {
            on!(self.store.backend, b => backend::Fleet::controls(b, &self.store.key_prefix).await)
        })
        .await
    }
}
