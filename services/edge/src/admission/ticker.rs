//! The admission passes: every `admission.tick_ms`, each edge runs one pass
//! of every sale's waiting room (`lua/queue_admit.lua`, by the units left
//! in every bucket), and publishes the room's figures on `/metrics`. Two
//! edges passing at once admit no more than one would: Redis runs the
//! passes one after the other, each reading what the other wrote.
//!
//! A pass also settles tickets whose order never did — claimed, and still
//! claimed the publish deadline past their token's expiry (the edge that
//! held the order died, or the settling call was lost): used when the
//! buyer holds an order, else expired, so the place goes to the next.

use seckill_shared::domain::SaleKey;
use seckill_shared::stock::queue::RoomState;
use seckill_shared::stock::Stock;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs the passes until `shutdown`; a claim is stale `grace` (the
/// publish deadline) past its token's expiry.
pub async fn admit_every(
    stock: Stock,
    tick: Duration,
    grace: Duration,
    shutdown: CancellationToken,
) -> Result<(), seckill_shared::stock::conn::RedisCallError> {
    let tolerance = tick.as_millis() as i64;
    seckill_shared::ops::shutdown::every("admission passes", tick, shutdown, || async {
        for sale in stock.waiting_room().rooms().await? {
            if let Err(error) = pass(&stock, sale, tolerance, grace).await {
                // One room that fails stops no other.
                tracing::warn!(%sale, %error, "an admission pass failed");
            }
        }
        Ok(())
    })
    .await
}

/// The passes one turn makes at most on a closed draw's end, after its own.
const FINAL_PASSES_A_TURN: usize = 20;

async fn pass(stock: &Stock, sale: SaleKey, tolerance_ms: i64, grace: Duration) -> anyhow::Result<()> {
    let Some(before) = stock.waiting_room().room(sale).await? else {
        stock.waiting_room().room_off(sale).await?;
        return Ok(());
    };
    // A draw's room is passed once more after its close: that pass records
    // its end (queue_admit.lua).
    if !before.closed || (before.draw && !before.finalized) {
        let admitted = stock.waiting_room().admit_pass(sale, tolerance_ms, grace).await?;
        metrics::counter!("seckill_queue_admitted_total", "sale" => sale.to_string()).increment(admitted.now as u64);
        for (ticket, user) in &admitted.stale {
            let used = stock.waiting_room().settle_stale_claim(sale, ticket, *user, before.round).await?;
            let outcome = if used { "used" } else { "expired" };
            tracing::warn!(%sale, %user, outcome, "an admission claimed by an order that never settled it, settled");
            metrics::counter!("seckill_queue_stale_claims_total", "sale" => sale.to_string(), "outcome" => outcome)
                .increment(1);
        }
    }
    // A closed draw's end is told 1,000 entries a pass (each pass a short
    // script): up to 20 more passes now, back to back, so a million
    // entries hear it within a minute.
    let mut room = stock.waiting_room().room(sale).await?;
    for _ in 0..FINAL_PASSES_A_TURN {
        match &room {
            Some(r) if r.closed && r.draw && !r.finalized => {
                stock.waiting_room().admit_pass(sale, tolerance_ms, grace).await?
            }
            _ => break,
        };
        room = stock.waiting_room().room(sale).await?;
    }
    if let Some(room) = room {
        gauges(sale, &room);
    }
    if before.draw {
        if let Some(draw) = stock.draws().draw_state(sale).await? {
            draw_gauges(sale, &draw);
        }
    }
    Ok(())
}

/// A draw's figures, per sale.
fn draw_gauges(sale: SaleKey, draw: &seckill_shared::draw::DrawState) {
    let label = sale.to_string();
    for (name, value) in [
        ("seckill_draw_entries", draw.entries),
        ("seckill_draw_winners", draw.winners),
        ("seckill_draw_claimed", draw.claimed),
        ("seckill_draw_promoted", draw.promoted),
        ("seckill_draw_expired", draw.expired),
        ("seckill_draw_lost", draw.lost),
        ("seckill_draw_waitlisted", draw.waitlisted),
        ("seckill_draw_events_unpublished", draw.events_unpublished),
    ] {
        metrics::gauge!(name, "sale" => label.clone()).set(value as f64);
    }
}

/// The room's figures, per sale.
fn gauges(sale: SaleKey, room: &RoomState) {
    let label = sale.to_string();
    for (name, value) in [
        ("seckill_queue_waiting", room.waiting),
        ("seckill_queue_active", room.active),
        ("seckill_queue_admitted_last_minute", room.admitted_last_minute),
        ("seckill_queue_expired", room.expired),
        ("seckill_queue_abandoned", room.abandoned),
        ("seckill_queue_sold_out", i64::from(room.sold_out)),
    ] {
        metrics::gauge!(name, "sale" => label.clone()).set(value as f64);
    }
    let wait = room.wait_seconds(room.waiting.max(0) as u64).map_or(-1.0, |w| w as f64);
    metrics::gauge!("seckill_queue_wait_seconds", "sale" => label).set(wait);
}
