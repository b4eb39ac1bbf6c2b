//! The edge holds against clients who cheat (docs/security.md): a
//! flood of admin guesses from 100,000 addresses leaves its memory flat and
//! the operator unthrottled; behind a trusted proxy the guesser is blocked
//! and the operator is not, while a client that names itself in
//! `X-Forwarded-For` without being a proxy is keyed on its own address; one
//! address ordering with a thousand user ids is limited per client; a flood
//! of `/readyz` sends the brokers nothing more than the edge's own check.
//! The floods come from loopback addresses (127.x.y.z) and are bounded.

use futures::stream::{self, StreamExt};
use seckill_e2e::http::Client;
use seckill_e2e::{Child, TestEnv, ADMIN_TOKEN};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// An edge of its own process (its memory and `/metrics` are its own),
/// with `extra` settings; its URL, its address and its console's.
async fn edge_process(env: &TestEnv, extra: &[(&str, &str)]) -> (Child, Client, SocketAddr, SocketAddr) {
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (addr, console) = (free(), free());
    let mut child_env = env.child_env();
    child_env.push(("SECKILL_HTTP_ADDR".into(), addr.to_string()));
    child_env.push(("SECKILL_ADMIN_ADDR".into(), console.to_string()));
    child_env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let edge = Child::start("seckill-edge", &child_env);
    let client = Client::new(format!("http://{addr}"));
    seckill_e2e::eventually("the edge process to be ready", Duration::from_secs(60), || async {
        match client.try_send(hyper::Method::GET, "/readyz", None, &[]).await {
            Ok(reply) if reply.status == 200 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    (edge, client, addr, console)
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process's status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("a number of KiB")
}

/// One request over a new connection from `from`: its status (0 when no
/// answer came).
async fn request_from(from: Ipv4Addr, to: SocketAddr, request: &str) -> u16 {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket.bind((from, 0).into()).expect("binding a loopback address");
    let Ok(mut stream) = socket.connect(to).await else { return 0 };
    if stream.write_all(request.as_bytes()).await.is_err() {
        return 0;
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0)
}

fn admin_request(token: &str, forwarded_for: Option<&str>) -> String {
    let forwarded = forwarded_for.map(|f| format!("X-Forwarded-For: {f}\r\n")).unwrap_or_default();
    format!(
        "GET /admin/sales/1/1 HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer {token}\r\n{forwarded}Connection: close\r\n\r\n"
    )
}

/// The n-th loopback address past 127.1.0.0.
fn loopback(n: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 1, 0, 0)) + n)
}

/// 100,000 wrong admin tokens, each from another loopback address: the
/// edge's resident memory ends within 20 MiB of where it started, and the
/// operator, asking from 127.0.0.1 all along, is never throttled. (Before:
/// the failures' limiter kept every address it had seen.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_guessing_addresses_leave_memory_flat_and_the_operator_in() {
    let env = TestEnv::new().await;
    let (edge, client, _addr, addr) = edge_process(&env, &[]).await;
    let operator = admin_request(ADMIN_TOKEN, None);
    let localhost = Ipv4Addr::LOCALHOST;
    // Warm the paths up before the first reading.
    for n in 0..2_000 {
        request_from(loopback(200_000 + n), addr, &admin_request("warm-up-guess-0000", None)).await;
    }
    assert_eq!(request_from(localhost, addr, &operator).await, 404, "the operator reads (no such sale)");
    let before = rss_kib(edge.pid());
    let started = Instant::now();
    let mut operator_answers = Vec::new();
    for wave in 0..100u32 {
        let statuses: Vec<u16> = stream::iter(0..1_000u32)
            .map(|n| {
                let guess = admin_request(&format!("guess-{wave:03}-{n:04}-xxxxxxxx"), None);
                async move { request_from(loopback(wave * 1_000 + n), addr, &guess).await }
            })
            .buffer_unordered(64)
            .collect()
            .await;
        assert!(statuses.iter().all(|s| *s == 401), "wave {wave}: every guess is a 401: {statuses:?}");
        operator_answers.push(request_from(localhost, addr, &operator).await);
    }
    let after = rss_kib(edge.pid());
    println!(
        "100,000 admin guesses from distinct addresses in {:?}: edge RSS {before} KiB -> {after} KiB",
        started.elapsed()
    );
    assert!(operator_answers.iter().all(|s| *s == 404), "the operator is never throttled: {operator_answers:?}");
    assert!(after < before + 20 * 1024, "RSS grew {} KiB (bound 20 MiB)", after.saturating_sub(before));
    let metrics = client.get("/metrics").await.text;
    let failures = metrics.lines().find(|l| l.starts_with("seckill_edge_admin_auth_failures_total")).unwrap();
    assert!(failures.ends_with(" 102000"), "{failures}");
    edge.kill9().await;
}

