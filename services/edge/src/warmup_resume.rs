//! Warm-ups cut short finish by themselves. A warm-up holds its sale's
//! buckets still before it commits the new round, so one that stops
//! midway — Redis paused, PostgreSQL gone, its edge killed — leaves the
//! sale answering 503 to every buyer until it is finished. One edge at a
//! time (the PostgreSQL lease `warm-up resumer`, through the singleton
//! loop) looks every `warmup_resume.every_ms` for each sale's last warm-up
//! that is not finished, and runs it again by its id, from the step it
//! reached, with backoff per warm-up, until it is done — or a newer
//! warm-up or a close replaces it (it is then no sale's last unfinished
//! one). A warm-up whose run is still going holds the sale's warm-up lock:
//! the resumer finds it busy and leaves it be.

use crate::home::Homes;
use crate::settings::{Settings, WarmupResumeSettings};
use crate::sold_out::SoldOutFlags;
use seckill_shared::ops::leader::{self, Turn};
use seckill_shared::ops::lease::{Lease, LeaseTerm};
use seckill_shared::ops::lock::LockClient;
use seckill_shared::ops::shutdown::Background;
use seckill_shared::sales::warmup_rows::{self, Step};
use seckill_shared::sales::{self, WarmupError, WarmupRequest};
use seckill_shared::stock::Stock;
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The lease one resumer across the edges holds.
pub const LEASE: &str = "warm-up resumer";

/// What the resumer uses: a warm-up's parts, and this edge's flags and
/// buckets of the sale, reset once it finished.
pub struct Resumer {
    pub settings: Arc<Settings>,
    pub stock: Stock,
    pub db: PgPool,
    pub locks: LockClient,
    pub sold_out: Arc<SoldOutFlags>,
    pub homes: Arc<Homes>,
}

/// The runs of one warm-up that failed, and when the next may start.
struct Backoff {
    failures: usize,
    not_before: Instant,
}

/// Competes for the lease; while holding it, resumes warm-ups cut short.
pub async fn run(state: Resumer, background: Background, shutdown: CancellationToken) -> anyhow::Result<()> {
    let state = Arc::new(state);
    let settings = state.settings.warmup_resume.clone();
    let lease = Lease::new(state.db.clone(), LEASE, Duration::from_millis(settings.lease_ms), background);
    let every = Duration::from_millis(settings.every_ms);
    let failed: Arc<tokio::sync::Mutex<HashMap<String, Backoff>>> = Arc::default();
    leader::lead("warm-up resumer", &lease, every, &shutdown, |_term: Arc<LeaseTerm>| {
        let (state, settings, failed) = (state.clone(), settings.clone(), failed.clone());
        async move {
            resume_once(&state, &settings, &mut *failed.lock().await).await;
            Turn::Again(every)
        }
    })
    .await
}

/// One look: every sale's last unfinished warm-up whose backoff has passed
/// is run again. Returns how many finished now.
async fn resume_once(state: &Resumer, settings: &WarmupResumeSettings, failed: &mut HashMap<String, Backoff>) -> usize {
    let deadline = state.settings.servers.database.call_deadline();
    let unfinished = match seckill_shared::db::within(deadline, warmup_rows::unfinished_everywhere(&state.db)).await {
        Ok(unfinished) => unfinished,
        Err(error) => {
            tracing::warn!(%error, "warm-ups cut short not read; looking again later");
            return 0;
        }
    };
    metrics::gauge!("seckill_warmups_unfinished").set(unfinished.len() as f64);
    failed.retain(|id, _| unfinished.iter().any(|w| &w.id == id));
    let mut finished = 0;
    for warmup in unfinished {
        if failed.get(&warmup.id).is_some_and(|b| Instant::now() < b.not_before) {
            continue;
        }
        let request = WarmupRequest { id: Some(warmup.id.clone()), ..warmup.request };
        let sale = request.sale;
        let (locks, lock) = (&state.locks, &state.settings.warmup_lock);
        let ran = sales::warmup(&state.stock, &state.db, deadline, locks, lock, &request).await;
        match ran {
            Ok(row) => {
                failed.remove(&warmup.id);
                finished += 1;
                // Units came back to the sale: this edge's flag goes now.
                state.sold_out.clear(sale);
                state.homes.forget(sale);
                metrics::counter!("seckill_warmups_resumed_total").increment(1);
                tracing::warn!(warmup = %warmup.id, %sale, round = row.round, "a warm-up cut short finished by itself");
            }
            // Its run is going on (it holds the sale's lock): left be.
            Err(WarmupError::Busy(_)) => {}
            // It can no longer be honoured (a close replaced it; its
            // clock is not judged again: a sale over or a draw due while
            // it waited is finished all the same): never run again.
            Err(WarmupError::Invalid(why)) => {
                failed.remove(&warmup.id);
                let ended = warmup_rows::ended(&state.db, &warmup.id, Some(Step::Closed), Some(&why));
                if let Err(error) = seckill_shared::db::within(deadline, ended).await {
                    tracing::warn!(warmup = %warmup.id, %error, "a warm-up that cannot be finished not marked; looking again later");
                } else {
                    tracing::warn!(warmup = %warmup.id, %sale, %why, "a warm-up cut short can no longer be finished; given up");
                }
            }
            Err(error) => {
                let backoff =
                    failed.entry(warmup.id.clone()).or_insert(Backoff { failures: 0, not_before: Instant::now() });
                backoff.failures += 1;
                let wait = settings.retry.delays().nth(backoff.failures.min(20)).unwrap_or(Duration::from_secs(5));
                backoff.not_before = Instant::now() + wait;
                tracing::warn!(warmup = %warmup.id, %sale, %error, failures = backoff.failures, retry_in_ms = wait.as_millis() as u64, "a warm-up cut short failed again; it will be run again");
            }
        }
    }
    finished
}
