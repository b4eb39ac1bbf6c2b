//! Deductions, per sale: adaptive micro-batching, and an outcome that is
//! always known.
//!
//! **Batching.** While one script call for a sale's bucket (its only one,
//! for a sale without buckets) is in flight, later requests for that bucket
//! wait, and the next call decides all of them
//! together (up to `deduct_batch_max`), each exactly as a call of its own
//! would have, in arrival order (`lua/deduct.lua` takes a batch). An idle
//! sale's request goes at once: no timer ever delays a request. With
//! `deduct_batch_max` 1 every request makes its own call. A sale's queue is
//! bounded (`deduct_queue_max`): a request that finds it full is answered
//! at once, nothing deducted; a request whose client has gone is dropped
//! before the call.
//!
//! **Outcomes.** Each call has an id and the script keeps its outcome under
//! it. A call whose answer was not heard (a timeout, a dropped connection:
//! the script may have run) is asked again with the same id until
//! `deduct_resolve_ms` has passed, and the buyers hear what it decided. A
//! call that definitely did not run (Redis refused the connection or the
//! command) keeps nothing. Where Redis has replicas, a batch that accepted
//! orders is confirmed by `redis.min_replica_acks` of them (`WAIT`) before
//! anyone hears it. A call still unheard after the resolve time, or not
//! confirmed, is voided (`lua/void.lua`: it can never deduct later, and
//! each order it accepted is undone unless its publish deadline has passed
//! — the reservation is the sweeper's then, and the order stands).
//!
//! **A 503 only once nothing is kept.** A void is confirmed by the replicas
//! the same way before anyone is told anything: then its buyers whose order
//! was undone (or who held none) hear 503, and those whose order stands
//! hear 202 with it. A void that cannot be confirmed in time leaves the
//! truth unknown: those buyers hear 202 `UNCONFIRMED` (with the order id
//! when the deduction was heard) and poll, while the void goes on in the
//! background.

use backon::Retryable;
use parking_lot::Mutex;
use seckill_shared::domain::{OrderId, SaleKey};
use seckill_shared::ops::retry;
use seckill_shared::ops::shutdown::Background;
use seckill_shared::stock::conn::RedisCallError;
use seckill_shared::stock::{Bucket, DeductCall, DeductRequest, Deduction, Stock, Voided};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Why a request was not decided: nothing is kept, except where the
/// outcome is [`NotDecided::Unconfirmed`].
#[derive(Debug, thiserror::Error)]
pub enum NotDecided {
    /// The sale's queue is full.
    #[error("too many requests of this sale wait for Redis")]
    QueueFull,
    /// The call never ran: Redis refused it.
    #[error("redis did not run the deduction: {0}")]
    Refused(#[source] Arc<RedisCallError>),
    /// The replicas did not confirm the batch in time; it was undone (the
    /// undoing confirmed).
    #[error("the replicas did not confirm the deduction in time; it was undone")]
    NotReplicated,
    /// Its outcome could not be heard within the resolve time; the call was
    /// voided (the void confirmed).
    #[error("redis did not answer the deduction; it was voided")]
    Voided,
    /// Neither the deduction nor its void could be confirmed in time:
    /// whether this request holds a unit is not known (its order id, when
    /// the deduction was heard). The void goes on in the background.
    #[error("redis did not confirm the deduction or its undoing in time")]
    Unconfirmed(Option<OrderId>),
    /// Units were still on their way between the sale's buckets after
    /// every try (the home bucket's borrowing, `home.rs`).
    #[error("units were still on their way between the sale's buckets")]
    StillMoving,
}

/// A deduction's answer.
pub type Answer = Result<Deduction, Arc<NotDecided>>;

struct Waiter {
    request: DeductRequest,
    publish_deadline: Duration,
    answer: oneshot::Sender<Answer>,
}

/// Requests waiting per sale's bucket; a bucket is in the map while a call
/// of its runs.
#[derive(Default)]
struct Waiting {
    requests: Vec<Waiter>,
}

/// How the batcher decides.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// Most requests per call (1: no batching).
    pub max: usize,
    /// Most requests waiting per sale.
    pub queue_max: usize,
    /// How long an unheard call is asked again before it is voided.
    pub resolve: Duration,
}

