//! `[[notify]]`, the `redis-sentinel` store and Redis's packed
//! completions: what each needs, and what each refuses.

use std::time::Duration;

use super::{parse, problems, MINIMAL};
use crate::config::Backend;

/// `redis-sentinel`: the sentinels, the primary's name and, optionally, how
/// to talk to the primary; each missing piece or mixed sentinel named.
#[test]
fn parses_a_sentinel_store() {
    let with = |store: &str| MINIMAL.replace("backend = \"memory\"", store);
    let config = parse(&with(
        "backend = \"redis-sentinel\"\nsentinels = [\"redis://10.0.0.1:26379\", \"redis://10.0.0.2:26379\"]\n\
         master = \"mymaster\"\nurl = \"redis://hookgate:pw@primary/2\"\nmin_replicas_acked = 1",
    ))
    .unwrap();
    assert_eq!(
        config.fixed.store.backend,
        Backend::RedisSentinel {
            sentinels: vec![
                "redis://10.0.0.1:26379".into(),
                "redis://10.0.0.2:26379".into()
            ],
            master: "mymaster".into(),
            url: Some("redis://hookgate:pw@primary/2".into()),
        }
    );
    assert_eq!(config.fixed.store.min_replicas_acked, 1);
    assert!(config
        .summary()
        .contains("redis-sentinel (primary \"mymaster\", asked of 2 sentinels)"));

    let refused = |store: &str| problems(&with(store)).join("\n");
    let missing = refused("backend = \"redis-sentinel\"");
    assert!(missing.contains("needs `sentinels = ["), "{missing}");
    assert!(
        missing.contains("needs `master = \"mymaster\"`"),
        "{missing}"
    );
    let mixed = refused(
        "backend = \"redis-sentinel\"\nmaster = \"m\"\nsentinels = [\"redis://a:26379\", \"rediss://b:26379\"]",
    );
    assert!(mixed.contains("all rediss:// or all redis://"), "{mixed}");
    let logins = refused(
        "backend = \"redis-sentinel\"\nmaster = \"m\"\nsentinels = [\"redis://u:p@a:26379\", \"redis://b:26379\"]",
    );
    assert!(logins.contains("the same user and password"), "{logins}");
    let stray = refused("backend = \"redis\"\nurl = \"redis://a:6379\"\nmaster = \"m\"");
    assert!(
        stray.contains("`master` does not apply to backend \"redis\""),
        "{stray}"
    );
}

/// `packed_completions`: on unless set false, and a Redis store's alone.
#[test]
fn parses_packed_completions() {
    let with = |store: &str| MINIMAL.replace("backend = \"memory\"", store);
    let redis = "backend = \"redis\"\nurl = \"redis://a:6379\"";
    let store = |text: &str| parse(&with(text)).unwrap().fixed.store;
    assert!(store(redis).packed_completions);
    assert!(!store(&format!("{redis}\npacked_completions = false")).packed_completions);
    let stray = problems(&with("backend = \"memory\"\npacked_completions = true")).join("\n");
    assert!(
        stray.contains("`packed_completions` does not apply to backend \"memory\""),
        "{stray}"
    );
}

/// `[[notify]]`: each kind's own setting required, and only there; the
/// events and routes it names must exist; its delivery is a route no
/// sender reaches.
#[test]
fn parses_notify_targets() {
    let with = |notify: &str| format!("{MINIMAL}\n{notify}");
    let text = with(
        "[[notify]]\nname = \"pd\"\nkind = \"pagerduty\"\nrouting_key = \"R0123\"\non = [\"dead_letter\"]\n\
         [[notify]]\nname = \"hooks\"\nkind = \"webhook\"\nurl = \"https://oncall.example/hook\"\n\
         secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nroutes = [\"orders\"]\ngroup_within = \"30s\"",
    );
    let config = parse(&text).unwrap();
    let [pd, hooks] = &config.live.notify[..] else {
        panic!("two targets")
    };
    assert_eq!(pd.kind, crate::config::NotifyKind::PagerDuty);
    assert_eq!(
        pd.delivery.call.upstream.to_string(),
        "https://events.pagerduty.com/v2/enqueue"
    );
    assert_eq!(pd.on, [crate::config::NoticeKind::DeadLetter]);
    assert_eq!(hooks.delivery.name, "@notify/hooks");
    assert!(hooks.delivery.signs.is_some() && pd.delivery.signs.is_none());
    assert!(hooks.wants(crate::config::NoticeKind::BreakerOpen, "orders"));
    assert!(!hooks.wants(crate::config::NoticeKind::BreakerOpen, "other"));
    assert_eq!(hooks.group_within, Duration::from_secs(30));
    assert!(config.live.scopes().contains(&"@notify/hooks".to_owned()));
    let summary = config.summary();
    assert!(summary.contains("notify hooks: webhook (Standard Webhooks signed) on dead_letter, entity_blocked, breaker_open, queue_near_bound, reconcile_missing for orders, grouped within 30s, at most 1/s"), "{summary}");
    assert!(
        !summary.contains("oncall.example"),
        "never the URL: {summary}"
    );

    let refused = |notify: &str| problems(&with(notify)).join("\n");
    let webhook =
        refused("[[notify]]\nname = \"w\"\nkind = \"webhook\"\nurl = \"https://x.example/\"");
    assert!(webhook.contains("needs `secret`"), "{webhook}");
    let pagerduty = refused("[[notify]]\nname = \"p\"\nkind = \"pagerduty\"");
    assert!(pagerduty.contains("needs `routing_key`"), "{pagerduty}");
    let slack = refused(
        "[[notify]]\nname = \"s\"\nkind = \"slack\"\nurl = \"https://hooks.slack.com/x\"\n\
         on = [\"dead_letters\"]\nroutes = [\"nope\"]\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
    );
    assert!(
        slack.contains("notify[0].on[0]: \"dead_letters\" is not one of"),
        "{slack}"
    );
    assert!(slack.contains("no route is named \"nope\""), "{slack}");
    assert!(slack.contains("only a webhook target is signed"), "{slack}");
}
