//! How a scope's records spread over shards: one namespace per shard, an
//! event's shard picked from its key by a hash that never changes (FNV-1a),
//! so every instance and every version finds an event where the first put
//! it. With one shard — every backend today — a scope is one namespace and
//! the names are those of earlier releases. What spans a scope (listings,
//! counts, the queue) visits every shard; the queue starts each pass at the
//! next shard, so no shard's events wait behind another's.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A store's shards per scope.
#[derive(Debug)]
pub(super) struct Shards {
    count: u16,
    /// Where the next pass over a scope's queue starts.
    next: AtomicUsize,
}

impl Shards {
    pub(super) fn new(count: u16) -> Self {
        Self {
            count: count.max(1),
            next: AtomicUsize::new(0),
        }
    }

    pub(super) fn count(&self) -> u16 {
        self.count
    }

    /// The shard of an event key or a body hash; `None` with one shard.
    pub(super) fn of(&self, key: &str) -> Option<u16> {
        (self.count > 1).then(|| (fnv1a(key.as_bytes()) % u64::from(self.count)) as u16)
    }

    /// Every shard, in order.
    pub(super) fn all(&self) -> impl Iterator<Item = Option<u16>> {
        let count = self.count;
        (0..count).map(move |shard| (count > 1).then_some(shard))
    }

    /// Every shard, starting one further at each call.
    pub(super) fn rotation(&self) -> impl Iterator<Item = Option<u16>> {
        let count = self.count;
        let start = self.next.fetch_add(1, Ordering::Relaxed) % usize::from(count);
        (0..usize::from(count)).map(move |i| {
            let shard = ((start + i) % usize::from(count)) as u16;
            (count > 1).then_some(shard)
        })
    }
}

/// FNV-1a, 64 bits: stable across versions and platforms (std's hasher is
/// not promised to be).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shard_is_the_old_layout() {
        let one = Shards::new(1);
        assert_eq!(one.of("evt_1"), None);
        assert_eq!(one.all().collect::<Vec<_>>(), [None]);
        assert_eq!(one.rotation().collect::<Vec<_>>(), [None]);
    }

    #[test]
    fn keys_spread_over_every_shard_and_stay_where_they_are() {
        let shards = Shards::new(16);
        let mut seen = [0u32; 16];
        for i in 0..16_000 {
            let shard = shards.of(&format!("evt_{i}")).unwrap();
            seen[usize::from(shard)] += 1;
        }
        assert!(seen.iter().all(|n| (800..1200).contains(n)), "{seen:?}");
        // Fixed forever: a record written by one version is found by the next.
        assert_eq!(fnv1a(b"evt_1"), 0x92f4_3a00_c328_4f02);
        assert_eq!(shards.of("evt_1"), Some(2));
    }

    #[test]
    fn each_pass_starts_at_the_next_shard() {
        let shards = Shards::new(3);
        let firsts: Vec<_> = (0..4).map(|_| shards.rotation().next().unwrap()).collect();
        assert_eq!(firsts, [Some(0), Some(1), Some(2), Some(0)]);
        assert_eq!(shards.rotation().count(), 3);
    }
}
