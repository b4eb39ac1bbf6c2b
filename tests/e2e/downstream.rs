//! The contract for teams downstream: order events through the outbox and
//! its relay, records that match their JSON Schemas, and keys partitioned
//! as Java clients partition them.

use rdkafka::message::{Message, OwnedMessage};
use seckill_e2e::http::Client;
use seckill_e2e::schemas;
use seckill_e2e::{eventually, relay_rows, Child, TestEnv};
use seckill_order::relay::Relay;
use seckill_shared::domain::OrderEvent;
use seckill_shared::kafka::{header_str, headers_map, REQUEST_ID_HEADER, TRACEPARENT_HEADER};
use seckill_shared::ops::leader::Seat;
use seckill_shared::ops::lease::LeaseTerm;
use seckill_shared::ops::shutdown::Background;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

pub(crate) fn json(message: &OwnedMessage) -> serde_json::Value {
    serde_json::from_slice(message.payload().unwrap_or_default()).unwrap_or(serde_json::Value::Null)
}

/// Every record fixture of a version still decodes against its schema; a
/// record of another major version does not.
#[test]
fn fixtures_match_their_schemas() {
    let fixtures = seckill_e2e::repo_root().join("tests/fixtures/records");
    for (file, schema, valid) in [
        ("orders-v1.json", "orders.v1.json", true),
        ("orders-v1-round.json", "orders.v1.json", true),
        ("orders-v1-newer.json", "orders.v1.json", true),
        ("orders-v2.json", "orders.v1.json", false),
        ("order-events-v1.json", "order-events.v1.json", true),
    ] {
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixtures.join(file)).unwrap()).unwrap();
        assert_eq!(schemas::is_valid(schema, &value), valid, "{file}");
    }
}

/// What the edge, the order service and the compensator actually write
/// matches the schemas: orders, dead letters (value and headers), events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_pipeline_writes_matches_its_schemas() {
    let env = TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let mut order_settings = env.order_settings();
    order_settings.servers.kafka.cloudevents_source = super::cloud_events::SOURCE.into();
    let order = env.spawn_order(order_settings).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    let client = Client::new(edge.url());
    let sale = env.sale();
    env.warmup(sale, 2).await;
    for user in 1..=2 {
        assert_eq!(client.order(sale.activity.get(), sale.sku.get(), user).await.status, 202);
    }
    // The edge's two orders written first: a record beyond the stock read
    // before them (another partition, another consumer) would take a unit.
    eventually("the edge's orders written", Duration::from_secs(60), || async {
        let created = env.count_orders(sale, "CREATED").await;
        if created == 2 {
            Ok(())
        } else {
            Err(format!("{created} written"))
        }
    })
    .await;
    // Two dead letters: an undecodable record, and an order beyond the
    // database's stock.
    let topics = env.topics();
    env.produce(&topics.orders, "9", b"{broken", &[]).await;
    let beyond = env.order_records(sale, 3..4);
    env.produce_records(&beyond).await;
    eventually("the pipeline drained, events relayed", Duration::from_secs(60), || async {
        let report = seckill_shared::books::reconcile(&env.stock, &env.db, Some(&env.kafka), sale, true)
            .await
            .map_err(|e| e.to_string())?;
        // The FAILED through the outbox, the two CREATED from the order service.
        if report.drained() && report.orders_failed == 1 && report.events + report.events_created_directly == 3 {
            Ok(())
        } else {
            Err(format!("{:?}", report.violations))
        }
    })
    .await;

    let orders = env.read_topic(&topics.orders, 4, Duration::from_secs(10)).await;
    let records: Vec<_> = orders
        .iter()
        .filter(|m| m.payload() != Some(b"{broken"))
        .map(|m| (json(m), "an orders record".to_owned()))
        .collect();
    schemas::assert_valid("orders.v1.json", &records);
    let from_edge: Vec<&OwnedMessage> =
        orders.iter().filter(|m| m.headers().and_then(|h| header_str(h, REQUEST_ID_HEADER)).is_some()).collect();
    assert_eq!(from_edge.len(), 2, "the edge's records carry their request id");
    assert!(
        from_edge.iter().all(|m| m.headers().and_then(|h| header_str(h, TRACEPARENT_HEADER)).is_some()),
        "and a traceparent"
    );

    dead_letters_match_their_schemas(&env.read_topic(&topics.dlq, 2, Duration::from_secs(10)).await);
    events_match_their_schema(&env.read_topic(&topics.events, 3, Duration::from_secs(10)).await);
    let tail = env.ctl(&["events", "tail", "--limit", "3", "--idle", "20", "--json"]).await;
    assert_eq!(tail.code, 0, "{tail:?}");
    assert_eq!(tail.stdout.lines().count(), 3, "seckillctl events tail prints each event once: {}", tail.stdout);
    env.verify_events(sale).await;
    compensator.stop().await;
    order.stop().await;
    edge.stop().await;
}

