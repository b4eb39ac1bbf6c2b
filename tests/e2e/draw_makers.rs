//! The edge making a draw killed half-way — at `drawAt`, its entries
//! frozen, and between two slices of the draw — leaves one draw: the other
//! edge takes the draws' lease over and makes it, or finishes it, the same
//! way.

use seckill_e2e::draw::warm;
use seckill_e2e::draw::{draw_json, drawn, enter, outcomes, outcomes_by_user, read_draw};
use seckill_e2e::http::Client;
use seckill_e2e::{eventually, Child, TestEnv};
use std::collections::BTreeSet;
use std::time::Duration;

/// An edge as a process of its own, ready, stopping itself at `halt` (its
/// `SECKILL_TEST_HALT_AT`; empty: nowhere).
async fn edge_process(env: &TestEnv, halt: &str) -> (Child, Client) {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut child_env = env.child_env();
    for (name, value) in [
        ("SECKILL_HTTP_ADDR", free.to_string()),
        ("SECKILL__ADMISSION__SIGNING_KEY", crate::waiting_room::SIGNING_KEY.to_owned()),
        ("SECKILL__ADMISSION__TICK_MS", "100".to_owned()),
        ("SECKILL_TEST_HALT_AT", halt.to_owned()),
    ] {
        child_env.push((name.into(), value));
    }
    let (child, client) = (Child::start("seckill-edge", &child_env), Client::new(format!("http://{free}")));
    eventually("an edge to serve", Duration::from_secs(30), || async {
        let reply = client.try_send(hyper::Method::GET, "/readyz", None, &[]).await.map_err(|e| e.to_string())?;
        if reply.status == 200 {
            Ok(())
        } else {
            Err(reply.text)
        }
    })
    .await;
    (child, client)
}

/// Two edges; the one holding the `draws` lease is killed (SIGKILL) half-way
/// through the draw: its entries frozen, nothing drawn. The other takes the
/// lease over and makes the draw: one draw — every entry won or waitlisted
/// once, as many winners as units, every outcome published — whoever made
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_killed_at_the_draw_leaves_one_draw() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let (first, first_client) = edge_process(&env, "draw-frozen").await;
    // The first edge holds the lease before the second starts.
    draws_lease_held(&env).await;
    let (_second, client) = edge_process(&env, "").await;
    let body = draw_json(-1, 12, 60);
    let request: seckill_shared::draw::Draw = serde_json::from_str(&body).unwrap();
    warm(&env, sale, 30, request, true).await.expect("warmed up");
    for user in 1..=200 {
        assert_eq!(enter(&first_client, sale, user).await.json["status"], "ENTERED");
    }
    // Killed half-way through the draw, its entries frozen and nothing
    // drawn (it stopped itself there): the draw is the other edge's to
    // make, once it takes the lease over. (It stops only once its freeze
    // answered "frozen".)
    eventually("the first edge stopped with the draw half made", Duration::from_secs(60), || async {
        let state = env.stock.draws().draw_state(sale).await.map_err(|e| e.to_string())?.unwrap();
        match (first.stopped(), state.drawn) {
            (true, false) => Ok(()),
            seen => Err(format!("(stopped, drawn): {seen:?}")),
        }
    })
    .await;
    first.kill9().await;
    let state = read_draw(&client, sale).await.json["state"].clone();
    assert_ne!(state, "DRAWN", "killed before the draw: the lease is its for seconds more");

    let draw = drawn(&client, sale).await;
    assert_eq!((draw["entries"].as_i64(), draw["winners"].as_i64()), (Some(200), Some(30)));
    let events = outcomes(&env, sale, 200).await;
    let outcome_of = outcomes_by_user(&events);
    assert_eq!(outcome_of.len(), 200, "every entry drawn");
    assert!(outcome_of.values().all(|o| o.len() == 1), "each once, won or waitlisted: {outcome_of:?}");
    let won = outcome_of.values().filter(|o| o.contains("WON")).count();
    assert_eq!(won, 30, "as many winners as units");
    let state = eventually("every outcome published", Duration::from_secs(30), || async {
        let state = env.stock.draws().draw_state(sale).await.map_err(|e| e.to_string())?.unwrap();
        if state.events_unpublished == 0 {
            Ok(state)
        } else {
            Err(format!("{state:?}"))
        }
    })
    .await;
    assert_eq!(state.events, 200, "one outcome per entry recorded: one draw");
}

/// The edge making a draw of 4,500 entries (three slices) stops after its
/// first slice and is killed there: 2,000 outcomes recorded, none told, the
/// draw not made. The other edge takes the lease over and finishes it from
/// where it stopped, with the winners the first slice fixed: one draw —
/// every entry one outcome on the topic, as many winners as units, the
/// first of the ranking the seed and the digest give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_killed_between_two_slices_of_a_draw_leaves_one_draw() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let (first, _) = edge_process(&env, "draw-sliced").await;
    draws_lease_held(&env).await;
    let (_second, client) = edge_process(&env, "").await;
    let request: seckill_shared::draw::Draw = serde_json::from_str(&draw_json(-1, 8, 60)).unwrap();
    warm(&env, sale, 30, request, true).await.expect("warmed up");
    for user in 1..=4_500 {
        let entered =
            env.stock.draws().enter_draw(sale, seckill_shared::domain::UserId::new(user).unwrap(), None).await;
        assert!(entered.is_ok(), "{entered:?}");
    }
    let half = eventually("the first edge stopped after one slice", Duration::from_secs(60), || async {
        let state = env.stock.draws().draw_state(sale).await.map_err(|e| e.to_string())?.unwrap();
        match (first.stopped(), state.drawn, state.events) {
            (true, false, 2_000) => Ok(state),
            seen => Err(format!("(stopped, drawn, outcomes recorded): {seen:?}")),
        }
    })
    .await;
    assert_eq!(half.events_unpublished, 2_000, "nothing told of a draw made in part");
    first.kill9().await;

    let draw = drawn(&client, sale).await;
    assert_eq!((draw["entries"].as_i64(), draw["winners"].as_i64()), (Some(4_500), Some(30)));
    let events = outcomes(&env, sale, 4_500).await;
    let outcome_of = outcomes_by_user(&events);
    assert_eq!(outcome_of.len(), 4_500, "every entry drawn");
    assert!(outcome_of.values().all(|o| o.len() == 1), "each once, won or waitlisted");
    let won: BTreeSet<i64> = outcome_of.iter().filter(|(_, o)| o.contains("WON")).map(|(u, _)| *u).collect();
    let users: Vec<seckill_shared::domain::UserId> =
        (1..=4_500).map(|u| seckill_shared::domain::UserId::new(u).unwrap()).collect();
    let (seed, digest) = (draw["seed"].as_str().unwrap(), draw["entriesDigest"].as_str().unwrap());
    let first_30: BTreeSet<i64> =
        seckill_shared::draw::proof::ranking(seed, digest, &users).iter().take(30).map(|(u, _)| u.get()).collect();
    assert_eq!(won, first_30, "the winners are the ranking's first, whoever made which slice");
}

/// Waits until an edge holds the draws' lease.
async fn draws_lease_held(env: &TestEnv) {
    eventually("the first edge to hold the draws lease", Duration::from_secs(30), || async {
        let held: Option<(String,)> = sqlx::query_as("SELECT holder FROM leases WHERE name = 'draws'")
            .fetch_optional(&env.db)
            .await
            .map_err(|e| e.to_string())?;
        held.map(drop).ok_or_else(|| "no holder yet".to_owned())
    })
    .await;
}
