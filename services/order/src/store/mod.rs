//! Writing a batch of orders to PostgreSQL in one transaction, idempotently,
//! with the database-side stock guard.
//!
//! Two ways, tried in this order:
//!
//! - **Optimistic** (nearly every batch): insert every row with one plain
//!   `INSERT … SELECT FROM unnest(…)` — no speculative insertion, nothing
//!   returned — then take each sale's stock down by the rows inserted with an
//!   `UPDATE … WHERE round = $read AND remaining_stock >= $n`. Only that last
//!   statement locks the sale row, so concurrent writers of one sale overlap
//!   everywhere but in their commits. If a row conflicts (its order id
//!   already has one: a replay or a duplicate; or its user's place already
//!   holds a live order this round), or a sale lacks the stock (or was re-warmed
//!   since its round was read), the transaction is rolled back and
//! - **Locked** takes over: under `FOR UPDATE` on the batch's sale rows (so
//!   writers of one sale take turns), each record is classified first —
//!   order id already has a row, the user's place already holds a live
//!   order this round, fewer units left than the order holds — and only the rest are inserted, with
//!   `ON CONFLICT DO NOTHING RETURNING` for rows that race in meanwhile. This
//!   is the path that decides duplicates and `NO_DB_STOCK` order by order.
//!
//! Either way a sale's `remaining_stock` goes down by exactly the units of
//! the rows inserted (the `CHECK (remaining_stock >= 0)` backs the arithmetic up).
//! A writer on the locked path and one on the optimistic path holding the
//! same order id can deadlock; PostgreSQL aborts one (SQLSTATE 40P01), which
//! is transient, and the batch is retried.

mod batch;
mod rows;

use batch::{duplicate_user, in_round, sale_not_found, sale_of, statuses, Sale, SaleState};
pub use batch::{BatchOutcome, Source, Sources};
use rows::{insert, insert_orders, is_unique_violation, take_stock, OrderColumns};
use seckill_shared::db::{is_data_error, within};
use seckill_shared::domain::{FailReason, OrderRecord, SaleKey};
use sqlx::{PgConnection, PgPool};
use std::collections::{HashMap, HashSet};

