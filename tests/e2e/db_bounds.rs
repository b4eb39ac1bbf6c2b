//! Nothing waits forever on PostgreSQL: every session of the pipeline
//! carries its bounds and its service's name; a server that takes bytes and
//! never answers (a frozen process, a proxy holding answers, a path cut
//! without a reset) ends the wait at the call deadline, and the work is done
//! again on a fresh connection; a lease renewal that hangs is a lost lease,
//! and the leader abandons the turn it was in.

use seckill_e2e::chaos::Pipeline;
use seckill_e2e::http::Client;
use seckill_e2e::proxy::Pausable;
use seckill_e2e::{eventually, TestEnv};
use seckill_shared::config::DbSettings;
use seckill_shared::ops::leader::{self, Turn};
use seckill_shared::ops::lease::Lease;
use seckill_shared::ops::shutdown::Background;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Bounds short enough for a test: the server ends a statement after 1 s,
/// the client gives up a call after 2 s.
fn short_bounds(url: String) -> DbSettings {
    DbSettings {
        url,
        statement_timeout_ms: 1_000,
        lock_timeout_ms: 500,
        idle_in_transaction_timeout_ms: 5_000,
        call_deadline_ms: 2_000,
        ..DbSettings::default()
    }
}

fn postgres_addr() -> std::net::SocketAddr {
    "127.0.0.1:5432".parse().expect("an address")
}

/// The test's database, reached through `proxy`.
fn through(env: &TestEnv, proxy: &Pausable) -> String {
    env.database.url.replace("127.0.0.1:5432", &proxy.addr.to_string())
}

/// Each service names its sessions (`pg_stat_activity` tells who holds
/// what), and a pooled session has the bounds the settings give, on the
/// server and on the client's socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_session_is_bounded_and_named_by_its_service() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let pipeline = Pipeline::start(&env);
    pipeline.wait_ready().await;
    let client = Client::new(pipeline.url.clone());
    assert_eq!(client.order(sale.activity.get(), sale.sku.get(), 1).await.status, 202);
    env.wait_orders(sale, "CREATED", 1).await;
    eventually("each service's sessions named", Duration::from_secs(60), || async {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT application_name FROM pg_stat_activity WHERE datname = current_database() ORDER BY 1",
        )
        .fetch_all(&env.db)
        .await
        .map_err(|e| e.to_string())?;
        let named =
            ["seckill-compensator", "seckill-edge", "seckill-order"].iter().all(|n| names.iter().any(|x| x == n));
        if named {
            Ok(())
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await;
    pipeline.stop().await;

    let settings = short_bounds(env.database.url.clone());
    let pool = seckill_shared::db::connect_lazy(&settings).expect("a pool");
    let mut session = pool.acquire().await.expect("a session");
    for (name, want) in [
        ("statement_timeout", "1s"),
        ("lock_timeout", "500ms"),
        ("idle_in_transaction_session_timeout", "5s"),
        ("tcp_user_timeout", "10000"),
        ("tcp_keepalives_idle", "10"),
    ] {
        let value: String =
            sqlx::query_scalar("SELECT current_setting($1)").bind(name).fetch_one(&mut *session).await.unwrap();
        assert_eq!(value, want, "the server's {name}");
    }
    let bounds = seckill_shared::db::socket::SocketBounds {
        peers: vec![(Some(postgres_addr().ip()), postgres_addr().port())],
        keepalive: seckill_shared::config::TCP_KEEPALIVE,
        user_timeout: Duration::from_millis(settings.tcp_user_timeout_ms),
    };
    // The session's own socket (its port, as the server sees it): the
    // process holds other tests' connections too, opened otherwise.
    let port: i32 = sqlx::query_scalar("SELECT inet_client_port()").fetch_one(&mut *session).await.unwrap();
    let sockets = bounds.read();
    let own: Vec<_> = sockets.iter().filter(|s| s.local.map(|l| i32::from(l.port())) == Some(port)).collect();
    assert_eq!(own.len(), 1, "the session's socket is found among {sockets:?}");
    assert!(
        own[0].keepalive && own[0].user_timeout == Some(Duration::from_secs(10)),
        "the session's socket to PostgreSQL has keepalives and TCP_USER_TIMEOUT: {own:?}"
    );
    drop(session);
    pool.close().await;
}

/// The order service's write waits for the sale row (a transaction of
/// this test holds it) when the path to PostgreSQL is cut without a reset:
/// once the lock is free the server runs the statement and keeps the
/// transaction open, waiting for a COMMIT that never comes, holding the
/// sale row. The worker gives the write up at the call deadline and does
/// it again on a fresh connection; the server ends the abandoned
/// transaction (`idle_in_transaction_session_timeout`), freeing the row;
/// every order after it is written, and its event relayed. (Before: the
/// worker waited on the cut connection for good, the transaction held the
/// sale row for good, and every order after it stayed QUEUED.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_cut_off_mid_transaction_is_given_up_and_done_again() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 30).await;
    let proxy = Pausable::start(postgres_addr()).await;
    let mut settings = env.order_settings();
    settings.servers.database = DbSettings {
        lock_timeout_ms: 3_000,
        statement_timeout_ms: 4_000,
        call_deadline_ms: 5_000,
        ..short_bounds(through(&env, &proxy))
    };
    let order = env.spawn_order(settings).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.url());
    let buy = |from: i64| {
        let client = client.clone();
        async move {
            for user in from..from + 10 {
                assert_eq!(client.order(sale.activity.get(), sale.sku.get(), user).await.status, 202, "user {user}");
            }
        }
    };
    buy(1).await;
    env.wait_orders(sale, "CREATED", 10).await;

    let mut holder = env.db.begin().await.expect("a transaction");
    sqlx::query("SELECT 1 FROM sales WHERE activity_id = $1 AND sku_id = $2 FOR UPDATE")
        .bind(sale.activity.get())
        .bind(sale.sku.get())
        .execute(&mut *holder)
        .await
        .expect("the sale row locked");
    buy(11).await;
    waiting_for_a_lock(&env).await;
    proxy.cut_open_connections();
    holder.rollback().await.expect("the sale row freed");
    buy(21).await;
    env.wait_orders(sale, "CREATED", 30).await;
    env.verify_events(sale).await;
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, true).await.unwrap();
    assert!(report.consistent && report.broken_promises.is_empty(), "{:?}", report.violations);
    edge.stop().await;
    order.stop().await;
}

