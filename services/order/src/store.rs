//! Writing a batch of orders to PostgreSQL in one transaction, idempotently,
//! with the database-side stock guard.
//!
//! Under a `FOR UPDATE` lock on the batch's sale rows (so concurrent writers
//! of one sale take turns), each record is classified against what the
//! database already holds: its order id already has a row (done, nothing to
//! do), the sale is unknown, the user already holds a CREATED order this
//! round, or no stock is left. The rest are inserted with one
//! `INSERT … SELECT FROM unnest(…) ON CONFLICT DO NOTHING RETURNING`, and
//! each sale's `remaining_stock` goes down by exactly the rows inserted
//! (the `CHECK (remaining_stock >= 0)` backs the arithmetic up).

use seckill_shared::db::is_data_error;
use seckill_shared::domain::{FailReason, OrderRecord, OrderStatus, SaleKey};
use sqlx::{PgPool, Row};
use std::collections::{HashMap, HashSet};

/// Why a write failed, and so what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Retry later (database unreachable, serialization failure, timeout):
    /// commit nothing, skip nothing.
    #[error("transient: {0}")]
    Transient(String),
    /// The database refused the data: retrying will not help.
    #[error("permanent: {0}")]
    Permanent(String),
}

impl From<sqlx::Error> for WriteError {
    /// Only a verdict on the data itself (SQLSTATE class 22, data exception,
    /// or 23, integrity constraint violation) is permanent. Everything else —
    /// a connection refused, a database not accepting connections, a server
    /// shutting down, a serialization failure, even a misconfiguration — is
    /// retried: dead-lettering good orders because the database is unwell
    /// would fail buyers for nothing.
    fn from(error: sqlx::Error) -> Self {
        if is_data_error(&error) {
            Self::Permanent(error.to_string())
        } else {
            Self::Transient(error.to_string())
        }
    }
}

/// What became of each record of a batch.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// Written now, CREATED.
    pub created: Vec<OrderRecord>,
    /// Already had a row (a duplicate, a replay, or settled FAILED first).
    pub already_done: Vec<(OrderRecord, OrderStatus)>,
    /// Can never be written: to the dead-letter topic.
    pub rejected: Vec<(OrderRecord, FailReason, String)>,
}

