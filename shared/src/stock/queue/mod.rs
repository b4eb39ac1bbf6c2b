//! A sale's waiting room in Redis: the line, the tickets and the admissions
//! (`lua/queue_*.lua`, all in the sale's own slot, so it works on a Redis
//! Cluster and beside the sale's buckets). Every edge serves the same room
//! and runs its admission passes; an edge restart loses nothing.
//!
//! [`setup`] opens a round's room (at warm-up), closes it or takes it away;
//! [`ticket`] joins and reads tickets; [`admit`] is one admission pass;
//! [`claim`] uses an admission token for one order, once; a draw's entries
//! and the draw, on the same keys, are [`crate::draw`]'s. [`RoomState`] is
//! the room as the edge's gate, the dashboard and `seckillctl queue stats`
//! read it.

mod admit;
mod claim;
mod setup;
mod ticket;

pub use admit::{Admitted, PassReads, MOST_PER_PASS};
pub use claim::Claim;
pub use setup::RoomSettings;
pub use setup::{RoomRound, ABANDON_MS};
pub use ticket::{TicketAnswer, TicketStatus, TicketView};

use super::conn::RedisCallError;
use crate::domain::SaleKey;
use std::collections::HashMap;

/// A new ticket id for `sale`: `A-S-` and 128 random bits, so a ticket
/// names its sale.
pub fn new_ticket(sale: SaleKey) -> String {
    format!("{}-{}-{:032x}", sale.activity, sale.sku, rand::random::<u128>())
}

/// The sale a ticket id names (`None`: not a ticket id).
pub fn ticket_sale(ticket: &str) -> Option<SaleKey> {
    let mut parts = ticket.splitn(3, '-');
    let (activity, sku, random) = (parts.next()?, parts.next()?, parts.next()?);
    let hex = random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    if !hex {
        return None;
    }
    SaleKey::from_raw(activity.parse().ok()?, sku.parse().ok()?).ok()
}

/// A sale's waiting room: its settings and where it stands.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoomState {
    pub round: i64,
    pub active_buyers: i64,
    /// 0: unlimited.
    pub admit_per_minute: i64,
    pub prequeue_ms: i64,
    pub token_ttl_ms: i64,
    pub overbook: f64,
    /// Proof-of-work bits a join must show (0: none).
    pub challenge_bits: u32,
    pub starts_ms: i64,
    pub ends_ms: i64,
    /// The shuffle's seed (hex): secret (empty) until the start.
    pub seed: String,
    /// SHA-256 of the seed's text (hex), shown from the warm-up on: the
    /// seed that orders the pre-queue was fixed before anyone joined, and
    /// the one revealed at the start is that one ([`seed_commitment`]).
    pub seed_commitment: String,
    pub abandon_ms: i64,
    /// Tickets taken, admissions, tokens used, expired, tickets abandoned.
    pub joined: i64,
    pub admitted: i64,
    pub used: i64,
    pub expired: i64,
    pub abandoned: i64,
    pub sold_out: bool,
    /// When the last pass marked it sold out (ms, 0: never).
    pub sold_out_at_ms: i64,
    pub closed: bool,
    /// A draw's room (`queue_draw.lua`), and whether its end was recorded
    /// (every waiting entry lost, every unused right expired).
    pub draw: bool,
    pub drawn: bool,
    pub finalized: bool,
    /// Tickets in line now; admitted and unused now; admitted in the last
    /// minute.
    pub waiting: i64,
    pub active: i64,
    pub admitted_last_minute: i64,
}

impl RoomState {
    /// The room as it may be shown at `now_ms`: the seed orders the
    /// pre-queue, so it is secret (empty) until the start; its commitment
    /// is shown all along.
    pub fn shown_at(mut self, now_ms: i64) -> Self {
        // A draw's seed ranks its entries: shown once they are frozen and
        // drawn, whatever this clock says.
        if self.starts_ms > now_ms || (self.draw && !self.drawn) {
            self.seed.clear();
        }
        self
    }

    /// The estimated wait of the ticket at `place` (seconds): by the
    /// admissions of the last minute, or the configured rate before any;
    /// `None` when neither says (an unlimited room that admitted nobody yet),
    /// or when nobody waits for a place (sold out, closed).
    pub fn wait_seconds(&self, place: u64) -> Option<u64> {
        if self.sold_out || self.closed {
            return None;
        }
        wait_seconds(place, self.admitted_last_minute, self.admit_per_minute)
    }
}

/// The commitment to a room's shuffle seed: SHA-256 of its text, in hex
/// (`printf %s SEED | sha256sum`).
pub fn seed_commitment(seed: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(seed.as_bytes()))
}

/// The commitment a room's fields hold: a draw's own (its seed is not in
/// Redis before the draw), else the one of the seed they hold.
pub(crate) fn commitment_of(fields: &HashMap<String, String>) -> String {
    match fields.get("commitment").filter(|c| !c.is_empty()) {
        Some(commitment) => commitment.clone(),
        None => fields.get("seed").filter(|s| !s.is_empty()).map(|seed| seed_commitment(seed)).unwrap_or_default(),
    }
}

