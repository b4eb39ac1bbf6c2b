//! The outbox table (`order_events`), as it was before events moved to the
//! WAL: rows written before migration 09, or by a transaction that was
//! running while it ran, are sent first — in `(xid, id)` order, only rows
//! no running transaction can still precede, the cursor
//! (`order_events_relayed`) moved past them once delivered — until none is
//! left. Then the outbox is drained for good and the relay reads the WAL.
//! Relayed rows are pruned after the retention, their counts kept per sale
//! round.

use super::delivery::{self, Outgoing};
use super::{Relay, RelayError};
use seckill_shared::lease::LeaseTerm;
use seckill_shared::outbox;
use seckill_shared::parked::EventSource;

impl Relay {
    /// One turn over the outbox: sends the next rows after the cursor,
    /// waits for every delivery, moves the cursor past them under `term` (a
    /// row that is no event is parked and passed with them). Returns how
    /// many rows it dealt with.
    pub(super) async fn relay_outbox_once(&self, term: &LeaseTerm) -> Result<usize, RelayError> {
        let rows = outbox::next_after_cursor(&self.deps.db, self.settings.events.batch).await?;
        let Some(last) = rows.last() else { return Ok(0) };
        let topic = &self.deps.topics.events;
        let mut outgoing: Vec<Outgoing> = Vec::with_capacity(rows.len());
        for row in &rows {
            match Outgoing::new(&row.event, EventSource::outbox(row.id)) {
                Ok(event) => outgoing.push(event),
                // One bad row must not stop every event behind it: it is
                // parked for an operator and passed with the rest.
                Err(error) => {
                    seckill_shared::parked::park_bad_event(
                        &self.deps.db,
                        topic,
                        EventSource::outbox(row.id),
                        &row.event,
                        &error,
                    )
                    .await?
                }
            }
        }
        delivery::deliver(&self.producer, &self.deps.db, topic, self.delivery_timeout(), &outgoing).await?;
        // Only now: a relay killed before this line sends them again. The
        // position itself, not a lookup of the last row: that row may be
        // gone by now (deleted by hand), and the cursor must move anyway.
        let mut tx = self.deps.db.begin().await?;
        term.check(&mut tx).await?;
        outbox::move_cursor(&mut tx, last.xid, last.id).await?;
        tx.commit().await?;
        metrics::counter!("seckill_events_relayed_total").increment(outgoing.len() as u64);
        Ok(rows.len())
    }

    /// Whether the outbox is drained for good: nothing after the cursor.
    /// Migration 09 took the tables whose triggers wrote outbox rows only
    /// once every transaction writing them had ended, and held them until
    /// its new triggers were in place: no row can be added behind one the
    /// relay sees. Marks it so under `term` the first time it holds.
    pub(super) async fn outbox_drained(&self, term: &LeaseTerm) -> Result<bool, RelayError> {
        let mut tx = self.deps.db.begin().await?;
        term.check(&mut tx).await?;
        let drained = sqlx::query_scalar!(
            r#"UPDATE order_events_stream SET outbox_drained = true
                WHERE NOT outbox_drained
                  AND NOT EXISTS (SELECT 1 FROM order_events
                                   WHERE (xid, id) > (SELECT xid, id FROM order_events_relayed))
            RETURNING true AS "drained!""#
        )
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
        tx.commit().await?;
        if drained {
            tracing::info!("the outbox is drained for good: order events are read from the WAL from now on");
        }
        Ok(drained)
    }

    /// Deletes relayed outbox rows that happened more than the retention
    /// ago, keeping their counts per sale round and type.
    pub async fn prune(&self, term: &LeaseTerm) -> Result<u64, RelayError> {
        let retention_secs = self.settings.events.retention_ms as f64 / 1000.0;
        let mut tx = self.deps.db.begin().await?;
        term.check(&mut tx).await?;
        let pruned = sqlx::query_scalar!(
            "WITH gone AS (
                DELETE FROM order_events
                 WHERE occurred_at < now() - make_interval(secs => $1)
                   AND (xid, id) <= (SELECT xid, id FROM order_events_relayed)
             RETURNING activity_id, sku_id, round, type
             ), counted AS (
                INSERT INTO order_events_pruned (activity_id, sku_id, round, type, count)
                SELECT activity_id, sku_id, round, type, count(*) FROM gone GROUP BY 1, 2, 3, 4
                ON CONFLICT (activity_id, sku_id, round, type)
                  DO UPDATE SET count = order_events_pruned.count + EXCLUDED.count
                RETURNING count
             )
             SELECT count(*) FROM gone",
            retention_secs
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(pruned.unwrap_or(0) as u64)
    }
}