/// Behind a trusted proxy (127.0.0.1), the client is whom the proxy names:
/// a guesser the proxy names is blocked, the operator it names next is
/// not. A client that is no proxy (127.0.0.2) naming itself in
/// `X-Forwarded-For` is keyed on its own address. (Before: every client
/// behind the proxy was the proxy, so one guesser locked the operator out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_the_guesser_is_blocked_and_the_operator_is_not() {
    let env = TestEnv::new().await;
    let proxy_list = [("SECKILL__AUTH__TRUSTED_PROXIES", "127.0.0.1/32, 10.0.0.0/8")];
    let (edge, _client, _addr, addr) = edge_process(&env, &proxy_list).await;
    let proxy = Ipv4Addr::LOCALHOST;
    let guesses: Vec<u16> = stream::iter(0..30)
        .then(|n| {
            let guess = admin_request(&format!("guess-{n:04}-xxxxxxxxxxxx"), Some("198.51.100.7, 10.3.3.3"));
            async move { request_from(proxy, addr, &guess).await }
        })
        .collect()
        .await;
    assert_eq!(
        guesses.iter().filter(|s| **s == 429).count(),
        19,
        "the guesser is blocked after its burst: {guesses:?}"
    );
    let operator = request_from(proxy, addr, &admin_request(ADMIN_TOKEN, Some("198.51.100.8"))).await;
    assert_eq!(operator, 404, "the operator behind the same proxy is let in (no such sale)");
    let blocked = request_from(proxy, addr, &admin_request(ADMIN_TOKEN, Some("198.51.100.7"))).await;
    assert_eq!(blocked, 429, "the guesser is blocked even with the right token");

    // Not a proxy: its header is ignored, however it rotates it.
    let untrusted = Ipv4Addr::new(127, 0, 0, 2);
    let rotating: Vec<u16> = stream::iter(0..30)
        .then(|n| {
            let guess = admin_request(&format!("guess-{n:04}-yyyyyyyyyyyy"), Some(&format!("203.0.113.{n}")));
            async move { request_from(untrusted, addr, &guess).await }
        })
        .collect()
        .await;
    assert_eq!(rotating.iter().filter(|s| **s == 429).count(), 19, "keyed on its own address: {rotating:?}");
    edge.kill9().await;
}

