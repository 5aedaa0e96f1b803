//! The audit of operator actions (`GET /admin/audit`, the console's Audit
//! page): every change asked of the admin API — who (address, `via`,
//! `role`), what (method and path with its query) and when, and how it was
//! answered. Kept in this instance's memory, the last [`KEPT`]; the log has
//! every one too (`admin action …`).

use std::collections::VecDeque;
use std::sync::Mutex;

use serde_json::json;

/// Actions remembered, at most.
const KEPT: usize = 1_000;
/// A path (with its query) is kept up to this many bytes.
const PATH_BYTES: usize = 1_000;

/// One operator action.
pub(super) struct Entry {
    pub at_ms: u64,
    pub peer: String,
    pub via: &'static str,
    pub role: &'static str,
    pub method: String,
    pub path: String,
    pub status: u16,
}

#[derive(Default)]
pub(super) struct Audit {
    entries: Mutex<VecDeque<Entry>>,
}

impl Audit {
    pub fn record(&self, mut entry: Entry) {
        if entry.path.len() > PATH_BYTES {
            let mut end = PATH_BYTES;
            while !entry.path.is_char_boundary(end) {
                end -= 1;
            }
            entry.path.truncate(end);
            entry.path.push('…');
        }
        let mut entries = self.entries.lock().expect("poisoned");
        if entries.len() == KEPT {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    /// Newest first.
    pub fn json(&self) -> serde_json::Value {
        let entries = self.entries.lock().expect("poisoned");
        let actions: Vec<_> = (entries.iter().rev())
            .map(|entry| {
                json!({
                    "at": entry.at_ms,
                    "peer": entry.peer,
                    "via": entry.via,
                    "role": entry.role,
                    "method": entry.method,
                    "path": entry.path,
                    "status": entry.status,
                })
            })
            .collect();
        json!({ "actions": actions })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> Entry {
        Entry {
            at_ms: 1,
            peer: "127.0.0.1:1".into(),
            via: "token",
            role: "operator",
            method: "POST".into(),
            path: path.into(),
            status: 200,
        }
    }

    #[test]
    fn the_audit_keeps_the_newest_and_bounds_each_path() {
        let audit = Audit::default();
        for i in 0..KEPT + 5 {
            audit.record(entry(&format!("/admin/{i}")));
        }
        let shown = audit.json();
        let actions = shown["actions"].as_array().unwrap();
        assert_eq!(actions.len(), KEPT);
        assert_eq!(actions[0]["path"], format!("/admin/{}", KEPT + 4));
        audit.record(entry(&"é".repeat(PATH_BYTES)));
        let long = audit.json()["actions"][0]["path"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(long.len() <= PATH_BYTES + '…'.len_utf8() && long.ends_with('…'));
    }
}
