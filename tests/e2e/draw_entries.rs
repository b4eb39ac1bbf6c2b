//! What an entry is answered, and to whom: a winner's token only to a
//! caller identified as its user, and an entry answered 200 only once the
//! replicas asked for have it; what Redis holds of the draw before it is
//! made: never the seed; and the last outcome of a draw with no end.

use seckill_e2e::draw::warm;
use seckill_e2e::draw::{draw_json, drawn, enter, warm_with_draw};
use seckill_e2e::http::Client;
use seckill_e2e::TestEnv;
use std::time::Duration;

/// With no user identity configured (and no `auth.allow_anonymous`), a
/// winner's entry answers without its admission token: anyone may name a
/// user id, so the token would be anyone's. Its status and deadline are
/// still told. (Before: entering again as the winner's user id answered the
/// winner's token to whoever asked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winners_token_is_shown_only_to_a_caller_identified_as_its_user() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let mut settings = env.edge_settings();
    settings.auth.allow_anonymous = false;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    warm_with_draw(&edge, sale, 2, &draw_json(-1, 2, 60), "").await;
    for user in 1..=2 {
        let entered = enter(&client, sale, user).await;
        assert_eq!(entered.status, 200, "{}", entered.text);
    }
    drawn(&client, sale).await;
    let again = enter(&client, sale, 1).await;
    assert_eq!((again.status.as_u16(), again.json["status"].as_str()), (200, Some("WON")), "{}", again.text);
    assert!(again.json.get("admission").is_none(), "no token for an unidentified caller: {}", again.text);
    assert!(again.json["admissionExpiresAt"].is_string(), "the deadline is told: {}", again.text);
    let entry = again.json["entry"].as_str().unwrap().to_owned();
    let read = client.get(&format!("/api/seckill/draw/entries/{entry}")).await;
    assert_eq!((read.status.as_u16(), read.json["status"].as_str()), (200, Some("WON")), "{}", read.text);
    assert!(read.json.get("admission").is_none(), "{}", read.text);
    edge.stop().await;
}

/// Where the replicas must confirm writes and none does (here: there is
/// none), an entry is answered 503, not 200 — an entry answered 200 is on
/// a replica, as a claim is, so a failover cannot lose it before the
/// freeze; asked again where no replica is asked for, it is the same
/// entry. The draw's own steps (freeze, apply) are confirmed alike.
/// (Before: 200 at once, whatever the replicas had.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_no_replica_confirmed_is_not_answered_200() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let draw: seckill_shared::draw::Draw = serde_json::from_str(&draw_json(-1, 60, 60)).unwrap();
    warm(&env, sale, 2, draw, true).await.expect("warmed up");
    let mut settings = env.edge_settings();
    settings.servers.redis.min_replica_acks = Some(1);
    settings.servers.redis.replica_ack_timeout_ms = 100;
    let edge = env.spawn_edge(settings).await;
    let unconfirmed = enter(&Client::new(edge.url()), sale, 7).await;
    assert_eq!((unconfirmed.status.as_u16(), unconfirmed.code()), (503, "TRY_AGAIN"), "{}", unconfirmed.text);
    edge.stop().await;
    let plain = env.spawn_edge(env.edge_settings()).await;
    let again = enter(&Client::new(plain.url()), sale, 7).await;
    assert_eq!((again.status.as_u16(), again.json["status"].as_str()), (200, Some("ENTERED")), "{}", again.text);
    assert_eq!(env.stock.draws().draw_state(sale).await.unwrap().unwrap().entries, 1, "one entry, the same");
    plain.stop().await;
}

/// A draw takes at most `maxEntries` entries: one more is answered 409
/// `ENTRIES_FULL` and nothing is kept, while an entrant asking again still
/// reads their entry. (Before: entries were unbounded — one client could
/// add millions under any user ids, and the draw's one script over them
/// held Redis for seconds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_draw_refuses_the_next_entry_and_keeps_nothing() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(env.edge_settings()).await;
    let draw = draw_json(-1, 60, 60).replace(r#""claimSeconds""#, r#""maxEntries":3,"claimSeconds""#);
    warm_with_draw(&edge, sale, 2, &draw, "").await;
    let client = Client::new(edge.url());
    for user in 1..=3 {
        let entered = enter(&client, sale, user).await;
        assert_eq!(entered.status, 200, "{}", entered.text);
    }
    let full = enter(&client, sale, 4).await;
    assert_eq!((full.status.as_u16(), full.code()), (409, "ENTRIES_FULL"), "{}", full.text);
    let again = enter(&client, sale, 2).await;
    assert_eq!((again.status.as_u16(), again.json["status"].as_str()), (200, Some("ENTERED")), "{}", again.text);
    let state = env.stock.draws().draw_state(sale).await.unwrap().unwrap();
    assert_eq!(state.entries, 3, "nothing kept of the refused entry");
    edge.stop().await;
}

