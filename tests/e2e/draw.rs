//! A draw, checked from the side of those who rely on it: the buyers who
//! enter and poll, the doubter who verifies the draw with the published
//! figures and no server, the shop's notifier that reads
//! `seckill.draw-events` as a consumer, and the books (`draw_faults.rs`:
//! an entry too late, an edge killed at the draw).

use futures::stream::{self, StreamExt};
use hyper::Method;
use seckill_e2e::draw::{draw_json, drawn, enter, outcomes, read_draw, warm_with_draw};
use seckill_e2e::http::{Client, Reply};
use seckill_e2e::{eventually, Running, TestEnv, ADMIN_TOKEN};
use seckill_shared::domain::{SaleKey, UserId};
use seckill_shared::draw::proof;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// Users by the type of their outcome, each once (a record published
/// again counts once).
fn users_by_type(events: &[(Value, String)]) -> BTreeMap<String, BTreeMap<i64, Value>> {
    let mut by: BTreeMap<String, BTreeMap<i64, Value>> = BTreeMap::new();
    for (event, _) in events {
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        by.entry(kind).or_default().insert(event["userId"].as_i64().unwrap_or_default(), event.clone());
    }
    by
}

/// 5,000 entries for 100 units in three stock buckets: exactly 100 sold, every order from a winner
/// or a promoted entry; `seckillctl draw verify` reproduces the ranking
/// from the export, and catches a changed seed and an added entry; ten
/// winners who never order are replaced by the next ten, in the pass that
/// expired them; every entry's last outcome is on the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draw_sells_its_stock_to_its_winners_and_anyone_can_verify_it() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(crate::waiting_room::settings(&env)).await;
    let order_service = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    // Time enough for 5,000 entries beside the suite's other tests.
    let draw_at = chrono::Utc::now() + chrono::Duration::seconds(60);
    // In three stock buckets: the winners are counted over all of them.
    let warmed = warm_with_draw(&edge, sale, 100, &draw_json(-1, 60, 10), r#","buckets":3"#).await;
    let commitment = warmed.json["draw"]["seedCommitment"].as_str().unwrap().to_owned();
    assert_eq!((commitment.len(), warmed.json["draw"].get("seed")), (64, None), "{}", warmed.text);
    let entry_of = enter_everyone(&client, sale, &commitment).await;
    assert!(chrono::Utc::now() < draw_at, "the entries took past the draw: the test proves nothing");

    let draw = drawn(&client, sale).await;
    let (seed, digest) = (draw["seed"].as_str().unwrap(), draw["entriesDigest"].as_str().unwrap());
    assert_eq!(draw["winners"], 100);

    // 90 winners order at once (their rights last `claimSeconds` from the
    // draw); 10 never do. A waitlisted user may not order. The ranking, as
    // a buyer computes it from the seed revealed, is checked below against
    // the verify command's.
    let users: Vec<UserId> = entry_of.keys().map(|u| UserId::new(*u).unwrap()).collect();
    let ranked: Vec<i64> = proof::ranking(seed, digest, &users).iter().map(|(u, _)| u.get()).collect();
    order_with_their_rights(&client, sale, &entry_of, &ranked[..90]).await;
    let refused = crate::waiting_room::order_with(&client, sale, ranked[100], None).await;
    assert_eq!((refused.status.as_u16(), refused.code()), (403, "ADMISSION_REQUIRED"), "{}", refused.text);
    let place = client.get(&format!("/api/seckill/draw/entries/{}", entry_of[&ranked[100]])).await;
    let read = (place.json["status"].as_str(), place.json["place"].as_u64());
    assert_eq!(read, (Some("WAITLISTED"), Some(1)), "{}", place.text);

    assert_eq!(proof::sha256_hex(seed.as_bytes()), commitment, "the seed revealed is the one committed");
    let ranking = verify_with_no_server(&env, sale, seed, &commitment, digest).await;
    assert_eq!(ranking, ranked, "the verify command ranks as the draw did");
    the_notifier_reads_the_ranking(&env, sale, &ranking).await;

    // Their rights lapse; the next ten are promoted in the same pass.
    let by = users_by_type(&outcomes(&env, sale, 5_020).await);
    let expired: BTreeSet<i64> = by["EXPIRED"].keys().copied().collect();
    assert_eq!(expired, ranking[90..100].iter().copied().collect(), "the ten who never ordered");
    let promoted: BTreeSet<i64> = by["PROMOTED"].keys().copied().collect();
    assert_eq!(promoted, ranking[100..110].iter().copied().collect(), "the waitlist's first ten");
    let expired_at: BTreeSet<i64> = by["EXPIRED"].values().map(|e| e["occurredAt"].as_i64().unwrap()).collect();
    for event in by["PROMOTED"].values() {
        let at = event["occurredAt"].as_i64().unwrap();
        assert!(expired_at.contains(&at), "promoted by the pass that expired a right: {event}");
    }
    order_with_their_rights(&client, sale, &entry_of, &ranking[100..110]).await;

    // Exactly the stock sold, each order a winner's or a promoted entry's.
    let report = eventually("the 100 orders written", Duration::from_secs(60), || async {
        let r = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await;
        let r = r.map_err(|e| e.to_string())?;
        if r.orders_created == 100 && r.orders_in_flight == 0 {
            Ok(r)
        } else {
            Err(format!("{r:?}"))
        }
    })
    .await;
    assert!(report.consistent, "{:?}", report.violations);
    assert_eq!(report.redis_remaining, 0);
    let books = report.draw.expect("the reconciliation shows the draw");
    assert_eq!((books.winners, books.claimed, books.promoted, books.expired), (100, 100, 10, 10));
    assert_eq!((books.seed.as_str(), books.entries_digest.as_str()), (seed, digest));
    the_sale_ends_and_every_entry_has_its_last_outcome(&env, &edge, sale, &ranking).await;
    let sale_arg = format!("{}:{}", sale.activity, sale.sku);
    let stats = env.ctl(&["draw", "stats", "--sale", &sale_arg]).await;
    assert!(stats.stdout.contains(seed) && stats.stdout.contains(digest), "{}", stats.stdout);
    order_service.stop().await;
    edge.stop().await;
}