/// The wait of the ticket at `place` at `recent` admissions a minute (or
/// `per_minute` configured, while `recent` is 0).
pub fn wait_seconds(place: u64, recent: i64, per_minute: i64) -> Option<u64> {
    let rate = if recent > 0 { recent } else { per_minute };
    (rate > 0).then(|| (place as f64 * 60.0 / rate as f64).ceil() as u64)
}

impl crate::stock::WaitingRoom<'_> {
    /// `sale`'s waiting room (`None`: the sale has none).
    pub async fn room(self, sale: SaleKey) -> Result<Option<RoomState>, RedisCallError> {
        let k = self.keys.queue(sale);
        let [meta, line, _, _, active, _, log, _, _] = k.all();
        let mut pipe = redis::pipe();
        pipe.hgetall(meta).zcard(line).zcard(active).zcount(log, (crate::now_ms() - 60_000) * 1000, "+inf");
        let (fields, waiting, active, recent): (HashMap<String, String>, i64, i64, i64) =
            self.conn.pipe(&pipe).await?.unwrap_or_default();
        if fields.is_empty() {
            return Ok(None);
        }
        let int = |name: &str| fields.get(name).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) as i64;
        Ok(Some(RoomState {
            round: int("round"),
            active_buyers: int("active_buyers"),
            admit_per_minute: int("per_minute"),
            prequeue_ms: int("prequeue"),
            token_ttl_ms: int("ttl"),
            overbook: fields.get("overbook").and_then(|v| v.parse().ok()).unwrap_or(1.0),
            challenge_bits: int("bits") as u32,
            starts_ms: int("starts"),
            ends_ms: int("ends"),
            seed: fields.get("seed").cloned().unwrap_or_default(),
            seed_commitment: commitment_of(&fields),
            abandon_ms: int("abandon"),
            joined: int("joined"),
            admitted: int("admitted"),
            used: int("used"),
            expired: int("expired"),
            abandoned: int("abandoned"),
            sold_out: int("sold_out") == 1,
            sold_out_at_ms: int("sold_out_at"),
            closed: int("closed") == 1,
            draw: int("draw") == 1,
            drawn: int("drawn") == 1,
            finalized: int("final") == 1,
            waiting,
            active,
            admitted_last_minute: recent,
        }))
    }

    /// Every admission of `sale`'s room so far, in order: (ticket, when in
    /// ms, to the microsecond's order).
    pub async fn admissions(self, sale: SaleKey) -> Result<Vec<(String, f64)>, RedisCallError> {
        let log = self.keys.queue(sale).all()[6].clone();
        let mut conn = self.conn.clone();
        let entries: Vec<(String, f64)> = self
            .conn
            .bounded(redis::cmd("ZRANGE").arg(&log).arg(0).arg(-1).arg("WITHSCORES").query_async(&mut conn))
            .await?;
        Ok(entries
            .into_iter()
            .map(|(member, at)| (member.rsplit_once(':').map_or(member.clone(), |(t, _)| t.to_owned()), at / 1000.0))
            .collect())
    }
}

/// A ticket as the room keeps it: (ticket, user, state (`None`: a letter
/// the protocol does not name), admitted at, ended at (ms; 0: not yet)).
pub type Ticket = (String, i64, Option<crate::stock::protocol::TicketState>, i64, i64);

impl crate::stock::WaitingRoom<'_> {
    /// Every ticket of `sale`'s room as the room keeps it: (ticket, user,
    /// state, admitted at, ended at (ms; 0: not yet)) — for the checks that
    /// read an admission's whole life.
    pub async fn tickets(self, sale: SaleKey) -> Result<Vec<Ticket>, RedisCallError> {
        let tickets = self.keys.queue(sale).all()[2].clone();
        let mut conn = self.conn.clone();
        let all: HashMap<String, String> = self.conn.bounded(redis::AsyncCommands::hgetall(&mut conn, tickets)).await?;
        Ok(all
            .into_iter()
            .map(|(ticket, value)| {
                let v = crate::stock::TicketValue::parse(&value).unwrap_or_default();
                (ticket, v.user, v.state, v.admitted_ms, v.ended_ms)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_names_its_sale() {
        let sale = SaleKey::from_raw(7, 9).unwrap();
        let ticket = new_ticket(sale);
        assert_eq!(ticket_sale(&ticket), Some(sale));
        for bad in ["7-9-xyz", "7-9", "0-9-00000000000000000000000000000000", "7-9-0000000000000000000000000000000G"] {
            assert_eq!(ticket_sale(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_wait_is_told_by_the_rate_seen_or_the_rate_set() {
        assert_eq!(wait_seconds(10, 60, 0), Some(10));
        assert_eq!(wait_seconds(10, 0, 120), Some(5));
        assert_eq!(wait_seconds(10, 0, 0), None);
    }

    #[test]
    fn the_commitment_is_sha256_of_the_seed_text_as_sha256sum_prints_it() {
        // FIPS 180-2's example: SHA-256("abc").
        assert_eq!(seed_commitment("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let room = RoomState {
            seed: "abc".into(),
            seed_commitment: seed_commitment("abc"),
            starts_ms: 10,
            ..Default::default()
        };
        let before = room.shown_at(5);
        assert_eq!(
            (before.seed.as_str(), before.seed_commitment.len()),
            ("", 64),
            "the seed hidden, its commitment not"
        );
    }
}
