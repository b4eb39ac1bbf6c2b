//! The contract's refusals that concern who asks: rate limits (429 with
//! Retry-After), the user token and its subject, secrets that would open or
//! close the edge by accident, status reads checked and limited.

use super::contract::{edge_with, state};
use hyper::Method;
use seckill_e2e::http::{assert_error, Client, Reply};
use seckill_e2e::TestEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_answer_429_with_retry_after() {
    let env = TestEnv::new().await;
    let (edge, client) = edge_with(&env, |s| {
        s.rate_limit.per_user_per_second = 1;
        s.rate_limit.per_user_burst = 1;
    })
    .await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let (a, k) = (sale.activity.get(), sale.sku.get());
    assert_eq!(client.order(a, k, 1).await.status.as_u16(), 202);
    let before = state(&env, sale).await;
    // A burst of 5 at once: at most one passes the 1/s limit (to be told it
    // already purchased); the rest are limited.
    let burst = futures::future::join_all((0..5).map(|_| client.order(a, k, 1))).await;
    let limited: Vec<&Reply> = burst.iter().filter(|r| r.status == 429).collect();
    assert!(limited.len() >= 4, "{:?}", burst.iter().map(|r| r.status).collect::<Vec<_>>());
    assert_error(limited[0], 429, "RATE_LIMITED", "a burst over the user's limit");
    let retry_after: u64 = limited[0].headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    assert!(burst.iter().all(|r| r.status != 202));
    assert_eq!(state(&env, sale).await, before, "a limited request changes nothing");
    assert_eq!(client.order(a, k, 2).await.status.as_u16(), 202, "other users are not limited");
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_auth_checks_the_token_and_its_subject() {
    let env = TestEnv::new().await;
    let secret = "jwt-test-secret-of-at-least-32-bytes";
    let (edge, client) = edge_with(&env, |s| s.user_jwt_secret = Some(secret.into())).await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let (a, k) = (sale.activity.get(), sale.sku.get());
    let token = |sub: &str, key: &str| {
        let claims = serde_json::json!({ "sub": sub, "exp": chrono::Utc::now().timestamp() + 600 });
        jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(key.as_bytes()).unwrap(),
        )
        .unwrap()
    };
    let body = format!(r#"{{"activityId":{a},"skuId":{k},"userId":7}}"#);
    let send = |auth: Option<String>| {
        let (client, body) = (client.clone(), body.clone());
        async move {
            let headers: Vec<(&str, &str)> = auth.as_deref().map(|h| vec![("authorization", h)]).unwrap_or_default();
            client.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &headers).await
        }
    };
    let before = state(&env, sale).await;
    assert_error(&send(None).await, 401, "UNAUTHORIZED", "no token");
    assert_error(
        &send(Some(format!("Bearer {}", token("7", "wrong-secret")))).await,
        401,
        "UNAUTHORIZED",
        "bad signature",
    );
    assert_error(&send(Some(format!("Bearer {}", token("8", secret)))).await, 403, "FORBIDDEN", "someone else's token");
    assert_eq!(state(&env, sale).await, before, "refused requests changed nothing");
    let ok = send(Some(format!("Bearer {}", token("7", secret)))).await;
    assert_eq!(ok.status.as_u16(), 202, "{}", ok.text);
    let order_id = ok.json["orderId"].as_str().unwrap().to_owned();
    let other = client
        .send(
            Method::GET,
            &format!("/api/seckill/order/{order_id}"),
            None,
            &[("authorization", &format!("Bearer {}", token("8", secret)))],
        )
        .await;
    assert_error(&other, 403, "FORBIDDEN", "reading someone else's order");
    let own = client
        .send(
            Method::GET,
            &format!("/api/seckill/order/{order_id}"),
            None,
            &[("authorization", &format!("Bearer {}", token("7", secret)))],
        )
        .await;
    assert_eq!(own.status.as_u16(), 200);
    edge.stop().await;
}

/// An empty secret is a misconfiguration, never "HMAC with an empty key" or
/// "an admin token nobody can send".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_secrets_refuse_to_start() {
    let env = TestEnv::new().await;
    for (change, name) in [
        (
            Box::new(|s: &mut seckill_edge::Settings| s.user_jwt_secret = Some(String::new().into()))
                as Box<dyn Fn(&mut seckill_edge::Settings)>,
            "SECKILL_USER_JWT_SECRET",
        ),
        (Box::new(|s: &mut seckill_edge::Settings| s.admin_token = Some(String::new().into())), "SECKILL_ADMIN_TOKEN"),
    ] {
        let mut settings = env.edge_settings();
        change(&mut settings);
        let built = seckill_edge::Application::build(settings).await;
        let error = built.err().unwrap_or_else(|| panic!("an empty {name} must refuse to start"));
        assert!(format!("{error:#}").contains(name), "{error:#}");
    }
}

/// With user auth on, an order's status is revealed to its owner only — the
/// token is checked before the lookup — and status reads are rate-limited
/// like orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_check_the_token_first_and_are_rate_limited() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    settings.user_jwt_secret = Some("status-secret-of-at-least-32-bytes".into());
    settings.rate_limit.per_user_per_second = 1;
    settings.rate_limit.per_user_burst = 2;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    let sale = env.sale();
    let (a, s) = (sale.activity.get(), sale.sku.get());
    let unknown = format!("/api/seckill/order/{a}-{s}-999-00000000000000ff");
    assert_error(&client.get(&unknown).await, 401, "UNAUTHORIZED", "no token, unknown order: existence not revealed");

    let token = {
        let claims = serde_json::json!({ "sub": "5", "exp": chrono::Utc::now().timestamp() + 600 });
        let key = jsonwebtoken::EncodingKey::from_secret(b"status-secret-of-at-least-32-bytes").unwrap();
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
    };
    let bearer = format!("Bearer {token}");
    let path = format!("/api/seckill/result?activityId={a}&skuId={s}&userId=5");
    let headers = [("authorization", bearer.as_str())];
    let replies = futures::future::join_all((0..6).map(|_| client.send(Method::GET, &path, None, &headers))).await;
    let limited = replies.iter().filter(|r| r.status == 429).count();
    assert!(
        limited >= 3,
        "a burst of 6 reads over a burst of 2: {:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    edge.stop().await;
}
