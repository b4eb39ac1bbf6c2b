//! The one Redis connection every part of `shared` talks through
//! ([`RedisConn`]), and the one error a Redis call can end in
//! ([`RedisCallError`]).
//!
//! Two forms of `SECKILL_REDIS_URL`:
//!
//! - `redis://host:port/db` — one server; the connection reconnects by
//!   itself.
//! - `redis+sentinel://s1:p1,s2:p2,s3:p3/master[?db=N]` — the primary that
//!   Redis Sentinel names for `master`. A call that fails the way a failover
//!   fails (connection refused or dropped, an I/O error or timeout, a
//!   `READONLY` answer from a demoted primary) drops the connection, and the
//!   next call asks the Sentinels for the primary again: after a failover
//!   every service reaches the new primary without a restart. Scripts are
//!   reloaded there on `NOSCRIPT` (the script runner does that).
//! - `redis+cluster://h1:p1,h2:p2,h3:p3` — a Redis Cluster, through the
//!   redis crate's cluster client: any reachable node tells it the rest,
//!   each command goes to the primary of its key's slot, and a `MOVED` (a
//!   replica promoted, slots moved) refreshes the slot map. Every script
//!   and pipeline here touches one slot (one sale's hash tag); `WAIT`
//!   goes in one pipeline behind a write to the slot it must confirm.
//!
//! Every call is bounded by the settings' `timeout_ms`: a Redis that does
//! not answer is an error the caller can act on (answer 503, retry), never a
//! request that hangs. A timed-out command may still have run — callers that
//! change state treat that as "unknown", never as "did not happen".

mod error;
mod sentinel;
mod url;

pub use error::RedisCallError;
pub use url::check_url;

use crate::config::RedisSettings;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use sentinel::SentinelPrimary;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use url::{cluster_nodes, tcp_settings, SentinelUrl};

/// A shared connection with a bound on every call. Cloning is cheap: clones
/// share one multiplexed connection.
#[derive(Clone)]
pub struct RedisConn {
    inner: Inner,
    timeout: Duration,
}

