//! The books, for Prometheus: every `audit.interval_ms` this instance
//! reconciles each live sale and exports the verdict and its main terms as
//! gauges (`seckill_sale_consistent`, `seckill_sale_remaining`,
//! `seckill_sale_violations`, `seckill_sale_broken_promises`: orders
//! answered 202 that ended FAILED), with the records parked for an operator
//! (`seckill_parked_records`) and the dead letters' counts
//! (`seckill_dlq_records{reason}`, `…_by_sale{sale}`, replayed, redriven,
//! oldest and newest). The alert rules under `infra/observability/`
//! read them. A reconciliation taken while orders move can disagree for an
//! instant (a unit between PostgreSQL's commit and Redis's follow); the
//! rules wait for the disagreement to last.

use crate::Settings;
use seckill_shared::books;
use seckill_shared::db::within;
use seckill_shared::ops::host::Connections;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs until `shutdown`.
pub async fn run(settings: Arc<Settings>, deps: Connections, shutdown: CancellationToken) -> anyhow::Result<()> {
    let interval = Duration::from_millis(settings.audit.interval_ms);
    let deadline = settings.servers.database.call_deadline();
    seckill_shared::ops::shutdown::every("audit", interval, shutdown, || audit_once(&deps, deadline)).await
}

/// One audit: the gauges of every live sale, and the parked records.
pub async fn audit_once(deps: &Connections, deadline: Duration) -> anyhow::Result<()> {
    // Each read within the call deadline: a server that never answers
    // fails this audit; the next one comes at its time.
    for report in within(deadline, books::reconcile_live(&deps.stock, &deps.db)).await? {
        let sale = format!("{}:{}", report.activity_id, report.sku_id);
        metrics::gauge!("seckill_sale_consistent", "sale" => sale.clone()).set(if report.consistent {
            1.0
        } else {
            0.0
        });
        metrics::gauge!("seckill_sale_violations", "sale" => sale.clone()).set(report.violations.len() as f64);
        let broken: i64 = report.broken_promises.values().sum();
        metrics::gauge!("seckill_sale_broken_promises", "sale" => sale.clone()).set(broken as f64);
        metrics::gauge!("seckill_sale_remaining", "sale" => sale.clone(), "store" => "redis")
            .set(report.redis_remaining as f64);
        metrics::gauge!("seckill_sale_remaining", "sale" => sale, "store" => "postgresql")
            .set(report.db_remaining as f64);
    }
    let parked = within(deadline, seckill_shared::db::parked::count(&deps.db)).await?;
    metrics::gauge!("seckill_parked_records").set(parked as f64);
    let stats =
        within(deadline, seckill_shared::db::dead_letters::stats(&deps.db, &deps.topics.dlq, Default::default()))
            .await?;
    export_dead_letters(&stats);
    Ok(())
}

/// The dead-letter index's counts, as `seckillctl dlq stats` gives them
/// (by hour is Prometheus's own: `increase(seckill_dlq_records[1h])`).
fn export_dead_letters(stats: &seckill_shared::db::dead_letters::Stats) {
    for (reason, n) in &stats.by_reason {
        metrics::gauge!("seckill_dlq_records", "reason" => reason.clone()).set(*n as f64);
    }
    for (sale, n) in &stats.by_sale {
        metrics::gauge!("seckill_dlq_records_by_sale", "sale" => sale.clone()).set(*n as f64);
    }
    metrics::gauge!("seckill_dlq_replayed_records").set(stats.replayed as f64);
    metrics::gauge!("seckill_dlq_redriven_records").set(stats.redriven as f64);
    let seconds = |t: Option<chrono::DateTime<chrono::Utc>>| t.map_or(0.0, |t| t.timestamp_millis() as f64 / 1000.0);
    metrics::gauge!("seckill_dlq_oldest_timestamp_seconds").set(seconds(stats.oldest));
    metrics::gauge!("seckill_dlq_newest_timestamp_seconds").set(seconds(stats.newest));
}
