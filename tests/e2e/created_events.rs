//! CREATED events produced by the order service itself — after its
//! transaction commits, before its offsets are committed — and the relay's
//! rule that keeps an order's events in order. The order service runs as a
//! process and stops itself (SIGSTOP, `SECKILL_TEST_HALT_AT`) at each new
//! step of a batch; the test pays an order there, or kills it (SIGKILL),
//! and reads the events topic as a consumer would.

use rdkafka::message::{Message, OwnedMessage};
use seckill_e2e::http::Client;
use seckill_e2e::{eventually, Child, Group, TestEnv};
use seckill_order::relay::Relay;
use seckill_shared::domain::{OrderRecord, SaleKey};
use seckill_shared::ops::leader::Seat;
use seckill_shared::ops::shutdown::Background;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// An order service (consumers only: the test drives the relay) that
/// stops itself when its first batch reaches `halt_at`, if given.
fn order_service(env: &TestEnv, halt_at: Option<&str>) -> Child {
    let mut child_env = env.child_env();
    child_env.push(("SECKILL__METRICS_ADDR".into(), "127.0.0.1:0".into()));
    child_env.push(("SECKILL__EVENTS__ENABLED".into(), "false".into()));
    // One member, whose first batch takes all five records.
    child_env.push(("SECKILL__CONSUMERS".into(), "1".into()));
    child_env.push(("SECKILL__BATCH_WAIT_MS".into(), "1000".into()));
    if let Some(point) = halt_at {
        child_env.push(("SECKILL_TEST_HALT_AT".into(), point.into()));
    }
    Child::start("seckill-order", &child_env)
}

/// Five orders deducted in Redis and on the orders topic, and an order
/// service stopped at `point` of the batch that writes them.
async fn five_orders_halted_at(env: &TestEnv, sale: SaleKey, point: &str) -> (Vec<OrderRecord>, Child) {
    env.warmup(sale, 10).await;
    let mut records = Vec::new();
    for user in 1..=5 {
        records.push(env.deduct(sale, user).await);
    }
    env.produce_records(&records).await;
    let child = order_service(env, Some(point));
    eventually(&format!("the order service stopped at {point}"), Duration::from_secs(90), || async {
        let rows = env.count_orders(sale, "CREATED").await;
        if rows == 5 && child.stopped() {
            Ok(())
        } else {
            Err(format!("{rows} rows, stopped {}", child.stopped()))
        }
    })
    .await;
    // Stopped before the batch's offsets were committed: a halt that let
    // the process run on a moment (a stop signal sent to the process, not
    // the thread) committed them, and nothing was consumed again.
    assert_eq!(env.order_lag().await, 5, "the halted service committed no offset");
    (records, child)
}

/// The events topic as a consumer reads it: each event id, in the order of
/// the records of its key (a user), and how often each came.
struct Seen {
    by_user: BTreeMap<String, Vec<String>>,
    times: BTreeMap<String, usize>,
}

