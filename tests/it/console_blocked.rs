//! The console's view of ordered delivery, in a real headless Chromium: a
//! route whose entity is held by a dead event shows a "blocked" badge; its
//! list names the entity, the dead event and how many events wait; the
//! dead event opens from the list and is redelivered, and the entity's
//! waiting event follows it, in order.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::ordering::{dead_head, embedded, entity_event, ordered_config, poisoned_upstream};
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_blocked_entity_in_chromium_and_unblocks_it() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let (upstream, healed) = poisoned_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = ordered_config(&upstream, &embedded(&dir), "max_attempts = 1");
    let gateway = TestGateway::start(&config).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    dead_head(&gateway, &sender).await;
    for (id, created) in [("evt_a2", 2), ("evt_a3", 3)] {
        sender
            .deliver(&url, &entity_event(id, "sub_a", created))
            .await;
    }

    browser.open_console(&gateway.admin_url("/ui")).await;
    let badge = browser
        .wait_for(
            "the blocked badge",
            "return document.querySelector('#routes-body [data-blocked=hook]')?.textContent",
        )
        .await;
    assert_eq!(badge, "1 blocked");
    browser.screenshot("blocked-badge").await;

    browser.click("#routes-body [data-blocked=hook]").await;
    let row = browser
        .wait_for(
            "the blocked entities",
            "const row = document.querySelector('#blocked-body tr'); \
             return row && [...row.children].map(cell => cell.textContent)",
        )
        .await;
    assert_eq!(row[0], "sub_a", "{row}");
    assert_eq!(row[1], "evt_poison", "{row}");
    assert_eq!(row[3], "2", "two events wait: {row}");
    assert_eq!(upstream.count("evt_a2"), 0, "held behind the dead event");
    let section = browser
        .run("return document.querySelector('#event').textContent")
        .await;
    assert!(!section.as_str().unwrap().contains("null"), "{section}");
    browser.screenshot("blocked-entities").await;

    // The dead event, opened from the list, redelivered once the upstream
    // takes it: the entity's events follow it, in order.
    browser.click("#blocked-body a").await;
    browser
        .wait_for(
            "the dead event",
            "return document.querySelector('#event-state [data-state=dead]')",
        )
        .await;
    healed.store(true, Ordering::SeqCst);
    browser.click("button[data-action=redeliver]").await;
    browser.confirm().await;
    let all = ["evt_poison", "evt_a2", "evt_a3"].map(String::from);
    assert!(upstream.all_reached(&all, Duration::from_secs(10)).await);
    let order: Vec<String> = (upstream.seen().into_iter())
        .map(|seen| seen.key())
        .filter(|key| key != "evt_poison")
        .collect();
    assert_eq!(order, ["evt_a2", "evt_a3"]);

    // The badge is gone once the list is drawn again.
    browser.click("#nav-overview").await;
    browser
        .wait_for(
            "no badge",
            "return document.querySelector('#routes-body tr[data-route=hook]') \
             && !document.querySelector('#routes-body [data-blocked=hook]')",
        )
        .await;
    browser.screenshot("unblocked").await;
    gateway.shutdown().await;
}