/// The dead letters: their headers and values as the schemas say, and
/// Spring's headers as a Java DLT tool reads them.
fn dead_letters_match_their_schemas(dead: &[OwnedMessage]) {
    assert_eq!(dead.len(), 2);
    let mut dead_headers = Vec::new();
    let mut dead_values = Vec::new();
    for message in dead {
        let headers = serde_json::to_value(message.headers().map(headers_map).unwrap_or_default()).unwrap();
        if headers["dlq.reason"] != "MALFORMED" {
            dead_values.push((json(message), "a dead letter's value".to_owned()));
        }
        dead_headers.push((headers, "dead-letter headers".to_owned()));
    }
    schemas::assert_valid("orders-dlq-headers.v1.json", &dead_headers);
    // Spring's headers as a Java DLT tool reads them: the partition a 4-byte
    // and the offset an 8-byte big-endian number, equal to ours.
    for message in dead {
        use rdkafka::message::Headers as _;
        let h = message.headers().expect("headers");
        let raw = |key: &str| h.iter().find(|x| x.key == key).and_then(|x| x.value).expect(key).to_vec();
        let ours = |key| header_str(h, key).expect(key).parse::<i64>().unwrap();
        let partition = i32::from_be_bytes(raw("kafka_dlt-original-partition").try_into().unwrap());
        let offset = i64::from_be_bytes(raw("kafka_dlt-original-offset").try_into().unwrap());
        assert_eq!((i64::from(partition), offset), (ours("dlq.original.partition"), ours("dlq.original.offset")));
        assert_eq!(raw("kafka_dlt-original-timestamp").len(), 8);
    }
    schemas::assert_valid("orders-dlq.v1.json", &dead_values);
}

/// The events: one per order (two CREATED with their trace, one FAILED
/// NO_DB_STOCK), each valid and keyed by its user.
fn events_match_their_schema(events: &[OwnedMessage]) {
    assert_eq!(events.len(), 3, "one event per order: two CREATED, one FAILED");
    let values: Vec<_> = events.iter().map(|m| (json(m), "an order event".to_owned())).collect();
    schemas::assert_valid("order-events.v1.json", &values);
    let mut kinds = BTreeMap::new();
    for message in events {
        let value = json(message);
        let event: OrderEvent = serde_json::from_value(value).expect("an OrderEvent");
        assert_eq!(message.key(), Some(event.user_id.to_string().as_bytes()), "keyed by user id");
        *kinds.entry(event.kind.clone()).or_insert(0) += 1;
        if event.kind == "CREATED" {
            let headers = message.headers().expect("headers");
            assert!(
                header_str(headers, REQUEST_ID_HEADER).is_some() && header_str(headers, TRACEPARENT_HEADER).is_some(),
                "the order's trace follows it"
            );
        } else {
            assert_eq!(event.reason.as_deref(), Some("NO_DB_STOCK"));
        }
    }
    assert_eq!(kinds, BTreeMap::from([("CREATED".to_owned(), 2), ("FAILED".to_owned(), 1)]));
    let read = super::cloud_events::read_with_the_sdk(events);
    eprintln!("the events, as the CloudEvents SDK read them: {}", read.trim());
}

