//! The `warmups` table (migration 09): each warm-up by its id, what was
//! asked and how far it got — the one home of its SQL.

use super::WarmupRequest;
use crate::domain::SaleKey;
use crate::stock::Bucket;
use sqlx::{PgConnection, PgPool};

/// How far a warm-up got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Its buckets placed; being held still.
    Started,
    /// Its round committed in PostgreSQL; Redis being loaded.
    Committed,
    /// Loaded and confirmed.
    Done,
    /// Refused (orders in flight): nothing changed.
    Refused,
    /// Replaced by a close before it finished: never resumed.
    Closed,
}

impl Step {
    /// The column's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "STARTED",
            Self::Committed => "COMMITTED",
            Self::Done => "DONE",
            Self::Refused => "REFUSED",
            Self::Closed => "CLOSED",
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "COMMITTED" => Self::Committed,
            "DONE" => Self::Done,
            "REFUSED" => Self::Refused,
            "CLOSED" => Self::Closed,
            _ => Self::Started,
        }
    }
}

/// One warm-up as recorded.
#[derive(Debug, Clone)]
pub struct Warmup {
    pub id: String,
    pub request: WarmupRequest,
    /// The round's buckets, once placed.
    pub buckets: Option<Vec<Bucket>>,
    /// The previous round's buckets it lists no more.
    pub retired: Vec<Bucket>,
    /// The round, once committed.
    pub round: Option<i32>,
    pub step: Step,
    /// Why its last run stopped, if it did.
    pub error: Option<String>,
    /// When it was first asked.
    pub started_at: chrono::DateTime<chrono::Utc>,
}

fn buckets(ids: Option<Vec<i64>>) -> Option<Vec<Bucket>> {
    ids.map(|ids| ids.into_iter().filter_map(|b| u32::try_from(b).ok()).map(Bucket).collect())
}

fn ids(buckets: &[Bucket]) -> Vec<i64> {
    buckets.iter().map(|b| i64::from(b.0)).collect()
}

/// The warm-up `id`: recorded now with `request` if new, else as it was
/// (`None`: the id was recorded with another request).
pub async fn begin(pool: &PgPool, id: &str, request: &WarmupRequest) -> sqlx::Result<Option<Warmup>> {
    let asked = serde_json::to_value(request).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    sqlx::query!(
        "INSERT INTO warmups (warmup_id, activity_id, sku_id, request, step) VALUES ($1, $2, $3, $4, 'STARTED')
         ON CONFLICT (warmup_id) DO NOTHING",
        id,
        request.sale.activity.get(),
        request.sale.sku.get(),
        asked
    )
    .execute(pool)
    .await?;
    let found = find(pool, id).await?;
    Ok(found.filter(|found| {
        WarmupRequest { id: None, ..found.request.clone() } == WarmupRequest { id: None, ..request.clone() }
    }))
}

/// The warm-up `id`, if recorded.
pub async fn find(pool: &PgPool, id: &str) -> sqlx::Result<Option<Warmup>> {
    let row = sqlx::query!(
        "SELECT warmup_id, request, buckets, retired, round, step, error, created_at FROM warmups WHERE warmup_id = $1",
        id
    )
    .fetch_optional(pool)
    .await?;
    row.map(|row| {
        let request: WarmupRequest =
            serde_json::from_value(row.request).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
        Ok(Warmup {
            id: row.warmup_id,
            request,
            buckets: buckets(row.buckets),
            retired: buckets(row.retired).unwrap_or_default(),
            round: row.round,
            step: Step::parse(&row.step),
            error: row.error,
            started_at: row.created_at,
        })
    })
    .transpose()
}

/// The sale's last warm-up that is not finished (STARTED or COMMITTED):
/// one a caller gave up on or whose process died, to be repeated.
pub async fn unfinished(pool: &PgPool, sale: SaleKey) -> sqlx::Result<Option<Warmup>> {
    let id = sqlx::query_scalar!(
        "SELECT warmup_id FROM warmups WHERE activity_id = $1 AND sku_id = $2
          ORDER BY created_at DESC LIMIT 1",
        sale.activity.get(),
        sale.sku.get()
    )
    .fetch_optional(pool)
    .await?;
    let Some(id) = id else { return Ok(None) };
    Ok(find(pool, &id).await?.filter(|w| matches!(w.step, Step::Started | Step::Committed)))
}

/// Every sale's last warm-up that is not finished, oldest first: what the
/// edges' resumer runs again.
pub async fn unfinished_everywhere(pool: &PgPool) -> sqlx::Result<Vec<Warmup>> {
    let ids = sqlx::query_scalar!(
        r#"SELECT warmup_id AS "warmup_id!" FROM (
              SELECT DISTINCT ON (activity_id, sku_id) warmup_id, step, created_at
                FROM warmups ORDER BY activity_id, sku_id, created_at DESC
           ) last
          WHERE step IN ('STARTED', 'COMMITTED')
          ORDER BY created_at"#
    )
    .fetch_all(pool)
    .await?;
    let mut found = Vec::with_capacity(ids.len());
    for id in ids {
        found.extend(find(pool, &id).await?);
    }
    Ok(found)
}

/// The sale's last warm-up, if unfinished, replaced by a close: it is
/// never resumed. Inside the close's lock.
pub async fn closed(pool: &PgPool, sale: SaleKey) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE warmups SET step = 'CLOSED', error = 'the sale was closed before it finished', updated_at = now()
          WHERE warmup_id = (SELECT warmup_id FROM warmups WHERE activity_id = $1 AND sku_id = $2
                              ORDER BY created_at DESC LIMIT 1)
            AND step IN ('STARTED', 'COMMITTED')",
        sale.activity.get(),
        sale.sku.get()
    )
    .execute(pool)
    .await
    .map(drop)
}

/// Its buckets, once placed (the same on every run of it).
pub async fn placed(pool: &PgPool, id: &str, round: &[Bucket], retired: &[Bucket]) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE warmups SET buckets = $2, retired = $3, step = 'STARTED', error = NULL, updated_at = now()
          WHERE warmup_id = $1",
        id,
        &ids(round),
        &ids(retired)
    )
    .execute(pool)
    .await
    .map(drop)
}

/// Its round committed: in the transaction that commits it.
pub async fn committed(tx: &mut PgConnection, id: &str, round: i32) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE warmups SET round = $2, step = 'COMMITTED', updated_at = now() WHERE warmup_id = $1",
        id,
        round
    )
    .execute(tx)
    .await
    .map(drop)
}

/// Where it ended (`Done`, `Refused`), or why a run stopped short (the
/// step unchanged).
pub async fn ended(pool: &PgPool, id: &str, step: Option<Step>, error: Option<&str>) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE warmups SET step = COALESCE($2, step), error = $3, updated_at = now() WHERE warmup_id = $1",
        id,
        step.map(Step::as_str),
        error
    )
    .execute(pool)
    .await
    .map(drop)
}
