//! PostgreSQL's nodes killed under load (`make chaos-pg`, on
//! `infra/local/up.sh --postgres-ha`): the services as child processes on
//! the formation's multi-host URL, a node `kill -9`ed (its pg_autoctl,
//! supervisor and postmaster) while the order service drains a backlog or
//! while payments and cancels arrive, and every promise checked from the
//! side of whoever relies on it — each 202 an order CREATED, each 200 of a
//! payment or a cancel in the books, each change on the events topic as a
//! consumer reads it — with the time from the kill to the first write the
//! new primary took.

use super::{Kind, Pipeline};
use crate::http::Client;
use crate::{binary, eventually, pg_ha, TestEnv};
use seckill_shared::domain::SaleKey;
use sqlx::PgPool;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// What a scenario showed.
#[derive(Debug, Default)]
pub struct PgOutcome {
    pub name: &'static str,
    /// Orders answered 202.
    pub accepted: usize,
    /// Their rows, CREATED (or PAID, CANCELLED) in the database.
    pub rows: i64,
    /// Their CREATED events on the topic, as a consumer reads them.
    pub events: usize,
    /// Payments applied (in the ledger).
    pub payments: i64,
    /// 202s that ended FAILED, or with no row: broken promises.
    pub broken_202: i64,
    /// Payments and cancels answered 200 that the database does not hold.
    pub not_recorded_200: i64,
    /// From the fault to the first write a reader saw committed after it
    /// (through the pool that follows the primary).
    pub first_write: Option<Duration>,
    /// From the fault to the relay's first move of its cursor (events it
    /// sent were delivered).
    pub first_event: Option<Duration>,
    /// What else the scenario saw.
    pub notes: String,
}

/// The header of [`PgOutcome::row`].
pub const PG_TABLE_HEADER: &str = "| scenario | 202 answered | rows written | CREATED events on the topic | payments applied | broken promises (202 → FAILED or lost) | 200 not recorded | first write after the fault | first event relayed after the fault | notes |\n|---|---|---|---|---|---|---|---|---|---|";

impl PgOutcome {
    /// A Markdown table row.
    pub fn row(&self) -> String {
        let seconds = |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()));
        let (first, event) = (seconds(self.first_write), seconds(self.first_event));
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {first} | {event} | {} |",
            self.name,
            self.accepted,
            self.rows,
            self.events,
            self.payments,
            self.broken_202,
            self.not_recorded_200,
            self.notes
        )
    }
}

/// A sale on the formation, its services running.
pub struct HaSale {
    pub test: TestEnv,
    pub sale: SaleKey,
    pub pipeline: Pipeline,
}

impl HaSale {
    /// A whole formation, a database on it, a sale of `stock` units (a
    /// payment window of `window` s) and the services.
    pub async fn start(stock: i64, window: i64) -> Self {
        Self::start_via(stock, window, None).await
    }

    /// [`HaSale::start`], the services reaching the nodes through
    /// `proxies` when given (the test's own pool goes straight to them).
    pub async fn start_via(stock: i64, window: i64, proxies: Option<&super::pg_faults::NodeProxies>) -> Self {
        pg_ha::ensure_whole().await;
        let test = TestEnv::on_postgres_ha().await;
        let sale = test.sale();
        test.warmup_with_window(sale, stock, window).await;
        // Batches of 50: a backlog drains in many transactions, so a kill
        // lands between some of them. The edge takes the provider's
        // notifications and acts for users by id (the tests' own setting).
        let mut extra = vec![
            (Kind::Order, "SECKILL__BATCH_SIZE", "50"),
            (Kind::Edge, "SECKILL_PAYMENT_WEBHOOK_SECRET", crate::http::WEBHOOK_SECRET),
            (Kind::Edge, "SECKILL__AUTH__ALLOW_ANONYMOUS", "true"),
        ];
        let proxied = proxies.map(|p| p.url(&test.database_name)).unwrap_or_default();
        if proxies.is_some() {
            for kind in [Kind::Edge, Kind::Order, Kind::Compensator] {
                extra.push((kind, "SECKILL_DATABASE_URL", proxied.as_str()));
            }
        }
        let pipeline = Pipeline::start_with(&test, &extra);
        pipeline.wait_ready().await;
        Self { test, sale, pipeline }
    }