/// 5,000 users enter (8 at a time), each answered ENTERED with the one
/// commitment; entering again answers the same entry. Their entry ids.
async fn enter_everyone(client: &Client, sale: SaleKey, commitment: &str) -> HashMap<i64, String> {
    let entries: Vec<Reply> =
        stream::iter(1..=5_000i64).map(|user| enter(client, sale, user)).buffered(8).collect().await;
    let mut entry_of = HashMap::new();
    for (user, reply) in (1..=5_000i64).zip(&entries) {
        assert_eq!((reply.status.as_u16(), reply.json["status"].as_str()), (200, Some("ENTERED")), "{}", reply.text);
        assert_eq!(reply.json["seedCommitment"], commitment);
        entry_of.insert(user, reply.json["entry"].as_str().unwrap().to_owned());
    }
    assert_eq!(enter(client, sale, 1).await.json["entry"], entry_of[&1].as_str(), "entering again: the same entry");
    let before = read_draw(client, sale).await.json;
    let shown = (before["state"].as_str(), before["entries"].as_i64(), before.get("seed"));
    assert_eq!(shown, (Some("OPEN"), Some(5_000), None), "before the draw: no seed");
    entry_of
}

/// The doubter's check: the export verifies with the published seed,
/// commitment and digest; another seed and one more entry do not. The
/// ranking it prints, by user.
async fn verify_with_no_server(env: &TestEnv, sale: SaleKey, seed: &str, commitment: &str, digest: &str) -> Vec<i64> {
    let dir = std::env::temp_dir().join(format!("draw-{}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let list = dir.join("entries.txt");
    let sale_arg = format!("{}:{}", sale.activity, sale.sku);
    let export = env.ctl(&["draw", "export", "--sale", &sale_arg, "--out", list.to_str().unwrap()]).await;
    assert_eq!(export.code, 0, "{}", export.stderr);
    let verify = |seed: &str, list: &std::path::Path| {
        let args = ["draw", "verify", "--seed", seed, "--entries", list.to_str().unwrap(), "--commitment", commitment];
        let args: Vec<String> = [&args[..], &["--digest", digest, "--winners", "100", "--json"]]
            .concat()
            .into_iter()
            .map(str::to_owned)
            .collect();
        async move { env.ctl(&args.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };
    let verified = verify(seed, &list).await;
    assert_eq!(verified.code, 0, "{}{}", verified.stdout, verified.stderr);
    let report: Value = serde_json::from_str(&verified.stdout).unwrap();
    let ranking: Vec<i64> =
        report["ranking"].as_array().unwrap().iter().map(|r| r["userId"].as_i64().unwrap()).collect();
    assert_eq!(ranking.len(), 5_000);
    let other_seed = verify(&format!("{seed}0"), &list).await;
    assert_eq!(other_seed.code, 1, "a changed seed is caught: {}", other_seed.stdout);
    assert!(other_seed.stdout.contains("does not match the commitment"), "{}", other_seed.stdout);
    let added = dir.join("added.txt");
    std::fs::write(&added, std::fs::read_to_string(&list).unwrap() + "999999\n").unwrap();
    let one_more = verify(seed, &added).await;
    assert_eq!(one_more.code, 1, "an added entry is caught: {}", one_more.stdout);
    assert!(one_more.stdout.contains("not the one drawn"), "{}", one_more.stdout);
    std::fs::remove_dir_all(&dir).ok();
    ranking
}

/// The notifier's view of the draw: the winners are the verified ranking's
/// first hundred, in order; the waitlist the rest, in order.
async fn the_notifier_reads_the_ranking(env: &TestEnv, sale: SaleKey, ranking: &[i64]) {
    let by = users_by_type(&outcomes(env, sale, 5_000).await);
    let won: BTreeMap<i64, i64> = by["WON"].iter().map(|(u, e)| (e["place"].as_i64().unwrap(), *u)).collect();
    assert_eq!(won.values().copied().collect::<Vec<_>>(), ranking[..100], "the winners: the ranking's first 100");
    let waitlisted: BTreeMap<i64, i64> =
        by["WAITLISTED"].iter().map(|(u, e)| (e["place"].as_i64().unwrap(), *u)).collect();
    assert_eq!(waitlisted.values().copied().collect::<Vec<_>>(), ranking[100..], "the waitlist is the rest, in order");
}

/// Each of `users` reads their entry (WON, with its token) and orders with
/// it: 202.
async fn order_with_their_rights(client: &Client, sale: SaleKey, entry_of: &HashMap<i64, String>, users: &[i64]) {
    for user in users {
        let reply = client.get(&format!("/api/seckill/draw/entries/{}", entry_of[user])).await;
        assert_eq!(reply.json["status"], "WON", "{}", reply.text);
        let token = reply.json["admission"].as_str().unwrap();
        let placed = crate::waiting_room::order_with(client, sale, *user, Some(token)).await;
        assert_eq!(placed.status, 202, "{}", placed.text);
    }
}

/// The sale is closed: every entry still waitlisted has lost, and every
/// entry's last outcome is on the topic — once per outcome, with its
/// CloudEvents type, as its schema says.
async fn the_sale_ends_and_every_entry_has_its_last_outcome(
    env: &TestEnv,
    edge: &Running,
    sale: SaleKey,
    ranking: &[i64],
) {
    let close = Client::new(edge.console_url());
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let path = format!("/admin/sales/{}/{}/close", sale.activity, sale.sku);
    let closed = close.send(Method::POST, &path, None, &[("authorization", &auth)]).await;
    assert_eq!(closed.status, 200, "{}", closed.text);
    let events = outcomes(env, sale, 9_910).await;
    let by = users_by_type(&events);
    let lost: BTreeSet<i64> = by["LOST"].keys().copied().collect();
    assert_eq!(lost, ranking[110..].iter().copied().collect(), "the waitlist's rest lost");
    let expired: BTreeSet<i64> = by["EXPIRED"].keys().copied().collect();
    let ordered = ranking[..90].iter().chain(&ranking[100..110]);
    let finals: BTreeSet<i64> = ordered.chain(&expired).chain(&lost).copied().collect();
    assert_eq!(finals.len(), 5_000, "every entry has its final outcome on the topic");
    let counts: BTreeMap<&str, usize> = by.iter().map(|(k, v)| (k.as_str(), v.len())).collect();
    let expected = [("EXPIRED", 10), ("LOST", 4_890), ("PROMOTED", 10), ("WAITLISTED", 4_900), ("WON", 100)];
    assert_eq!(counts, BTreeMap::from(expected));
    for (event, ce_type) in &events {
        assert_eq!(ce_type, &format!("com.seckill.draw.{}", event["type"].as_str().unwrap().to_lowercase()));
    }
    let sample: Vec<Value> = events.iter().step_by(97).map(|(e, _)| e.clone()).collect();
    let errors = seckill_e2e::schemas::errors("draw-events.v1.json", &sample);
    assert!(errors.iter().all(Vec::is_empty), "{errors:?}");
}