/// A lease renewal whose answer never comes (it waited for the lease's row,
/// and the path to the server was cut meanwhile) is a lost lease once the
/// lease has run out — another instance may hold it by then — and the
/// leader abandons the turn it was in (a turn waiting on the same silent
/// server), then competes again and leads. (Before: the renewal waited for
/// good, the term was never lost, and the turn never ended.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_hangs_loses_the_lease_and_the_turn_is_abandoned() {
    let env = TestEnv::new().await;
    let proxy = Pausable::start(postgres_addr()).await;
    let bounds = DbSettings {
        lock_timeout_ms: 3_000,
        statement_timeout_ms: 4_000,
        call_deadline_ms: 5_000,
        ..short_bounds(through(&env, &proxy))
    };
    let pool = seckill_shared::db::connect_lazy(&bounds).expect("a pool");
    let shutdown = CancellationToken::new();
    let background = Background::new(shutdown.clone());
    let name = format!("test lease {}", env.id);
    let lease = Lease::new(pool.clone(), &name, Duration::from_millis(1_500), background.clone());
    let turns = Arc::new(AtomicUsize::new(0));
    let leading = {
        let (lease, turns, shutdown) = (lease.clone(), turns.clone(), shutdown.clone());
        tokio::spawn(async move {
            leader::lead("test", &lease, Duration::from_millis(200), &shutdown, move |_term| {
                let turn = turns.fetch_add(1, Ordering::SeqCst);
                async move {
                    if turn == 0 {
                        // The first turn waits on the silent server, as a
                        // relay turn would: only the term's loss ends it.
                        std::future::pending::<()>().await;
                    }
                    Turn::Again(Duration::from_millis(100))
                }
            })
            .await
        })
    };
    let count = |at_least: usize| {
        let turns = turns.clone();
        async move {
            match turns.load(Ordering::SeqCst) {
                n if n >= at_least => Ok(()),
                n => Err(format!("{n} turns")),
            }
        }
    };
    eventually("the first turn", Duration::from_secs(30), || count(1)).await;
    // The next renewal waits for the lease's row (this test holds it), and
    // is cut off while it waits: it is on its way and will never be answered.
    let mut holder = env.db.begin().await.expect("a transaction");
    sqlx::query("SELECT 1 FROM leases WHERE name = $1 FOR UPDATE")
        .bind(&name)
        .execute(&mut *holder)
        .await
        .expect("the lease's row locked");
    waiting_for_a_lock(&env).await;
    proxy.cut_open_connections();
    holder.rollback().await.expect("the lease's row freed");
    eventually("a second turn once the server answers", Duration::from_secs(30), || count(2)).await;
    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), leading).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "the leader stops with the service: {stopped:?}");
    background.wait(Duration::from_secs(5)).await;
    pool.close().await;
}

