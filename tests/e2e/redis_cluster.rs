//! On the Redis Cluster topology (`infra/local/up.sh --redis-cluster`,
//! which `make test` starts): every script here keeps to one sale's slot,
//! and the cluster would refuse one that did not.

use seckill_e2e::http::Client;
use seckill_e2e::{TestEnv, Topology};

/// `lua/deduct.lua` given one sale's keys runs; given keys of two sales (two
/// slots) the cluster refuses it with `CROSSSLOT` and nothing changes. Then
/// a buyer orders through an edge configured by the cluster URL alone, and
/// the order is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_keep_to_one_slot_and_the_cluster_refuses_one_that_does_not() {
    let env = TestEnv::on(Topology::RedisCluster).await;
    let one = env.sale();
    let two = seckill_shared::domain::SaleKey::from_raw(one.activity.get(), one.sku.get() + 1).unwrap();
    env.warmup(one, 5).await;
    env.warmup(two, 5).await;
    let deduct = redis::Script::new(include_str!("../../lua/deduct.lua"));
    let (a, b) = (env.stock.keys().sale_base(one), env.stock.keys().sale_base(two));
    let mut conn = env.stock.connection();
    let call = |stock_key: &str| {
        let mut invocation = deduct.prepare_invoke();
        for key in ["meta", "", "buyers", "orders", "reserved", "seq", "call:c1", "trace"] {
            invocation.key(if key.is_empty() { stock_key.to_owned() } else { format!("{a}:{key}") });
        }
        invocation.arg(one.activity.get()).arg(one.sku.get()).arg(10_000).arg("c1").arg(60_000);
        invocation.arg(7).arg("00000000000000aa").arg("r").arg("");
        invocation
    };
    let refused = call(&format!("{b}:stock")).invoke_async::<redis::Value>(&mut conn).await;
    let error = refused.expect_err("a script across two slots");
    assert_eq!(error.kind(), redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot), "{error}");
    for sale in [one, two] {
        let snapshot = env.stock.snapshot(sale).await.expect("a snapshot");
        assert_eq!((snapshot.remaining, snapshot.buyers), (5, 0), "the refused call changed nothing");
    }
    let ran: Vec<Vec<redis::Value>> = call(&format!("{a}:stock")).invoke_async(&mut conn).await.expect("one slot");
    assert_eq!(ran[0][0], redis::Value::Int(1), "accepted: {ran:?}");
    assert_eq!(env.stock.snapshot(one).await.expect("a snapshot").remaining, 4);

    assert!(env.redis.url.starts_with("redis+cluster://"), "{}", env.redis.url);
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let reply = Client::new(edge.url()).order(two.activity.get(), two.sku.get(), 8).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    env.wait_orders(two, "CREATED", 1).await;
    assert_eq!(env.stock.snapshot(two).await.expect("a snapshot").remaining, 4);
    order.stop().await;
    edge.stop().await;
}