/// The batcher of one edge.
pub struct Batcher {
    stock: Stock,
    limits: BatchLimits,
    sales: Mutex<HashMap<(SaleKey, Bucket), Waiting>>,
    /// Where voids that outlive their request go on.
    background: Background,
}

impl Batcher {
    /// A batcher deciding on `stock` within `limits`.
    pub fn new(stock: Stock, limits: BatchLimits, background: Background) -> Arc<Self> {
        let limits = BatchLimits { max: limits.max.max(1), queue_max: limits.queue_max.max(1), ..limits };
        Arc::new(Self { stock, limits, sales: Mutex::new(HashMap::new()), background })
    }

    /// Decides one request, in the next call for its sale's `bucket`.
    pub async fn deduct(
        self: &Arc<Self>,
        sale: SaleKey,
        bucket: Bucket,
        request: DeductRequest,
        publish_deadline: Duration,
    ) -> Answer {
        let (answer, answered) = oneshot::channel();
        let lead = {
            let mut sales = self.sales.lock();
            let lead = !sales.contains_key(&(sale, bucket));
            let waiting = sales.entry((sale, bucket)).or_default();
            if waiting.requests.len() >= self.limits.queue_max {
                metrics::counter!("seckill_edge_deduct_queue_full_total").increment(1);
                return Err(Arc::new(NotDecided::QueueFull));
            }
            waiting.requests.push(Waiter { request, publish_deadline, answer });
            lead
        };
        if lead {
            // A task of its own: a caller that goes away (its client hung
            // up) does not take the others' call with it.
            tokio::spawn(self.clone().drain(sale, bucket));
        }
        // The drain answers every waiter it takes; it never drops one.
        answered.await.unwrap_or(Err(Arc::new(NotDecided::Voided)))
    }

    /// Runs calls for `sale`'s `bucket` while requests wait, then leaves.
    async fn drain(self: Arc<Self>, sale: SaleKey, bucket: Bucket) {
        loop {
            let batch: Vec<Waiter> = {
                let mut sales = self.sales.lock();
                let Some(waiting) = sales.get_mut(&(sale, bucket)) else { return };
                // A request whose client has gone is not decided at all.
                waiting.requests.retain(|w| !w.answer.is_closed());
                if waiting.requests.is_empty() {
                    sales.remove(&(sale, bucket));
                    return;
                }
                let take = waiting.requests.len().min(self.limits.max);
                waiting.requests.drain(..take).collect()
            };
            crate::hot_metrics::DEDUCT_BATCH_SIZE.record(batch.len() as f64);
            let deadline = batch.iter().map(|w| w.publish_deadline).max().unwrap_or_default();
            let (requests, answers): (Vec<DeductRequest>, Vec<oneshot::Sender<Answer>>) =
                batch.into_iter().map(|w| (w.request, w.answer)).unzip();
            let call = DeductCall::new(requests, deadline).in_bucket(bucket);
            for (answer, decided) in answers.into_iter().zip(self.decide(sale, &call).await) {
                let _ = answer.send(decided);
            }
        }
    }

    /// Runs `call` until its outcome is known: decided (and, where Redis has
    /// replicas, confirmed by them), known to keep nothing, or — when not
    /// even its void can be confirmed — unconfirmed. One answer per request.
    async fn decide(&self, sale: SaleKey, call: &DeductCall) -> Vec<Answer> {
        // Not heard (a timeout, a dropped connection: it may have run):
        // asked again, the same call, until the resolve time is spent.
        let heard = (|| self.stock.orders().deduct_batch(sale, call))
            .retry(self.asking())
            .when(|error: &RedisCallError| !error.never_ran())
            .notify(|error, _| {
                tracing::warn!(%error, call = %call.id, "deduction outcome not heard; asking again");
                metrics::counter!("seckill_edge_deduct_asked_again_total").increment(1);
            })
            .await;
        match heard {
            Ok(decided) => {
                let accepted = decided.iter().any(|d| matches!(d, Deduction::Accepted { .. }));
                if accepted && !self.stock.orders().confirmed(sale, call).await.unwrap_or(false) {
                    metrics::counter!("seckill_edge_deduct_not_replicated_total").increment(1);
                    return self.void(sale, call, NotDecided::NotReplicated, Some(&decided)).await;
                }
                decided.into_iter().map(Ok).collect()
            }
            Err(error) if error.never_ran() => {
                let refused = Arc::new(NotDecided::Refused(Arc::new(error)));
                call.requests.iter().map(|_| Err(refused.clone())).collect()
            }
            Err(error) => {
                tracing::error!(%error, call = %call.id, "deduction outcome not heard in time; voiding the call");
                self.void(sale, call, NotDecided::Voided, None).await
            }
        }
    }

