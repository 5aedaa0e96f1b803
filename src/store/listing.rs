//! What a listing returns: records with their scope and id, one page at a
//! time, and the opaque cursor a client passes back for the next (the
//! listing itself is `roles/listing.rs`).

use super::Record;

/// A record as a listing returns it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub scope: String,
    pub id: String,
    pub record: Record,
}

impl Listed {
    /// Where it sorts: listings are newest first by this.
    pub(super) fn position(&self) -> (u64, &str, &str) {
        (self.record.updated_ms, &self.scope, &self.id)
    }

    /// Where a listing goes on after this record.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            updated_ms: self.record.updated_ms,
            scope: self.scope.clone(),
            id: self.id.clone(),
        }
    }
}

/// One page of a listing, and where the next one starts.
#[derive(Debug, Clone)]
pub struct Page {
    pub records: Vec<Listed>,
    pub next: Option<Cursor>,
}

/// Where a listing goes on: after the record at `(updated_ms, scope, id)`.
/// Opaque to clients (URL-safe base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    updated_ms: u64,
    scope: String,
    id: String,
}

impl Cursor {
    /// Where a listing of the records changed at or before `ms` starts.
    pub fn at_or_before(ms: u64) -> Self {
        // Every scope sorts after "": its records must be older than `ms + 1`.
        Cursor {
            updated_ms: ms.saturating_add(1),
            scope: String::new(),
            id: String::new(),
        }
    }

    pub fn encode(&self) -> String {
        use base64::Engine;
        let text = format!("{}\n{}\n{}", self.updated_ms, self.scope, self.id);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    }

    pub fn decode(text: &str) -> Option<Self> {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let mut parts = text.splitn(3, '\n');
        Some(Self {
            updated_ms: parts.next()?.parse().ok()?,
            scope: parts.next()?.to_owned(),
            id: parts.next()?.to_owned(),
        })
    }

    /// The bound a listing of `scope` continues from: records of a scope
    /// that sorts before the cursor's may share its time, those of a later
    /// scope may not.
    pub(super) fn bound_for(&self, scope: &str) -> (u64, Option<&str>) {
        let id = match scope.cmp(self.scope.as_str()) {
            std::cmp::Ordering::Less => None,
            std::cmp::Ordering::Equal => Some(self.id.as_str()),
            std::cmp::Ordering::Greater => Some(""),
        };
        (self.updated_ms, id)
    }
}
