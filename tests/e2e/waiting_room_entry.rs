//! Getting through a sale's waiting room, checked from the buyer's and
//! the operator's side: signed tokens that place one order each, two edges
//! serving one room, the proof of work's four refusals, the queue page in
//! a real browser, and the room's figures in `seckillctl` and `/metrics`.

use crate::waiting_room::{admitted, join, order_with, poll, settings, warm_with_room, SIGNING_KEY};
use hyper::Method;
use seckill_e2e::http::{assert_error, Client};
use seckill_e2e::{eventually, TestEnv, ADMIN_TOKEN};
use seckill_edge::admission::challenge::{solve, Challenge};
use seckill_edge::admission::token::Token;
use seckill_edge::admission::Signer;
use seckill_edge::settings::DeductionMode;
use seckill_shared::domain::UserId;
use std::time::Duration;

/// While a round admits through its room: an order without a token,
/// with another user's, with a forged, expired or another sale's one, or a
/// second order with one token, is answered 403 ADMISSION_REQUIRED and
/// changes nothing; the token's own order is 202.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_without_its_own_valid_admission_is_refused_and_changes_nothing() {
    refused_without_an_admission(DeductionMode::Lua).await;
}

/// The same through the seed's lock (`deduction = "lock"`): it checks the
/// room as the script does (before: an order without a token was 202).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_mode_honours_the_room_too() {
    refused_without_an_admission(DeductionMode::Lock).await;
}

async fn refused_without_an_admission(mode: DeductionMode) {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let mut settings = settings(&env);
    settings.deduction = mode;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    warm_with_room(&edge, sale, 10, r#"{"activeBuyers":10}"#, "").await;
    let ticket = join(&client, sale, 1, None).await.json["ticket"].as_str().unwrap().to_owned();
    let token = admitted(&client, &ticket).await;
    let before = env.stock.books().snapshot(sale).await.unwrap();
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
    assert_eq!(env.stock.books().snapshot(sale).await.unwrap(), before, "the refusals changed nothing");
    let placed = order_with(&client, sale, 1, Some(&token)).await;
    assert_eq!(placed.status, 202, "{}", placed.text);
    let after = env.stock.books().snapshot(sale).await.unwrap();
    let again = order_with(&client, sale, 1, Some(&token)).await;
    assert_error(&again, 403, "ADMISSION_REQUIRED", "a second order with one token");
    assert_eq!(env.stock.books().snapshot(sale).await.unwrap(), after, "the second order changed nothing");
    let room = env.stock.waiting_room().room(sale).await.unwrap().unwrap();
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
    warm_with_room(&first, sale, 10, r#"{"activeBuyers":1}"#, "").await;
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
    warm_with_room(&edge, sale, 10, r#"{"activeBuyers":10,"challenge":{"kind":"pow","bits":12}}"#, "").await;
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
    assert_eq!(env.stock.waiting_room().room(sale).await.unwrap().unwrap().joined, 0, "no ticket taken");
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
    warm_with_room(&edge, sale, 1, r#"{"activeBuyers":1,"challenge":{"kind":"pow","bits":8}}"#, "").await;
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
    let room = env.stock.waiting_room().room(sale).await.unwrap().expect("the room");
    assert!(bought.contains(&format!("seed commitment (SHA-256): {}", room.seed_commitment)), "{bought}");
    let path = format!("/admin/sales/{}/{}/close", sale.activity, sale.sku);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let console = Client::new(edge.console_url());
    assert_eq!(console.send(Method::POST, &path, None, &[("authorization", &auth)]).await.status, 200);
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
    let console = Client::new(edge.console_url());
    let snapshot = console.send(Method::GET, "/admin/dashboard/snapshot", None, &[("authorization", &auth)]).await;
    let card = snapshot.json["sales"]
        .as_array()
        .and_then(|sales| sales.iter().find(|c| c["activityId"].as_i64() == Some(sale.activity.get())).cloned());
    let room = card.map(|c| c["waitingRoom"].clone()).unwrap_or_default();
    assert_eq!((room["waiting"].as_i64(), room["activeBuyers"].as_i64()), (Some(4), Some(3)), "{}", snapshot.text);
    let none = env.ctl(&["queue", "stats", "--sale", &format!("{}:{s}", sale.activity.get() + 1)]).await;
    assert_eq!(none.code, 1, "{}", none.stderr);
    edge.stop().await;
}
