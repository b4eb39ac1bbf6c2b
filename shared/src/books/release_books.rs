//! The books of a release (an activity whose sizes share one limit per
//! customer): no customer holds more than the limit across its sizes in
//! PostgreSQL's rows, and the release's takes in Redis count at least what
//! those rows hold for every customer (a take counts against its customer
//! until its order ends; one that counted less would let them pass).
//!
//! `seckillctl reconcile --release A` and `GET /admin/releases/{A}` both
//! serve this.

use crate::domain::ActivityId;
use crate::stock::conn::RedisCallError;
use crate::stock::Stock;
use sqlx::PgPool;
use std::collections::BTreeMap;

/// A customer the release's books name, with their units.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomerUnits {
    pub user_id: i64,
    /// The units the customer's live orders (CREATED, PAID) hold across
    /// the release's sizes (PostgreSQL).
    pub units_in_orders: i64,
    /// The units the release's takes count for them (Redis).
    pub units_taken: i64,
}

/// A release's books and the verdict.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = ReleaseReconciliation)]
pub struct ReleaseReport {
    pub activity_id: i64,
    /// Units one customer may hold across the release's sizes.
    pub per_customer_limit: i64,
    /// Customers with a live order in the release (PostgreSQL).
    pub customers: i64,
    /// The most units one customer holds in live orders (PostgreSQL).
    pub most_held: i64,
    /// Units the live orders hold (PostgreSQL).
    pub units_in_orders: i64,
    /// Units the takes count (Redis), pending ones included: more than
    /// `unitsInOrders` by the orders not written yet (in flight) and the
    /// takes pending or not given back yet.
    pub units_taken: i64,
    /// Takes whose order is not yet known to be made (the sweep gives
    /// those whose order never came back within its bound).
    pub takes_pending: i64,
    /// Customers holding more than the limit in PostgreSQL's rows: a
    /// broken promise to the shop.
    pub over_limit: Vec<CustomerUnits>,
    /// Customers the takes count fewer units for than their live orders
    /// hold: the release could let them pass its limit.
    pub undercounted: Vec<CustomerUnits>,
    /// No customer over the limit and none undercounted.
    pub consistent: bool,
}

/// Why a release's books could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseBooksError {
    #[error("activity {0} declares no release")]
    NotARelease(i64),
    #[error("redis: {0}")]
    Redis(#[from] RedisCallError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// Reads `activity`'s release in Redis and its orders in PostgreSQL.
pub async fn reconcile_release(
    stock: &Stock,
    db: &PgPool,
    activity: ActivityId,
) -> Result<ReleaseReport, ReleaseBooksError> {
    let limit =
        stock.releases().release_limit(activity).await?.ok_or(ReleaseBooksError::NotARelease(activity.get()))?;
    let takes_pending = stock.releases().takes_pending(activity).await?;
    let taken = stock.releases().release_held(activity).await?;
    let rows = sqlx::query!(
        r#"SELECT user_id, sum(quantity)::bigint AS "units!" FROM orders
            WHERE activity_id = $1 AND status IN ('CREATED', 'PAID')
            GROUP BY user_id"#,
        activity.get()
    )
    .fetch_all(db)
    .await?;
    let in_orders: BTreeMap<i64, i64> = rows.into_iter().map(|row| (row.user_id, row.units)).collect();
    let customer = |user_id: i64, units_in_orders: i64| CustomerUnits {
        user_id,
        units_in_orders,
        units_taken: taken.get(&user_id).copied().unwrap_or(0),
    };
    let over_limit: Vec<_> =
        in_orders.iter().filter(|(_, units)| **units > limit).map(|(user, units)| customer(*user, *units)).collect();
    let undercounted: Vec<_> = in_orders
        .iter()
        .map(|(user, units)| customer(*user, *units))
        .filter(|c| c.units_taken < c.units_in_orders)
        .collect();
    Ok(ReleaseReport {
        activity_id: activity.get(),
        per_customer_limit: limit,
        customers: in_orders.len() as i64,
        most_held: in_orders.values().copied().max().unwrap_or(0),
        units_in_orders: in_orders.values().sum(),
        units_taken: taken.values().sum(),
        takes_pending,
        consistent: over_limit.is_empty() && undercounted.is_empty(),
        over_limit,
        undercounted,
    })
}

/// The books of every declared release (the dashboard's).
pub async fn reconcile_releases(stock: &Stock, db: &PgPool) -> Result<Vec<ReleaseReport>, ReleaseBooksError> {
    let mut reports = Vec::new();
    for activity in stock.releases().declared().await? {
        match reconcile_release(stock, db, activity).await {
            Err(ReleaseBooksError::NotARelease(_)) => {}
            other => reports.push(other?),
        }
    }
    Ok(reports)
}
