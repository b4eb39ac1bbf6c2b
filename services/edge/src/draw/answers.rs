//! A draw's bodies: an entry, what an entry reads, and the draw as anyone
//! may read it.

use chrono::{DateTime, Utc};
use seckill_shared::draw::EntryStatus;
use serde::Serialize;
use utoipa::ToSchema;

/// An entry, as its holder reads it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = DrawEntry)]
pub struct EntryBody {
    /// The entry's id (`GET /api/seckill/draw/entries/{entry}`).
    pub entry: String,
    #[schema(example = "ENTERED")]
    pub status: EntryStatus,
    /// `WON` with its right unused, to a caller identified as its user (a
    /// user token, or `auth.allow_anonymous`): the admission token; the order carries
    /// it in the `Seckill-Admission` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub admission: Option<String>,
    /// `WON`: order before this; `EXPIRED`: the deadline that passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub admission_expires_at: Option<DateTime<Utc>>,
    /// `WON`: its order was placed (the token is spent).
    pub ordered: bool,
    /// `WAITLISTED`: the place on the list, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub place: Option<u64>,
    /// When the draw is (or was) made.
    pub draw_at: DateTime<Utc>,
    /// SHA-256 (hex) of the draw's seed, fixed before entries opened.
    pub seed_commitment: String,
}

/// A sale's draw, as anyone may read it: when, the commitment, and once
/// drawn the seed and the entry list's digest that let anyone check it
/// (`seckillctl draw verify`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PublishedDraw)]
pub struct DrawBody {
    pub activity_id: i64,
    pub sku_id: i64,
    pub round: i64,
    /// `OPEN` (taking entries), `NOT_OPEN`, `DRAWING` (entries closed, the
    /// draw being made), `DRAWN`, `CLOSED` (the sale is over).
    #[schema(example = "OPEN")]
    pub state: &'static str,
    pub entries_open_at: DateTime<Utc>,
    pub draw_at: DateTime<Utc>,
    pub claim_seconds: i64,
    /// SHA-256 (hex) of the seed's text, published from the warm-up on.
    pub seed_commitment: String,
    /// The seed, once drawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub seed: Option<String>,
    /// SHA-256 (hex) of the entry list as `seckillctl draw export` writes
    /// it, once drawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub entries_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub drawn_at: Option<DateTime<Utc>>,
    pub entries: i64,
    /// Entries that won at the draw (the orders the units could serve).
    pub winners: i64,
    /// Rights used by an order, entries promoted from the waitlist, rights
    /// that lapsed, entries lost, entries waitlisted now.
    pub claimed: i64,
    pub promoted: i64,
    pub expired: i64,
    pub lost: i64,
    pub waitlisted: i64,
}
