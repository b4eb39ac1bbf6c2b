//! The relay says what holds it back: a transaction left open anywhere on
//! the server — here an operator's session in another database — keeps
//! every event written after it from being relayed (a transaction still
//! open may yet commit an event before them). The relay's log and
//! `/metrics`, and the reconciliation, name that transaction; once it ends,
//! every event goes out.

use seckill_e2e::http::{sample, Client};
use seckill_e2e::private_postgres::PrivatePostgres;
use seckill_e2e::{eventually, TestEnv};
use sqlx::Connection;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_left_open_elsewhere_is_named_and_the_events_go_out_once_it_ends() {
    // A server of the test's own: the open transaction holds back every
    // relay on the server, which must not be other tests'.
    let server = PrivatePostgres::start(10_000);
    let env = TestEnv::on_private_postgres(&server).await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let mut settings = env.order_settings();
    settings.events.held_back_after_ms = 500;
    let order = env.spawn_order(settings).await;

    let mut operator = sqlx::PgConnection::connect(&server.admin_url()).await.expect("another database");
    sqlx::query("SET application_name = 'psql-left-open'").execute(&mut operator).await.unwrap();
    sqlx::query("BEGIN").execute(&mut operator).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut operator).await.unwrap();
    let xid: String = sqlx::query_scalar("SELECT pg_current_xact_id()::text").fetch_one(&mut operator).await.unwrap();

    // Orders whose CREATED events go through the outbox (an older order
    // service's, a tool's): the relay's to send.
    env.created_through_the_outbox(sale, 1..4).await;
    let metrics = Client::new(order.url());
    eventually("the relay counts the events held back", Duration::from_secs(30), || async {
        let page = metrics.get("/metrics").await.text;
        match sample(&page, "seckill_relay_events_held_back") {
            Some(held) if held >= 3.0 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let report = eventually("the books name the transaction", Duration::from_secs(30), || async {
        let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false)
            .await
            .map_err(|e| e.to_string())?;
        report.events_held_back_by.clone().ok_or_else(|| format!("pending {}", report.events_pending))
    })
    .await;
    assert_eq!(report.pid, Some(pid), "{report:?}");
    assert_eq!(report.backend_xid, xid, "{report:?}");
    assert_eq!(report.database.as_deref(), Some("postgres"), "{report:?}");
    assert_eq!(report.application_name.as_deref(), Some("psql-left-open"), "{report:?}");
    assert_eq!(report.state.as_deref(), Some("idle in transaction"), "{report:?}");
    assert!(report.events_waiting >= 3, "{report:?}");

    sqlx::query("COMMIT").execute(&mut operator).await.unwrap();
    env.verify_events(sale).await;
    // (The orders were written straight to PostgreSQL, past Redis: the
    // books' balance is not this test's.)
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert_eq!((report.events_pending, report.events_held_back_by), (0, None));
    order.stop().await;
}
