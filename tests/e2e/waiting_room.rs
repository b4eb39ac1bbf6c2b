//! A sale's waiting room, checked from the buyer's side: a pre-queue
//! shuffled fairly, admission by rate, by active buyers and by the units
//! left, SOLD_OUT for everyone the moment the last unit is taken, signed
//! tokens that place one order each, two edges serving one room, and the
//! proof of work's four refusals.

use futures::stream::{self, StreamExt};
use hyper::Method;
use seckill_e2e::http::{assert_error, Client, Reply};
use seckill_e2e::{eventually, TestEnv, ADMIN_TOKEN};
use seckill_edge::admission::challenge::{solve, Challenge};
use seckill_edge::admission::token::Token;
use seckill_edge::admission::Signer;
use seckill_shared::domain::{SaleKey, UserId};
use std::time::Duration;

/// The key the tests' edges sign with.
const SIGNING_KEY: &str = "tests-admission-key-0123456789abcdef";

fn settings(env: &TestEnv) -> seckill_edge::Settings {
    let mut settings = env.edge_settings();
    settings.admission.signing_key = Some(SIGNING_KEY.into());
    settings.admission.tick_ms = 100;
    settings.rate_limit.global_per_second = 1_000_000;
    settings.rate_limit.global_burst = 1_000_000;
    settings.status_reads.per_client_per_second = 1_000_000;
    settings.status_reads.per_client_burst = 1_000_000;
    settings
}

/// Warms `sale` up with `stock` units behind a room of `admission` (JSON),
/// through the admin API; `extra`: more fields of the body.
async fn warm_with_room(client: &Client, sale: SaleKey, stock: i64, admission: &str, extra: &str) {
    let body = format!(r#"{{"stock":{stock},"force":true,"admission":{admission}{extra}}}"#);
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let reply = client.send(Method::PUT, &path, Some(body.as_bytes()), &[("authorization", &auth)]).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

async fn join(client: &Client, sale: SaleKey, user: i64, proof: Option<(&str, &str)>) -> Reply {
    let proof = proof.map(|(c, s)| format!(r#","challenge":"{c}","solution":"{s}""#)).unwrap_or_default();
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}{proof}}}"#, sale.activity, sale.sku);
    client.send(Method::POST, "/api/seckill/queue", Some(body.as_bytes()), &[]).await
}

async fn poll(client: &Client, ticket: &str) -> Reply {
    client.get(&format!("/api/seckill/queue/{ticket}")).await
}

async fn order_with(client: &Client, sale: SaleKey, user: i64, token: Option<&str>) -> Reply {
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}}}"#, sale.activity, sale.sku);
    let headers: Vec<(&str, &str)> = token.map(|t| ("seckill-admission", t)).into_iter().collect();
    client.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &headers).await
}

/// Polls `ticket` until it is admitted: its token.
async fn admitted(client: &Client, ticket: &str) -> String {
    eventually("the ticket to be admitted", Duration::from_secs(30), || async {
        let reply = poll(client, ticket).await;
        match reply.json["admission"].as_str() {
            Some(token) => Ok(token.to_owned()),
            None => Err(reply.text),
        }
    })
    .await
}

/// Spearman's rank correlation of two orders of the same n items, given
/// as each item's rank in the second order, listed by the first.
fn spearman(ranks: &[usize]) -> f64 {
    let n = ranks.len() as f64;
    let d2: f64 = ranks.iter().enumerate().map(|(i, r)| (i as f64 - *r as f64).powi(2)).sum();
    1.0 - 6.0 * d2 / (n * (n * n - 1.0))
}

