//! A draw's seed, kept in PostgreSQL (`draw_seeds`) from its warm-up until
//! the draw and never in Redis before it: Redis holds only the seed's
//! commitment, by which the edge making the draw finds the seed here,
//! checks it and reveals it with the draw. Whoever reads Redis before the
//! draw cannot rank a single entry (docs/buyers-api.md, the trust model).

use crate::domain::SaleKey;
use crate::stock::queue::seed_commitment;
use sqlx::PgPool;

/// A new seed for `sale`'s draw, kept; its commitment (what Redis holds).
pub async fn keep(pool: &PgPool, sale: SaleKey) -> sqlx::Result<String> {
    let seed = format!("{:032x}{:032x}", rand::random::<u128>(), rand::random::<u128>());
    let commitment = seed_commitment(&seed);
    sqlx::query!(
        "INSERT INTO draw_seeds (commitment, activity_id, sku_id, seed) VALUES ($1, $2, $3, $4)",
        commitment,
        sale.activity.get(),
        sale.sku.get(),
        seed
    )
    .execute(pool)
    .await?;
    Ok(commitment)
}

/// The seed committed to as `commitment` (`None`: none kept).
pub async fn find(pool: &PgPool, commitment: &str) -> sqlx::Result<Option<String>> {
    let seed = sqlx::query_scalar!("SELECT seed FROM draw_seeds WHERE commitment = $1", commitment)
        .fetch_optional(pool)
        .await?;
    Ok(seed.filter(|seed| seed_commitment(seed) == commitment))
}
