//! The one retry policy (`backon`'s exponential backoff with jitter) every
//! loop that retries goes through: a dependency waited for while it is
//! down ([`retry_until`]), a call asked again within a bound ([`within`],
//! [`times`]), and a record's step retried until it is done or parked
//! ([`retry_then_park`]). (`backon` rather than `backoff`: the latter is
//! unmaintained, RUSTSEC-2025-0012, whose advice is `backon`.)

use backon::{BackoffBuilder, ExponentialBuilder};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Exponential backoff with jitter while a dependency fails.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrySettings {
    /// First delay.
    pub initial_ms: u64,
    /// Longest delay.
    pub max_ms: u64,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self { initial_ms: 100, max_ms: 5_000 }
    }
}

impl RetrySettings {
    /// The delays between attempts: exponential with jitter, endless.
    pub fn delays(&self) -> impl Iterator<Item = Duration> {
        let max = Duration::from_millis(self.max_ms);
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(self.initial_ms))
            .with_max_delay(max)
            .with_jitter()
            .without_max_times()
            .build()
            .chain(std::iter::repeat(max))
    }
}

/// Retries `attempt` with exponential backoff and jitter until it succeeds,
/// or `shutdown` is cancelled (then `None`: the caller abandons its work,
/// having committed nothing, so nothing is lost).
pub async fn retry_until<T, E, F>(
    retry: RetrySettings,
    what: &str,
    shutdown: &CancellationToken,
    mut attempt: impl FnMut() -> F,
) -> Option<T>
where
    E: std::fmt::Display,
    F: std::future::Future<Output = Result<T, E>>,
{
    let mut delays = retry.delays();
    loop {
        match attempt().await {
            Ok(value) => return Some(value),
            Err(error) => {
                let delay = delays.next().unwrap_or_default();
                tracing::warn!(%error, retry_in = ?delay, "{what} failed; retrying");
                metrics::counter!("seckill_retries_total", "what" => what.to_owned()).increment(1);
                if !crate::ops::shutdown::pause(shutdown, delay).await {
                    return None;
                }
            }
        }
    }
}

/// Exponential delays from `first` up to `longest`, with jitter, ending
/// once `total` has been waited: asking a call again within a bound (an
/// unheard deduction, a void not yet confirmed).
pub fn within(first: Duration, longest: Duration, total: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(first)
        .with_max_delay(longest)
        .with_jitter()
        .without_max_times()
        .with_total_delay(Some(total))
}

/// Exponential delays from `first`, with jitter, for `retries` retries.
pub fn times(first: Duration, retries: usize) -> ExponentialBuilder {
    ExponentialBuilder::default().with_min_delay(first).with_jitter().with_max_times(retries)
}

/// One attempt at a record's step, as [`retry_then_park`] takes it.
pub enum Attempt<T, E> {
    /// Done.
    Done(T),
    /// Refused for good (the data itself: trying again cannot cure it):
    /// counted; past `park_after` refusals the record is to be parked.
    Refused(E),
    /// Failed for now (a dependency down): asked again after a delay.
    Later(E),
    /// Failed for now, and the caller retries at a level above.
    GiveUp(E),
}

/// How [`retry_then_park`] ended.
pub enum Ended<T, E> {
    /// The step is done.
    Done(T),
    /// Refused `attempts` times, the last for `error`: park the record.
    Park { error: E, attempts: u32 },
    /// Given up for now ([`Attempt::GiveUp`]).
    GaveUp(E),
    /// Shutdown came first: nothing is committed, the record is replayed.
    Stopped,
}

/// Runs `attempt` until it is done, waiting the policy's delays between
/// tries: a refusal for good counts toward `park_after`, after which the
/// caller parks the record; a failure for now is waited for however long
/// (or handed up, [`Attempt::GiveUp`]). `what` names it in logs and in
/// `seckill_retries_total`.
pub async fn retry_then_park<T, E, F, Fut>(
    retry: RetrySettings,
    park_after: u32,
    what: &str,
    shutdown: &CancellationToken,
    mut attempt: F,
) -> Ended<T, E>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Attempt<T, E>>,
{
    let mut delays = retry.delays();
    let mut refusals = 0;
    loop {
        match attempt().await {
            Attempt::Done(value) => return Ended::Done(value),
            Attempt::GiveUp(error) => return Ended::GaveUp(error),
            Attempt::Refused(error) => {
                refusals += 1;
                tracing::warn!(%error, attempt = refusals, "{what} refused");
                if refusals >= park_after {
                    return Ended::Park { error, attempts: refusals };
                }
            }
            Attempt::Later(error) => {
                tracing::warn!(%error, "{what} failed; retrying");
                metrics::counter!("seckill_retries_total", "what" => what.to_owned()).increment(1);
            }
        }
        if !crate::ops::shutdown::pause(shutdown, delays.next().unwrap_or_default()).await {
            return Ended::Stopped;
        }
    }
}
