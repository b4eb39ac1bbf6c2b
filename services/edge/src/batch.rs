//! Adaptive micro-batching of deductions, per sale. While one script call
//! for a sale is in flight, later requests for that sale wait, and the next
//! call decides all of them together (up to `deduct_batch_max`), each
//! exactly as a call of its own would have, in arrival order
//! (`lua/deduct.lua` takes a batch). An idle sale's request goes at once:
//! no timer ever delays a request; batches grow only when requests already
//! have to wait for Redis. With `deduct_batch_max` 1 every request makes its
//! own call, as before.

use seckill_shared::domain::{SaleKey, UserId};
use seckill_shared::redis_conn::RedisCallError;
use seckill_shared::stock::{Deduction, Stock};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// A deduction's answer; a failed call fails every request of its batch.
pub type Answer = Result<Deduction, Arc<RedisCallError>>;

struct Waiter {
    user: UserId,
    nonce: String,
    publish_deadline: Duration,
    answer: oneshot::Sender<Answer>,
}

/// Requests waiting per sale; a sale is in the map while a call of its runs.
#[derive(Default)]
struct Waiting {
    requests: Vec<Waiter>,
}

/// The batcher of one edge.
pub struct Batcher {
    stock: Stock,
    max: usize,
    sales: Mutex<HashMap<SaleKey, Waiting>>,
}

impl Batcher {
    /// Batches of at most `max` requests (1: no batching).
    pub fn new(stock: Stock, max: usize) -> Arc<Self> {
        Arc::new(Self { stock, max: max.max(1), sales: Mutex::new(HashMap::new()) })
    }

    /// Decides one request, in the next call for its sale.
    pub async fn deduct(
        self: &Arc<Self>,
        sale: SaleKey,
        user: UserId,
        nonce: String,
        publish_deadline: Duration,
    ) -> Answer {
        if self.max == 1 {
            return self.stock.deduct(sale, user, &nonce, publish_deadline).await.map_err(Arc::new);
        }
        let (answer, answered) = oneshot::channel();
        let lead = {
            let mut sales = self.sales.lock().expect("batcher lock");
            let lead = !sales.contains_key(&sale);
            sales.entry(sale).or_default().requests.push(Waiter { user, nonce, publish_deadline, answer });
            lead
        };
        if lead {
            // A task of its own: a caller that goes away (its client hung
            // up) does not take the others' call with it.
            tokio::spawn(self.clone().drain(sale));
        }
        answered.await.unwrap_or_else(|_| {
            Err(Arc::new(RedisCallError::Unexpected { script: "deduct.lua", answer: "batch dropped".into() }))
        })
    }

    /// Runs calls for `sale` while requests wait, then leaves.
    async fn drain(self: Arc<Self>, sale: SaleKey) {
        loop {
            let batch: Vec<Waiter> = {
                let mut sales = self.sales.lock().expect("batcher lock");
                let Some(waiting) = sales.get_mut(&sale) else { return };
                if waiting.requests.is_empty() {
                    sales.remove(&sale);
                    return;
                }
                let take = waiting.requests.len().min(self.max);
                waiting.requests.drain(..take).collect()
            };
            metrics::histogram!("seckill_edge_deduct_batch_size").record(batch.len() as f64);
            let deadline = batch.iter().map(|w| w.publish_deadline).max().unwrap_or_default();
            let requests: Vec<(UserId, &str)> = batch.iter().map(|w| (w.user, w.nonce.as_str())).collect();
            match self.stock.deduct_batch(sale, &requests, deadline).await {
                Ok(answers) => {
                    for (waiter, answer) in batch.into_iter().zip(answers) {
                        let _ = waiter.answer.send(Ok(answer));
                    }
                }
                Err(error) => {
                    let error = Arc::new(error);
                    for waiter in batch {
                        let _ = waiter.answer.send(Err(error.clone()));
                    }
                }
            }
        }
    }
}