/// 2,000 buyers join during the pre-queue, one after the other; at the
/// start they are admitted in an order uncorrelated with when they came
/// (|ρ| < 0.1), which the seed shown afterwards reproduces; before the
/// start nobody has a place, and a join after it queues behind them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pre_queue_is_shuffled_at_the_start_whoever_came_first() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(settings(&env)).await;
    let client = Client::new(edge.url());
    let starts = chrono::Utc::now() + chrono::Duration::seconds(12);
    let extra = format!(r#","startsAt":"{}""#, starts.to_rfc3339());
    warm_with_room(&client, sale, 2_000, r#"{"activeBuyers":2000,"overbook":1.0}"#, &extra).await;
    let mut tickets = Vec::new();
    for user in 1..=2_000i64 {
        let reply = join(&client, sale, user, None).await;
        assert_eq!((reply.status.as_u16(), reply.json["status"].as_str()), (200, Some("WAITING")), "{}", reply.text);
        assert!(reply.json.get("position").is_none(), "no place before the start: {}", reply.text);
        tickets.push(reply.json["ticket"].as_str().unwrap().to_owned());
    }
    assert!(chrono::Utc::now() < starts, "the joins took past the start: the test proves nothing");
    let again = join(&client, sale, 1, None).await;
    assert_eq!(again.json["ticket"], tickets[0].as_str(), "joining again: the same ticket");
    tokio::time::sleep((starts - chrono::Utc::now()).to_std().unwrap_or_default()).await;
    let late = join(&client, sale, 5_000, None).await;
    let order = eventually("all 2000 admitted", Duration::from_secs(60), || async {
        let log = env.stock.admissions(sale).await.map_err(|e| e.to_string())?;
        if log.len() >= 2_000 {
            Ok(log)
        } else {
            Err(format!("{} admitted", log.len()))
        }
    })
    .await;
    let rank: std::collections::HashMap<&str, usize> =
        order.iter().enumerate().map(|(i, (t, _))| (t.as_str(), i)).collect();
    let ranks: Vec<usize> = tickets.iter().map(|t| rank[t.as_str()]).collect();
    let rho = spearman(&ranks);
    println!("admission order against joining order: Spearman rho = {rho:.4} (n = 2000)");
    assert!(rho.abs() < 0.1, "rho = {rho}");
    let late_ticket = late.json["ticket"].as_str().unwrap();
    assert!(!rank.contains_key(late_ticket) || rank[late_ticket] >= 2_000, "the late join queues behind");
    // The seed the reconciliation shows after the start reproduces the order.
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    let seed = report.waiting_room.expect("the reconciliation shows the room").seed;
    assert!(!seed.is_empty(), "the seed is shown after the start");
    let mut conn = env.stock.connection();
    let mut by_seed = Vec::new();
    for ticket in &tickets {
        let hash: String = redis::cmd("EVAL")
            .arg("return redis.sha1hex(ARGV[1])")
            .arg(0)
            .arg(format!("{seed}:{ticket}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        by_seed.push((u64::from_str_radix(&hash[..13], 16).unwrap(), ticket.clone()));
    }
    by_seed.sort();
    let admitted_order: Vec<&String> = order.iter().take(2_000).map(|(t, _)| t).collect();
    assert_eq!(by_seed.iter().map(|(_, t)| t).collect::<Vec<_>>(), admitted_order, "the seed reproduces the shuffle");
    edge.stop().await;
}

/// Admissions keep to the rate (no window of w ms holds more than
/// 1 + (w + tolerance) / T, T = (60 s + tolerance) / (rate − 1): no minute
/// more than the rate, no burst) and to the active buyers: while nobody
/// orders, no more than activeBuyers are in; each order frees a place.
/// Checked from the room's own log and each ticket's admitted and ended
/// times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_keeps_to_its_rate_and_its_active_buyers() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(settings(&env)).await;
    let client = Client::new(edge.url());
    warm_with_room(&client, sale, 1_000, r#"{"activeBuyers":5,"admitPerMinute":600}"#, "").await;
    let mut tickets = Vec::new();
    for user in 1..=100i64 {
        let reply = join(&client, sale, user, None).await;
        tickets.push((user, reply.json["ticket"].as_str().unwrap().to_owned()));
    }
    // Nobody orders: five are in, and stay five.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let room = env.stock.room(sale).await.unwrap().unwrap();
    assert_eq!((room.active, room.admitted), (5, 5), "{room:?}");
    // Every admitted buyer orders at once, the rest keep polling.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut ordered = std::collections::HashSet::new();
    while tokio::time::Instant::now() < deadline {
        for (user, ticket) in &tickets {
            if ordered.contains(user) {
                continue;
            }
            let reply = poll(&client, ticket).await;
            if let Some(token) = reply.json["admission"].as_str() {
                let placed = order_with(&client, sale, *user, Some(token)).await;
                assert_eq!(placed.status, 202, "{}", placed.text);
                ordered.insert(*user);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log: Vec<f64> = env.stock.admissions(sale).await.unwrap().into_iter().map(|(_, at)| at).collect();
    let (tolerance, interval) = (100.0, 60_100.0 / 599.0);
    for (i, start) in log.iter().enumerate() {
        for (j, end) in log.iter().enumerate().skip(i) {
            let most = 1.0 + ((end - start) + tolerance) / interval;
            assert!((j - i + 1) as f64 <= most + 1e-9, "{} admissions in {} ms", j - i + 1, end - start);
        }
    }
    assert!((10..100).contains(&log.len()), "the rate, not the line, bound the run: {} admitted", log.len());
    let lives = env.stock.tickets(sale).await.unwrap();
    for at in &log {
        let at = *at as i64;
        let inside = lives.iter().filter(|(_, _, _, a, e)| *a > 0 && *a <= at && (*e == 0 || *e > at)).count();
        assert!(inside <= 5, "{inside} active at {at}");
    }
    println!("admitted {} of 100 in about 7 s at 600/min and 5 active buyers", log.len());
    edge.stop().await;
}

/// 100 units and 2,000 waiting: the first 100 are admitted and buy; the
/// pass after the last unit marks the room sold out, and every waiting
/// ticket then reads SOLD_OUT (the delay is printed: a figure, not an
/// assertion); a join answers SOLD_OUT at once. A unit that comes back (an
/// order cancelled) lets the next ticket in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiting_ticket_reads_sold_out_once_the_last_unit_is_taken() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(settings(&env)).await;
    let order_service = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    warm_with_room(&client, sale, 100, r#"{"activeBuyers":100,"overbook":1.0}"#, "").await;
    let joined: Vec<(i64, String)> = stream::iter(1..=2_000i64)
        .map(|user| {
            let client = client.clone();
            async move { (user, join(&client, sale, user, None).await.json["ticket"].as_str().unwrap().to_owned()) }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let admitted_ones: Vec<(i64, String)> = eventually("100 admitted", Duration::from_secs(30), || async {
        let lives = env.stock.tickets(sale).await.map_err(|e| e.to_string())?;
        let inside: Vec<(i64, String)> =
            lives.into_iter().filter(|l| l.2 == "A").map(|(ticket, user, ..)| (user, ticket)).collect();
        if inside.len() == 100 {
            Ok(inside)
        } else {
            Err(format!("{} admitted", inside.len()))
        }
    })
    .await;
    let mut orders = Vec::new();
    for (user, ticket) in &admitted_ones {
        let token = admitted(&client, ticket).await;
        let placed = order_with(&client, sale, *user, Some(&token)).await;
        assert_eq!(placed.status, 202, "{}", placed.text);
        orders.push((*user, placed.json["orderId"].as_str().unwrap().to_owned()));
    }
    let last_unit_ms = seckill_shared::now_ms();
    let room = eventually("the room marked sold out", Duration::from_secs(10), || async {
        match env.stock.room(sale).await {
            Ok(Some(room)) if room.sold_out => Ok(room),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    println!("the room read SOLD_OUT {} ms after the last unit's 202", room.sold_out_at_ms - last_unit_ms);
    let waiting: Vec<&(i64, String)> =
        joined.iter().filter(|(user, _)| !admitted_ones.iter().any(|(u, _)| u == user)).collect();
    let reads: Vec<String> = stream::iter(&waiting)
        .map(|(_, ticket)| {
            let client = client.clone();
            async move { poll(&client, ticket).await.json["status"].as_str().unwrap_or("?").to_owned() }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert_eq!(reads.len(), 1_900);
    assert!(reads.iter().all(|s| s == "SOLD_OUT"), "{:?}", reads.iter().find(|s| *s != "SOLD_OUT"));
    let newcomer = join(&client, sale, 9_999, None).await;
    assert_eq!(newcomer.json["status"], "SOLD_OUT", "{}", newcomer.text);
    // A unit comes back: admission resumes.
    let (user, order_id) = &orders[0];
    env.wait_status(
        &seckill_shared::domain::OrderId::parse(order_id).unwrap(),
        ("CREATED", None),
        Duration::from_secs(60),
    )
    .await;
    let body = format!(r#"{{"userId":{user}}}"#);
    let cancelled =
        client.send(Method::POST, &format!("/api/seckill/order/{order_id}/cancel"), Some(body.as_bytes()), &[]).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    eventually("one more admitted", Duration::from_secs(30), || async {
        let room = env.stock.room(sale).await.map_err(|e| e.to_string())?.unwrap();
        if room.admitted == 101 && !room.sold_out {
            Ok(())
        } else {
            Err(format!("{room:?}"))
        }
    })
    .await;
    order_service.stop().await;
    edge.stop().await;
}

/// While a round admits through its room: an order without a token,
/// with another user's, with a forged, expired or another sale's one, or a
/// second order with one token, is answered 403 ADMISSION_REQUIRED and
/// changes nothing; the token's own order is 202.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_without_its_own_valid_admission_is_refused_and_changes_nothing() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(settings(&env)).await;
    let client = Client::new(edge.url());
    warm_with_room(&client, sale, 10, r#"{"activeBuyers":10}"#, "").await;
    let ticket = join(&client, sale, 1, None).await.json["ticket"].as_str().unwrap().to_owned();
    let token = admitted(&client, &ticket).await;
    let before = env.stock.snapshot(sale).await.unwrap();
    let signer = Signer::new(Some(SIGNING_KEY));
    let (user, round) = (UserId::new(1).unwrap(), before.round);
    let expired = Token { sale, round, user, ticket: ticket.clone(), expires_ms: seckill_shared::now_ms() - 1 };
    let other_sale = Token { sale: env.sale(), round, user, ticket: ticket.clone(), expires_ms: i64::MAX / 2 };
    let forged = Token { sale, round, user, ticket: ticket.clone(), expires_ms: i64::MAX / 2 }
        .sign(&Signer::new(Some("another-key-0123456789abcdef0123456789")));
    let cases = [
        ("no token", 1, None),
        ("another user's token", 2, Some(token.clone())),
        ("an expired token", 1, Some(expired.sign(&signer))),
        ("another sale's token", 1, Some(other_sale.sign(&signer))),
        ("a forged token", 1, Some(forged)),
    ];
    for (case, user, token) in &cases {
        let reply = order_with(&client, sale, *user, token.as_deref()).await;
        assert_error(&reply, 403, "ADMISSION_REQUIRED", case);
    }
    assert_eq!(env.stock.snapshot(sale).await.unwrap(), before, "the refusals changed nothing");
    let placed = order_with(&client, sale, 1, Some(&token)).await;
    assert_eq!(placed.status, 202, "{}", placed.text);
    let after = env.stock.snapshot(sale).await.unwrap();
    let again = order_with(&client, sale, 1, Some(&token)).await;
    assert_error(&again, 403, "ADMISSION_REQUIRED", "a second order with one token");
    assert_eq!(env.stock.snapshot(sale).await.unwrap(), after, "the second order changed nothing");
    let room = env.stock.room(sale).await.unwrap().unwrap();
    assert_eq!((room.used, room.active), (1, 0), "{room:?}");
    edge.stop().await;
}

/// Two edges with one signing key serve one room: a ticket taken at one is
/// polled at the other, its token orders there, and an edge restarted has
/// lost no ticket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edges_serve_one_room_and_a_restart_loses_no_ticket() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let (first, second) = (env.spawn_edge(settings(&env)).await, env.spawn_edge(settings(&env)).await);
    let (a, b) = (Client::new(first.url()), Client::new(second.url()));
    warm_with_room(&a, sale, 10, r#"{"activeBuyers":1}"#, "").await;
    let one = join(&a, sale, 1, None).await.json["ticket"].as_str().unwrap().to_owned();
    let two = join(&b, sale, 2, None).await.json["ticket"].as_str().unwrap().to_owned();
    let token = admitted(&b, &one).await;
    assert_eq!(poll(&a, &two).await.json["status"], "WAITING");
    assert_eq!(order_with(&b, sale, 1, Some(&token)).await.status, 202);
    first.stop().await;
    let first = env.spawn_edge(settings(&env)).await;
    let a = Client::new(first.url());
    let token = admitted(&a, &two).await;
    assert_eq!(order_with(&a, sale, 2, Some(&token)).await.status, 202);
    first.stop().await;
    second.stop().await;
}

/// A room that asks a proof of work refuses a join without one, with a
/// wrong solution, with an expired challenge and with one used before
/// (403 CHALLENGE_FAILED, no ticket taken); a fresh solved challenge joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proof_of_work_refuses_missing_wrong_expired_and_replayed() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(settings(&env)).await;
    let client = Client::new(edge.url());
    warm_with_room(&client, sale, 10, r#"{"activeBuyers":10,"challenge":{"kind":"pow","bits":12}}"#, "").await;
    let path = format!("/api/seckill/queue/challenge?activityId={}&skuId={}&userId=1", sale.activity, sale.sku);
    let issued = client.get(&path).await;
    assert_eq!((issued.status.as_u16(), issued.json["bits"].as_u64()), (200, Some(12)), "{}", issued.text);
    let challenge = issued.json["challenge"].as_str().unwrap().to_owned();
    let solution = solve(&challenge, 12);
    let wrong = (0u64..)
        .map(|n| format!("w{n}"))
        .find(|s| seckill_edge::admission::challenge::leading_zero_bits(&challenge, s) < 12)
        .unwrap();
    let signer = Signer::new(Some(SIGNING_KEY));
    let stale =
        Challenge::new(sale, UserId::new(1).unwrap(), 12, seckill_shared::now_ms() - 10_000, 1_000).sign(&signer);
    let stale_solution = solve(&stale, 12);
    assert_error(&join(&client, sale, 1, None).await, 403, "CHALLENGE_FAILED", "no proof");
    assert_error(&join(&client, sale, 1, Some((&challenge, &wrong))).await, 403, "CHALLENGE_FAILED", "wrong");
    assert_error(&join(&client, sale, 1, Some((&stale, &stale_solution))).await, 403, "CHALLENGE_FAILED", "expired");
    assert_eq!(env.stock.room(sale).await.unwrap().unwrap().joined, 0, "no ticket taken");
    let joined = join(&client, sale, 1, Some((&challenge, &solution))).await;
    assert_eq!((joined.status.as_u16(), joined.json["status"].as_str().is_some()), (200, true), "{}", joined.text);
    let replayed = join(&client, sale, 1, Some((&challenge, &solution))).await;
    assert_error(&replayed, 403, "CHALLENGE_FAILED", "replayed");
    edge.stop().await;
}

/// The queue page in headless Chromium: a buyer's page joins (solving the
/// proof of work), is admitted, orders with the token and reads the order
/// CREATED; the next buyer's page reads sold out; once the sale is closed,
/// a page reads closed. A screenshot of each in the test's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_page_joins_buys_and_says_sold_out_and_closed_in_a_real_browser() {
    let repo = seckill_e2e::repo_root();
    let python = repo.join(".data/venv/bin/python");
    assert!(python.exists(), "{} is missing: `make test` installs it (make test-tools)", python.display());
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(settings(&env)).await;
    let order_service = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    warm_with_room(&client, sale, 1, r#"{"activeBuyers":1,"challenge":{"kind":"pow","bits":8}}"#, "").await;
    let logs = seckill_e2e::binary("seckillctl").parent().expect("target dir").join("e2e-logs");
    std::fs::create_dir_all(&logs).expect("the log folder");
    let prefix = logs.join("queue-page");
    let browse = |cases: &'static [&'static str]| {
        let (python, page, prefix, url) =
            (python.clone(), repo.join("tests/browser/queue_page.py"), prefix.clone(), edge.url());
        async move {
            let run = tokio::process::Command::new(&python)
                .arg(page)
                .args([url.as_str(), &sale.activity.to_string(), &sale.sku.to_string()])
                .arg(&prefix)
                .args(cases)
                .kill_on_drop(true)
                .output();
            let output = tokio::time::timeout(Duration::from_secs(180), run).await.expect("in time").expect("runs");
            let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
            assert!(output.status.success(), "the browser saw:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
            eprintln!("the queue page, as the browser saw it: {}", stdout.trim());
            stdout
        }
    };
    let bought = browse(&["1:You bought it", "2:Sold out"]).await;
    assert!(bought.contains("CREATED"), "{bought}");
    let path = format!("/admin/sales/{}/{}/close", sale.activity, sale.sku);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    assert_eq!(client.send(Method::POST, &path, None, &[("authorization", &auth)]).await.status, 200);
    browse(&["3:The sale is closed"]).await;
    let png = std::fs::read(logs.join("queue-page-1.png")).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 5_000, "a real screenshot");
    eprintln!("screenshots: {}-{{1,2,3}}.png", prefix.display());
    order_service.stop().await;
    edge.stop().await;
}

/// The operator's side: `seckillctl warmup --admission` opens a room,
/// `seckillctl queue stats` shows its figures (text and JSON, the seed kept
/// secret before the start), `/metrics` has them per sale, and a bad
/// admission is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_see_the_room_in_seckillctl_and_metrics() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let (a, s) = (sale.activity.to_string(), sale.sku.to_string());
    let starts = (chrono::Utc::now() + chrono::Duration::seconds(3600)).to_rfc3339();
    let bad = env
        .ctl(&["warmup", "--activity", &a, "--sku", &s, "--stock", "5", "--admission", r#"{"activeBuyers":0}"#])
        .await;
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("activeBuyers"), "{}", bad.stderr);
    let admission = r#"{"activeBuyers":3,"admitPerMinute":60,"prequeueSeconds":7200}"#;
    let warm =
        ["warmup", "--activity", &a, "--sku", &s, "--stock", "5", "--starts-at", &starts, "--admission", admission];
    let warmed = env.ctl(&warm).await;
    assert_eq!(warmed.code, 0, "{}", warmed.stderr);
    let edge = env.spawn_edge(settings(&env)).await;
    let client = Client::new(edge.url());
    for user in 1..=4 {
        assert_eq!(join(&client, sale, user, None).await.json["status"], "WAITING");
    }
    let sale_arg = format!("{a}:{s}");
    let stats = env.ctl(&["queue", "stats", "--sale", &sale_arg, "--json"]).await;
    assert_eq!(stats.code, 0, "{}", stats.stderr);
    let json: serde_json::Value = serde_json::from_str(&stats.stdout).unwrap();
    assert_eq!(
        (json["waiting"].as_i64(), json["activeBuyers"].as_i64(), json["admitPerMinute"].as_i64()),
        (Some(4), Some(3), Some(60))
    );
    assert_eq!(json["seed"], "", "the seed is secret before the start");
    let text = env.ctl(&["queue", "stats", "--sale", &sale_arg]).await;
    assert!(text.stdout.contains("waiting") && text.stdout.contains("secret until the start"), "{}", text.stdout);
    let metrics = eventually("the room's figures on /metrics", Duration::from_secs(10), || async {
        let body = client.get("/metrics").await.text;
        let line = format!("seckill_queue_waiting{{sale=\"{sale_arg}\"}} 4");
        if body.contains(&line) {
            Ok(body)
        } else {
            Err(body.lines().filter(|l| l.starts_with("seckill_queue")).collect::<Vec<_>>().join("\n"))
        }
    })
    .await;
    assert!(metrics.contains("seckill_queue_wait_seconds"), "the estimated wait is shown");
    // The dashboard's figures carry the room in the sale's card.
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let snapshot = client.send(Method::GET, "/admin/dashboard/snapshot", None, &[("authorization", &auth)]).await;
    let card = snapshot.json["sales"]
        .as_array()
        .and_then(|sales| sales.iter().find(|c| c["activityId"].as_i64() == Some(sale.activity.get())).cloned());
    let room = card.map(|c| c["waitingRoom"].clone()).unwrap_or_default();
    assert_eq!((room["waiting"].as_i64(), room["activeBuyers"].as_i64()), (Some(4), Some(3)), "{}", snapshot.text);
    let none = env.ctl(&["queue", "stats", "--sale", &format!("{}:{s}", sale.activity.get() + 1)]).await;
    assert_eq!(none.code, 1, "{}", none.stderr);
    edge.stop().await;
}
