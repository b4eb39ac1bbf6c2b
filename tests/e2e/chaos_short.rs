//! The short version of `make chaos` that runs in `make test`: process
//! crashes, a database outage seen by this test only, and poison records,
//! all during one load of buyers asking for 1 or 2 units. (Stopping the shared Kafka, PostgreSQL or Redis
//! servers would disturb the tests running beside it: those faults run in
//! `make chaos`.)

use seckill_e2e::chaos::{run, Fault, Scenario, TABLE_HEADER};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_and_outages_lose_nothing() {
    let outcome = run(Scenario {
        name: "short: buyers of 1 or 2 units (limit 2); kill -9 edge, order service, compensator (mid-record); database blocked 4 s; poison + duplicate",
        topology: seckill_e2e::Topology::Single,
        seed: 11,
        // Not sold out before the dead letters are made (3.5 s in).
        stock: 6_000,
        buckets: 1,
        users: 4_000,
        requests: 5_000,
        rate: 500.0,
        concurrency: 32,
        retry_ratio: 0.1,
        per_user_limit: 2,
        quantities: "1,2",
        faults: vec![
            (Duration::from_millis(1_500), Fault::PoisonAndDuplicate),
            (Duration::from_millis(2_500), Fault::KillEdge),
            (Duration::from_millis(3_500), Fault::DeadLetters(150)),
            (Duration::from_millis(3_700), Fault::KillCompensator),
            (Duration::from_millis(4_500), Fault::KillOrder),
            (Duration::from_millis(5_500), Fault::BlockDatabase(Duration::from_secs(4))),
        ],
    })
    .await;
    println!("{TABLE_HEADER}\n{}", outcome.row());
    // Floors: the faults landed on a sale that sold (a run that accepted
    // nothing would pass every check above), and every dead letter made
    // was compensated.
    assert!(outcome.accepted >= 1_000 && outcome.units >= 1_000, "too little sold to show anything: {}", outcome.row());
    assert!(outcome.restored >= 150, "the 150 dead letters restored: {}", outcome.row());
}

/// The worst case of a Redis failure: it comes back empty. The edge must not
/// sell from nothing, and the status of orders already written still
/// answers, from PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_lost_everything_sells_nothing() {
    use seckill_e2e::http::Client;
    let env = seckill_e2e::TestEnv::new().await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let client = Client::new(edge.url());
    let (a, k) = (sale.activity.get(), sale.sku.get());
    let accepted = client.order(a, k, 1).await;
    let order_id = accepted.json["orderId"].as_str().expect("accepted").to_owned();
    seckill_e2e::eventually("the order written", Duration::from_secs(30), || async {
        let n = env.count_orders(sale, "CREATED").await;
        if n == 1 {
            Ok(())
        } else {
            Err(n.to_string())
        }
    })
    .await;

    // Every key of this test's prefix is gone, as if Redis restarted empty.
    let mut conn = env.stock.connection();
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}*", env.redis.key_prefix)).query_async(&mut conn).await.unwrap();
    let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.unwrap();

    let refused = client.order(a, k, 2).await;
    assert_eq!((refused.status.as_u16(), refused.code()), (404, "SALE_NOT_FOUND"), "{}", refused.text);
    let status = client.get(&format!("/api/seckill/order/{order_id}")).await;
    assert_eq!((status.status.as_u16(), status.json["status"].as_str()), (200, Some("CREATED")), "{}", status.text);
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert!(!report.consistent, "the loss is reported, never silent");
    assert!(report.violations.iter().any(|v| v.contains("redis has no such sale")), "{:?}", report.violations);
    order.stop().await;
    edge.stop().await;
}

/// A release of four sizes (limit two per customer) while an edge and the
/// order service are killed: no customer above the limit, every 202 kept,
/// the takes the killed edge left pending settled by the sweep, the books
/// consistent (`make chaos` runs the long row, with Redis paused too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_holds_its_limit_through_crashes() {
    let outcome = seckill_e2e::chaos::release::release_through_faults(
        seckill_e2e::Topology::Single,
        "short: a release of 4 sizes, limit 2: kill -9 edge, order service",
        120,
        &[Fault::KillEdge, Fault::KillOrder],
    )
    .await;
    println!("{}", outcome.row());
}