#[derive(Clone)]
enum Inner {
    /// One server, reconnecting by itself.
    Direct(ConnectionManager),
    /// The primary Sentinel names, found again after a failover.
    Sentinel(Arc<SentinelPrimary>),
    /// A Redis Cluster: each command to its slot's primary.
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// Connects: to one server, to the primary Sentinel names, or to a
    /// Redis Cluster.
    pub async fn connect(settings: &RedisSettings) -> Result<Self, RedisCallError> {
        let timeout = Duration::from_millis(settings.timeout_ms);
        let bad_url = |why: String| redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad url", why));
        let inner = if let Some(nodes) = cluster_nodes(&settings.url) {
            let client = redis::cluster::ClusterClientBuilder::new(nodes.map_err(bad_url)?)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .tcp_settings(tcp_settings())
                .retries(3)
                .max_retry_wait(500)
                .build()?;
            let connect = client.get_async_connection();
            let conn = tokio::time::timeout(timeout * 2, connect)
                .await
                .map_err(|_| RedisCallError::Timeout(timeout * 2))??;
            Inner::Cluster(conn)
        } else {
            match SentinelUrl::parse(&settings.url) {
                Some(url) => Inner::Sentinel(Arc::new(SentinelPrimary::new(&url.map_err(bad_url)?, timeout)?)),
                None => {
                    use redis::IntoConnectionInfo;
                    let info = settings.url.as_str().into_connection_info()?.set_tcp_settings(tcp_settings());
                    let client = redis::Client::open(info)?;
                    let config = redis::aio::ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout))
                        .set_number_of_retries(2)
                        .set_max_delay(Duration::from_millis(500));
                    let manager = tokio::time::timeout(timeout * 2, ConnectionManager::new_with_config(client, config))
                        .await
                        .map_err(|_| RedisCallError::Timeout(timeout * 2))??;
                    Inner::Direct(manager)
                }
            }
        };
        let conn = Self { inner, timeout };
        // Fail at start, not at the first request, when nothing answers.
        conn.ping().await?;
        Ok(conn)
    }

    /// The bound on every call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A failed call's error, as this connection can vouch for it: on a
    /// Redis Cluster, one the client may have met after resending.
    fn failed(&self, error: redis::RedisError) -> RedisCallError {
        match self.inner {
            Inner::Cluster(_) => RedisCallError::Resent(error),
            Inner::Direct(_) | Inner::Sentinel(_) => RedisCallError::Redis(error),
        }
    }

    /// Awaits `call` for at most the configured timeout.
    pub async fn bounded<T>(&self, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T, RedisCallError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.map_err(|error| self.failed(error)),
            Err(_) => {
                // A primary that stopped answering may have been replaced.
                if let Inner::Sentinel(primary) = &self.inner {
                    primary.forget();
                }
                Err(RedisCallError::Timeout(self.timeout))
            }
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

    /// Runs `evalsha` — `EVALSHA` of `script`'s hash, its keys and
    /// arguments written straight into one command (no argument copied
    /// apart, as a prepared invocation does: the accepted path's calls) —
    /// bounded; a server that does not know the script yet is given it
    /// (on the node of `key`, one of the call's keys) and asked again.
    pub async fn evalsha<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        evalsha: &Cmd,
        key: &str,
    ) -> Result<T, RedisCallError> {
        let mut conn = self.clone();
        match self.bounded(evalsha.query_async(&mut conn)).await {
            Err(error)
                if error
                    .redis_error()
                    .is_some_and(|e| e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)) =>
            {
                let mut invocation = script.prepare_invoke();
                invocation.key(key);
                self.bounded(invocation.load_async(&mut conn)).await?;
                self.bounded(evalsha.query_async(&mut conn)).await
            }
            other => other,
        }
    }

    /// Runs a pipeline, bounded; an empty one sends nothing.
    pub async fn pipe<T: redis::FromRedisValue>(&self, pipe: &Pipeline) -> Result<Option<T>, RedisCallError> {
        if pipe.is_empty() {
            return Ok(None);
        }
        let mut conn = self.clone();
        self.bounded(pipe.query_async(&mut conn)).await.map(Some)
    }

    /// Runs `write` and `WAIT replicas timeout` right behind it, in one
    /// pipeline: one connection to one server (on a cluster, the primary of
    /// `write`'s key's slot). Answers what `write` answered and how many
    /// replicas confirmed every write made before the `WAIT` — `write`'s,
    /// and every earlier write of that server. `WAIT` sent by itself would
    /// count only the writes of the connection it went out on: after a
    /// reconnect (or, on a cluster, a retry that went to another node) it
    /// would confirm a write it never saw.
    pub async fn write_then_wait<T: redis::FromRedisValue>(
        &self,
        write: Cmd,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(T, u32), RedisCallError> {
        let mut pipe = redis::pipe();
        pipe.add_command(write).cmd("WAIT").arg(replicas).arg(timeout.as_millis() as u64);
        let mut conn = self.clone();
        // WAIT answers by its own timeout; the call's bound comes after it.
        match tokio::time::timeout(timeout + self.timeout, pipe.query_async::<(T, u32)>(&mut conn)).await {
            Ok(result) => result.map_err(|error| self.failed(error)),
            Err(_) => Err(RedisCallError::Timeout(timeout + self.timeout)),
        }
    }

    /// Runs `script` on `keys` with `args`, and `WAIT replicas timeout`
    /// right behind it in one pipeline, as [`RedisConn::write_then_wait`]
    /// does with a command; a server that does not know the script yet (a
    /// promoted replica) is given it and asked again.
    pub async fn script_then_wait<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[&str],
        args: &[&str],
        replicas: u32,
        timeout: Duration,
    ) -> Result<(T, u32), RedisCallError> {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(script.get_hash()).arg(keys.len()).arg(keys).arg(args);
        match self.write_then_wait(evalsha.clone(), replicas, timeout).await {
            Err(error)
                if error
                    .redis_error()
                    .is_some_and(|e| e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)) =>
            {
                let mut invocation = script.prepare_invoke();
                for key in keys {
                    invocation.key(*key);
                }
                let mut conn = self.clone();
                self.bounded(invocation.load_async(&mut conn)).await?;
                self.write_then_wait(evalsha, replicas, timeout).await
            }
            other => other,
        }
    }

    /// The replicas a deduction must be confirmed by when the settings do
    /// not say: 1 where the topology has a replica (a Sentinel or cluster
    /// URL always has; a primary says how many are connected), else 0.
    pub async fn replicas_in_topology(&self, url: &str) -> Result<u32, RedisCallError> {
        if SentinelUrl::parse(url).is_some() || cluster_nodes(url).is_some() {
            return Ok(1);
        }
        let mut conn = self.clone();
        let info: String = self.bounded(redis::cmd("INFO").arg("replication").query_async(&mut conn)).await?;
        let connected = info
            .lines()
            .find_map(|line| line.strip_prefix("connected_slaves:"))
            .and_then(|n| n.trim().parse::<u32>().ok())
            .unwrap_or(0);
        Ok(connected.min(1))
    }

    /// On a Redis Cluster, which primary serves each range of slots
    /// (`CLUSTER SLOTS`: first slot, last slot, the primary's address);
    /// `None` on one server or behind Sentinel, where one primary serves all.
    pub async fn slot_primaries(&self) -> Result<Option<Vec<(u16, u16, String)>>, RedisCallError> {
        if !matches!(self.inner, Inner::Cluster(_)) {
            return Ok(None);
        }
        let mut conn = self.clone();
        let ranges: Vec<Value> = self.bounded(redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut conn)).await?;
        let unexpected =
            |answer: &Value| RedisCallError::Unexpected { script: "CLUSTER SLOTS", answer: format!("{answer:?}") };
        let mut primaries = Vec::with_capacity(ranges.len());
        for range in &ranges {
            let parsed = match range {
                Value::Array(fields) => match fields.as_slice() {
                    [Value::Int(first), Value::Int(last), Value::Array(primary), ..] => match primary.as_slice() {
                        [host, Value::Int(port), ..] => redis::from_redis_value::<String>(host.clone())
                            .ok()
                            .map(|host| (*first as u16, *last as u16, format!("{host}:{port}"))),
                        _ => None,
                    },
                    _ => None,
                },
                _ => None,
            };
            primaries.push(parsed.ok_or_else(|| unexpected(range))?);
        }
        Ok(Some(primaries))
    }

    /// `PING`, bounded: whether Redis answers.
    pub async fn ping(&self) -> Result<(), RedisCallError> {
        let mut conn = self.clone();
        self.bounded(redis::cmd("PING").query_async::<String>(&mut conn)).await.map(|_| ())
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.inner {
            Inner::Direct(manager) => manager.req_packed_command(cmd),
            Inner::Cluster(cluster) => cluster.req_packed_command(cmd),
            Inner::Sentinel(primary) => {
                let primary = primary.clone();
                Box::pin(async move {
                    let mut conn = primary.connection().await?;
                    let result = conn.req_packed_command(cmd).await;
                    primary.judge(&result);
                    result
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.inner {
            Inner::Direct(manager) => manager.req_packed_commands(cmd, offset, count),
            Inner::Cluster(cluster) => cluster.req_packed_commands(cmd, offset, count),
            Inner::Sentinel(primary) => {
                let primary = primary.clone();
                Box::pin(async move {
                    let mut conn = primary.connection().await?;
                    let result = conn.req_packed_commands(cmd, offset, count).await;
                    primary.judge(&result);
                    result
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Inner::Direct(manager) => manager.get_db(),
            Inner::Sentinel(_) | Inner::Cluster(_) => 0,
        }
    }
}