/// Writes `records` in one transaction. Records with the same order id as
/// an earlier one in the batch are dropped (the first decides).
pub async fn write_batch(pool: &PgPool, records: &[OrderRecord]) -> Result<BatchOutcome, WriteError> {
    let mut outcome = BatchOutcome::default();
    let mut seen = HashSet::new();
    let records: Vec<&OrderRecord> = records.iter().filter(|r| seen.insert(r.order_id.clone())).collect();
    if records.is_empty() {
        return Ok(outcome);
    }
    let mut tx = pool.begin().await?;

    let mut sales: Vec<SaleKey> = records.iter().map(|r| r.sale()).collect();
    sales.sort();
    sales.dedup();
    let activities: Vec<i64> = sales.iter().map(|s| s.activity.get()).collect();
    let skus: Vec<i64> = sales.iter().map(|s| s.sku.get()).collect();
    // Lock in a fixed order so two writers never deadlock.
    let rows = sqlx::query(
        "SELECT s.activity_id, s.sku_id, s.round, s.remaining_stock
           FROM sales s JOIN unnest($1::bigint[], $2::bigint[]) AS b(activity_id, sku_id) USING (activity_id, sku_id)
          ORDER BY s.activity_id, s.sku_id
            FOR UPDATE OF s",
    )
    .bind(&activities)
    .bind(&skus)
    .fetch_all(&mut *tx)
    .await?;
    // sale -> (round, remaining)
    let mut stock: HashMap<(i64, i64), (i32, i64)> =
        rows.iter().map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3)))).collect();

    let ids: Vec<&str> = records.iter().map(|r| r.order_id.as_str()).collect();
    let existing: HashMap<String, OrderStatus> =
        sqlx::query("SELECT order_id, status FROM orders WHERE order_id = ANY($1)")
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| (r.get::<String, _>(0), OrderStatus::parse(r.get(1)).unwrap_or(OrderStatus::Failed)))
            .collect();

    // Users of the batch who already hold a CREATED order this round. The
    // round is spelled out so the lookup uses every column of the one-order-
    // per-user index (activity, sku, round, user).
    let known: Vec<&&OrderRecord> =
        records.iter().filter(|r| stock.contains_key(&(r.activity_id.get(), r.sku_id.get()))).collect();
    let holder_activities: Vec<i64> = known.iter().map(|r| r.activity_id.get()).collect();
    let holder_skus: Vec<i64> = known.iter().map(|r| r.sku_id.get()).collect();
    let holder_rounds: Vec<i32> = known.iter().map(|r| stock[&(r.activity_id.get(), r.sku_id.get())].0).collect();
    let holder_users: Vec<i64> = known.iter().map(|r| r.user_id.get()).collect();
    let mut holders: HashSet<(i64, i64, i64)> = sqlx::query(
        "SELECT o.activity_id, o.sku_id, o.user_id
           FROM orders o
           JOIN unnest($1::bigint[], $2::bigint[], $3::int[], $4::bigint[]) AS b(activity_id, sku_id, round, user_id)
             USING (activity_id, sku_id, round, user_id)
          WHERE o.status = 'CREATED'",
    )
    .bind(&holder_activities)
    .bind(&holder_skus)
    .bind(&holder_rounds)
    .bind(&holder_users)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect();

    let mut candidates: Vec<&OrderRecord> = Vec::new();
    for record in records {
        let sale = (record.activity_id.get(), record.sku_id.get());
        if let Some(status) = existing.get(record.order_id.as_str()) {
            outcome.already_done.push((record.clone(), *status));
            continue;
        }
        let Some((_, remaining)) = stock.get_mut(&sale) else {
            outcome.rejected.push((record.clone(), FailReason::SaleNotFound, format!("sale {} does not exist", record.sale())));
            continue;
        };
        if !holders.insert((sale.0, sale.1, record.user_id.get())) {
            outcome.rejected.push((
                record.clone(),
                FailReason::DuplicateUser,
                format!("user {} already holds an order in sale {}", record.user_id, record.sale()),
            ));
            continue;
        }
        if *remaining <= 0 {
            holders.remove(&(sale.0, sale.1, record.user_id.get()));
            outcome.rejected.push((
                record.clone(),
                FailReason::NoDbStock,
                format!("sale {} has no stock left in the database", record.sale()),
            ));
            continue;
        }
        *remaining -= 1;
        candidates.push(record);
    }

    if !candidates.is_empty() {
        let rounds: Vec<i32> = candidates.iter().map(|r| stock[&(r.activity_id.get(), r.sku_id.get())].0).collect();
        let order_ids: Vec<&str> = candidates.iter().map(|r| r.order_id.as_str()).collect();
        let activities: Vec<i64> = candidates.iter().map(|r| r.activity_id.get()).collect();
        let skus: Vec<i64> = candidates.iter().map(|r| r.sku_id.get()).collect();
        let users: Vec<i64> = candidates.iter().map(|r| r.user_id.get()).collect();
        let accepted: Vec<i64> = candidates.iter().map(|r| r.accepted_at).collect();
        let inserted: HashSet<String> = sqlx::query_scalar(
            "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, accepted_at)
             SELECT order_id, activity_id, sku_id, round, user_id, 'CREATED', to_timestamp(accepted_ms / 1000.0)
               FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::bigint[])
                    AS b(order_id, activity_id, sku_id, round, user_id, accepted_ms)
             ON CONFLICT DO NOTHING
             RETURNING order_id",
        )
        .bind(&order_ids)
        .bind(&activities)
        .bind(&skus)
        .bind(&rounds)
        .bind(&users)
        .bind(&accepted)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();

        // Rows that lost a race with another writer since the checks above.
        let lost: Vec<&str> = order_ids.iter().copied().filter(|id| !inserted.contains(*id)).collect();
        let raced: HashMap<String, OrderStatus> = if lost.is_empty() {
            HashMap::new()
        } else {
            sqlx::query("SELECT order_id, status FROM orders WHERE order_id = ANY($1)")
                .bind(&lost)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| (r.get::<String, _>(0), OrderStatus::parse(r.get(1)).unwrap_or(OrderStatus::Failed)))
                .collect()
        };

        let mut written: HashMap<(i64, i64), i64> = HashMap::new();
        for record in candidates {
            if inserted.contains(record.order_id.as_str()) {
                *written.entry((record.activity_id.get(), record.sku_id.get())).or_insert(0) += 1;
                outcome.created.push(record.clone());
            } else if let Some(status) = raced.get(record.order_id.as_str()) {
                outcome.already_done.push((record.clone(), *status));
            } else {
                outcome.rejected.push((
                    record.clone(),
                    FailReason::DuplicateUser,
                    format!("user {} already holds an order in sale {}", record.user_id, record.sale()),
                ));
            }
        }
        for ((activity, sku), n) in written {
            sqlx::query(
                "UPDATE sales SET remaining_stock = remaining_stock - $3, updated_at = now()
                  WHERE activity_id = $1 AND sku_id = $2",
            )
            .bind(activity)
            .bind(sku)
            .bind(n)
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    Ok(outcome)
}