/// Waits until a session of the test's database waits for a lock.
pub(crate) async fn waiting_for_a_lock(env: &TestEnv) {
    eventually("a session waiting for a lock", Duration::from_secs(30), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&env.db)
        .await
        .map_err(|e| e.to_string())?;
        if waiting > 0 {
            Ok(())
        } else {
            Err("none waits".to_owned())
        }
    })
    .await;
}

/// PostgreSQL stops answering (every byte the edge sends it held, as a
/// frozen primary would) while an operator warms a sale up and closes it:
/// each is answered 503 naming PostgreSQL once the call deadline passed,
/// and gives its sale's lock back — PostgreSQL back, the same warm-up id
/// finishes the warm-up and the close closes (a lock kept would answer 409
/// SALE_BUSY). (Before: both waited for good, the close's lock kept alive
/// by its watchdog: the sale answered SALE_BUSY until the edge restarted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_up_and_a_close_give_up_a_silent_postgres_and_their_lock() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let proxy = Pausable::start(postgres_addr()).await;
    let mut settings = env.edge_settings();
    settings.servers.database = short_bounds(through(&env, &proxy));
    let edge = env.spawn_edge(settings).await;
    let console = Client::new(edge.console_url());
    let auth = format!("Bearer {}", seckill_e2e::ADMIN_TOKEN);
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let warm = || async {
        let body = br#"{"stock":10,"force":true,"warmupId":"silent-pg-1"}"#;
        console.send(hyper::Method::PUT, &path, Some(body), &[("authorization", &auth)]).await
    };
    let close = || async {
        let close_path = format!("{path}/close");
        console.send(hyper::Method::POST, &close_path, None, &[("authorization", &auth)]).await
    };
    proxy.pause();
    let refused = tokio::time::timeout(Duration::from_secs(60), warm()).await.expect("the warm-up answered in 60 s");
    assert_eq!((refused.status.as_u16(), refused.code()), (503, "TRY_AGAIN"), "{}", refused.text);
    assert!(refused.json["message"].as_str().unwrap_or_default().contains("PostgreSQL"), "{}", refused.text);
    proxy.resume();
    eventually("the same warm-up finished", Duration::from_secs(60), || async {
        let reply = warm().await;
        if reply.status == 200 {
            Ok(())
        } else {
            Err(reply.text)
        }
    })
    .await;
    // One try answered 200; an earlier try, or the edge's resumer, may
    // still be at the same warm-up under the sale's lock — and may take it
    // again once PostgreSQL is paused, holding it for its own call deadline
    // (fresh-clone runs saw the close refused 409 SALE_BUSY, twice, the
    // second after waiting for the lock to be free first). Such a close
    // kept nothing and is asked again: the lock's holder gives it back
    // within its deadline, and the close then meets PostgreSQL.
    proxy.pause();
    let refused = eventually("the close to meet the silent PostgreSQL", Duration::from_secs(60), || async {
        let reply = tokio::time::timeout(Duration::from_secs(60), close()).await.expect("the close answered in 60 s");
        match (reply.status.as_u16(), reply.code()) {
            (409, "SALE_BUSY") => Err(reply.text),
            _ => Ok(reply),
        }
    })
    .await;
    assert_eq!((refused.status.as_u16(), refused.code()), (503, "TRY_AGAIN"), "{}", refused.text);
    assert!(refused.json["message"].as_str().unwrap_or_default().contains("PostgreSQL"), "{}", refused.text);
    proxy.resume();
    let closed = close().await;
    assert_eq!(closed.status, 200, "its lock given back: {}", closed.text);
    edge.stop().await;
}
