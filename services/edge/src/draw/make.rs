//! Making a draw, once: its entries frozen (Redis's clock past `drawAt`),
//! ranked by the committed seed ([`seckill_shared::draw::proof`]),
//! read from PostgreSQL, where it was kept out of Redis's sight until now
//! (the script reveals it with the draw),
//! the ranking written as the room's line and applied in one script that
//! runs once per round — the first entries win, as many as the units left
//! can serve, the rest are the waitlist. Anything cut short is made again
//! the same way: the ranking depends on the seed and the frozen entries'
//! digest alone, so a second edge (or the same after a crash) writes the same
//! line, and the script answers "drawn before".

use seckill_shared::db;
use seckill_shared::domain::{SaleKey, UserId};
use seckill_shared::draw::{proof, seed};
use seckill_shared::draw::{Applied, DrawSecret};
use seckill_shared::stock::Stock;
use std::collections::HashMap;
use std::time::Duration;

/// What a draw made now found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    pub entries: usize,
    pub winners: i64,
    pub digest: String,
}

/// A maker or publisher of a later term of the draws' lease acted on a
/// draw: this term is over.
#[derive(Debug, thiserror::Error)]
#[error("a maker or publisher of a later term acted on the draw")]
pub struct LaterTerm;

/// Where a draw's seed is read: the pool keeping it until the draw, within
/// the deadline of a database call.
pub type Seeds<'a> = (&'a sqlx::PgPool, Duration);

/// Makes `sale`'s draw if it is due and not made, as the holder of the
/// lease term `fence` (`None`: nothing made now: too early, made before,
/// or the sale closed first; a [`LaterTerm`] error: a later term acted on
/// the draw, nothing written).
pub async fn make(stock: &Stock, seeds: Seeds<'_>, sale: SaleKey, fence: i64) -> anyhow::Result<Option<Made>> {
    if stock.draws().freeze_draw(sale).await? != Some(true) {
        return Ok(None);
    }
    // The crash tests stop an edge here: frozen, not drawn.
    seckill_shared::ops::halt::at("draw-frozen");
    let seed = seed_of(stock, seeds, sale).await?;
    // Twice at most: an entry can only have slipped in before the freeze,
    // so a second read of the frozen entries is whole.
    for _ in 0..2 {
        let entries = stock.draws().draw_entries(sale).await?;
        let by_user: HashMap<UserId, String> = entries.iter().map(|(entry, user)| (*user, entry.clone())).collect();
        let users: Vec<UserId> = by_user.keys().copied().collect();
        let digest = proof::sha256_hex(proof::entry_list(&users).as_bytes());
        let ranked: Vec<String> =
            proof::ranking(&seed, &digest, &users).into_iter().map(|(user, _)| by_user[&user].clone()).collect();
        let winners = stock.waiting_room().orders_left(sale).await?;
        match stock.draws().apply_draw(sale, &ranked, (winners, &digest, &seed), fence).await? {
            Some(Applied::Made) => {
                return Ok(Some(Made { entries: ranked.len(), winners: winners.min(ranked.len() as i64), digest }))
            }
            // Another edge made it meanwhile.
            Some(Applied::Before) => return Ok(None),
            Some(Applied::LaterTerm) => return Err(LaterTerm.into()),
            None => {}
        }
    }
    anyhow::bail!("the entries of {sale}'s draw changed after they were frozen")
}

/// The seed `sale`'s draw ranks by: kept in PostgreSQL under the
/// commitment its room holds (checked against it), or, for a draw warmed
/// before seeds left Redis, the room's own.
async fn seed_of(stock: &Stock, (pool, deadline): Seeds<'_>, sale: SaleKey) -> anyhow::Result<String> {
    match stock.draws().draw_secret(sale).await? {
        Some(DrawSecret::Committed(commitment)) => db::within(deadline, seed::find(pool, &commitment))
            .await?
            .ok_or_else(|| anyhow::anyhow!("no seed kept for the draw of {sale} (commitment {commitment})")),
        Some(DrawSecret::InRedis(seed)) => Ok(seed),
        None => anyhow::bail!("the draw of {sale} has no seed"),
    }
}