/// Every value under the test's key prefix, as text: what an insider who
/// can read Redis (a replica, a dump) sees.
async fn everything_in_redis(env: &TestEnv) -> String {
    let client = redis::Client::open(env.redis.url.as_str()).expect("a Redis URL");
    let mut conn = client.get_multiplexed_async_connection().await.expect("Redis");
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}*", env.redis.key_prefix)).query_async(&mut conn).await.unwrap();
    let mut seen = String::new();
    for key in keys {
        // Every type read as its raw reply: strings, hashes, sets, zsets, streams.
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(&mut conn).await.unwrap();
        let read = match kind.as_str() {
            "hash" => redis::cmd("HGETALL").arg(&key).clone(),
            "zset" => redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES").clone(),
            "set" => redis::cmd("SMEMBERS").arg(&key).clone(),
            "stream" => redis::cmd("XRANGE").arg(&key).arg("-").arg("+").clone(),
            "list" => redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).clone(),
            _ => redis::cmd("GET").arg(&key).clone(),
        };
        let value: redis::Value = read.query_async(&mut conn).await.unwrap();
        seen.push_str(&format!("{key} {value:?}\n"));
    }
    seen
}

/// Until the draw the seed is kept in PostgreSQL and not in Redis: an
/// insider reading every key finds the commitment and the entries, never
/// the seed that ranks them (with it, one could enter last and choose the
/// accounts that win). The draw reveals it in Redis, and it is the one
/// committed to. (Before: the seed sat in the room's hash from the warm-up
/// on.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_reading_redis_before_the_draw_finds_its_seed() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(env.edge_settings()).await;
    warm_with_draw(&edge, sale, 2, &draw_json(-1, 4, 60), "").await;
    let client = Client::new(edge.url());
    for user in 1..=5 {
        let entered = enter(&client, sale, user).await;
        assert_eq!(entered.status, 200, "{}", entered.text);
    }
    let commitment = env.stock.draws().draw_state(sale).await.unwrap().expect("a draw").seed_commitment;
    let seed: String = sqlx::query_scalar("SELECT seed FROM draw_seeds WHERE commitment = $1")
        .bind(&commitment)
        .fetch_one(&env.db)
        .await
        .expect("the seed kept in PostgreSQL under its commitment");
    assert_eq!(seckill_shared::stock::queue::seed_commitment(&seed), commitment);
    let before = everything_in_redis(&env).await;
    assert!(before.contains(&commitment), "the commitment is public:\n{before}");
    assert!(!before.contains(&seed), "the seed is in Redis before the draw:\n{before}");
    let published = drawn(&client, sale).await;
    assert_eq!(published["seed"].as_str(), Some(seed.as_str()), "the draw reveals the seed committed to: {published}");
    assert!(everything_in_redis(&env).await.contains(&seed), "revealed in Redis with the draw");
    edge.stop().await;
}

/// A draw with no end: once its unit is sold and paid (no unit left, no
/// right live) and a payment window has passed (no unpaid order can give a
/// unit back), every waitlisted entry is told LOST — on the topic and when
/// it reads its entry — and the draw's keys expire. (Before: the waitlist
/// waited for ever, and the keys stayed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draw_with_no_end_tells_its_waitlist_lost_once_nothing_can_serve_it() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    warm_with_draw(&edge, sale, 1, &draw_json(-1, 3, 60), r#","paymentWindowSeconds":2"#).await;
    let client = Client::new(edge.url());
    let mut entries = Vec::new();
    for user in 1..=3 {
        let entered = enter(&client, sale, user).await;
        assert_eq!(entered.status, 200, "{}", entered.text);
        entries.push((user, entered.json["entry"].as_str().expect("an entry").to_owned()));
    }
    drawn(&client, sale).await;
    let mut won = None;
    for (user, entry) in &entries {
        let read = client.get(&format!("/api/seckill/draw/entries/{entry}")).await;
        if read.json["status"] == "WON" {
            won = Some((*user, read.json["admission"].as_str().expect("the winner's token").to_owned()));
        }
    }
    let (winner, token) = won.expect("a winner");
    let placed = crate::waiting_room::order_with(&client, sale, winner, Some(&token)).await;
    assert_eq!(placed.status, 202, "{}", placed.text);
    env.wait_orders(sale, "CREATED", 1).await;
    let paid = client.pay(placed.json["orderId"].as_str().expect("an order id"), "pay-the-draw").await;
    assert_eq!(paid.json["outcome"], "APPLIED", "{}", paid.text);
    let events = seckill_e2e::draw::outcomes(&env, sale, 5).await;
    let lost: Vec<i64> =
        events.iter().filter(|(e, _)| e["type"] == "LOST").map(|(e, _)| e["userId"].as_i64().unwrap()).collect();
    let mut losers: Vec<i64> = entries.iter().map(|(u, _)| *u).filter(|u| *u != winner).collect();
    losers.sort_unstable();
    assert_eq!(lost.iter().copied().collect::<std::collections::BTreeSet<_>>(), losers.iter().copied().collect());
    for (user, entry) in entries.iter().filter(|(u, _)| *u != winner) {
        let read = client.get(&format!("/api/seckill/draw/entries/{entry}")).await;
        assert_eq!(read.json["status"], "LOST", "user {user}: {}", read.text);
    }
    let meta = env.stock.keys().queue(sale).meta().to_owned();
    let ttl: i64 = redis::cmd("PTTL").arg(&meta).query_async(&mut env.stock.connection()).await.expect("PTTL");
    assert!(ttl > 0 && ttl <= 86_400_000, "the draw's keys expire (PTTL {ttl} ms)");
    order.stop().await;
    edge.stop().await;
}

