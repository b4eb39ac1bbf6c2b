//! The one Redis connection every part of `shared` talks through, and the
//! one error a Redis call can end in.
//!
//! Every call is bounded by the settings' `timeout_ms`: a Redis that does
//! not answer is an error the caller can act on (answer 503, retry), never a
//! request that hangs. A timed-out command may still have run — callers that
//! change state treat that as "unknown", never as "did not happen".

use crate::config::RedisSettings;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::future::Future;
use std::time::Duration;

/// What went wrong with one Redis call.
#[derive(Debug, thiserror::Error)]
pub enum RedisCallError {
    /// Redis answered with an error, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis did not answer in time. The command may still have run.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// A script answered something this code does not understand.
    #[error("unexpected answer from {script}: {answer}")]
    Unexpected {
        /// The script (or command) that answered.
        script: &'static str,
        /// What it answered, as debug text.
        answer: String,
    },
}

/// A shared, self-reconnecting connection with a bound on every call.
/// Cloning is cheap: clones share one multiplexed connection.
#[derive(Clone)]
pub struct RedisConn {
    inner: ConnectionManager,
    timeout: Duration,
}

impl RedisConn {
    /// Connects (the connection reconnects by itself afterwards).
    pub async fn connect(settings: &RedisSettings) -> Result<Self, RedisCallError> {
        let timeout = Duration::from_millis(settings.timeout_ms);
        let client = redis::Client::open(settings.url.as_str())?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let inner = tokio::time::timeout(timeout * 2, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| RedisCallError::Timeout(timeout * 2))??;
        Ok(Self { inner, timeout })
    }

    /// The bound on every call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Awaits `call` for at most the configured timeout.
    pub async fn bounded<T>(&self, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T, RedisCallError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(RedisCallError::Timeout(self.timeout)),
        }
    }

    /// Runs a prepared script (EVALSHA, loading it on NOSCRIPT), bounded.
    pub async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, RedisCallError> {
        let mut conn = self.clone();
        self.bounded(invocation.invoke_async(&mut conn)).await
    }

    /// Runs a pipeline, bounded; an empty one sends nothing.
    pub async fn pipe<T: redis::FromRedisValue>(&self, pipe: &Pipeline) -> Result<Option<T>, RedisCallError> {
        if pipe.is_empty() {
            return Ok(None);
        }
        let mut conn = self.clone();
        self.bounded(pipe.query_async(&mut conn)).await.map(Some)
    }

    /// `PING`, bounded: whether Redis answers.
    pub async fn ping(&self) -> Result<(), RedisCallError> {
        let mut conn = self.clone();
        self.bounded(redis::cmd("PING").query_async::<String>(&mut conn)).await.map(|_| ())
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}
