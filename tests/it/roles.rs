//! `[admin] read_token`: a second token that reads everything the admin
//! API and the console show and changes nothing (403 `read_only`), by
//! bearer token and by console session alike.

use std::sync::atomic::Ordering;

use http::{Method, StatusCode};

use crate::console::{as_session, csrf_of, gateway, login};
use crate::support::*;

#[tokio::test]
async fn the_read_token_reads_every_admin_route_and_changes_nothing() {
    let (gateway, upstream, healthy) = gateway().await;
    let url = gateway.url("/hook");
    // One dead letter, keeping its request.
    let refused = Sender::new().deliver(&url, &event("evt_ro")).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "the upstream's answer"
    );
    assert_eq!(upstream.count("evt_ro"), 1);
    healthy.store(true, Ordering::SeqCst);

    let key = "/admin/routes/hook/keys/evt_ro";
    for path in [
        "/admin/events".to_owned(),
        "/admin/events?state=dead&route=hook".to_owned(),
        "/admin/routes".to_owned(),
        "/admin/events?since=1h&status=503&error=refused".to_owned(),
        "/admin/bulk".to_owned(),
        "/admin/audit".to_owned(),
        "/admin/history".to_owned(),
        key.to_owned(),
        format!("{key}?body=true"),
    ] {
        let read = get(&gateway.admin_url(&path), Some(READ_TOKEN)).await;
        assert_eq!(read.status, StatusCode::OK, "{path}");
    }
    let shown = get(&gateway.admin_url(key), Some(READ_TOKEN)).await.json();
    assert_eq!(shown["state"], "dead");

    let changes = [
        (Method::DELETE, key.to_owned()),
        (Method::DELETE, format!("{key}?force=true")),
        (Method::POST, format!("{key}/release")),
        (Method::POST, format!("{key}/redeliver")),
        (Method::POST, format!("{key}/replay")),
        (
            Method::POST,
            "/admin/routes/hook/dead-letters/redeliver".to_owned(),
        ),
        (Method::POST, "/admin/routes/hook/pause".to_owned()),
        (Method::POST, "/admin/routes/hook/resume".to_owned()),
        (Method::POST, "/admin/reload".to_owned()),
        (
            Method::POST,
            "/admin/events/redeliver?route=hook&dry_run=true".to_owned(),
        ),
        (
            Method::POST,
            "/admin/events/redeliver?route=hook".to_owned(),
        ),
        (Method::POST, "/admin/events/replay?route=hook".to_owned()),
        (Method::POST, "/admin/events/forget?route=hook".to_owned()),
        (Method::DELETE, "/admin/bulk/b_0000000000000000".to_owned()),
    ];
    for (method, path) in &changes {
        let refused = request(method.clone(), &gateway.admin_url(path), Some(READ_TOKEN)).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{method} {path}");
        assert_eq!(refused.code(), "read_only", "{method} {path}");
    }
    // A method no endpoint of the path has is 405 to anyone, naming the
    // ones it has.
    let wrong = request(
        Method::PUT,
        &gateway.admin_url("/admin/events"),
        Some(READ_TOKEN),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(wrong.headers["allow"], "GET");
    let wrong = request(Method::POST, &gateway.admin_url(key), Some(ADMIN_TOKEN)).await;
    assert_eq!(wrong.headers["allow"], "GET, DELETE");
    // Nothing changed: the record is still dead, nothing was sent again,
    // the route is not paused.
    let after = get(&gateway.admin_url(key), Some(ADMIN_TOKEN)).await.json();
    assert_eq!(after["state"], "dead");
    assert_eq!(upstream.count("evt_ro"), 1);
    let routes = get(&gateway.admin_url("/admin/routes"), Some(ADMIN_TOKEN))
        .await
        .json();
    assert!(routes["routes"][0]["paused"].is_null(), "{routes}");

    // A console session of the read token: the page says so, a change
    // with its CSRF token is refused all the same.
    let (_, cookie) = login(&gateway, READ_TOKEN).await;
    let cookie = cookie.expect("the read token logs in");
    let page = as_session(&gateway, Method::GET, "/ui", &cookie, None).await;
    let html = String::from_utf8_lossy(&page.body).into_owned();
    assert!(
        html.contains(r#"<meta name="role" content="reader">"#),
        "{html}"
    );
    let csrf = csrf_of(&gateway, &cookie).await;
    let events = as_session(&gateway, Method::GET, "/admin/events", &cookie, None).await;
    assert_eq!(events.status, StatusCode::OK);
    let refused = as_session(
        &gateway,
        Method::POST,
        &format!("{key}/redeliver"),
        &cookie,
        Some(&csrf),
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.code(), "read_only");
    assert_eq!(upstream.count("evt_ro"), 1);
    // The operator's session, its CSRF token missing; and nobody at all.
    let (_, operator) = login(&gateway, ADMIN_TOKEN).await;
    let operator = operator.expect("the admin token logs in");
    let forged = as_session(&gateway, Method::DELETE, key, &operator, None).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.json());
    let anonymous = request(Method::POST, &gateway.admin_url("/admin/reload"), None).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let wrong = request(
        Method::POST,
        &gateway.admin_url("/admin/reload"),
        Some("not-a-token-at-all"),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);

    // Every change asked is listed with its answer, refused ones too.
    let audit = get(&gateway.admin_url("/admin/audit"), Some(ADMIN_TOKEN))
        .await
        .json();
    let listed = |method: &str, path: &str, role: &str, status: u16| {
        (audit["actions"].as_array().unwrap().iter()).any(|action| {
            action["method"] == method
                && action["path"] == path
                && action["role"] == role
                && action["status"] == status
        })
    };
    for (method, path) in &changes {
        assert!(
            listed(method.as_str(), path, "reader", 403),
            "{method} {path}: {audit}"
        );
    }
    let redeliver = format!("{key}/redeliver");
    assert!(listed("POST", &redeliver, "reader", 403), "{audit}");
    assert!(
        listed("DELETE", key, "operator", 403),
        "no CSRF token: {audit}"
    );
    assert!(listed("POST", "/admin/reload", "anonymous", 401), "{audit}");
    let anonymous = (audit["actions"].as_array().unwrap().iter())
        .filter(|action| action["role"] == "anonymous")
        .count();
    assert_eq!(anonymous, 2, "{audit}");

    // The admin token still does what the read token may not.
    let page = as_session(&gateway, Method::GET, "/ui", &operator, None).await;
    let html = String::from_utf8_lossy(&page.body).into_owned();
    assert!(html.contains(r#"<meta name="role" content="operator">"#));
    let redelivered = request(
        Method::POST,
        &gateway.admin_url(&format!("{key}/redeliver")),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(redelivered.status, StatusCode::OK);
    assert_eq!(redelivered.json()["state"], "completed");
    assert_eq!(upstream.count("evt_ro"), 2);
    gateway.shutdown().await;
}
