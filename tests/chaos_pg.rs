//! `make chaos-pg`: PostgreSQL with failover (`infra/local/up.sh
//! --postgres-ha`: pg_auto_failover, a primary and a synchronous standby)
//! with its nodes killed, frozen and cut off under load, the services on
//! the multi-host URL. (a) the primary killed while the order service
//! drains a backlog; (b) the primary killed while payment notifications and
//! cancels arrive; (c) the standby killed (the primary goes on,
//! asynchronous until the standby is back); (d) the old primary back as the
//! new standby, then the primary killed again; (e, f) the primary frozen
//! (SIGSTOP: silent, every byte still acknowledged) while a backlog drains
//! and while payments arrive; (g, h) the primary cut off (a proxy holding
//! everything both ways, for good) while a backlog drains and while
//! payments arrive; (i) the formation stopped and started after a failover.
//! Each prints its row; every "broken" and "not recorded" column must read
//! 0. `make test` runs the short (g), and a warm-up and a close meeting a
//! frozen primary (`chaos_pg_short_warm_up_and_close`).

use futures::future::{FutureExt, LocalBoxFuture};
use seckill_e2e::chaos::payments_through;
use seckill_e2e::chaos::pg::{PgOutcome, PG_TABLE_HEADER};
use seckill_e2e::chaos::pg_drain::{drain_through, fail_back, restart_after_a_failover, Victim};
use seckill_e2e::chaos::pg_faults::PgFault;

/// Prints a scenario's row as it ends (a later one may fail), and keeps it.
fn ran(rows: &mut Vec<PgOutcome>, outcome: PgOutcome) {
    println!("{}", outcome.row());
    rows.push(outcome);
}

fn judge(rows: &[PgOutcome]) {
    let table: Vec<String> = rows.iter().map(|outcome| outcome.row()).collect();
    println!("\n{PG_TABLE_HEADER}\n{}", table.join("\n"));
    for outcome in rows {
        assert_eq!((outcome.broken_202, outcome.not_recorded_200), (0, 0), "a promise broken: {}", outcome.row());
        assert_eq!(outcome.rows, outcome.accepted as i64, "a row per 202: {}", outcome.row());
    }
}

/// A scenario: its row's name, and what runs it.
type Scenario = (&'static str, fn(&'static str) -> LocalBoxFuture<'static, PgOutcome>);

/// Every scenario, in the order they run.
const SCENARIOS: [Scenario; 9] = [
    ("a the primary killed while a backlog drains", |n| {
        drain_through(n, 3_000, Victim::Primary, PgFault::Kill).boxed_local()
    }),
    ("b the primary killed while payments and cancels arrive", |n| {
        payments_through(n, 600, PgFault::Kill).boxed_local()
    }),
    ("c the standby killed while a backlog drains", |n| {
        drain_through(n, 3_000, Victim::Standby, PgFault::Kill).boxed_local()
    }),
    ("d the old primary back as the standby, then the primary killed again", |n| fail_back(n, 3_000).boxed_local()),
    ("e the primary frozen while a backlog drains", |n| {
        drain_through(n, 3_000, Victim::Primary, PgFault::Freeze).boxed_local()
    }),
    ("f the primary frozen while payments and cancels arrive", |n| {
        payments_through(n, 600, PgFault::Freeze).boxed_local()
    }),
    ("g the primary cut off while a backlog drains", |n| {
        drain_through(n, 3_000, Victim::Primary, PgFault::Cut).boxed_local()
    }),
    ("h the primary cut off while payments and cancels arrive", |n| {
        payments_through(n, 600, PgFault::Cut).boxed_local()
    }),
    ("i the formation stopped and started after a failover", |n| restart_after_a_failover(n, 1_000).boxed_local()),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_pg() {
    let only = std::env::var("CHAOS_ONLY").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o.split(',').any(|o| name.starts_with(o)));
    let chosen: Vec<_> = SCENARIOS.into_iter().filter(|(name, _)| wanted(name)).collect();
    let names: Vec<&str> = SCENARIOS.iter().map(|(name, _)| *name).collect();
    assert!(!chosen.is_empty(), "CHAOS_ONLY={only:?} names no scenario of {names:?}");
    let mut rows = Vec::new();
    for (name, run) in chosen {
        ran(&mut rows, run(name).await);
    }
    judge(&rows);
}

/// The short version inside `make test`: (g) on a smaller backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_pg_short() {
    let outcome =
        drain_through("short: the primary cut off while a backlog drains", 2_000, Victim::Primary, PgFault::Cut).await;
    assert_eq!(outcome.events, outcome.accepted, "a CREATED event per 202: {}", outcome.row());
    judge(&[outcome]);
}

/// PostgreSQL's primary frozen (SIGSTOP: silent, every byte still
/// acknowledged) while an operator warms one sale up and closes another:
/// each is answered 503 naming PostgreSQL once its call deadline passed,
/// and gives its sale's lock back; once the standby is promoted, the same
/// warm-up id finishes and the close closes — both sales usable again
/// within the call deadline plus the failover, and the warmed sale takes
/// an order. (Before: both waited for good, the sale's lock kept alive by
/// its watchdog: 409 SALE_BUSY until the edge restarted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_pg_short_warm_up_and_close() {
    use hyper::Method;
    use seckill_e2e::{eventually, http::Client, pg_ha};
    use std::time::Duration;
    pg_ha::ensure_whole().await;
    let env = seckill_e2e::TestEnv::on_postgres_ha().await;
    let (warmed, closed) = (env.sale(), env.sale());
    env.warmup(closed, 10).await;
    let mut settings = env.edge_settings();
    settings.servers.database.call_deadline_ms = 3_000;
    let edge = env.spawn_edge(settings).await;
    let console = Client::new(edge.console_url());
    let warm_path = format!("/admin/sales/{}/{}", warmed.activity, warmed.sku);
    let close_path = format!("/admin/sales/{}/{}/close", closed.activity, closed.sku);
    let warm = || console.admin(Method::PUT, &warm_path, Some(br#"{"stock":10,"force":true,"warmupId":"frozen-1"}"#));
    let close = || console.admin(Method::POST, &close_path, None);

    let primary = pg_ha::primary().expect("a primary");
    let group = pg_ha::NodeGroup::of(&primary);
    let frozen_at = group.freeze();
    for (what, reply) in [("warm-up", warm().await), ("close", close().await)] {
        assert_eq!((reply.status.as_u16(), reply.code()), (503, "TRY_AGAIN"), "the {what}: {}", reply.text);
        assert!(reply.json["message"].as_str().unwrap_or_default().contains("PostgreSQL"), "{}", reply.text);
    }
    eventually("the same warm-up finished on the promoted standby", Duration::from_secs(180), || async {
        let reply = warm().await;
        (reply.status == 200).then_some(()).ok_or(reply.text)
    })
    .await;
    eventually("the close done on the promoted standby", Duration::from_secs(60), || async {
        let reply = close().await;
        (reply.status == 200).then_some(()).ok_or(reply.text)
    })
    .await;
    let usable = frozen_at.elapsed();
    let order = Client::new(edge.url()).order(warmed.activity.get(), warmed.sku.get(), 1).await;
    assert_eq!(order.status, 202, "the warmed sale sells: {}", order.text);
    eprintln!("{primary} frozen: both sales usable again {:.1} s after", usable.as_secs_f64());
    group.thaw();
    edge.stop().await;
    pg_ha::wait_healthy(Duration::from_secs(180)).await;
    env.drop_ha_database().await;
}