/// The relay killed mid-way: no event is lost, and an event sent again
/// keeps its `eventId`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_way_the_relay_loses_no_event() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5_000).await;
    let mut child_env = env.child_env();
    child_env.push(("SECKILL__METRICS_ADDR".into(), "127.0.0.1:0".into()));
    child_env.push(("SECKILL__EVENTS__BATCH".into(), "100".into()));
    let records = env.created_through_the_outbox(sale, 1..3_001).await;
    let child = Child::start("seckill-order", &child_env);
    let topic = env.topics().events;
    eventually("some events relayed", Duration::from_secs(60), || async {
        let n = env.read_topic(&topic, 1, Duration::from_millis(500)).await.len();
        if n > 0 {
            Ok(())
        } else {
            Err("none yet".into())
        }
    })
    .await;
    child.kill9().await;
    let child = Child::start("seckill-order", &child_env);
    eventually("every event relayed", Duration::from_secs(120), || async {
        let pending: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM order_events WHERE (xid, id) > (SELECT xid, id FROM order_events_relayed)",
        )
        .fetch_one(&env.db)
        .await
        .map_err(|e| e.to_string())?;
        let orders = env.count_orders(sale, "CREATED").await;
        if orders == 3_000 && pending == 0 {
            Ok(())
        } else {
            Err(format!("{orders} orders, {pending} events pending"))
        }
    })
    .await;
    // Every event is in the topic now (marked only after delivery), some
    // twice: read all the topic holds, not the first 3,000.
    let (kafka, name) = (env.kafka.clone(), topic.clone());
    let written = tokio::task::spawn_blocking(move || seckill_shared::kafka::lag::lag(&kafka, "reader", &name))
        .await
        .unwrap()
        .unwrap()
        .written;
    let events = env.read_topic(&topic, written as usize, Duration::from_secs(30)).await;
    let ids: BTreeSet<String> = events.iter().map(|m| json(m)["eventId"].as_str().unwrap_or("").to_owned()).collect();
    let expected: BTreeSet<String> = records.iter().map(|id| format!("{id}:CREATED")).collect();
    assert_eq!(ids, expected, "every order's event, under its stable id");
    env.verify_events(sale).await;
    println!(
        "relay killed mid-way: {} events read for {} orders ({} sent twice)",
        events.len(),
        expected.len(),
        events.len() - expected.len()
    );
    assert!(child.terminate().await);
}

/// With PostgreSQL down the relay waits; its events come once it returns.
/// And relayed events are pruned, their counts kept for the books.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_waits_for_postgres_and_prunes_what_it_sent() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 100).await;
    let mut settings = env.order_settings();
    settings.events.retention_ms = 0;
    let relay = Relay::new(std::sync::Arc::new(settings), env.connections(), Background::default()).expect("a relay");
    env.created_through_the_outbox(sale, 1..11).await;
    let term = relay.lease().take().await.expect("the database").expect("the relay's lease");
    assert!(relay.lease().take().await.expect("the database").is_none(), "one relay at a time");

    env.set_database_reachable(false).await;
    assert!(relay.relay_once(&term).await.is_err(), "no relaying without the database");
    env.set_database_reachable(true).await;
    let first = eventually("the database again", Duration::from_secs(30), || async {
        relay.relay_once(&term).await.map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(first + relay_rows(&relay, &term, 10 - first).await, 10);
    assert_eq!(relay.relay_once(&term).await.expect("a turn"), 0, "nothing sent twice");
    assert_eq!(env.read_topic(&env.topics().events, 10, Duration::from_secs(10)).await.len(), 10);

    assert_eq!(relay.prune(&term).await.expect("pruning"), 10);
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert_eq!((report.events, report.events_pending), (10, 0), "pruned events still counted");
}

/// The relay keeps a cursor, not a mark per row: an event whose
/// transaction commits after a later one's must not fall behind it. The
/// relay waits for the open transaction, then sends both, the older first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_whose_transaction_commits_late_is_not_skipped() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    // One user (one key, one partition: the topic keeps their order), in
    // two rounds (one order per user per round).
    let order = |round: i32| format!("{}-{}-{round}-000000000000000{round}", sale.activity.get(), sale.sku.get());
    let insert = "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, accepted_at)
                  VALUES ($1, $2, $3, $4, 7, 'CREATED', now())";
    let write =
        |round: i32| sqlx::query(insert).bind(order(round)).bind(sale.activity.get()).bind(sale.sku.get()).bind(round);
    let relay = Relay::new(std::sync::Arc::new(env.order_settings()), env.connections(), Background::default())
        .expect("a relay");
    let term = relay.lease().take().await.expect("the database").expect("the relay's lease");

    let mut early = env.db.begin().await.unwrap();
    write(1).execute(&mut *early).await.unwrap();
    write(2).execute(&env.db).await.unwrap();
    assert_eq!(relay.relay_once(&term).await.expect("a turn"), 0, "nothing passes a transaction still open");
    early.commit().await.unwrap();
    assert_eq!(relay_rows(&relay, &term, 2).await, 2);
    assert_eq!(relay.relay_once(&term).await.expect("a turn"), 0, "nothing sent twice");
    let sent: Vec<String> = env
        .read_topic(&env.topics().events, 2, Duration::from_secs(10))
        .await
        .iter()
        .map(|m| json(m)["orderId"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(sent, [order(1), order(2)], "the transaction that wrote first goes first");
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert_eq!((report.events, report.events_pending), (1, 0), "round 1's event, relayed");
}

/// Three orders of `sale` written (and their CREATED events in the outbox,
/// behind what the test put there), and a relay holding its lease.
async fn three_orders_behind(env: &TestEnv, sale: seckill_shared::domain::SaleKey) -> (Relay, LeaseTerm) {
    let relay = Relay::new(std::sync::Arc::new(env.order_settings()), env.connections(), Background::default())
        .expect("a relay");
    env.created_through_the_outbox(sale, 1..4).await;
    let term = relay.lease().take().await.expect("the database").expect("the relay's lease");
    (relay, term)
}

/// An outbox row that cannot be an event (written by hand, or by a tool
/// that inserted orders with ids of its own) is parked, and the events
/// behind it still flow: one bad row never stops the relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_row_that_is_no_event_is_parked_and_the_rest_flow() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    sqlx::query(
        "INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type)
         VALUES ('pgb-1-1:CREATED', 'pgb-1-1', $1, $2, 1, 1, 'CREATED')",
    )
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .execute(&env.db)
    .await
    .unwrap();
    let (relay, term) = three_orders_behind(&env, sale).await;
    assert_eq!(relay_rows(&relay, &term, 4).await, 4, "three sent, one parked");
    assert_eq!(env.read_topic(&env.topics().events, 3, Duration::from_secs(10)).await.len(), 3);
    let parked: Vec<(String, String)> =
        sqlx::query_as("SELECT order_id, reason FROM parked_records").fetch_all(&env.db).await.unwrap();
    assert_eq!(parked, [("pgb-1-1".to_owned(), "BAD_OUTBOX_ROW".to_owned())]);
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert_eq!((report.events_pending, report.parked), (0, 1), "the operator is told: {:?}", report.violations);
}

