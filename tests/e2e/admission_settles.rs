//! A claimed admission always settles: whatever happens to the order's
//! request — its buyer hangs up while the publish is held up, the claim's
//! answer is lost, the edge is killed mid-order — the room keeps admitting
//! and the buyer either has the order or can use a fresh admission.

use crate::waiting_room::{admitted, join, order_with, poll, settings, warm_with_room};
use seckill_e2e::http::Client;
use seckill_e2e::proxy::Pausable;
use seckill_e2e::{eventually, TestEnv};
use seckill_shared::domain::{SaleKey, UserId};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The broker's listener that tells its clients the broker is at 9095
/// (infra/kafka/server.properties): a proxy there carries all they send.
const PROXIED_LISTENER: &str = "127.0.0.1:9094";
const PROXIED_PORT: u16 = 9095;

/// One test at a time holds the proxied listener's port.
static KAFKA_PROXY_PORT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A proxy between the edge and Kafka, to hold its publishes.
async fn kafka_proxy() -> (tokio::sync::MutexGuard<'static, ()>, Pausable) {
    let guard = KAFKA_PROXY_PORT.lock().await;
    let proxy = Pausable::start_on(PROXIED_PORT, PROXIED_LISTENER.parse().expect("an address")).await;
    (guard, proxy)
}

/// Joins `user` and waits for their admission token.
async fn admitted_user(client: &Client, sale: SaleKey, user: i64) -> (String, String) {
    let ticket = join(client, sale, user, None).await.json["ticket"].as_str().expect("a ticket").to_owned();
    let token = admitted(client, &ticket).await;
    (ticket, token)
}

/// An edge (settings changed by `change`) in front of a sale whose room
/// admits one buyer at a time, tokens lasting `ttl_seconds`: user 1
/// admitted (their ticket and token), user 2 waiting (their ticket).
async fn one_admitted(
    env: &TestEnv,
    sale: SaleKey,
    ttl_seconds: u32,
    change: impl FnOnce(&mut seckill_edge::Settings),
) -> (seckill_e2e::Running, Client, (String, String), String) {
    let mut edge_settings = settings(env);
    change(&mut edge_settings);
    let edge = env.spawn_edge(edge_settings).await;
    let client = Client::new(edge.url());
    let room = format!(r#"{{"activeBuyers":1,"tokenTtlSeconds":{ttl_seconds}}}"#);
    warm_with_room(&edge, sale, 10, &room, "").await;
    let admitted = admitted_user(&client, sale, 1).await;
    let next = join(&client, sale, 2, None).await.json["ticket"].as_str().unwrap().to_owned();
    (edge, client, admitted, next)
}

/// Sends an order with `token` on a connection of its own and returns the
/// connection, the answer not read: dropping it is hanging up.
async fn order_and_hold(addr: std::net::SocketAddr, sale: SaleKey, user: i64, token: &str) -> tokio::net::TcpStream {
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}}}"#, sale.activity, sale.sku);
    let request = format!(
        "POST /api/seckill/order HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         seckill-admission: {token}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("the edge");
    stream.write_all(request.as_bytes()).await.expect("the request sent");
    stream
}