    /// `users` buyers order once each through the edge; the ids answered 202.
    pub async fn buy(&self, users: u64, from: u64) -> Vec<String> {
        let file = binary("seckillctl").parent().expect("dir").join(format!("pg-accepted-{}-{from}.txt", self.test.id));
        let (a, s, n) = (self.sale.activity.to_string(), self.sale.sku.to_string(), users.to_string());
        let out = self
            .test
            .ctl(&[
                "bench",
                "--url",
                &self.pipeline.url,
                "--activity",
                &a,
                "--sku",
                &s,
                "--users",
                &n,
                "--requests",
                &n,
                "--user-offset",
                &from.to_string(),
                "--concurrency",
                "32",
                "--accepted-out",
                file.to_str().expect("utf-8"),
                "--json",
            ])
            .await;
        assert_eq!(out.code, 0, "the load: {}{}", out.stdout, out.stderr);
        let ids = std::fs::read_to_string(&file).unwrap_or_default().lines().map(str::to_owned).collect();
        let _ = std::fs::remove_file(&file);
        ids
    }

    /// Rows of the sale's orders in `statuses`.
    pub async fn rows(&self, statuses: &[&str]) -> i64 {
        let statuses: Vec<String> = statuses.iter().map(|s| s.to_string()).collect();
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE activity_id = $1 AND sku_id = $2 AND status = ANY($3)")
            .bind(self.sale.activity.get())
            .bind(self.sale.sku.get())
            .bind(&statuses)
            .fetch_one(&self.test.db)
            .await
            .unwrap_or(-1)
    }

    /// Waits (bounded) until `n` of the sale's orders are in `statuses`.
    pub async fn wait_rows(&self, statuses: &[&str], n: i64) {
        eventually(&format!("{n} orders {statuses:?}"), Duration::from_secs(180), || async {
            let found = self.rows(statuses).await;
            if found >= n {
                Ok(())
            } else {
                Err(found.to_string())
            }
        })
        .await;
    }

