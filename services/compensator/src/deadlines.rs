//! The payment deadline worker: cancels CREATED orders whose payment window
//! has passed and gives their units back to their sale round.
//!
//! Deadlines live in PostgreSQL, in the order rows themselves, behind a
//! partial index on `pay_deadline` over CREATED orders only: each poll reads
//! just what is due, earliest first, and never scans the table. Rows are
//! taken `FOR UPDATE SKIP LOCKED`, so every compensator instance can run the
//! worker at once (each takes what the others do not hold) and a payment
//! racing the cancel either wins the row or finds it cancelled. Kafka delay
//! topics were the other choice; they would put a second copy of each
//! deadline in a log, to be kept in step with the order row a payment or a
//! buyer's cancel changes — the row is the one place the fate is decided.
//!
//! Each poll cancels in PostgreSQL first, then gives back every unit of a
//! CANCELLED row not yet marked `unit_returned_at` — those it just cancelled,
//! those a buyer's cancel left when Redis did not answer, and those a kill
//! between the two steps left. Redis gives a unit back at most once per
//! order id: a missed deadline fires after a restart, never twice.

use crate::Settings;
use seckill_shared::db::within;
use seckill_shared::ops::host::Connections;
use seckill_shared::orders::cancellation::{self, Cancel};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs until `shutdown`.
pub async fn run(settings: Arc<Settings>, deps: Connections, shutdown: CancellationToken) -> anyhow::Result<()> {
    let poll = Duration::from_millis(settings.deadlines.poll_ms);
    loop {
        let deadline = settings.servers.database.call_deadline();
        let pause = match poll_once(&deps, settings.deadlines.batch, deadline).await {
            Ok(_) => poll,
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "payment deadlines: will try again");
                poll.max(Duration::from_secs(1))
            }
        };
        if !seckill_shared::ops::shutdown::pause(&shutdown, pause).await {
            return Ok(());
        }
    }
}

/// Cancels every due order, `batch` per transaction, each batch's units
/// given back by a task of its own while the next batch is cancelled (one
/// script call per sale and batch); then gives back any cancelled unit
/// Redis has still not taken (a failed return, a crash). Returns how many
/// orders it cancelled.
pub async fn poll_once(deps: &Connections, batch: i64, deadline: Duration) -> anyhow::Result<i64> {
    let mut cancelled = 0;
    let mut returns = tokio::task::JoinSet::new();
    loop {
        // Each transaction, and each return, within the call deadline: a
        // server that never answers fails the poll, which comes again.
        let now = within(deadline, async {
            let mut tx = deps.db.begin().await?;
            let now = cancellation::cancel(&mut tx, Cancel::Due { limit: batch }).await?;
            tx.commit().await?;
            Ok::<_, anyhow::Error>(now)
        })
        .await?;
        cancelled += now.len() as i64;
        let full = now.len() as i64 >= batch;
        if !now.is_empty() {
            let deps = deps.clone();
            returns
                .spawn(async move { within(deadline, cancellation::return_units(&deps.stock, &deps.db, &now)).await });
        }
        if !full {
            break;
        }
    }
    if cancelled > 0 {
        metrics::counter!("seckill_orders_expired_total").increment(cancelled as u64);
    }
    // Sales whose Redis failed are left for the next round; the others go on.
    let mut failing = Vec::new();
    while let Some(returned) = returns.join_next().await {
        match returned? {
            Ok(returned) => failing.extend(returned.failed),
            // The rows stay unmarked: the pass below, or the next poll, tries again.
            Err(error) => tracing::warn!(%error, "giving cancelled units back; will try again"),
        }
    }
    loop {
        let unreturned = within(deadline, cancellation::unreturned(&deps.db, batch, &failing)).await?;
        failing.extend(within(deadline, cancellation::return_units(&deps.stock, &deps.db, &unreturned)).await?.failed);
        if (unreturned.len() as i64) < batch {
            return Ok(cancelled);
        }
    }
}