/// Waits until the sale holds one reservation: the order's unit deducted,
/// its publish under way.
async fn until_deducted(env: &TestEnv, sale: SaleKey) {
    eventually("the deduction to run", Duration::from_secs(30), || async {
        match env.stock.books().snapshot(sale).await {
            Ok(snapshot) if snapshot.reservations == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// Waits for `next`'s admission: the room, with one place, goes on.
async fn room_goes_on(client: &Client, next: &str, within: Duration) {
    eventually("the next buyer's admission", within, || async {
        let reply = poll(client, next).await;
        match reply.json["admission"].as_str() {
            Some(_) => Ok(()),
            None => Err(reply.text),
        }
    })
    .await;
}

/// A buyer who orders with their admission and hangs up while the publish
/// is held up (a proxy holding what the edge sends Kafka): the order goes
/// on without them — published, its admission spent by the order itself
/// (tokens last an hour: no admission pass settles it) — so the room admits
/// the next buyer. (Before: the
/// request's future was dropped with the claim unsettled, the ticket held
/// its `active` place for the rest of the round, and nobody else got in.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buyer_who_hangs_up_mid_publish_has_the_order_and_the_room_goes_on() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let (_port, kafka) = kafka_proxy().await;
    // Tokens last an hour: no admission pass settles the claim meanwhile,
    // only the order itself can.
    let (edge, client, (_, token), next) =
        one_admitted(&env, sale, 3600, |s| s.servers.kafka.brokers = PROXIED_LISTENER.into()).await;

    kafka.pause();
    let connection = order_and_hold(edge.addr, sale, 1, &token).await;
    until_deducted(&env, sale).await;
    let buyer = connection.local_addr().expect("the buyer's address");
    drop(connection);
    // The edge saw the hang-up and let the connection go (the request with
    // it) while the publish is still held.
    eventually("the edge to let the hung-up connection go", Duration::from_secs(30), || async {
        match seckill_e2e::sockets::server_side_open(edge.addr, buyer) {
            false => Ok(()),
            true => Err("still open on the edge's side".to_owned()),
        }
    })
    .await;
    assert_eq!(
        env.stock.waiting_room().room(sale).await.unwrap().unwrap().used,
        0,
        "the order not settled yet: Kafka is held"
    );
    kafka.resume();

    room_goes_on(&client, &next, Duration::from_secs(120)).await;
    let room = env.stock.waiting_room().room(sale).await.unwrap().unwrap();
    assert_eq!((room.used, room.expired), (1, 0), "spent by its order: {room:?}");
    let path = format!("/api/seckill/result?activityId={}&skuId={}&userId=1", sale.activity, sale.sku);
    assert_eq!(client.get(&path).await.status, 200, "the buyer has the order");
    edge.stop().await;
}

/// The claim reached Redis but its answer was lost (a proxy holding
/// Redis's answers): the buyer is answered 503, and may order again — with
/// the same token, or a fresh admission once the room has settled the
/// claim — and the room goes on. (Before: the ticket stayed claimed for
/// the round: every order with it "placed an order already", and nobody
/// else was admitted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_claim_reply_leaves_the_buyer_a_way_in() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let redis = Pausable::start(crate::promise::redis_addr()).await;
    let (edge, client, (ticket, token), next) = one_admitted(&env, sale, 10, |s| {
        s.servers.redis.url = format!("redis://{}/0", redis.addr);
        s.servers.redis.timeout_ms = 500;
    })
    .await;

    redis.hold_answers();
    let lost = order_with(&client, sale, 1, Some(&token)).await;
    redis.resume();
    assert_eq!(lost.status, 503, "{}", lost.text);

    let placed = eventually("the buyer to order again", Duration::from_secs(90), || async {
        let token = match poll(&client, &ticket).await.json["admission"].as_str() {
            Some(fresh) => fresh.to_owned(),
            None => token.clone(),
        };
        let reply = order_with(&client, sale, 1, Some(&token)).await;
        if reply.status == 403 {
            // Refused while the claim stands; once the room settled it as
            // expired, joining again queues for a fresh admission.
            let _ = join(&client, sale, 1, None).await;
        }
        if reply.status == 202 {
            Ok(reply)
        } else {
            Err(reply.text)
        }
    })
    .await;
    assert_eq!(placed.code(), "QUEUED");
    room_goes_on(&client, &next, Duration::from_secs(30)).await;
    edge.stop().await;
}

/// The edge holding an admitted order is killed (SIGKILL) after the
/// deduction, while the publish is held up: the other edge's admission
/// passes settle the claim by what the sale says — the buyer holds an
/// order, so the admission is used — the token's expiry plus the publish
/// deadline later, and the room goes on. (Before: claimed for the round.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_killed_mid_order_leaves_the_room_admitting() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let (_port, kafka) = kafka_proxy().await;
    let survivor = env.spawn_edge(settings(&env)).await;
    let client = Client::new(survivor.url());
    warm_with_room(&survivor, sale, 10, r#"{"activeBuyers":1,"tokenTtlSeconds":10}"#, "").await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut child_env = env.child_env();
    for (name, value) in [
        ("SECKILL_KAFKA_BROKERS", PROXIED_LISTENER.to_owned()),
        ("SECKILL_HTTP_ADDR", free.to_string()),
        ("SECKILL__ADMISSION__SIGNING_KEY", crate::waiting_room::SIGNING_KEY.to_owned()),
    ] {
        child_env.push((name.into(), value));
    }
    let doomed = seckill_e2e::Child::start("seckill-edge", &child_env);
    let doomed_client = Client::new(format!("http://{free}"));
    eventually("the second edge to serve", Duration::from_secs(30), || async {
        doomed_client.try_send(hyper::Method::GET, "/readyz", None, &[]).await.map(drop).map_err(|e| e.to_string())
    })
    .await;
    let (_, token) = admitted_user(&client, sale, 1).await;
    let next = join(&client, sale, 2, None).await.json["ticket"].as_str().unwrap().to_owned();

    kafka.pause();
    let _connection = order_and_hold(free, sale, 1, &token).await;
    until_deducted(&env, sale).await;
    doomed.kill9().await;
    kafka.resume();

    room_goes_on(&client, &next, Duration::from_secs(90)).await;
    let room = env.stock.waiting_room().room(sale).await.unwrap().unwrap();
    assert_eq!((room.used, room.expired), (1, 0), "settled as used: the buyer holds an order: {room:?}");
    let held = env.stock.orders().user_order(sale, UserId::new(1).unwrap()).await.unwrap();
    assert!(held.is_some(), "the buyer has the order");
    survivor.stop().await;
}
