//! A sale's waiting room, checked from the buyer's side: a pre-queue
//! shuffled fairly, admission by rate, by active buyers and by the units
//! left, SOLD_OUT for everyone the moment the last unit is taken
//! (`waiting_room_entry.rs`: the tokens, two edges, the proof of work, the
//! page and the operators' figures).

use futures::stream::{self, StreamExt};
use hyper::Method;
use seckill_e2e::http::{Client, Reply};
use seckill_e2e::{eventually, Running, TestEnv, ADMIN_TOKEN};
use seckill_shared::domain::SaleKey;
use seckill_shared::stock::protocol::TicketState;
use std::time::Duration;

/// The key the tests' edges sign with.
pub(crate) const SIGNING_KEY: &str = "tests-admission-key-0123456789abcdef";

pub(crate) fn settings(env: &TestEnv) -> seckill_edge::Settings {
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
/// through `edge`'s admin API; `extra`: more fields of the body.
pub(crate) async fn warm_with_room(edge: &Running, sale: SaleKey, stock: i64, admission: &str, extra: &str) {
    let client = Client::new(edge.console_url());
    let body = format!(r#"{{"stock":{stock},"force":true,"admission":{admission}{extra}}}"#);
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let reply = client.send(Method::PUT, &path, Some(body.as_bytes()), &[("authorization", &auth)]).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

pub(crate) async fn join(client: &Client, sale: SaleKey, user: i64, proof: Option<(&str, &str)>) -> Reply {
    let proof = proof.map(|(c, s)| format!(r#","challenge":"{c}","solution":"{s}""#)).unwrap_or_default();
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}{proof}}}"#, sale.activity, sale.sku);
    client.send(Method::POST, "/api/seckill/queue", Some(body.as_bytes()), &[]).await
}

pub(crate) async fn poll(client: &Client, ticket: &str) -> Reply {
    client.get(&format!("/api/seckill/queue/{ticket}")).await
}

pub(crate) async fn order_with(client: &Client, sale: SaleKey, user: i64, token: Option<&str>) -> Reply {
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}}}"#, sale.activity, sale.sku);
    let headers: Vec<(&str, &str)> = token.map(|t| ("seckill-admission", t)).into_iter().collect();
    client.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &headers).await
}

/// Polls `ticket` until it is admitted: its token.
pub(crate) async fn admitted(client: &Client, ticket: &str) -> String {
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
    // Time enough for 2,000 joins one after the other beside the suite's
    // other tests (on the Redis Cluster variant too).
    let starts = chrono::Utc::now() + chrono::Duration::seconds(30);
    let extra = format!(r#","startsAt":"{}""#, starts.to_rfc3339());
    warm_with_room(&edge, sale, 2_000, r#"{"activeBuyers":2000,"overbook":1.0}"#, &extra).await;
    let mut tickets = Vec::new();
    let mut commitments = std::collections::BTreeSet::new();
    for user in 1..=2_000i64 {
        let reply = join(&client, sale, user, None).await;
        assert_eq!((reply.status.as_u16(), reply.json["status"].as_str()), (200, Some("WAITING")), "{}", reply.text);
        assert!(reply.json.get("position").is_none(), "no place before the start: {}", reply.text);
        tickets.push(reply.json["ticket"].as_str().unwrap().to_owned());
        commitments.insert(reply.json["seedCommitment"].as_str().unwrap_or_default().to_owned());
    }
    // Before the start: the seed secret, its commitment shown (one, to all).
    let before = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    let before = before.waiting_room.expect("the room");
    assert!(before.seed.is_empty(), "the seed is secret before the start");
    assert_eq!(commitments.iter().collect::<Vec<_>>(), vec![&before.seed_commitment], "one commitment, shown to all");
    assert_eq!(before.seed_commitment.len(), 64);
    assert!(chrono::Utc::now() < starts, "the joins took past the start: the test proves nothing");
    let again = join(&client, sale, 1, None).await;
    assert_eq!(again.json["ticket"], tickets[0].as_str(), "joining again: the same ticket");
    tokio::time::sleep((starts - chrono::Utc::now()).to_std().unwrap_or_default()).await;
    let late = join(&client, sale, 5_000, None).await;
    let order = eventually("all 2000 admitted", Duration::from_secs(60), || async {
        let log = env.stock.waiting_room().admissions(sale).await.map_err(|e| e.to_string())?;
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
    assert_eq!(
        seckill_shared::stock::queue::seed_commitment(&seed),
        before.seed_commitment,
        "the seed revealed is the one committed before anyone joined"
    );
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
    warm_with_room(&edge, sale, 1_000, r#"{"activeBuyers":5,"admitPerMinute":600}"#, "").await;
    let mut tickets = Vec::new();
    for user in 1..=100i64 {
        let reply = join(&client, sale, user, None).await;
        tickets.push((user, reply.json["ticket"].as_str().unwrap().to_owned()));
    }
    // Nobody orders: five are in, and stay five.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let room = env.stock.waiting_room().room(sale).await.unwrap().unwrap();
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
    let log: Vec<f64> =
        env.stock.waiting_room().admissions(sale).await.unwrap().into_iter().map(|(_, at)| at).collect();
    let (tolerance, interval) = (100.0, 60_100.0 / 599.0);
    for (i, start) in log.iter().enumerate() {
        for (j, end) in log.iter().enumerate().skip(i) {
            let most = 1.0 + ((end - start) + tolerance) / interval;
            assert!((j - i + 1) as f64 <= most + 1e-9, "{} admissions in {} ms", j - i + 1, end - start);
        }
    }
    assert!((10..100).contains(&log.len()), "the rate, not the line, bound the run: {} admitted", log.len());
    let lives = env.stock.waiting_room().tickets(sale).await.unwrap();
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
    warm_with_room(&edge, sale, 100, r#"{"activeBuyers":100,"overbook":1.0}"#, "").await;
    let joined: Vec<(i64, String)> = stream::iter(1..=2_000i64)
        .map(|user| {
            let client = client.clone();
            async move { (user, join(&client, sale, user, None).await.json["ticket"].as_str().unwrap().to_owned()) }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let admitted_ones: Vec<(i64, String)> = eventually("100 admitted", Duration::from_secs(30), || async {
        let lives = env.stock.waiting_room().tickets(sale).await.map_err(|e| e.to_string())?;
        let admitted = lives.into_iter().filter(|l| l.2 == Some(TicketState::Admitted));
        let inside: Vec<(i64, String)> = admitted.map(|(ticket, user, ..)| (user, ticket)).collect();
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
        match env.stock.waiting_room().room(sale).await {
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
        let room = env.stock.waiting_room().room(sale).await.map_err(|e| e.to_string())?.unwrap();
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
