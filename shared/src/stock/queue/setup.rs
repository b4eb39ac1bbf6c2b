//! A round's waiting room opened, closed or taken away
//! (`lua/queue_setup.lua`).

use super::super::snapshot::sale_of_member;
use super::super::with_keys;
use crate::domain::SaleKey;
use crate::stock::conn::RedisCallError;
use redis::AsyncCommands;
use redis::Script;
use std::sync::LazyLock;

static QUEUE_SETUP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../../lua/queue_setup.lua")));

/// A waiting ticket not polled for this long is abandoned: it takes no
/// place and no share of the rate until its holder comes back.
pub const ABANDON_MS: i64 = 60_000;

/// A draw's "abandon time": about a century.
const NEVER_ABANDONED_MS: i64 = 3_153_600_000_000;

/// How a round's waiting room admits (the warm-up's `admission`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoomSettings {
    pub active_buyers: i64,
    /// 0: unlimited.
    pub admit_per_minute: i64,
    pub prequeue_ms: i64,
    pub token_ttl_ms: i64,
    pub overbook: f64,
    /// Proof-of-work bits a join must show (0: none).
    pub challenge_bits: u32,
    /// A draw's room (`crate::draw::Draw`): its joins are entries, nobody
    /// is admitted before the draw, no entry is abandoned, and every
    /// outcome is an event.
    pub draw: bool,
    /// A draw's most entries (0: no bound).
    pub max_entries: i64,
}

/// The round a room opens for.
#[derive(Debug, Clone, Copy)]
pub struct RoomRound {
    pub round: i64,
    /// Window start and end (ms, 0: none).
    pub starts_ms: i64,
    pub ends_ms: i64,
    /// When every key of the room expires (ms, 0: never).
    pub expire_at_ms: i64,
    /// The sale's payment window (ms): a draw with no end tells its
    /// waitlist LOST once it sold out this long (and the publish deadline)
    /// ago with no right live (`lua/queue_admit.lua`).
    pub payment_window_ms: i64,
}

impl crate::stock::WaitingRoom<'_> {
    /// Opens `sale`'s waiting room for `round` with a fresh shuffle seed
    /// — a draw's room with `draw_commitment`, the commitment to a seed
    /// kept out of Redis until the draw ([`crate::draw::seed`]) —
    /// (`false`: it is open for that round already, and left as it is),
    /// and registers it for the edges' admission passes.
    pub async fn open_room(
        self,
        sale: SaleKey,
        round: RoomRound,
        room: &RoomSettings,
        draw_commitment: Option<&str>,
    ) -> Result<bool, RedisCallError> {
        let k = self.keys.queue(sale);
        let mut invocation = with_keys(&QUEUE_SETUP, &k.all());
        invocation
            .arg("open")
            .arg(round.round)
            .arg(room.active_buyers)
            .arg(room.admit_per_minute)
            .arg(room.prequeue_ms)
            .arg(room.token_ttl_ms)
            .arg(room.overbook)
            .arg(room.challenge_bits)
            .arg(round.starts_ms)
            .arg(round.ends_ms)
            .arg(draw_commitment.map_or_else(|| format!("{:032x}", rand::random::<u128>()), str::to_owned))
            .arg(round.expire_at_ms)
            // A draw's entries wait hours, unpolled: never abandoned.
            .arg(if room.draw { NEVER_ABANDONED_MS } else { ABANDON_MS })
            .arg(u8::from(room.draw))
            .arg(room.max_entries)
            .arg(round.payment_window_ms);
        let opened: i64 = self.conn.invoke(&invocation).await?;
        let mut register = redis::pipe();
        register.sadd(self.keys.rooms(), sale.to_string()).ignore();
        self.conn.pipe::<()>(&register).await?;
        Ok(opened == crate::stock::protocol::queue_setup::OPENED)
    }

    /// Takes `sale`'s waiting room away (a round warmed without one).
    pub async fn room_off(self, sale: SaleKey) -> Result<(), RedisCallError> {
        let k = self.keys.queue(sale);
        let mut invocation = with_keys(&QUEUE_SETUP, &k.all());
        invocation.arg("off");
        let _: i64 = self.conn.invoke(&invocation).await?;
        let mut unregister = redis::pipe();
        unregister.srem(self.keys.rooms(), sale.to_string()).ignore();
        self.conn.pipe::<()>(&unregister).await?;
        Ok(())
    }

    /// Closes `sale`'s waiting room (the sale closed): nobody is admitted
    /// any more, every ticket reads CLOSED, and its keys expire at
    /// `expire_at_ms`.
    pub async fn close_room(self, sale: SaleKey, expire_at_ms: i64) -> Result<(), RedisCallError> {
        let k = self.keys.queue(sale);
        let mut invocation = with_keys(&QUEUE_SETUP, &k.all());
        invocation.arg("close").arg(expire_at_ms);
        let _: i64 = self.conn.invoke(&invocation).await?;
        Ok(())
    }

    /// The sales whose rooms were opened and not taken away.
    pub async fn rooms(self) -> Result<Vec<SaleKey>, RedisCallError> {
        let mut conn = self.conn.clone();
        let members: Vec<String> = self.conn.bounded(conn.smembers(self.keys.rooms())).await?;
        Ok(members.iter().filter_map(|m| sale_of_member(m)).collect())
    }
}