/// An event the broker refuses for good (here larger than any record it
/// takes: a 2 MB reason written by a tool) is parked, and the events behind
/// it — the same user's included — still flow. (Before: the relay retried
/// it every turn and no event after it was ever sent.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_broker_refuses_for_good_is_parked_and_the_rest_flow() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let order = format!("{}-{}-1-00000000000000ff", sale.activity, sale.sku);
    sqlx::query(
        "INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason)
         VALUES ($1 || ':FAILED', $1, $2, $3, 1, 1, 'FAILED', repeat('x', 2000000))",
    )
    .bind(&order)
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .execute(&env.db)
    .await
    .unwrap();
    let (relay, term) = three_orders_behind(&env, sale).await;
    assert_eq!(relay_rows(&relay, &term, 4).await, 4, "three sent, one parked");
    let sent = env.read_topic(&env.topics().events, 3, Duration::from_secs(10)).await;
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().any(|m| json(m)["userId"] == 1), "user 1's later event went on");
    let parked: Vec<(String, String)> =
        sqlx::query_as("SELECT order_id, reason FROM parked_records").fetch_all(&env.db).await.unwrap();
    assert_eq!(parked, [(order, "UNDELIVERABLE_EVENT".to_owned())]);
    assert_eq!(relay.relay_once(&term).await.expect("a turn"), 0, "nothing left behind the cursor");
}

/// Keys land on the partitions Java's default partitioner picks
/// (`toPositive(murmur2(key)) % partitions`; the expected values were
/// computed with Kafka's murmur2, checked against its own test vectors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_land_where_java_clients_put_them() {
    use rdkafka::producer::FutureRecord;
    let env = TestEnv::with_partitions(8).await;
    let producer = seckill_shared::kafka::producer(&env.kafka).expect("the project's producer");
    let topic = env.topics().orders;
    for (key, partition) in [("1", 7), ("2", 0), ("42", 4), ("1001", 4), ("123456789", 6), ("user-7", 4)] {
        let delivered = producer
            .send(FutureRecord::to(&topic).key(key).payload("x"), Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .expect("delivered");
        assert_eq!(delivered.partition, partition, "key {key}");
    }
}
