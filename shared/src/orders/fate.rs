//! Redis follows PostgreSQL. Once an order's fate is decided — its first
//! row, CREATED or FAILED — Redis is brought in line: a CREATED order is
//! marked so; a FAILED one has its unit restored (or, when the database
//! never had the unit, `NO_DB_STOCK`, written off), at most once per order
//! id. The compensator does this for dead letters and swept reservations,
//! the order service for records whose order had already FAILED.

use crate::db;
use crate::domain::{FailReason, Fate, OrderRecord};
use crate::stock::conn::RedisCallError;
use crate::stock::{Compensation, CompensationMode, Stock};
use sqlx::PgPool;

/// What following a fate did in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Followed {
    /// The order is marked CREATED: nothing restored.
    Created,
    /// The order is FAILED in Redis; what happened to its unit.
    Failed(Compensation),
}

/// Why Redis could not follow.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// Reading the sale's database stock (for a write-off) failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] RedisCallError),
}

/// Brings Redis in line with `fate` for `record`'s order. Idempotent.
pub async fn follow(stock: &Stock, db: &PgPool, record: &OrderRecord, fate: Fate) -> Result<Followed, FollowError> {
    let reason = match fate {
        Fate::Created => {
            stock
                .orders()
                .follow_created(&[(record.order_id.clone(), record.user_id, record.accepted_at, record.held())])
                .await?;
            return Ok(Followed::Created);
        }
        Fate::Failed(reason) => reason,
    };
    let settlement = if reason == FailReason::NoDbStock {
        // Redis counted a unit the database does not have: selling it again
        // would only make another doomed order. Bring Redis down instead.
        let remaining = db::find_sale(db, record.sale()).await?.map(|sale| sale.remaining_stock).unwrap_or(0);
        CompensationMode::WriteOff { db_remaining: remaining }
    } else {
        CompensationMode::Restore
    };
    let compensation =
        stock.orders().compensate(&record.order_id, record.user_id, record.held(), reason, settlement).await?;
    // The order's release (if its activity is one) gets its units back too,
    // once: its take goes with them. Asked again (an error above or here),
    // both are no-ops for what was done.
    if compensation != Compensation::Created {
        stock.releases().release_give_orders(std::slice::from_ref(&record.order_id)).await?;
    }
    if compensation == Compensation::Done {
        metrics::counter!("seckill_units_settled_total", "reason" => reason.code()).increment(1);
    }
    Ok(Followed::Failed(compensation))
}
