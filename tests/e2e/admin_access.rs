//! Admin access is apart, not guessable, and sessions end: the operators'
//! routes answer only on `admin_addr` (unless it is set to the buyers'
//! address), failed admin authentications are throttled per client, a
//! token configured with a trailing newline works, a dashboard stream ends
//! at sign-out, the cookie is `Secure` behind TLS, and short secrets are
//! refused at start.

use hyper::Method;
use seckill_e2e::http::{assert_error, Client, Reply};
use seckill_e2e::{TestEnv, ADMIN_TOKEN};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Every operators' path, as a request with the admin token would ask it.
fn operators_paths(sale: seckill_shared::domain::SaleKey) -> Vec<(Method, String)> {
    let sale_path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    vec![
        (Method::GET, sale_path.clone()),
        (Method::PUT, sale_path.clone()),
        (Method::POST, format!("{sale_path}/close")),
        (Method::GET, "/admin/dashboard".into()),
        (Method::GET, "/admin/dashboard/snapshot".into()),
        (Method::GET, "/admin/dashboard/app.js".into()),
        (Method::POST, "/admin/login".into()),
        (Method::POST, "/admin/logout".into()),
        (Method::GET, "/admin/dead-letters".into()),
        (Method::GET, "/admin/dead-letters/stats".into()),
        (Method::GET, "/admin/dead-letters/records".into()),
        (Method::GET, "/admin/dead-letters/runs".into()),
        (Method::POST, "/admin/dead-letters/runs".into()),
        (Method::GET, "/admin/dead-letters/runs/1".into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_routes_answer_only_on_the_admin_address() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    assert_ne!(edge.addr, edge.console, "two listeners");
    let (buyers, console) = (Client::new(edge.url()), Client::new(edge.console_url()));
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    for (method, path) in operators_paths(sale) {
        let reply = buyers.send(method.clone(), &path, None, &[("authorization", &bearer)]).await;
        assert_error(&reply, 404, "NOT_FOUND", &format!("{method} {path} on the buyers' address"));
    }
    let report = console
        .send(Method::GET, &format!("/admin/sales/{}/{}", sale.activity, sale.sku), None, &[("authorization", &bearer)])
        .await;
    assert_ne!(report.status.as_u16(), 404, "{}", report.text);
    // The console serves no buyer: an order there is not found, and the
    // sale keeps its stock.
    let order = console.order(sale.activity.get(), sale.sku.get(), 7).await;
    assert_error(&order, 404, "NOT_FOUND", "an order on the console's address");
    assert_eq!(console.get("/healthz").await.status, 200, "the console is probed too");
    assert_eq!(console.get("/metrics").await.status, 404, "metrics are the buyers' address's");
    assert_eq!(env.redis_stock(sale).await, 3);
    edge.stop().await;

    // Set to the buyers' address, one listener serves both.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut settings = env.edge_settings();
    (settings.http_addr, settings.admin_addr) = (port.to_string(), port.to_string());
    let shared = env.spawn_edge(settings).await;
    assert_eq!(shared.addr, shared.console);
    let both = Client::new(shared.url());
    let report = both
        .send(Method::GET, &format!("/admin/sales/{}/{}", sale.activity, sale.sku), None, &[("authorization", &bearer)])
        .await;
    assert_eq!(report.status, 200, "{}", report.text);
    shared.stop().await;
}

/// The console has a database pool of its own: with the buyers' one
/// connection held by a cancel that waits on its order's row lock, the
/// sale's report (PostgreSQL's figures among them) is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reads_postgresql_while_the_buyers_pool_is_taken() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let mut settings = env.edge_settings();
    settings.servers.database.max_connections = 1;
    settings.servers.database.lock_timeout_ms = 30_000;
    settings.servers.database.call_deadline_ms = 60_000;
    let edge = env.spawn_edge(settings).await;
    let order = env.spawn_order(env.order_settings()).await;
    let buyers = Client::new(edge.url());
    let order_id = crate::lifecycle::created_order(&buyers, sale, 7).await;

    let mut holder = env.db.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM orders WHERE order_id = $1 FOR UPDATE")
        .bind(&order_id)
        .execute(&mut *holder)
        .await
        .unwrap();
    let cancel = tokio::spawn({
        let (buyers, order_id) = (buyers.clone(), order_id.clone());
        async move { crate::lifecycle::post(&buyers, &order_id, "cancel", 7, None).await }
    });
    // The cancel waits on the row, holding the buyers' connection.
    crate::db_bounds::waiting_for_a_lock(&env).await;
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let report = Client::new(edge.console_url()).send(Method::GET, &path, None, &[("authorization", &bearer)]).await;
    assert_eq!(report.status, 200, "the console's own pool answers: {}", report.text);
    assert!(!cancel.is_finished(), "the cancel still holds the buyers' connection");
    holder.rollback().await.unwrap();
    let cancelled = cancel.await.unwrap();
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    order.stop().await;
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_admin_tokens_are_throttled_per_client() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.console_url());
    let sale = env.sale();
    env.warmup(sale, 1).await;
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let mut statuses = Vec::new();
    for guess in 0..300 {
        let token = format!("Bearer guess-{guess:012}");
        statuses.push(client.send(Method::GET, &path, None, &[("authorization", &token)]).await.status.as_u16());
    }
    let unauthorized = statuses.iter().filter(|s| **s == 401).count();
    let throttled = statuses.iter().filter(|s| **s == 429).count();
    // A burst of 10 failures; the one past it is answered 401 too (its
    // token was looked at before it was known to fail), every later one 429.
    assert_eq!((unauthorized, throttled), (11, 289), "{statuses:?}");
    // Throttled before the token is looked at: the right one waits too.
    let right = client.send(Method::GET, &path, None, &[("authorization", &format!("Bearer {ADMIN_TOKEN}"))]).await;
    assert_error(&right, 429, "RATE_LIMITED", "a client that guessed is throttled");
    assert!(right.headers.contains_key("retry-after"));
    let metrics = Client::new(edge.url()).get("/metrics").await.text;
    let failures = metrics.lines().find(|l| l.starts_with("seckill_edge_admin_auth_failures_total")).unwrap();
    assert!(failures.ends_with(" 11"), "{failures}");
    // The login form counts the same.
    let login = log_in(&client).await;
    assert_eq!(login.status, 429);
    edge.stop().await;
}

