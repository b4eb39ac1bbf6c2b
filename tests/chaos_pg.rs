//! `make chaos-pg`: PostgreSQL with failover (`infra/local/up.sh
//! --postgres-ha`: pg_auto_failover, a primary and a synchronous standby)
//! with its nodes killed under load, the services on the multi-host URL.
//! (a) the primary killed while the order service drains a backlog; (b) the
//! primary killed while payment notifications and cancels arrive; (c) the
//! standby killed (the primary goes on, asynchronous until the standby is
//! back); (d) the old primary back as the new standby, then the primary
//! killed again. Each prints its row; every "broken" and "not recorded"
//! column must read 0. `make test` runs the short (a).

use seckill_e2e::chaos::payments_through_a_kill;
use seckill_e2e::chaos::pg::{drain_through_a_kill, fail_back, Victim, PG_TABLE_HEADER};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_pg() {
    let only = std::env::var("CHAOS_ONLY").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.starts_with(o));
    let mut rows = Vec::new();
    if wanted("a") {
        rows.push(drain_through_a_kill("a the primary killed while a backlog drains", 3_000, Victim::Primary).await);
    }
    if wanted("b") {
        rows.push(payments_through_a_kill("b the primary killed while payments and cancels arrive", 600).await);
    }
    if wanted("c") {
        rows.push(drain_through_a_kill("c the standby killed while a backlog drains", 3_000, Victim::Standby).await);
    }
    if wanted("d") {
        rows.push(fail_back("d the old primary back as the standby, then the primary killed again", 3_000).await);
    }
    let table: Vec<String> = rows.iter().map(|outcome| outcome.row()).collect();
    println!("\n{PG_TABLE_HEADER}\n{}", table.join("\n"));
    for outcome in &rows {
        assert_eq!((outcome.broken_202, outcome.not_recorded_200), (0, 0), "a promise broken: {}", outcome.row());
        assert_eq!(outcome.rows, outcome.accepted as i64, "a row per 202: {}", outcome.row());
    }
}

/// The short version inside `make test`: (a) on a smaller backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_pg_short() {
    let outcome =
        drain_through_a_kill("short: the primary killed while a backlog drains", 2_000, Victim::Primary).await;
    println!("\n{PG_TABLE_HEADER}\n{}", outcome.row());
    assert_eq!((outcome.broken_202, outcome.not_recorded_200), (0, 0), "{}", outcome.row());
    assert_eq!((outcome.rows, outcome.events), (outcome.accepted as i64, outcome.accepted), "{}", outcome.row());
}