    /// How a call is asked again within the resolve time.
    fn asking(&self) -> backon::ExponentialBuilder {
        retry::within(Duration::from_millis(50), Duration::from_millis(500), self.limits.resolve)
    }

    /// Voids `call` and waits until the replicas confirm the void (where
    /// Redis has replicas: a failover right after must not bring back a
    /// deduction its buyers are told was not kept — voiding is idempotent,
    /// so a promoted replica that had the deduction and not the void is
    /// voided again). Then each request hears `why` (its order undone, or it
    /// held none) or its order, which stands (past its publish deadline, or
    /// written since). Not confirmed within the resolve time, the void goes
    /// on in the background, for as long as the call's outcome is kept, and
    /// the requests hear [`NotDecided::Unconfirmed`] with the order the
    /// deduction answered, if it was heard.
    async fn void(
        &self,
        sale: SaleKey,
        call: &DeductCall,
        why: NotDecided,
        heard: Option<&[Deduction]>,
    ) -> Vec<Answer> {
        let confirmed = (|| void_confirmed(&self.stock, sale, call))
            .retry(self.asking())
            .notify(|error, _| tracing::warn!(%error, call = %call.id, "voiding the call; again"))
            .await;
        if let Ok(voided) = confirmed {
            let undone = voided.iter().filter(|v| **v == Voided::Undone).count();
            tracing::warn!(call = %call.id, undone, "deduction call voided");
            return answers_after_void(voided, why);
        }
        metrics::counter!("seckill_edge_void_deferred_total").increment(1);
        tracing::error!(call = %call.id, "the void is not confirmed in time; trying on in the background");
        self.void_in_background(sale, call.clone());
        (0..call.requests.len())
            .map(|i| {
                let order_id = match heard.and_then(|decided| decided.get(i)) {
                    Some(Deduction::Accepted { order_id, .. }) => Some(order_id.clone()),
                    _ => None,
                };
                Err(Arc::new(NotDecided::Unconfirmed(order_id)))
            })
            .collect()
    }

    /// Voids `call` until the replicas confirm it, or its outcome is no
    /// longer kept (after that it cannot be told apart from one that never
    /// ran).
    fn void_in_background(&self, sale: SaleKey, call: DeductCall) {
        let stock = self.stock.clone();
        self.background.spawn("void a deduction call", async move {
            let late = retry::within(Duration::from_millis(500), Duration::from_millis(500), stock.call_outcome() / 2);
            match (|| void_confirmed(&stock, sale, &call)).retry(late).await {
                Ok(voided) => {
                    tracing::warn!(call = %call.id, ?voided, "deduction call voided late");
                    Ok(())
                }
                Err(error) => {
                    metrics::counter!("seckill_edge_void_abandoned_total").increment(1);
                    Err(anyhow::anyhow!("call {} could not be voided: {error:#}", call.id))
                }
            }
        });
    }
}

/// Voids `call` once and has the replicas confirm it: its answers, or why
/// it is not confirmed yet.
async fn void_confirmed(stock: &Stock, sale: SaleKey, call: &DeductCall) -> anyhow::Result<Vec<Voided>> {
    let voided = stock.orders().void(sale, call).await?;
    if !stock.orders().confirmed(sale, call).await? {
        anyhow::bail!("the void is not confirmed by the replicas yet");
    }
    Ok(voided)
}

/// What each request of a call whose void the replicas confirmed hears:
/// `why` where nothing is kept, its order where it stands.
fn answers_after_void(voided: Vec<Voided>, why: NotDecided) -> Vec<Answer> {
    let why = Arc::new(why);
    voided
        .into_iter()
        .map(|voided| match voided {
            Voided::Undone | Voided::Nothing => Err(why.clone()),
            Voided::Stands { order_id, round, accepted_at, slot } => {
                Ok(Deduction::Accepted { order_id, round, stock_left: None, accepted_at, slot })
            }
        })
        .collect()
}
