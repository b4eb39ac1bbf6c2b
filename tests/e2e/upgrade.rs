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

/// A database that applied migration 04 in its first version migrates on:
/// its record is brought to the corrected file's checksum, nothing re-run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_applied_the_first_cursor_migration_migrates_on() {
    let env = TestEnv::new().await;
    let first: Vec<u8> = (0..96)
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(
                &"538f2e985e36c949cccc52928f006ff5613be4ebf67f05bce51bc15baa0251206b5b164c383ad1e11c0de2b3117c10de"
                    [i..i + 2],
                16,
            )
            .unwrap()
        })
        .collect();
    sqlx::query("UPDATE _sqlx_migrations SET checksum = $1 WHERE version = 20261201000004")
        .bind(&first)
        .execute(&env.db)
        .await
        .unwrap();
    seckill_shared::db::migrate(&env.db).await.expect("migrating a database of the first version");
    let now: Vec<u8> = sqlx::query_scalar("SELECT checksum FROM _sqlx_migrations WHERE version = 20261201000004")
        .fetch_one(&env.db)
        .await
        .unwrap();
    let corrected = MIGRATOR.iter().find(|m| m.version == 20261201000004).unwrap();
    assert_eq!(now, corrected.checksum.as_ref());
}
