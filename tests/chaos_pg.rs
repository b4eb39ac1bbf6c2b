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
//! 0. `make test` runs the short (g).

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
