//! Poison never blocks a partition: a record that can never be settled (or
//! written, or dead-lettered) is parked after bounded attempts, the records
//! behind it are processed, and the reconciliation reports the parked one.

use seckill_e2e::{eventually, TestEnv};
use seckill_shared::kafka::dlq_header;
use std::time::Duration;

async fn parked(env: &TestEnv) -> Vec<(String, Option<String>, String)> {
    sqlx::query_as("SELECT topic, order_id, error FROM parked_records ORDER BY id")
        .fetch_all(&env.db)
        .await
        .unwrap_or_default()
}

/// A dead letter whose order PostgreSQL can never take (its acceptedAt is
/// 7,500 years before the epoch: SQLSTATE 22008), ahead of a good one on the
/// same partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_that_can_never_be_settled_is_parked() {
    let env = TestEnv::with_partitions(1).await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let mut poison = env.deduct(sale, 1).await;
    poison.accepted_at = -300_000_000_000_000;
    let good = env.deduct(sale, 2).await;
    let dlq = env.topics().dlq;
    for record in [&poison, &good] {
        // Same key: the same partition of the dead-letter topic, poison first.
        let payload = serde_json::to_vec(record).unwrap();
        env.produce(&dlq, "same-key", &payload, &[(dlq_header::REASON, "DB_REJECTED"), (dlq_header::ATTEMPTS, "1")])
            .await;
    }
    // Only the dead-letter consumer: the sweeper would settle both orders
    // by their reservations instead.
    let mut settings = env.compensator_settings();
    settings.sweeper.enabled = false;
    let compensator = env.spawn_compensator(settings).await;
    eventually("the good dead letter settled behind the poison", Duration::from_secs(90), || async {
        match env.order_row(&good.order_id).await {
            Some((status, reason)) if status == "FAILED" && reason.as_deref() == Some("DB_REJECTED") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let rows = parked(&env).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].1.as_deref(), Some(poison.order_id.as_str()));
    assert_eq!(rows[0].0, dlq);
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert!(report.violations.iter().any(|v| v.contains("parked")), "{:?}", report.violations);
    let listed = env.ctl(&["dlq", "parked", "--json"]).await;
    assert_eq!(listed.code, 0, "{listed:?}");
    assert!(listed.stdout.contains(poison.order_id.as_str()), "{}", listed.stdout);
    compensator.stop().await;
}

/// A record the order service can neither write nor dead-letter (so large
/// that its dead letter, with the headers that say why, is over the
/// producer's limit), ahead of a good one on the same partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_cannot_even_be_dead_lettered_is_parked() {
    let env = TestEnv::with_partitions(1).await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let orders = env.topics().orders;
    let huge = vec![b'x'; 999_900];
    env.produce(&orders, "1", &huge, &[]).await;
    let good = env.deduct(sale, 2).await;
    env.produce_records(std::slice::from_ref(&good)).await;
    // One record per batch: the good record is not in the poison's batch.
    let mut settings = env.order_settings();
    settings.batch_size = 1;
    let order = env.spawn_order(settings).await;
    eventually("the good record CREATED behind the poison", Duration::from_secs(90), || async {
        match env.order_row(&good.order_id).await {
            Some((status, _)) if status == "CREATED" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let rows = parked(&env).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].0.as_str(), rows[0].1.as_deref()), (orders.as_str(), None));
    order.stop().await;
}
