//! A producer that fails fatally is made anew, as the edge's is: the
//! idempotent producer's fatal error (raised here with librdkafka's own
//! test hook, `rd_kafka_test_fatal_error`) fails every send of that
//! producer for good. The relay's, the dead letters', the sweeper's and the
//! dead-letter tools' producers each send again after one. (Before: every
//! send of theirs failed until the process restarted.)

use rdkafka::message::Message;
use seckill_e2e::{eventually, TestEnv};
use seckill_shared::dlq::{self, Filter, RunOptions, Tools};
use seckill_shared::domain::{FailReason, UserId};
use seckill_shared::kafka::dlq_header;
use seckill_shared::ops::fence::Fence;
use seckill_shared::ops::leader::Seat;
use seckill_shared::ops::lock::LockClient;
use seckill_shared::ops::shutdown::Background;
use seckill_shared::stock::Deduction;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_sends_on_after_its_producer_failed_fatally() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20).await;
    // Orders whose CREATED events go through the outbox: the relay's to send.
    env.created_through_the_outbox(sale, 1..11).await;
    let settings = env.order_settings();
    let relay =
        seckill_order::relay::Relay::new(std::sync::Arc::new(settings), env.connections(), Background::default())
            .expect("a relay");
    relay.producer().inject_fatal_error();
    assert!(relay.producer().fatal().is_some(), "the relay's producer failed fatally");
    let term = relay.lease().take().await.expect("the database").expect("the relay's lease");
    // A turn may send nothing yet while other tests' transactions on the
    // server hold the relay's horizon below these rows: it turns again. A
    // failed turn is the fatal error's; after two, the relay must be sending.
    let (mut failures, mut sent) = (0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while sent < 10 && std::time::Instant::now() < deadline {
        match relay.relay_once(&term).await {
            Ok(n) => sent += n,
            Err(error) => {
                failures += 1;
                assert!(failures <= 2, "the relay still fails after {failures} failed turns: {error}");
            }
        }
        if sent < 10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(sent, 10, "the ten events, on the new producer");
    assert!(relay.producer().fatal().is_none(), "a new producer replaced the failed one");
    env.verify_events(sale).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_sent_after_the_producer_failed_fatally() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.produce_orders(sale, 1..2).await;
    let original = env.read_topic(&env.topics().orders, 1, Duration::from_secs(30)).await.pop().expect("a record");
    let letters = seckill_order::dead_letters::DeadLetters::new(&env.kafka, env.topics().dlq).expect("a producer");
    letters.producer().inject_fatal_error();
    assert!(letters.producer().fatal().is_some(), "the dead letters' producer failed fatally");
    letters.send(&original, FailReason::DbRejected, "a test").await.expect("sent on a new producer");
    assert!(letters.producer().fatal().is_none(), "a new producer replaced the failed one");
    let dead = env.read_topic(&env.topics().dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload(), original.payload(), "the original value, unchanged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_publishes_again_after_its_producer_failed_fatally() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let nonce = format!("{:016x}", rand::random::<u64>());
    let (lost, accepted) =
        match env.stock.orders().deduct(sale, UserId::new(1).unwrap(), 1, &nonce, Duration::ZERO).await.unwrap() {
            Deduction::Accepted { order_id, accepted_at, .. } => (order_id, accepted_at),
            other => panic!("{other:?}"),
        };
    let settings = std::sync::Arc::new(env.compensator_settings());
    let grace = settings.sweeper.grace_ms as i64;
    eventually("Redis's clock past the lost order's deadline and grace", Duration::from_secs(30), || async {
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
    sweeper.producer().inject_fatal_error();
    assert!(sweeper.producer().fatal().is_some(), "the sweeper's producer failed fatally");
    let locks = LockClient::new(env.stock.connection(), Background::default());
    let guard = locks
        .acquire(&env.stock.keys().sweeper_lock(), Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let fence = Fence { lock: guard.key(), token: guard.fence(), holder: guard.holder() };
    sweeper.sweep_once(fence).await.expect("a checkpoint");
    // The new producer's first send may outlast the tests' 1 s message
    // timeout on a busy machine (its producer id asked of the broker
    // first): that sweep fails for the sale and the next one tries again,
    // as in service. A producer never renewed fails every sweep.
    let report = eventually("a sweep that publishes the lost order again", Duration::from_secs(30), || async {
        let report = sweeper.sweep_once(fence).await.map_err(|error| format!("{error:#}"))?;
        if report.republished == 1 {
            Ok(report)
        } else {
            Err(format!("{report:?}"))
        }
    })
    .await;
    assert_eq!((report.created, report.failed, report.unknown), (0, 0, 0), "{report:?}");
    assert!(sweeper.producer().fatal().is_none(), "a new producer replaced the failed one");
    let republished = env.read_topic(&env.topics().orders, 1, Duration::from_secs(10)).await;
    let value: serde_json::Value = serde_json::from_slice(republished[0].payload().unwrap_or_default()).unwrap();
    assert_eq!(value["orderId"], lost.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_goes_on_after_the_tools_producer_failed_fatally() {
    let env = TestEnv::with_partitions(1).await;
    let topics = env.topics();
    env.produce(&topics.dlq, "k", b"not an order", &[(dlq_header::REASON, "MALFORMED"), (dlq_header::ATTEMPTS, "1")])
        .await;
    let tools = Tools::new(env.servers(), env.db.clone(), env.stock.clone(), Default::default());
    tools.producer().expect("a producer").inject_fatal_error();
    assert!(tools.producer().expect("a producer").fatal().is_some(), "the tools' producer failed fatally");
    let options =
        RunOptions { note: "after a fatal error".into(), operator: Some("test".into()), ..Default::default() };
    let report = dlq::replay::replay(&tools, Filter::default(), None, &options, &mut |_| {}).await.expect("a run");
    assert_eq!(report.done, 1, "{report:?}");
    let replayed = env.read_topic(&topics.orders, 1, Duration::from_secs(30)).await;
    assert_eq!(replayed[0].payload(), Some(&b"not an order"[..]));
    assert!(tools.producer().expect("a producer").fatal().is_none(), "a new producer replaced the failed one");
}

/// The draws' producer fails fatally before a draw's outcomes are
/// published: a new one publishes them, each once. (Before: the draws'
/// producer was made once and never again, so the edge holding the lease
/// published nothing more.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draws_outcomes_are_published_once_after_the_draw_producer_failed_fatally() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let draw: seckill_shared::draw::Draw = serde_json::from_str(&seckill_e2e::draw::draw_json(-1, 2, 60)).unwrap();
    seckill_e2e::draw::warm(&env, sale, 3, draw, true).await.expect("warmed up");
    for user in 1..=5 {
        env.stock.draws().enter_draw(sale, UserId::new(user).unwrap(), None).await.unwrap();
    }
    let draws =
        seckill_edge::draw::Draws::new(std::sync::Arc::new(env.edge_settings()), env.stock.clone(), env.db.clone());
    let producer = draws.producer().expect("a producer");
    producer.inject_fatal_error();
    assert!(producer.fatal().is_some(), "the draws' producer failed fatally");
    // The draw is made once `drawAt` passed, and its outcomes published, by
    // this holder of the (unfenced) first term.
    eventually("the draw made and its outcomes published", Duration::from_secs(30), || async {
        draws.look(sale, 1).await.map_err(|error| format!("{error:#}"))?;
        let state = env.stock.draws().draw_state(sale).await.map_err(|e| e.to_string())?.ok_or("no draw")?;
        if state.drawn && state.events_unpublished == 0 {
            Ok(())
        } else {
            Err(format!("drawn {}, {} outcomes unpublished", state.drawn, state.events_unpublished))
        }
    })
    .await;
    assert!(draws.producer().unwrap().fatal().is_none(), "a new producer replaced the failed one");
    // Read as a consumer would: five outcomes (3 won, 2 waitlisted), each
    // once — asked for one more than that, the topic holds no sixth.
    let records = env.read_topic(&env.topics().draw_events, 6, Duration::from_secs(5)).await;
    let events: Vec<serde_json::Value> =
        records.iter().map(|r| serde_json::from_slice(r.payload().unwrap_or_default()).unwrap()).collect();
    let ids: std::collections::BTreeSet<&str> = events.iter().map(|e| e["eventId"].as_str().unwrap()).collect();
    assert_eq!((records.len(), ids.len()), (5, 5), "each outcome once: {events:?}");
    let won = events.iter().filter(|e| e["type"] == "WON").count();
    assert_eq!(won, 3, "{events:?}");
}
