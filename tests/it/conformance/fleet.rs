//! The [`Fleet`](hookgate::store::Fleet) capability: route controls kept
//! until cleared — on every backend (the replay cache's invalidation feed
//! is `tests/it/replay_cache.rs`).

use hookgate::store::Store;

#[allow(unused_imports)]
use super::*;

/// The controls of routes named `{run}-…`, sorted.
async fn ours(store: &Store, run: &str) -> Vec<(String, String)> {
    let mut controls: Vec<(String, String)> = (store.fleet().controls().await.unwrap().into_iter())
        .filter(|(route, _)| route.starts_with(run))
        .collect();
    controls.sort();
    controls
}

/// Route controls (a pause) are set, replaced and cleared, and every
/// gateway reading the store sees the same set.
async fn route_controls_are_kept_until_cleared(store: Store, _: Time) {
    // The shared cluster outlives a test: names of this run only.
    let run = format!("r{}", rand::random::<u32>());
    let name = |route: &str| format!("{run}-{route}");
    assert!(ours(&store, &run).await.is_empty());
    store
        .fleet()
        .set_control(&name("a"), Some("{\"by\":\"x\"}"))
        .await
        .unwrap();
    store
        .fleet()
        .set_control(&name("b"), Some("paused"))
        .await
        .unwrap();
    store
        .fleet()
        .set_control(&name("a"), Some("again"))
        .await
        .unwrap();
    assert_eq!(
        ours(&store, &run).await,
        vec![
            (name("a"), "again".to_owned()),
            (name("b"), "paused".to_owned())
        ]
    );
    store.fleet().set_control(&name("a"), None).await.unwrap();
    store
        .fleet()
        .set_control(&name("missing"), None)
        .await
        .unwrap();
    assert_eq!(
        ours(&store, &run).await,
        vec![(name("b"), "paused".to_owned())]
    );
}

conformance! {
    tests: [
        route_controls_are_kept_until_cleared,
    ],
}