fn seen(messages: &[OwnedMessage]) -> Seen {
    let mut seen = Seen { by_user: BTreeMap::new(), times: BTreeMap::new() };
    for message in messages {
        let value = super::downstream::json(message);
        let id = value["eventId"].as_str().unwrap_or_default().to_owned();
        let user = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
        seen.by_user.entry(user).or_default().push(id.clone());
        *seen.times.entry(id).or_default() += 1;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_before_the_created_event_waits_for_it_even_through_a_kill() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    let sale = env.sale();
    let (records, child) = five_orders_halted_at(&env, sale, "committed").await;
    let events = env.topics().events;
    assert!(env.read_topic(&events, 1, Duration::from_secs(3)).await.is_empty(), "no CREATED before the halt");

    // The rows are committed, their CREATED events not produced: the buyer
    // pays now.
    let paid = &records[0];
    let payment = client.pay(paid.order_id.as_str(), "pay-before-created").await;
    assert_eq!(payment.json["outcome"], "APPLIED", "{}", payment.text);
    let relay = Relay::new(std::sync::Arc::new(env.order_settings()), env.connections(), Background::default())
        .expect("a relay");
    let term = relay.lease().take().await.expect("the database").expect("the relay's lease");
    for _ in 0..3 {
        assert_eq!(relay.relay_once(&term).await.expect("a turn"), 0, "the PAID waits for its CREATED");
    }
    assert!(env.read_topic(&events, 1, Duration::from_secs(2)).await.is_empty(), "nothing on the topic yet");

    // Killed there: the next order service consumes the batch again and
    // produces every CREATED event (the rows already existed).
    child.kill9().await;
    let next = order_service(&env, None);
    env.wait_drained(Group::Order).await;
    let sent = eventually("the PAID relayed", Duration::from_secs(30), || async {
        match relay.relay_once(&term).await {
            Ok(0) => Err("held".to_owned()),
            Ok(n) => Ok(n),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    assert_eq!(sent, 1);

    let seen = seen(&env.read_topic(&events, 6, Duration::from_secs(20)).await);
    for record in &records {
        let created = format!("{}:CREATED", record.order_id);
        assert_eq!(seen.times.get(&created), Some(&1), "{created} once (never delivered before the kill)");
    }
    let first_user = &seen.by_user[&paid.user_id.to_string()];
    let expected = vec![format!("{}:CREATED", paid.order_id), format!("{}:PAID", paid.order_id)];
    assert_eq!(first_user, &expected, "CREATED first, then PAID, as a consumer reads the user's events");
    let rows: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM orders WHERE activity_id = $1 AND sku_id = $2 AND source_offset IS NOT NULL",
    )
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .fetch_one(&env.db)
    .await
    .unwrap();
    assert_eq!(rows, 5, "exactly one row per order, each naming its record");
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, Some(&env.kafka), sale, true).await.unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!((report.events, report.events_created_directly), (1, 5), "the PAID in the outbox, no CREATED");
    assert!(next.terminate().await);
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_events_before_the_offsets_an_order_service_sends_them_again() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let (records, child) = five_orders_halted_at(&env, sale, "delivered").await;
    let events = env.topics().events;
    assert_eq!(env.read_topic(&events, 5, Duration::from_secs(20)).await.len(), 5, "delivered before the halt");
    child.kill9().await;
    let next = order_service(&env, None);
    env.wait_drained(Group::Order).await;

    let seen = seen(&env.read_topic(&events, 10, Duration::from_secs(20)).await);
    let ids: BTreeSet<&String> = seen.times.keys().collect();
    let expected: Vec<String> = records.iter().map(|r| format!("{}:CREATED", r.order_id)).collect();
    assert_eq!(ids, expected.iter().collect(), "each order's CREATED, under its one event id");
    assert!(seen.times.values().all(|&n| n == 2), "sent again by the next service: {:?}", seen.times);
    assert_eq!(env.count_orders(sale, "CREATED").await, 5, "one row each");
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, Some(&env.kafka), sale, true).await.unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    env.verify_events(sale).await;
    assert!(next.terminate().await);
}

/// A redriven order whose record the sweeper publishes again (the redrive
/// died after the deduction and the link, before its publish): the record
/// the sweeper rebuilds from Redis carries no `redriveOf`, and the order's
/// CREATED event still names the order it replaces — read from the link,
/// as the outbox's trigger read it before the order service produced the
/// event itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redriven_order_published_again_by_the_sweeper_keeps_its_link() {
    use seckill_shared::ops::fence::Fence;
    use seckill_shared::ops::lock::LockClient;
    use seckill_shared::stock::Deduction;
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let nonce = format!("{:016x}", rand::random::<u64>());
    let user = seckill_shared::domain::UserId::new(7).unwrap();
    let (order, accepted) = match env.stock.orders().deduct(sale, user, 1, &nonce, Duration::ZERO).await.unwrap() {
        Deduction::Accepted { order_id, accepted_at, .. } => (order_id, accepted_at),
        other => panic!("{other:?}"),
    };
    let original = format!("{}-{}-9-00000000000000ab", sale.activity, sale.sku);
    let run: i64 = sqlx::query_scalar(
        "INSERT INTO dlq_runs (kind, operator, filter, dry_run) VALUES ('redrive', 'test', '{}', false) RETURNING run_id",
    )
    .fetch_one(&env.db)
    .await
    .unwrap();
    sqlx::query("INSERT INTO dlq_redrives (original_order_id, call_id, run_id, new_order_id, placed_at) VALUES ($1, $2, $3, $4, now())")
        .bind(&original)
        .bind(&nonce)
        .bind(run)
        .bind(order.as_str())
        .execute(&env.db)
        .await
        .unwrap();

    let settings = std::sync::Arc::new(env.compensator_settings());
    let grace = settings.sweeper.grace_ms as i64;
    eventually("Redis's clock past the order's deadline and grace", Duration::from_secs(30), || async {
        let now = env.stock.now_ms().await.map_err(|e| e.to_string())?;
        if now > accepted + grace {
            Ok(())
        } else {
            Err(format!("{now}"))
        }
    })
    .await;
    let sweeper = seckill_compensator::sweeper::Sweeper::new(settings, env.connections(), Background::default())
        .expect("a sweeper");
    let locks = LockClient::new(env.stock.connection(), Background::default());
    let lease = Duration::from_secs(30);
    let guard = locks.acquire(&env.stock.keys().sweeper_lock(), lease, Duration::ZERO).await.unwrap().unwrap();
    let fence = Fence { lock: guard.key(), token: guard.fence(), holder: guard.holder() };
    // The first sweep marks where it stands; the second republishes.
    sweeper.sweep_once(fence).await.expect("a checkpoint");
    let report = sweeper.sweep_once(fence).await.expect("a sweep");
    assert_eq!(report.republished, 1, "{report:?}");

    let order_service = env.spawn_order(env.order_settings()).await;
    let events = env.read_topic(&env.topics().events, 1, Duration::from_secs(60)).await;
    let created: Vec<serde_json::Value> =
        events.iter().filter_map(|m| serde_json::from_slice(m.payload()?).ok()).collect();
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!((created[0]["orderId"].as_str(), created[0]["type"].as_str()), (Some(order.as_str()), Some("CREATED")));
    assert_eq!(created[0]["redriveOf"], original.as_str(), "the CREATED event names the order it replaces");
    order_service.stop().await;
}
