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
        for key in ["meta", "", "buyers", "orders", "reserved", "seq", "call:c1", "trace", "held"] {
            invocation.key(if key.is_empty() { stock_key.to_owned() } else { format!("{a}:{key}") });
        }
        invocation.arg(one.activity.get()).arg(one.sku.get()).arg(10_000).arg("c1").arg(60_000);
        invocation.arg(7).arg("00000000000000aa").arg("r").arg("").arg("0").arg(1);
        invocation
    };
    let refused = call(&format!("{b}:stock")).invoke_async::<redis::Value>(&mut conn).await;
    let error = refused.expect_err("a script across two slots");
    assert_eq!(error.kind(), redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot), "{error}");
    for sale in [one, two] {
        let snapshot = env.stock.books().snapshot(sale).await.expect("a snapshot");
        assert_eq!((snapshot.remaining, snapshot.buyers), (5, 0), "the refused call changed nothing");
    }
    // The round, then the request's entry: accepted (code 1).
    let ran: String = call(&format!("{a}:stock")).invoke_async(&mut conn).await.expect("one slot");
    assert!(ran.split(',').nth(1).is_some_and(|entry| entry.starts_with("1:")), "accepted: {ran}");
    assert_eq!(env.stock.books().snapshot(one).await.expect("a snapshot").remaining, 4);

    assert!(env.redis.url.starts_with("redis+cluster://"), "{}", env.redis.url);
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let reply = Client::new(edge.url()).order(two.activity.get(), two.sku.get(), 8).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    env.wait_orders(two, "CREATED", 1).await;
    assert_eq!(env.stock.books().snapshot(two).await.expect("a snapshot").remaining, 4);
    order.stop().await;
    edge.stop().await;
}

/// The cluster client resends a command after a dropped connection, so the
/// error it ends with — here a server's refusal — can follow an
/// attempt that ran: such an error is never taken for "it did not run" (the
/// deduction then asks again by its call id, as for any unheard answer). A
/// real Redis in cluster mode (one node holding every slot) announces a
/// proxy's port; the proxy passes a script on, its answer is dropped with
/// the connection, and the resend is refused by the server (an `ERR`). (Before: a server error
/// was read as "never ran", so a deduction that had run could be answered
/// 503 — "nothing kept" — to a buyer who then held the order.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_the_cluster_client_resent_is_not_taken_for_never_ran() {
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (port, bus, proxy_port) = (free(), free(), free());
    let dir = std::env::temp_dir().join(format!("seckill-one-node-cluster-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cli = |args: &[&str]| {
        let output = std::process::Command::new("redis-cli").arg("-p").arg(port.to_string()).args(args).output();
        output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
    };
    let mut server = tokio::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--cluster-enabled", "yes", "--cluster-port", &bus.to_string()])
        .args(["--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", &proxy_port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--dir", dir.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server");
    seckill_e2e::eventually("the node to answer", std::time::Duration::from_secs(30), || async {
        (cli(&["ping"]).trim() == "PONG").then_some(()).ok_or_else(|| "no PONG".to_owned())
    })
    .await;
    cli(&["cluster", "addslotsrange", "0", "16383"]);
    seckill_e2e::eventually("the one-node cluster to be up", std::time::Duration::from_secs(30), || async {
        let info = cli(&["cluster", "info"]);
        info.contains("cluster_state:ok").then_some(()).ok_or(info)
    })
    .await;
    let proxy = seckill_e2e::proxy::Severing::start(proxy_port, ([127, 0, 0, 1], port).into()).await;
    let settings = seckill_shared::config::RedisSettings {
        url: format!("redis+cluster://127.0.0.1:{proxy_port}"),
        timeout_ms: 2_000,
        ..Default::default()
    };
    let conn = seckill_shared::stock::conn::RedisConn::connect(&settings).await.expect("connecting through the proxy");
    let script = redis::Script::new("return redis.call('INCR', KEYS[1])");
    // Known to the node already: the one chunk the proxy passes on runs it.
    cli(&["script", "load", "return redis.call('INCR', KEYS[1])"]);
    let mut invocation = script.prepare_invoke();
    invocation.key("{resent}:ran");
    proxy.sever_after_next(move || {
        // What the first attempt did is kept aside; the resend meets a
        // value it refuses (any server refusal of the resend would do).
        for args in [&["rename", "{resent}:ran", "{resent}:first"][..], &["set", "{resent}:ran", "not a number"]] {
            let _ = std::process::Command::new("redis-cli").arg("-p").arg(port.to_string()).args(args).output();
        }
    });
    let error = conn.invoke::<i64>(&invocation).await.expect_err("the answer never came back");
    assert_eq!(cli(&["get", "{resent}:first"]).trim(), "1", "the first attempt ran");
    assert!(!error.never_ran(), "an error after a resend is not 'never ran': {error}");
    assert!(error.unheard(), "{error}");
    let _ = server.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}
