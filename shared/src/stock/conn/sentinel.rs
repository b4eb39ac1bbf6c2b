//! The primary Redis Sentinel names, found again after a failover.

use super::url::{tcp_settings, SentinelUrl};
use parking_lot::RwLock;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::AsyncConnectionConfig;
use std::time::Duration;

/// The primary of a Sentinel-watched master, and how to find it again.
pub(super) struct SentinelPrimary {
    /// Asks the Sentinels (one lookup at a time).
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The connection to the primary last named; `None` after a failure
    /// that may have been a failover.
    current: RwLock<Option<MultiplexedConnection>>,
    config: AsyncConnectionConfig,
}

impl SentinelPrimary {
    pub(super) fn new(url: &SentinelUrl, timeout: Duration) -> redis::RedisResult<Self> {
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
    pub(super) async fn connection(&self) -> redis::RedisResult<MultiplexedConnection> {
        if let Some(conn) = self.current.read().clone() {
            return Ok(conn);
        }
        let mut sentinels = self.sentinels.lock().await;
        // Another caller may have found it while this one waited.
        if let Some(conn) = self.current.read().clone() {
            return Ok(conn);
        }
        let conn = sentinels.get_async_connection_with_config(&self.config).await?;
        tracing::info!("connected to the primary Redis Sentinel names");
        *self.current.write() = Some(conn.clone());
        Ok(conn)
    }

    /// Drops the connection: the next call asks the Sentinels again.
    pub(super) fn forget(&self) {
        *self.current.write() = None;
    }

    /// After a failed call: whether it failed the way a failover fails.
    pub(super) fn judge<T>(&self, result: &redis::RedisResult<T>) {
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