    /// Waits until the order service has written a row beyond `after`:
    /// a kill then lands while it drains.
    pub async fn first_rows(&self, after: i64) {
        let give_up = Instant::now() + Duration::from_secs(120);
        while self.rows(&["CREATED"]).await <= after {
            assert!(Instant::now() < give_up, "the order service wrote nothing in 120 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// 202s whose order ended FAILED or has no row.
    pub async fn broken(&self, accepted: &[String]) -> i64 {
        let kept: i64 =
            sqlx::query_scalar("SELECT count(*) FROM orders WHERE order_id = ANY($1) AND status <> 'FAILED'")
                .bind(accepted)
                .fetch_one(&self.test.db)
                .await
                .expect("counting the promised orders");
        accepted.len() as i64 - kept
    }

    /// Waits until the test's pool reaches the writable primary again.
    pub async fn wait_writable(&self) {
        eventually("the pool on the primary", Duration::from_secs(120), || async {
            sqlx::query("SELECT 1").execute(&self.test.db).await.map(|_| ()).map_err(|e| e.to_string())
        })
        .await;
    }

    /// The sale's distinct orders with a CREATED event on the topic, as a
    /// consumer reads it (waiting, bounded, for `expected`: a relay that
    /// sent some twice after a failover sends duplicates, not more orders).
    pub async fn created_events(&self, expected: usize) -> usize {
        let give_up = Instant::now() + Duration::from_secs(120);
        loop {
            let messages = self.test.read_topic(&self.test.topics().events, expected * 4, Duration::from_secs(5)).await;
            let orders: std::collections::BTreeSet<String> = messages
                .iter()
                .filter_map(|m| serde_json::from_slice::<serde_json::Value>(rdkafka::Message::payload(m)?).ok())
                .filter(|e| e["type"] == "CREATED" && e["activityId"] == self.sale.activity.get())
                .filter_map(|e| e["orderId"].as_str().map(str::to_owned))
                .collect();
            if orders.len() >= expected || Instant::now() >= give_up {
                return orders.len();
            }
        }
    }

    /// The books, downstream and the services, checked and stopped; the
    /// database dropped.
    pub async fn finish(self) {
        self.test.verify_events(self.sale).await;
        let report = seckill_shared::books::reconcile(&self.test.stock, &self.test.db, None, self.sale, true)
            .await
            .expect("the books");
        assert!(report.consistent && report.broken_promises.is_empty(), "{:?}", report.violations);
        self.pipeline.stop().await;
        self.test.drop_ha_database().await;
    }
}

/// How long after a kill a reader first saw a write committed after it:
/// `sql` (one count) read through `db` — the pool that follows the primary
/// — every 50 ms until it exceeds `baseline` (read just before the kill;
/// what a read in the first 200 ms after the kill sees replaces it: commits
/// that were already on their way when the kill came).
pub(super) fn first_write_seen(
    db: PgPool,
    sql: String,
    mut baseline: i64,
    since: Instant,
) -> JoinHandle<Option<Duration>> {
    tokio::spawn(async move {
        while since.elapsed() < Duration::from_secs(180) {
            let read = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.clone())).fetch_one(&db);
            if let Ok(Ok(count)) = tokio::time::timeout(Duration::from_secs(1), read).await {
                if since.elapsed() < Duration::from_millis(200) {
                    baseline = baseline.max(count);
                } else if count > baseline {
                    return Some(since.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    })
}

impl HaSale {
    /// What every scenario reports of the orders answered 202 (`accepted`):
    /// the CREATED rows, the CREATED events a consumer reads, the promises
    /// broken.
    pub(super) async fn books(&self, name: &'static str, accepted: &[String]) -> PgOutcome {
        PgOutcome {
            name,
            accepted: accepted.len(),
            rows: self.rows(&["CREATED"]).await,
            events: self.created_events(accepted.len()).await,
            broken_202: self.broken(accepted).await,
            ..PgOutcome::default()
        }
    }

    /// The sale's orders CREATED, as [`first_write_seen`] counts them.
    pub(super) fn created_sql(&self) -> String {
        format!(
            "SELECT count(*) FROM orders WHERE activity_id = {} AND sku_id = {} AND status = 'CREATED'",
            self.sale.activity, self.sale.sku
        )
    }
}

/// The node brought back holds the sale's rows (as a standby, replayed).
pub(super) async fn came_back_with_every_row(ha: &HaSale, node: &str) -> String {
    let sql =
        format!("SELECT count(*) FROM orders WHERE activity_id = {} AND sku_id = {}", ha.sale.activity, ha.sale.sku);
    let want = ha.rows(&["CREATED", "PAID", "CANCELLED", "FAILED"]).await;
    eventually(&format!("{node} to hold every row"), Duration::from_secs(60), || async {
        match pg_ha::on_node(node, &ha.test.database_name, &sql).await {
            Some(rows) if rows == want => Ok(()),
            other => Err(format!("{other:?} of {want}")),
        }
    })
    .await;
    let role = if pg_ha::primary().as_deref() == Some(node) { "the primary" } else { "the standby" };
    format!("{node} back as {role} with all {want} rows")
}

/// One buyer's payment or cancel, sent until a final answer: the provider
/// (or the buyer) asks again after a 5xx, a 409 ORDER_PENDING or a lost
/// connection. The final status, and the answers before it (0: no answer).
pub(super) async fn until_final(client: &Client, path: &str, body: &str, headers: &[(&str, &str)]) -> (u16, Vec<u16>) {
    let mut before = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(120);
    while Instant::now() < give_up {
        match client.try_send(hyper::Method::POST, path, Some(body.as_bytes()), headers).await {
            Ok(reply) if reply.status.is_server_error() || reply.status == 409 => before.push(reply.status.as_u16()),
            Ok(reply) => return (reply.status.as_u16(), before),
            Err(_) => before.push(0),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (0, before)
}
