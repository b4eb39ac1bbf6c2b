//! Upgrades lose nothing: a migration that changes how events are relayed
//! takes every transaction still running into account, old and new events
//! leave in order, and older binaries start on a newer database.

use rdkafka::message::Message;
use seckill_e2e::{relay_events, TestEnv};
use seckill_order::relay::Relay;
use seckill_shared::db::MIGRATOR;
use seckill_shared::leader::Seat;
use seckill_shared::shutdown::Background;
use std::time::Duration;

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

/// The upgrade that moves order events to the WAL (migration 09) loses and
/// skips nothing, and keeps one user's events in order: it waits for a
/// transaction writing orders by the old trigger to end (and holds new
/// writers until its triggers are in place), the relay sends the outbox
/// rows the version before left — that transaction's among them — and only
/// then the events the new triggers wrote to the WAL. Relayed outbox rows
/// are pruned afterwards, their counts kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_move_to_events_in_the_wal_sends_the_outbox_first_and_loses_nothing() {
    let env = TestEnv::new().await;
    let db = env.scratch_database("wal").await;
    let migrations: Vec<_> = MIGRATOR.iter().collect();
    let wal = migrations.iter().position(|m| m.description == "order events from the wal").expect("migration 09");
    for migration in &migrations[..wal] {
        sqlx::raw_sql(migration.sql.clone()).execute(&db).await.expect("an older migration");
    }
    let sale = env.sale();
    let (activity, sku) = (sale.activity.get(), sale.sku.get());
    let order = |round: i32, user: i64| format!("{activity}-{sku}-{user}-00000000000000{round:02}");
    let insert = |round: i32, user: i64| {
        sqlx::query(
            "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, accepted_at)
             VALUES ($1, $2, $3, $4, $5, 'CREATED', now())",
        )
        .bind(order(round, user))
        .bind(activity)
        .bind(sku)
        .bind(round)
        .bind(user)
    };
    // Before the upgrade: two orders, their events in the outbox, unrelayed.
    insert(1, 7).execute(&db).await.unwrap();
    insert(1, 8).execute(&db).await.unwrap();

    // The upgrade: the slot first (as every migrate does), then 09, while a
    // transaction cancels user 7's order by the old trigger.
    seckill_shared::event_stream::prepare(&db).await.expect("the slot and the publication");
    let mut across = db.begin().await.unwrap();
    sqlx::query(
        "UPDATE orders SET status = 'CANCELLED', reason = 'BUYER_CANCELLED', cancelled_at = now() WHERE order_id = $1",
    )
    .bind(order(1, 7))
    .execute(&mut *across)
    .await
    .unwrap();
    let sql = migrations[wal].sql.clone();
    let pool = db.clone();
    let upgrade = tokio::spawn(async move { sqlx::raw_sql(sql).execute(&pool).await.map(|_| ()) });
    seckill_e2e::eventually("migration 09 waiting for the transaction", Duration::from_secs(30), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&db)
        .await
        .map_err(|e| e.to_string())?;
        if waiting > 0 {
            Ok(())
        } else {
            Err("not waiting".into())
        }
    })
    .await;
    across.commit().await.unwrap();
    upgrade.await.unwrap().expect("migration 09");
    for migration in &migrations[wal + 1..] {
        sqlx::raw_sql(migration.sql.clone()).execute(&db).await.expect("a later migration");
    }
    // After it: user 7 orders again in round 2 (its event in the WAL).
    insert(2, 7).execute(&db).await.unwrap();

    let mut settings = env.order_settings();
    settings.servers.database.url = env.scratch_database_url("wal");
    settings.events.retention_ms = 0;
    let connections = seckill_shared::host::Connections { db: db.clone(), ..env.connections() };
    let relay = Relay::new(std::sync::Arc::new(settings), connections, Background::default()).expect("a relay");
    let term = relay.lease().take().await.expect("the database").expect("the relay's lease");
    assert_eq!(relay_events(&relay, &term, 4).await, 4, "three outbox rows, then the WAL's event");
    assert_eq!(relay.relay_once(&term).await.expect("a turn"), 0, "nothing more");

    let events = env.read_topic(&env.topics().events, 5, Duration::from_secs(10)).await;
    let of_user_7: Vec<String> = events
        .iter()
        .map(|m| serde_json::from_slice::<serde_json::Value>(m.payload().unwrap_or_default()).unwrap())
        .filter(|event| event["userId"] == 7)
        .map(|event| event["eventId"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(events.len(), 4, "each event once");
    assert_eq!(
        of_user_7,
        [format!("{}:CREATED", order(1, 7)), format!("{}:CANCELLED", order(1, 7)), format!("{}:CREATED", order(2, 7))],
        "user 7's events in the order they happened"
    );
    assert_eq!(relay.prune(&term).await.expect("pruning"), 3, "the relayed outbox rows");
    let (pruned, from_the_wal): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT sum(count) FROM order_events_pruned)::bigint,
                (SELECT sum(count) FROM order_events_relayed_counts)::bigint",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!((pruned, from_the_wal), (3, 1), "every event counted once");
    drop(relay);
    env.drop_scratch_database("wal", db).await;
}
