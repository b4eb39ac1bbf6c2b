//! A release through faults: an activity of four sizes with a limit of two
//! units per customer across them, customers each ordering every size at
//! once (asking again after a 503, a 429, a 202 `UNCONFIRMED` or a dropped
//! connection, as buyers do) while the faults strike. No customer ends
//! above the limit in PostgreSQL's rows, every 202 `QUEUED` is written
//! CREATED, the takes left pending by a killed edge are settled by the
//! sweep within its bound, and the release's and each size's books
//! reconcile.

use super::faults::inject;
use super::pipeline::{Kind, Pipeline};
use super::Fault;
use crate::http::{Client, Reply};
use crate::{eventually, TestEnv, Topology};
use futures::stream::{self, StreamExt};
use seckill_shared::domain::{Limits, SaleKey};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The release's limit per customer, and its sizes.
const LIMIT: u32 = 2;
const SIZES: i64 = 4;

/// What a release through faults came to: its row.
pub struct ReleaseOutcome {
    pub name: &'static str,
    pub customers: i64,
    pub queued: usize,
    pub refused_by_release: usize,
    pub most_held: i64,
    /// Seconds from the last fault until no take was pending.
    pub settled_after: f64,
}

impl ReleaseOutcome {
    pub fn row(&self) -> String {
        format!(
            "| {} | {} customers x {SIZES} sizes, limit {LIMIT} | 202 QUEUED {} (all CREATED) | refused by the release {} | most one holds {} | pending takes settled {:.1} s after the last fault |",
            self.name, self.customers, self.queued, self.refused_by_release, self.most_held, self.settled_after
        )
    }
}

/// Runs the scenario: `faults` strike in turn, each once a share of the
/// customers has ordered; panics on a broken promise, naming it.
pub async fn release_through_faults(
    topology: Topology,
    name: &'static str,
    customers: i64,
    faults: &[Fault],
) -> ReleaseOutcome {
    let env = TestEnv::on(topology).await;
    let activity = env.sale().activity;
    let sizes: Vec<SaleKey> = (1..=SIZES).map(|s| SaleKey::from_raw(activity.get(), 60 + s).expect("ids")).collect();
    for size in &sizes {
        env.warmup_limited(*size, customers, 900, Limits { per_user_limit: 1, max_per_order: 1 }).await;
    }
    env.stock.releases().declare_release(activity, LIMIT).await.expect("the release declared");
    let burst = [
        (Kind::Edge, "SECKILL__RATE_LIMIT__PER_USER_BURST", "1000"),
        (Kind::Edge, "SECKILL__RATE_LIMIT__PER_USER_PER_SECOND", "1000"),
    ];
    let mut pipeline = Pipeline::start_with(&env, &burst);
    pipeline.wait_ready().await;
    let progress = Arc::new(AtomicUsize::new(0));
    let load = tokio::spawn(order_all(Client::new(&pipeline.url), sizes.clone(), customers, progress.clone()));
    for (i, fault) in faults.iter().enumerate() {
        let share = (i + 1) * customers as usize / (faults.len() + 1);
        eventually("customers ordering", Duration::from_secs(180), || async {
            let done = progress.load(Ordering::Relaxed);
            (done >= share).then_some(()).ok_or(format!("{done} of {share}"))
        })
        .await;
        inject(&env, sizes[0], &mut pipeline, *fault).await;
    }
    let faults_over = std::time::Instant::now();
    let replies = load.await.expect("the customers");
    let outcome = judge(&env, name, &sizes, customers, &replies).await;
    pipeline.stop().await;
    ReleaseOutcome { settled_after: faults_over.elapsed().as_secs_f64(), ..outcome }
}

/// Customers 1..=`customers`, 8 at a time, each ordering every size at
/// once, each order asked until answered.
async fn order_all(client: Client, sizes: Vec<SaleKey>, customers: i64, progress: Arc<AtomicUsize>) -> Vec<Reply> {
    let per_customer: Vec<Vec<Reply>> = stream::iter(1..=customers)
        .map(|customer| {
            let (client, sizes, progress) = (client.clone(), sizes.clone(), progress.clone());
            async move {
                let orders = sizes.iter().map(|size| until_answered(&client, *size, customer));
                let replies = futures::future::join_all(orders).await;
                progress.fetch_add(1, Ordering::Relaxed);
                replies
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    per_customer.into_iter().flatten().collect()
}

/// One order, asked again while the answer is not final: a 503, a 429, a
/// 202 `UNCONFIRMED` (its order polled instead would do as well) or no
/// answer (the edge was killed).
async fn until_answered(client: &Client, size: SaleKey, customer: i64) -> Reply {
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{customer}}}"#, size.activity, size.sku);
    eventually("an order answered", Duration::from_secs(120), || async {
        match client.try_send(hyper::Method::POST, "/api/seckill/order", Some(body.as_bytes()), &[]).await {
            Ok(reply) if ![503, 429].contains(&reply.status.as_u16()) && reply.code() != "UNCONFIRMED" => Ok(reply),
            Ok(reply) => Err(format!("{}: {}", reply.status, reply.text)),
            Err(error) => Err(error),
        }
    })
    .await
}

/// The promises, read as the shop and the buyers would.
async fn judge(
    env: &TestEnv,
    name: &'static str,
    sizes: &[SaleKey],
    customers: i64,
    replies: &[Reply],
) -> ReleaseOutcome {
    let queued: Vec<&str> =
        replies.iter().filter(|r| r.status == 202).filter_map(|r| r.json["orderId"].as_str()).collect();
    let refused_by_release = replies.iter().filter(|r| r.json["release"].is_i64()).count();
    assert!(refused_by_release > 0, "{name}: the customers met the release's limit");
    eventually("every QUEUED order written CREATED", Duration::from_secs(180), || async {
        let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM orders WHERE order_id = ANY($1)")
            .bind(&queued)
            .fetch_all(&env.db)
            .await
            .map_err(|e| e.to_string())?;
        assert!(!statuses.iter().any(|s| s == "FAILED"), "{name}: a 202 QUEUED ended FAILED");
        (statuses.len() == queued.len()).then_some(()).ok_or(format!("{} of {}", statuses.len(), queued.len()))
    })
    .await;
    let release = eventually("no take pending, the books consistent", Duration::from_secs(180), || async {
        let books = seckill_shared::books::reconcile_release(&env.stock, &env.db, sizes[0].activity).await;
        match books {
            Ok(books) if books.takes_pending == 0 && books.consistent => Ok(books),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(release.over_limit.is_empty() && release.most_held <= i64::from(LIMIT), "{name}: {release:?}");
    for size in sizes {
        let mut books = eventually("the size's books drained", Duration::from_secs(180), || async {
            match seckill_shared::books::reconcile(&env.stock, &env.db, None, *size, false).await {
                Ok(books) if books.drained() => Ok(books),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        books.judge(true);
        assert!(books.consistent && books.broken_promises.is_empty(), "{name}: size {size}: {:?}", books.violations);
    }
    ReleaseOutcome {
        name,
        customers,
        queued: queued.len(),
        refused_by_release,
        most_held: release.most_held,
        settled_after: 0.0,
    }
}