/// A draw with no end tells its last outcomes in slices of about 1,000
/// entries; a unit given back between two slices (a dead letter compensated
/// late) promotes nobody — entries ranked before the next in line may have
/// been told LOST already — and the slices go on until every waitlisted
/// entry has lost. (Before: the pass promoted the next in line past entries
/// it had told LOST.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_given_back_while_a_draw_tells_its_end_promotes_nobody() {
    use futures::StreamExt;
    use seckill_shared::domain::UserId;
    let env = TestEnv::new().await;
    let sale = env.sale();
    // The draw 8 s on: the 2,500 entries are all in before it, on a busy
    // machine too (at 2 s, a fresh-clone run's busy machine entered 1,778).
    let draw: seckill_shared::draw::Draw = serde_json::from_str(&draw_json(-1, 8, 10)).unwrap();
    let mut request = seckill_e2e::draw::draw_request(sale, 1, draw, true);
    request.payment_window_seconds = 2;
    env.run_warmup(&request).await.expect("warmed up");
    let draws = env.stock.draws();
    let entered: Vec<_> = futures::stream::iter(1..=2_500)
        .map(|user| async move { draws.enter_draw(sale, UserId::new(user).unwrap(), None).await.expect("an entry") })
        .buffer_unordered(16)
        .collect()
        .await;
    let refused: Vec<_> =
        entered.iter().filter(|a| !matches!(a, seckill_shared::draw::EntryAnswer::Entry(_))).collect();
    assert!(refused.is_empty(), "every entry taken before the draw: {:?}", refused.first());
    seckill_e2e::eventually("the draw made", Duration::from_secs(30), || async {
        match seckill_edge::draw::make::make(&env.stock, (&env.db, seckill_e2e::CALL_DEADLINE), sale, 1).await {
            Ok(Some(made)) => Ok(made),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Passes as an edge makes them, the units left named: none, then one.
    let first =
        seckill_e2e::eventually("the winner's right lapsed, the first slice told", Duration::from_secs(60), || async {
            let state = pass(&env, sale, 0).await;
            (state.lost > 0).then_some(state.clone()).ok_or(format!("{state:?}"))
        })
        .await;
    assert!(first.lost < 2_499, "told in slices: {first:?}");
    let given_back = pass(&env, sale, 1).await;
    assert_eq!(given_back.promoted, 0, "a unit given back mid-way promotes nobody: {given_back:?}");
    assert!(given_back.lost > first.lost, "the slices go on: {given_back:?}");
    let last = seckill_e2e::eventually("every waitlisted entry told", Duration::from_secs(30), || async {
        let state = pass(&env, sale, 1).await;
        (state.lost == 2_499).then_some(state.clone()).ok_or(format!("{state:?}"))
    })
    .await;
    assert_eq!((last.promoted, last.expired), (0, 1), "nobody promoted, the winner's right lapsed: {last:?}");
}

/// One admission pass of `sale`'s room with `orders` named as the orders
/// the units left can take: the draw's state after it.
async fn pass(env: &TestEnv, sale: seckill_shared::domain::SaleKey, orders: i64) -> seckill_shared::draw::DrawState {
    let reads = seckill_shared::stock::queue::PassReads { used: 0, orders };
    env.stock.waiting_room().admit_after(sale, reads, 0, Duration::ZERO).await.expect("a pass");
    env.stock.draws().draw_state(sale).await.expect("the draw").expect("a draw")
}
