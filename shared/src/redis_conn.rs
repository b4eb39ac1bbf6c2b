//! The one Redis connection every part of `shared` talks through, and the
//! one error a Redis call can end in.
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

use crate::config::RedisSettings;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, Value};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// What went wrong with one Redis call.
#[derive(Debug, thiserror::Error)]
pub enum RedisCallError {
    /// Redis answered with an error, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The Redis Cluster client failed after sending it, perhaps more than
    /// once: it resends a command after a dropped connection or a
    /// redirection (`retries`), so its last error — even a refused
    /// connection — may follow an attempt that ran.
    #[error("redis cluster: {0}")]
    Resent(redis::RedisError),
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

impl RedisCallError {
    /// Whether the call certainly did not run: Redis refused the connection
    /// (nothing was sent) or answered with an error (a replica refusing
    /// writes, a script error before any write). A timeout or a connection
    /// lost after sending may have run.
    pub fn never_ran(&self) -> bool {
        match self {
            Self::Redis(error) => error.is_connection_refusal() || matches!(error.kind(), redis::ErrorKind::Server(_)),
            // The cluster client may have sent it before the error it ends
            // with: only its outcome, asked for by the call's id, can say.
            Self::Resent(_) | Self::Timeout(_) | Self::Unexpected { .. } => false,
        }
    }

    /// The server's or client's error, when there is one.
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        match self {
            Self::Redis(error) | Self::Resent(error) => Some(error),
            Self::Timeout(_) | Self::Unexpected { .. } => None,
        }
    }

    /// Whether the answer was not heard (the call may have run): asking
    /// again is how a caller of an idempotent script learns its outcome.
    pub fn unheard(&self) -> bool {
        !self.never_ran() && !matches!(self, Self::Unexpected { .. })
    }
}

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

/// The primary of a Sentinel-watched master, and how to find it again.
struct SentinelPrimary {
    /// Asks the Sentinels (one lookup at a time).
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The connection to the primary last named; `None` after a failure
    /// that may have been a failover.
    current: RwLock<Option<MultiplexedConnection>>,
    config: AsyncConnectionConfig,
}

/// A `redis+sentinel://` URL, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SentinelUrl {
    sentinels: Vec<String>,
    master: String,
    db: i64,
}

impl SentinelUrl {
    /// `redis+sentinel://h1:p1,h2:p2/master[?db=N]`; `None` for another scheme.
    fn parse(url: &str) -> Option<Result<Self, String>> {
        let rest = url.strip_prefix("redis+sentinel://")?;
        let bad = |why: &str| Some(Err(format!("{url}: {why} (redis+sentinel://host:port[,host:port]/master[?db=N])")));
        let (hosts, path) = match rest.split_once('/') {
            Some(split) => split,
            None => return bad("no master name"),
        };
        let (master, query) = path.split_once('?').unwrap_or((path, ""));
        if master.is_empty() {
            return bad("no master name");
        }
        let db = match query.strip_prefix("db=") {
            Some(db) => match db.parse() {
                Ok(db) => db,
                Err(_) => return bad("db is not a number"),
            },
            None if query.is_empty() => 0,
            None => return bad("unknown query"),
        };
        let sentinels: Vec<String> =
            hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("redis://{h}")).collect();
        if sentinels.is_empty() {
            return bad("no sentinel address");
        }
        Some(Ok(Self { sentinels, master: master.to_owned(), db }))
    }
}

/// The nodes of a `redis+cluster://h1:p1,h2:p2` URL (as `redis://` URLs);
/// `None` for another scheme.
fn cluster_nodes(url: &str) -> Option<Result<Vec<String>, String>> {
    let rest = url.strip_prefix("redis+cluster://")?;
    let hosts = rest.strip_suffix('/').unwrap_or(rest);
    if hosts.contains(['/', '?']) {
        return Some(Err(format!("{url}: a cluster has no database or query (redis+cluster://host:port[,host:port])")));
    }
    let nodes: Vec<String> = hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("redis://{h}")).collect();
    if nodes.is_empty() {
        return Some(Err(format!("{url}: no node address (redis+cluster://host:port[,host:port])")));
    }
    Some(Ok(nodes))
}

