//! Browser clients: CORS for the shop's pages on another origin, and the
//! contract's JSON error body for every status, unknown paths and methods
//! included.

use hyper::Method;
use seckill_e2e::http::{Client, Reply};
use seckill_e2e::TestEnv;

const SHOP: &str = "https://shop.example";

fn header<'a>(reply: &'a Reply, name: &str) -> Option<&'a str> {
    reply.headers.get(name).and_then(|v| v.to_str().ok())
}

fn preflight<'a>(origin: &'a str, method: &'a str) -> [(&'a str, &'a str); 3] {
    [
        ("origin", origin),
        ("access-control-request-method", method),
        ("access-control-request-headers", "content-type,authorization"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shop_page_on_an_allowed_origin_may_place_orders() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.cors.allowed_origins = vec![SHOP.into()];
    settings.rate_limit.per_user_per_second = 1;
    settings.rate_limit.per_user_burst = 1;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let before = env.stock.books().snapshot(sale).await.unwrap();

    // Preflights: answered before any handler, counted against nothing.
    for _ in 0..5 {
        let reply = client.send(Method::OPTIONS, "/api/seckill/order", None, &preflight(SHOP, "POST")).await;
        assert_eq!(reply.status, 204, "{:?}", reply.headers);
        assert_eq!(header(&reply, "access-control-allow-origin"), Some(SHOP));
        let methods = header(&reply, "access-control-allow-methods").unwrap_or("");
        assert!(methods.contains("POST") && methods.contains("GET"), "{methods}");
        let headers = header(&reply, "access-control-allow-headers").unwrap_or("").to_ascii_lowercase();
        for wanted in ["content-type", "authorization", "x-request-id", "idempotency-key"] {
            assert!(headers.contains(wanted), "{wanted} in {headers}");
        }
        assert!(header(&reply, "access-control-max-age").is_some());
        assert!(header(&reply, "access-control-allow-credentials").is_none(), "no credentials");
        assert!(header(&reply, "vary").is_some_and(|v| v.to_ascii_lowercase().contains("origin")));
    }
    assert_eq!(env.stock.books().snapshot(sale).await.unwrap(), before, "preflights changed nothing");

    // The real request: allowed (the preflights did not use the user's limit
    // of 1), with the origin echoed.
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":1}}"#, sale.activity, sale.sku);
    let placed = client.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &[("origin", SHOP)]).await;
    assert_eq!(placed.status, 202, "{}", placed.text);
    assert_eq!(header(&placed, "access-control-allow-origin"), Some(SHOP));
    let plain = client.order(sale.activity.get(), sale.sku.get(), 2).await;
    assert_eq!(plain.status, 202);
    assert_eq!(header(&plain, "access-control-allow-origin"), None, "no Origin, no CORS headers");

    // Another origin learns nothing: no CORS headers, so its page cannot read
    // the answer.
    let refused =
        client.send(Method::OPTIONS, "/api/seckill/order", None, &preflight("https://evil.example", "POST")).await;
    assert_eq!(header(&refused, "access-control-allow-origin"), None);
    let sneaky = client
        .send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &[("origin", "https://evil.example")])
        .await;
    assert_eq!(header(&sneaky, "access-control-allow-origin"), None);

    // The admin API never answers cross-origin (on its own address too).
    let admin = Client::new(edge.console_url())
        .send(Method::OPTIONS, &format!("/admin/sales/{}/{}", sale.activity, sale.sku), None, &preflight(SHOP, "PUT"))
        .await;
    assert_eq!(header(&admin, "access-control-allow-origin"), None);
    assert_eq!((admin.status.as_u16(), admin.code()), (405, "METHOD_NOT_ALLOWED"), "{}", admin.text);
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_has_the_json_body() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    let expect = |reply: &Reply, status: u16, code: &str, case: &str| {
        assert_eq!((reply.status.as_u16(), reply.code()), (status, code), "{case}: {}", reply.text);
        assert!(reply.json["message"].as_str().is_some_and(|m| !m.is_empty()), "{case}: a message");
        assert_eq!(header(reply, "content-type"), Some("application/json"), "{case}");
    };
    expect(&client.get("/no/such/path").await, 404, "NOT_FOUND", "unknown path");
    expect(&client.get("/api/seckill/orders").await, 404, "NOT_FOUND", "a typo in the path");
    let wrong = client.send(Method::DELETE, "/api/seckill/order", None, &[]).await;
    expect(&wrong, 405, "METHOD_NOT_ALLOWED", "DELETE on the order path");
    assert_eq!(header(&wrong, "allow"), Some("POST"), "the Allow header says what is");
    let get_order = client.get("/api/seckill/order").await;
    expect(&get_order, 405, "METHOD_NOT_ALLOWED", "GET on the order path");
    // Without configured origins a preflight is just a method nothing serves.
    let preflight = client.send(Method::OPTIONS, "/api/seckill/order", None, &preflight(SHOP, "POST")).await;
    expect(&preflight, 405, "METHOD_NOT_ALLOWED", "a preflight with CORS off");
    assert_eq!(header(&preflight, "access-control-allow-origin"), None);
    let text = client
        .send_raw(Method::POST, "/api/seckill/order", Some(b"{}".to_vec()), &[("content-type", "text/plain")])
        .await;
    expect(&text, 415, "UNSUPPORTED_MEDIA_TYPE", "text/plain");
    let huge = format!(r#"{{"pad":"{}"}}"#, "x".repeat(5_000));
    expect(
        &client.send(Method::POST, "/api/seckill/order", Some(huge.as_bytes()), &[]).await,
        413,
        "PAYLOAD_TOO_LARGE",
        "5 KB",
    );
    edge.stop().await;
}