/// `rate_limit.per_client_per_second`: one address ordering for 1,000
/// made-up user ids is answered 429 `RATE_LIMITED` with `Retry-After` past
/// its burst, nothing deducted for those; another address is not limited
/// by it. (Before: only per user and globally, so one address could spend
/// the whole global budget.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_with_a_thousand_user_ids_is_limited_per_client() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5_000).await;
    let limits = [("SECKILL__RATE_LIMIT__PER_CLIENT_PER_SECOND", "5"), ("SECKILL__RATE_LIMIT__PER_CLIENT_BURST", "20")];
    let (edge, _client, addr, _console) = edge_process(&env, &limits).await;
    let order = |user: i64| {
        let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}}}"#, sale.activity, sale.sku);
        format!(
            "POST /api/seckill/order HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let cheat = Ipv4Addr::new(127, 0, 0, 3);
    let started = Instant::now();
    let statuses: Vec<u16> = stream::iter(1..=1_000)
        .map(|user| {
            let order = order(user);
            async move { request_from(cheat, addr, &order).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let accepted = statuses.iter().filter(|s| **s == 202).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    println!("one address, 1,000 user ids in {seconds:.1} s: {accepted} × 202, {limited} × 429");
    assert_eq!(accepted + limited, 1_000, "{statuses:?}");
    // The burst, and what five a second gave back meanwhile.
    assert!(accepted as f64 <= 20.0 + 5.0 * seconds + 1.0, "{accepted} accepted in {seconds:.1} s");
    assert_eq!(env.redis_stock(sale).await, 5_000 - accepted as i64, "a limited order deducts nothing");
    let other = request_from(Ipv4Addr::new(127, 0, 0, 4), addr, &order(5_001)).await;
    assert_eq!(other, 202, "another address has a budget of its own");
    edge.kill9().await;
}

/// What the edge's producer has sent the brokers of `request` (librdkafka's count).
fn requests_sent(metrics: &str, request: &str) -> f64 {
    seckill_e2e::http::sample(metrics, &format!("seckill_edge_kafka_requests_sent{{request=\"{request}\"}}"))
        .unwrap_or(0.0)
}

/// A flood of `/readyz` (wrk, 500 connections, 10 s) is answered from the
/// background check: the edge's producer sends the brokers at most one
/// readiness round (one metadata request; per partition, one offsets
/// request for each watermark) a second, and buyers are answered throughout. (Before: every
/// probe ran the check itself, on the blocking pool.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readyz_flood_asks_the_brokers_nothing_more() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 100_000).await;
    let (edge, client, addr, _console) = edge_process(&env, &[]).await;
    // librdkafka's statistics come once a second: wait for two.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = client.get("/metrics").await.text;
    let started = Instant::now();
    let wrk = tokio::process::Command::new("wrk")
        .args(["-t", "2", "-c", "500", "-d", "10s", &format!("http://{addr}/readyz")])
        .output();
    let buyers = async {
        let mut answered = Vec::new();
        for user in 1..=200 {
            answered.push(client.order(sale.activity.get(), sale.sku.get(), user).await.status.as_u16());
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        answered
    };
    let (wrk, answered) = tokio::join!(wrk, buyers);
    let wrk = wrk.expect("wrk (infra/local/test-tools.sh installs it)");
    let report = String::from_utf8_lossy(&wrk.stdout);
    assert!(wrk.status.success(), "wrk: {report}{}", String::from_utf8_lossy(&wrk.stderr));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seconds = started.elapsed().as_secs_f64();
    let after = client.get("/metrics").await.text;
    let metadata = requests_sent(&after, "Metadata") - requests_sent(&before, "Metadata");
    let offsets = requests_sent(&after, "ListOffsets") - requests_sent(&before, "ListOffsets");
    let probes = report.lines().find(|l| l.contains("requests in")).unwrap_or("").trim().to_owned();
    println!("/readyz flood: {probes}; the brokers were sent {metadata} metadata and {offsets} offsets requests in {seconds:.1} s");
    assert!(answered.iter().all(|s| *s == 202), "every buyer answered: {answered:?}");
    // One readiness round a second, not one a probe (wrk sends thousands):
    // a few more are the counts' own slack — librdkafka's statistics are up
    // to a second old at each end of the window, and the producer refreshes
    // its metadata by itself now and then (a fresh-clone CI run counted 19
    // in 17.0 s against a slack of 2).
    let partitions = f64::from(env.kafka.order_partitions);
    let rounds = seconds + 5.0;
    assert!(metadata <= rounds, "{metadata} metadata requests in {seconds:.1} s ({probes})");
    assert!(offsets <= rounds * 2.0 * partitions, "{offsets} offsets requests in {seconds:.1} s ({probes})");
    assert_eq!(client.get("/readyz").await.status, 200);
    edge.kill9().await;
}
