//! A draw's figures and proof as Redis holds them: what the buyers' read
//! of a draw, the console's card and `seckillctl draw stats` show, and
//! what the draws' maker and publisher look at.

use crate::domain::SaleKey;
use crate::stock::conn::RedisCallError;
use std::collections::HashMap;

/// A draw's figures and proof as Redis holds them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrawState {
    pub round: i64,
    pub entries_open_ms: i64,
    pub draw_ms: i64,
    pub claim_ms: i64,
    /// SHA-256 of the seed's text: shown from the warm-up on.
    pub seed_commitment: String,
    /// The seed: empty until the draw.
    pub seed: String,
    /// SHA-256 of the entry list as published: empty until the draw.
    pub entries_digest: String,
    pub drawn: bool,
    pub drawn_at_ms: i64,
    pub entries: i64,
    pub winners: i64,
    /// Rights used by an order, promoted from the waitlist, lapsed, lost.
    pub claimed: i64,
    pub promoted: i64,
    pub expired: i64,
    pub lost: i64,
    /// Waitlisted now.
    pub waitlisted: i64,
    pub closed: bool,
    /// Outcomes recorded, and those not yet published on the topic.
    pub events: i64,
    pub events_unpublished: i64,
    /// The last outcome published (a stream id): the publisher's cursor.
    #[serde(skip)]
    pub published_through: String,
    /// The proof of work an entry must bring (leading zero bits; 0: none).
    #[serde(skip)]
    pub challenge_bits: u32,
}

impl crate::stock::Draws<'_> {
    /// `sale`'s draw (`None`: the sale has none). The seed is shown once
    /// drawn, never before.
    pub async fn draw_state(self, sale: SaleKey) -> Result<Option<DrawState>, RedisCallError> {
        let k = self.keys.queue(sale);
        let [meta, line, ..] = k.all();
        let mut pipe = redis::pipe();
        pipe.hgetall(meta).zcard(line).cmd("XLEN").arg(k.all()[8]);
        let (fields, waitlisted, events): (HashMap<String, String>, i64, i64) =
            self.conn.pipe(&pipe).await?.unwrap_or_default();
        if fields.get("draw").map(String::as_str) != Some("1") {
            return Ok(None);
        }
        let int = |name: &str| fields.get(name).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) as i64;
        let text = |name: &str| fields.get(name).cloned().unwrap_or_default();
        let drawn = int("drawn") == 1;
        let seed = text("seed");
        let seed_commitment = crate::stock::queue::commitment_of(&fields);
        Ok(Some(DrawState {
            round: int("round"),
            entries_open_ms: int("starts") - int("prequeue"),
            draw_ms: int("starts"),
            claim_ms: int("ttl"),
            seed_commitment,
            seed: if drawn { seed } else { String::new() },
            entries_digest: text("digest"),
            drawn,
            drawn_at_ms: int("drawn_at"),
            entries: int("joined"),
            winners: int("winners"),
            claimed: int("used"),
            promoted: int("promoted"),
            expired: int("expired"),
            lost: int("lost"),
            waitlisted: if drawn { waitlisted } else { 0 },
            closed: int("closed") == 1,
            events,
            events_unpublished: events - int("published_count"),
            published_through: fields.get("published").cloned().unwrap_or_else(|| "0-0".into()),
            challenge_bits: int("bits") as u32,
        }))
    }
}