/// Posts the admin token to the sign-in form.
async fn log_in(client: &Client) -> Reply {
    client
        .send_raw(
            Method::POST,
            "/admin/login",
            Some(format!("token={ADMIN_TOKEN}").into_bytes()),
            &[("content-type", "application/x-www-form-urlencoded")],
        )
        .await
}

/// Signs in through the form; answers the session cookie (`name=value`).
async fn sign_in(client: &Client) -> String {
    let login = log_in(client).await;
    assert_eq!(login.status, 303, "{}", login.text);
    let cookie = login.headers["set-cookie"].to_str().unwrap().to_owned();
    cookie.split(';').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dashboard_stream_ends_at_sign_out_and_the_cookie_is_secure_behind_tls() {
    let env = TestEnv::new().await;
    let mut settings = env.edge_settings();
    // A Kubernetes Secret made from a file keeps the file's newline.
    settings.admin_token = Some(format!("{ADMIN_TOKEN}\n").into());
    settings.behind_tls = true;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.console_url());
    let login = log_in(&client).await;
    assert!(login.headers["set-cookie"].to_str().unwrap().ends_with("; Secure"), "{:?}", login.headers);
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let sale = env.sale();
    env.warmup(sale, 1).await;
    // A 503 (a source of the reconciliation slow on a loaded machine) is
    // asked again; a 401 never turns into a 200.
    seckill_e2e::eventually("the token without its newline to be the token", Duration::from_secs(30), || async {
        let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
        let report = client.send(Method::GET, &path, None, &[("authorization", &bearer)]).await;
        match report.status.as_u16() {
            200 => Ok(()),
            401 => panic!("the token with its newline trimmed was refused: {}", report.text),
            _ => Err(report.text),
        }
    })
    .await;

    let cookie = sign_in(&client).await;
    let mut stream = TcpStream::connect(edge.console).await.unwrap();
    let request = format!("GET /admin/dashboard/events HTTP/1.1\r\nHost: edge\r\nCookie: {cookie}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut seen = String::new();
    let mut buffer = [0u8; 8192];
    tokio::time::timeout(Duration::from_secs(30), async {
        while !seen.contains("event: figures") {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the stream ended before its first event: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    })
    .await
    .expect("a first event within 30 s");

    let logout = client.send_raw(Method::POST, "/admin/logout", None, &[("cookie", &cookie)]).await;
    assert!(logout.status.is_redirection() || logout.status.is_success(), "{}", logout.status);
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let n = stream.read(&mut buffer).await.unwrap_or(0);
            seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
            // The chunked body's last chunk, or the connection closed.
            if n == 0 || seen.ends_with("\r\n0\r\n\r\n") {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream still flows 30 s after sign-out");
    edge.stop().await;
}