/// Why a write failed, and so what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Retry later (database unreachable, serialization failure, timeout):
    /// commit nothing, skip nothing.
    #[error("transient: {0}")]
    Transient(#[source] sqlx::Error),
    /// The database refused the data: retrying will not help.
    #[error("permanent: {0}")]
    Permanent(#[source] sqlx::Error),
    /// The stock guard refused what was counted under the sale's lock: a
    /// concurrent change (a re-warm) moved the sale; retry.
    #[error("the stock guard refused a batch written under the sale's lock")]
    GuardMoved,
}

impl From<sqlx::Error> for WriteError {
    /// Only a verdict on the data itself (SQLSTATE class 22, data exception,
    /// or 23, integrity constraint violation) is permanent. Everything else —
    /// a connection refused, a database not accepting connections, a server
    /// shutting down, a serialization failure or deadlock, even a
    /// misconfiguration — is retried: dead-lettering good orders because the
    /// database is unwell would fail buyers for nothing.
    fn from(error: sqlx::Error) -> Self {
        if is_data_error(&error) {
            Self::Permanent(error)
        } else {
            Self::Transient(error)
        }
    }
}

/// Writes `records` one transaction each, after a batch of them was
/// refused: one bad row must not fail the good ones. A row refused for good
/// is rejected (`DB_REJECTED`, dead-lettered); a transient fault fails all.
/// Each transaction is given up past `deadline` (transient).
pub async fn write_row_by_row(
    db: &PgPool,
    records: &[OrderRecord],
    sources: &Sources<'_>,
    deadline: std::time::Duration,
) -> Result<BatchOutcome, WriteError> {
    let mut total = BatchOutcome::default();
    for record in records {
        match within(deadline, write_batch(db, std::slice::from_ref(record), sources)).await {
            Ok(outcome) => {
                total.created.extend(outcome.created);
                total.already_done.extend(outcome.already_done);
                total.rejected.extend(outcome.rejected);
            }
            Err(WriteError::Permanent(error)) => {
                total.rejected.push((record.clone(), FailReason::DbRejected, error.to_string()))
            }
            Err(transient) => return Err(transient),
        }
    }
    Ok(total)
}

/// Writes `records` in one transaction. Records with the same order id as
/// an earlier one in the batch are dropped (the first decides).
#[tracing::instrument(name = "write_batch", skip_all, fields(records = records.len()))]
pub async fn write_batch(
    pool: &PgPool,
    records: &[OrderRecord],
    sources: &Sources<'_>,
) -> Result<BatchOutcome, WriteError> {
    let mut seen = HashSet::with_capacity(records.len());
    let records: Vec<&OrderRecord> = records.iter().filter(|r| seen.insert(r.order_id.as_str())).collect();
    if records.is_empty() {
        return Ok(BatchOutcome::default());
    }
    if let Some(outcome) = write_optimistic(pool, &records, sources).await? {
        return Ok(outcome);
    }
    metrics::counter!("seckill_order_locked_batches_total").increment(1);
    write_locked(pool, &records, sources).await
}

/// The optimistic way; `None` when a sale's guard refused the batch (rolled
/// back, nothing written).
async fn write_optimistic(
    pool: &PgPool,
    records: &[&OrderRecord],
    sources: &Sources<'_>,
) -> Result<Option<BatchOutcome>, WriteError> {
    let mut outcome = BatchOutcome::default();
    let mut tx = pool.begin().await?;
    let sales = read_sales(&mut tx, records, false).await?;
    let mut candidates = Vec::with_capacity(records.len());
    for &record in records {
        match sales.get(&sale_of(record)) {
            // Another round's record may be a replay of a finished order:
            // the locked way looks its row up first.
            Some(state) if !state.takes(record) => return Ok(None),
            Some(_) => candidates.push(record),
            None => outcome.rejected.push(sale_not_found(record)),
        }
    }
    let columns = OrderColumns::new(&candidates, &sales, sources);
    if let Err(error) = insert_orders!(columns, "").execute(&mut *tx).await {
        if !is_unique_violation(&error) {
            return Err(error.into());
        }
        // An order id that already has a row, or a user's second order:
        // the locked way sorts them out.
        tx.rollback().await?;
        return Ok(None);
    }
    let mut written: HashMap<Sale, i64> = HashMap::new();
    for &record in &candidates {
        *written.entry(sale_of(record)).or_insert(0) += i64::from(record.quantity);
        outcome.created.push(in_round(record, sales[&sale_of(record)].round));
    }
    if !take_stock(&mut tx, &written, &sales).await? {
        tx.rollback().await?;
        return Ok(None);
    }
    tx.commit().await?;
    Ok(Some(outcome))
}

/// The places (activity, sku, user, slot) of the batch's users that a live
/// (CREATED or PAID) order holds this round. The round is spelled out so
/// the lookup reads the index on (activity, sku, round, user).
async fn live_holders(
    tx: &mut PgConnection,
    records: &[&OrderRecord],
    sales: &HashMap<Sale, SaleState>,
) -> Result<HashSet<(i64, i64, i64, i16)>, sqlx::Error> {
    let known: Vec<&&OrderRecord> = records.iter().filter(|r| sales.contains_key(&sale_of(r))).collect();
    let holder_activities: Vec<i64> = known.iter().map(|r| r.activity_id.get()).collect();
    let holder_skus: Vec<i64> = known.iter().map(|r| r.sku_id.get()).collect();
    let holder_rounds: Vec<i32> = known.iter().map(|r| sales[&sale_of(r)].round).collect();
    let holder_users: Vec<i64> = known.iter().map(|r| r.user_id.get()).collect();
    let holders = sqlx::query!(
        "SELECT o.activity_id, o.sku_id, o.user_id, o.slot
           FROM orders o
           JOIN unnest($1::bigint[], $2::bigint[], $3::int[], $4::bigint[]) AS b(activity_id, sku_id, round, user_id)
             USING (activity_id, sku_id, round, user_id)
          WHERE o.status IN ('CREATED', 'PAID')",
        &holder_activities,
        &holder_skus,
        &holder_rounds,
        &holder_users
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|r| (r.activity_id, r.sku_id, r.user_id, r.slot))
    .collect();

    Ok(holders)
}

/// The locked way: every record classified under the sale rows' locks.
async fn write_locked(
    pool: &PgPool,
    records: &[&OrderRecord],
    sources: &Sources<'_>,
) -> Result<BatchOutcome, WriteError> {
    let mut outcome = BatchOutcome::default();
    let mut tx = pool.begin().await?;
    let sales = read_sales(&mut tx, records, true).await?;

    let ids: Vec<&str> = records.iter().map(|r| r.order_id.as_str()).collect();
    let existing = statuses(&mut tx, &ids).await?;

    let mut holders = live_holders(&mut tx, records, &sales).await?;

    let mut left: HashMap<Sale, i64> = sales.iter().map(|(sale, state)| (*sale, state.remaining)).collect();
    let mut candidates: Vec<&OrderRecord> = Vec::new();
    for &record in records {
        let sale = sale_of(record);
        if let Some(&(fate, round)) = existing.get(record.order_id.as_str()) {
            outcome.already_done.push((in_round(record, round), fate));
            continue;
        }
        let Some(remaining) = left.get_mut(&sale) else {
            outcome.rejected.push(sale_not_found(record));
            continue;
        };
        if !sales[&sale].takes(record) {
            outcome.rejected.push((
                record.clone(),
                FailReason::RoundReplaced,
                format!("order of round {:?}; sale {} is in round {}", record.round, record.sale(), sales[&sale].round),
            ));
            continue;
        }
        // In range: the record was checked when it was read.
        let place = (sale.0, sale.1, record.user_id.get(), record.slot as i16);
        if !holders.insert(place) {
            outcome.rejected.push(duplicate_user(record));
            continue;
        }
        let units = i64::from(record.quantity);
        if *remaining < units {
            holders.remove(&place);
            outcome.rejected.push((
                record.clone(),
                FailReason::NoDbStock,
                format!("sale {} has no stock left in the database", record.sale()),
            ));
            continue;
        }
        *remaining -= units;
        candidates.push(record);
    }

    let written = insert(&mut tx, &candidates, &sales, sources, &mut outcome).await?;
    // Under the lock the guard cannot refuse what was counted above.
    if !take_stock(&mut tx, &written, &sales).await? {
        return Err(WriteError::GuardMoved);
    }
    tx.commit().await?;
    Ok(outcome)
}

/// The batch's sales as they stand, locked in a fixed order (so two locked
/// writers never deadlock) when `lock`.
async fn read_sales(
    tx: &mut PgConnection,
    records: &[&OrderRecord],
    lock: bool,
) -> Result<HashMap<Sale, SaleState>, sqlx::Error> {
    let mut keys: Vec<SaleKey> = records.iter().map(|r| r.sale()).collect();
    keys.sort();
    keys.dedup();
    let activities: Vec<i64> = keys.iter().map(|s| s.activity.get()).collect();
    let skus: Vec<i64> = keys.iter().map(|s| s.sku.get()).collect();
    macro_rules! sales {
        ($sql:tt) => {
            sqlx::query!($sql, &activities, &skus)
                .fetch_all(tx)
                .await?
                .into_iter()
                .map(|r| ((r.activity_id, r.sku_id), SaleState { round: r.round, remaining: r.remaining_stock }))
                .collect()
        };
    }
    Ok(if lock {
        sales!(
            "SELECT s.activity_id, s.sku_id, s.round, s.remaining_stock
               FROM sales s JOIN unnest($1::bigint[], $2::bigint[]) AS b(activity_id, sku_id) USING (activity_id, sku_id)
              ORDER BY s.activity_id, s.sku_id
                FOR UPDATE OF s"
        )
    } else {
        sales!(
            "SELECT s.activity_id, s.sku_id, s.round, s.remaining_stock
               FROM sales s JOIN unnest($1::bigint[], $2::bigint[]) AS b(activity_id, sku_id) USING (activity_id, sku_id)"
        )
    })
}
