//! Upgrades lose nothing: a migration that changes how events are relayed
//! takes every transaction still running into account.

use seckill_e2e::TestEnv;
use seckill_shared::db::MIGRATOR;

/// Migration 04 (the relay's cursor) once started the cursor at its own
/// transaction id: a transaction that began before it — its id taken by
/// the stock update every batch of the order service makes first — and
/// wrote its outbox row after it landed behind the cursor, was never
/// relayed, and was counted as relayed. The cursor now starts below every
/// transaction still running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_running_across_the_cursor_migration_is_still_relayed() {
    let env = TestEnv::new().await;
    let db = env.scratch_database("upgrade").await;
    let migrations: Vec<_> = MIGRATOR.iter().collect();
    let cursor = migrations.iter().position(|m| m.description.contains("outbox relay cursor")).expect("migration 04");
    for migration in &migrations[..cursor] {
        sqlx::raw_sql(migration.sql.clone()).execute(&db).await.expect("an older migration");
    }
    sqlx::query("INSERT INTO sales (activity_id, sku_id, total_stock, remaining_stock) VALUES (1, 1, 10, 10)")
        .execute(&db)
        .await
        .unwrap();
    // An event written before the upgrade, already relayed (marked).
    sqlx::query(
        "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, accepted_at)
         VALUES ('1-1-1-00000000000000a1', 1, 1, 1, 1, 'CREATED', now())",
    )
    .execute(&db)
    .await
    .unwrap();
    sqlx::query("UPDATE order_events SET relayed_at = now()").execute(&db).await.unwrap();

    // A batch of the order service, mid-way: its stock update done.
    let mut batch = db.begin().await.unwrap();
    sqlx::query("UPDATE sales SET remaining_stock = remaining_stock - 1").execute(&mut *batch).await.unwrap();
    // The upgrade runs meanwhile (it does not wait for the batch: the batch
    // holds nothing of order_events yet).
    sqlx::raw_sql(migrations[cursor].sql.clone()).execute(&db).await.expect("migration 04");
    // The batch writes its order (and, by trigger, its event) and commits.
    sqlx::query(
        "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, accepted_at)
         VALUES ('1-1-2-00000000000000a2', 1, 1, 1, 2, 'CREATED', now())",
    )
    .execute(&mut *batch)
    .await
    .unwrap();
    batch.commit().await.unwrap();
    // The rest of the upgrade: the migrations after 04.
    for migration in &migrations[cursor + 1..] {
        sqlx::raw_sql(migration.sql.clone()).execute(&db).await.expect("a later migration");
    }

    let pending: Vec<(String, bool)> = sqlx::query_as(
        "SELECT e.order_id, (e.xid, e.id) > (r.xid, r.id) FROM order_events e, order_events_relayed r ORDER BY e.id",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    env.drop_scratch_database("upgrade", db).await;
    assert_eq!(
        pending,
        [("1-1-1-00000000000000a1".to_owned(), false), ("1-1-2-00000000000000a2".to_owned(), true)],
        "the event relayed before the upgrade stays behind the cursor; the running batch's is ahead of it"
    );
}

/// During a rolling upgrade the new version migrates the database while old
/// pods still run; one of them restarting (a crash, a node drained), or a
/// rollback, must start on the newer schema. (Before: sqlx refused it —
/// "migration … was previously applied but is missing" — and the old pod
/// crash-looped.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_older_than_the_database_still_starts() {
    let env = TestEnv::new().await;
    let db = env.scratch_database("newer").await;
    seckill_shared::db::migrate(&db).await.expect("this version's migrations");
    // A migration of a version after this one.
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99991231000001, 'from a newer version', true, '\\x00', 1)",
    )
    .execute(&db)
    .await
    .unwrap();
    let started = seckill_shared::db::migrate(&db).await;
    env.drop_scratch_database("newer", db).await;
    started.expect("an older binary starts on a newer database");
}

/// A migration that needs a table a long transaction holds (here: a read
/// left open on `orders`) waits for it at most a few seconds at a time: in
/// between the wait is given up and tried again, so the sessions queued
/// behind its exclusive lock request — every other statement on that
/// table — are answered meanwhile; once the transaction ends, the
/// migration is applied. (Before: `lock_timeout` 0, the migration waited
/// for good, and every query on `orders` queued behind it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_behind_a_long_transaction_waits_a_bounded_time_and_retries() {
    let env = TestEnv::new().await;
    let db = env.scratch_database("held").await;
    // The migrations before the last that locks orders exclusively.
    let locking = |sql: &str| sql.contains("ACCESS EXCLUSIVE") && sql.contains("orders");
    let last = MIGRATOR.iter().filter(|m| locking(m.sql.as_str())).map(|m| m.version).max().unwrap();
    let before = MIGRATOR.iter().map(|m| m.version).filter(|v| *v < last).max().unwrap();
    MIGRATOR.run_to(before, &db).await.expect("the older migrations");
    let mut reader = db.begin().await.unwrap();
    sqlx::query("SELECT count(*) FROM orders").execute(&mut *reader).await.unwrap();
    let migrating = tokio::spawn({
        let db = db.clone();
        async move { seckill_shared::db::migrate(&db).await }
    });
    seckill_e2e::eventually("the migration waiting for its lock", std::time::Duration::from_secs(30), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&db)
        .await
        .map_err(|e| e.to_string())?;
        if waiting > 0 {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    })
    .await;
    // Queries on the table go on while the migration waits and retries.
    for _ in 0..3 {
        let read = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM orders").fetch_one(&db);
        let answered = tokio::time::timeout(std::time::Duration::from_secs(30), read).await;
        assert!(matches!(answered, Ok(Ok(0))), "a read of orders answered while the migration waits: {answered:?}");
    }
    assert!(!migrating.is_finished(), "the migration waits for the transaction");
    reader.commit().await.unwrap();
    let migrated = tokio::time::timeout(std::time::Duration::from_secs(120), migrating).await;
    assert!(matches!(migrated, Ok(Ok(Ok(())))), "applied once the transaction ended: {migrated:?}");
    let applied: i64 = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations").fetch_one(&db).await.unwrap();
    env.drop_scratch_database("held", db).await;
    assert_eq!(applied, MIGRATOR.iter().map(|m| m.version).max().unwrap());
}