/// Every connection to Redis: TCP keepalives
/// ([`crate::config::TCP_KEEPALIVE`]), so a primary that vanished without a
/// reset (a VM paused, a network cut) is noticed in about half a minute
/// instead of the kernel's two hours.
fn tcp_settings() -> redis::io::tcp::TcpSettings {
    use redis::io::tcp::socket2::TcpKeepalive;
    let keepalive = crate::config::TCP_KEEPALIVE;
    redis::io::tcp::TcpSettings::default().set_keepalive(
        TcpKeepalive::new().with_time(keepalive.idle).with_interval(keepalive.interval).with_retries(keepalive.probes),
    )
}

/// Whether `url` is one [`RedisConn::connect`] takes (connecting to
/// nothing): `redis://`, `rediss://`, `unix://`, `redis+sentinel://` or
/// `redis+cluster://`.
pub fn check_url(url: &str) -> Result<(), String> {
    if let Some(nodes) = cluster_nodes(url) {
        return nodes.and_then(|nodes| {
            redis::cluster::ClusterClient::new(nodes)
                .map(|_| ())
                .map_err(|e| format!("{}: {e}", crate::cli::masked_url(url)))
        });
    }
    match SentinelUrl::parse(url) {
        Some(parsed) => parsed.map(|_| ()),
        None => redis::Client::open(url).map(|_| ()).map_err(|e| format!("{}: {e}", crate::cli::masked_url(url))),
    }
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

impl SentinelPrimary {
    fn new(url: &SentinelUrl, timeout: Duration) -> redis::RedisResult<Self> {
        let node = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(redis::RedisConnectionInfo::default().set_db(url.db))
            .set_tcp_settings(tcp_settings());
        let sentinels =
            SentinelClient::build(url.sentinels.clone(), url.master.clone(), Some(node), SentinelServerType::Master)?;
        let config =
            AsyncConnectionConfig::new().set_connection_timeout(Some(timeout)).set_response_timeout(Some(timeout));
        Ok(Self { sentinels: tokio::sync::Mutex::new(sentinels), current: RwLock::new(None), config })
    }

    /// The primary's connection, asking the Sentinels when there is none.
    async fn connection(&self) -> redis::RedisResult<MultiplexedConnection> {
        if let Some(conn) = self.current.read().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(conn);
        }
        let mut sentinels = self.sentinels.lock().await;
        // Another caller may have found it while this one waited.
        if let Some(conn) = self.current.read().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(conn);
        }
        let conn = sentinels.get_async_connection_with_config(&self.config).await?;
        tracing::info!("connected to the primary Redis Sentinel names");
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// Drops the connection: the next call asks the Sentinels again.
    fn forget(&self) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// After a failed call: whether it failed the way a failover fails.
    fn judge<T>(&self, result: &redis::RedisResult<T>) {
        if let Err(error) = result {
            let moved = error.is_io_error()
                || error.is_connection_refusal()
                || error.is_connection_dropped()
                || error.is_timeout()
                || error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly);
            if moved {
                tracing::warn!(%error, "redis primary unreachable or demoted; asking the sentinels again");
                self.forget();
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_their_sentinels_and_master() {
        let url = SentinelUrl::parse("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/seckill")
            .unwrap()
            .unwrap();
        assert_eq!(url.sentinels.len(), 3);
        assert_eq!((url.master.as_str(), url.db), ("seckill", 0));
        let with_db = SentinelUrl::parse("redis+sentinel://s:1/m?db=2").unwrap().unwrap();
        assert_eq!(with_db.db, 2);
        assert!(SentinelUrl::parse("redis://127.0.0.1:6379/0").is_none(), "another scheme");
        for bad in
            ["redis+sentinel://s:1", "redis+sentinel://s:1/", "redis+sentinel:///m", "redis+sentinel://s:1/m?db=x"]
        {
            assert!(matches!(SentinelUrl::parse(bad), Some(Err(_))), "{bad}");
        }
    }

    #[test]
    fn cluster_urls_name_their_nodes() {
        let nodes = cluster_nodes("redis+cluster://127.0.0.1:7000,127.0.0.1:7001/").unwrap().unwrap();
        assert_eq!(nodes, ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]);
        assert!(cluster_nodes("redis://127.0.0.1:6379").is_none(), "another scheme");
        for bad in ["redis+cluster://", "redis+cluster://h:1/0", "redis+cluster://h:1?db=2"] {
            assert!(matches!(cluster_nodes(bad), Some(Err(_))), "{bad}");
        }
        assert!(check_url("redis+cluster://127.0.0.1:7000").is_ok());
    }
}
