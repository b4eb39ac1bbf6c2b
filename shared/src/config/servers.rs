//! The servers a service talks to — Redis, Kafka, PostgreSQL — and its
//! logging, each a typed part the services' settings are built from, with
//! defaults that work with the local infra; and the lease and wait of one
//! use of the distributed lock.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Redis connection and key layout.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisSettings {
    /// `redis://host:port/db`.
    pub url: String,
    /// Prefix of every key, so deployments (and tests) never share data.
    pub key_prefix: String,
    /// Bound on every Redis call.
    pub timeout_ms: u64,
    /// How long a deduction call's outcome is kept, so a caller that did
    /// not hear it can ask again (or void it) instead of guessing.
    pub call_outcome_ms: u64,
    /// Replicas that must confirm a deduction (`WAIT`, once per batch)
    /// before it is answered 202; unset: 1 when the topology has a replica
    /// (a Sentinel URL, or a primary with replicas connected at start), 0
    /// on one node.
    pub min_replica_acks: Option<u32>,
    /// How long a deduction waits for its replicas' confirmation before it
    /// is undone and answered 503.
    pub replica_ack_timeout_ms: u64,
    /// How long a sale's keys outlive its end and its payment window (the
    /// last order's deadline): then every key of the sale expires, whichever
    /// script created it. A sale without an end keeps its keys until it is
    /// closed (`seckillctl sale close`).
    pub sale_key_margin_secs: u64,
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379/0".into(),
            key_prefix: String::new(),
            timeout_ms: 2_000,
            call_outcome_ms: 60_000,
            min_replica_acks: None,
            replica_ack_timeout_ms: 1_000,
            sale_key_margin_secs: 3_600,
        }
    }
}

/// TCP keepalives on every connection to Redis and PostgreSQL: after
/// `idle` without traffic, a probe every `interval`, the peer given up
/// after `probes` unanswered — a peer that vanished without a reset (a VM
/// paused, a network cut) is noticed in about 25 s instead of the kernel's
/// default two hours.
#[derive(Debug, Clone, Copy)]
pub struct TcpKeepalive {
    pub idle: std::time::Duration,
    pub interval: std::time::Duration,
    pub probes: u32,
}

/// The project's keepalives (see [`TcpKeepalive`]).
pub const TCP_KEEPALIVE: TcpKeepalive =
    TcpKeepalive { idle: std::time::Duration::from_secs(10), interval: std::time::Duration::from_secs(5), probes: 3 };

/// Kafka brokers, topic names and client tuning.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaSettings {
    /// `host:port[,host:port]`.
    pub brokers: String,
    /// Prefix of both topic names and both consumer group ids, so parallel
    /// deployments and tests never share them.
    pub topic_prefix: String,
    /// Partitions of `seckill.orders` when the project creates it.
    pub order_partitions: i32,
    /// Partitions of `seckill.orders.dlq` when the project creates it.
    pub dlq_partitions: i32,
    /// Replication factor of the topics the services create; 0 (the
    /// default): as many brokers as the cluster has, at most 3 — never
    /// silently 1 on a three-broker cluster.
    pub replication_factor: i32,
    /// `min.insync.replicas` of created topics; 0 (the default): 2 when
    /// replicated three ways or more, else 1.
    pub min_insync_replicas: i32,
    /// How long the producer tries before a delivery fails.
    pub message_timeout_ms: u64,
    /// How long the producer waits to batch records.
    pub linger_ms: u64,
    /// Consumer session timeout: how fast a dead member's partitions move.
    pub session_timeout_ms: u64,
    /// A consumer's fetch is answered once this much is waiting (or after
    /// 50 ms). Under a steady stream a fetch per few records cost the broker
    /// and the order service more CPU than the records themselves: at 64 KiB,
    /// a sale consumed while it sells spent 140–150 µs of the machine per
    /// order instead of 200–220, and the edge's throughput rose by a third.
    /// A lone record waits at most the 50 ms.
    pub fetch_min_bytes: u32,
    /// Bound on metadata, watermark, offset and topic-creation calls.
    pub admin_timeout_ms: u64,
    /// `ce_source` of every order event (its CloudEvents headers): a URI
    /// naming the shop's pipeline.
    pub cloudevents_source: String,
}

/// `ce_source` when `kafka.cloudevents_source` is not set.
pub const DEFAULT_CLOUDEVENTS_SOURCE: &str = "urn:seckill:order-events";

impl Default for KafkaSettings {
    fn default() -> Self {
        Self {
            brokers: "127.0.0.1:9092".into(),
            topic_prefix: String::new(),
            order_partitions: 8,
            dlq_partitions: 2,
            replication_factor: 0,
            min_insync_replicas: 0,
            message_timeout_ms: 5_000,
            linger_ms: 1,
            session_timeout_ms: 10_000,
            fetch_min_bytes: 65_536,
            admin_timeout_ms: 10_000,
            cloudevents_source: DEFAULT_CLOUDEVENTS_SOURCE.into(),
        }
    }
}

impl KafkaSettings {
    /// The bound on administrative calls.
    pub fn admin_timeout(&self) -> Duration {
        Duration::from_millis(self.admin_timeout_ms)
    }
}

/// PostgreSQL connection pool, and the bounds on every wait for the
/// server: what PostgreSQL itself ends (a statement, a lock wait, a
/// transaction left idle) and what the client ends when the server says
/// nothing at all (a frozen or cut-off host).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DbSettings {
    /// `postgres://user:password@host:port/db`.
    pub url: String,
    pub max_connections: u32,
    /// Bound on waiting for a pooled connection.
    pub acquire_timeout_ms: u64,
    /// PostgreSQL's `statement_timeout` for every session of the pipeline:
    /// a statement running longer is cancelled by the server (SQLSTATE
    /// 57014, retried as transient). Migrations run without it.
    pub statement_timeout_ms: u64,
    /// PostgreSQL's `lock_timeout`: a statement waiting longer for a lock
    /// (a row another transaction holds) is cancelled (55P03, transient).
    pub lock_timeout_ms: u64,
    /// PostgreSQL's `idle_in_transaction_session_timeout`: a session that
    /// keeps a transaction open without a statement for longer is ended by
    /// the server, its locks released and its snapshot no longer holding
    /// the relay back.
    pub idle_in_transaction_timeout_ms: u64,
    /// `TCP_USER_TIMEOUT` of both ends of every connection (the client's
    /// socket, and the server's `tcp_user_timeout`): data unacknowledged
    /// this long — a host that vanished without a reset — ends the
    /// connection. Beside it, TCP keepalives on both ends notice an idle
    /// connection's peer gone in about 25 s.
    pub tcp_user_timeout_ms: u64,
    /// The client's own deadline on one unit of work (a batch written, a
    /// relay turn, a lease renewed, a connection given back to the pool):
    /// what bounds a wait on a server that accepts bytes and never answers
    /// (a frozen process; a proxy that holds answers), which neither the
    /// server's timeouts nor TCP can notice. Longer than
    /// `statement_timeout_ms`, so a server that answers ends its own
    /// statements first.
    pub call_deadline_ms: u64,
}

impl Default for DbSettings {
    fn default() -> Self {
        Self {
            url: "postgres://seckill:seckill@127.0.0.1:5432/seckill".into(),
            max_connections: 10,
            acquire_timeout_ms: 3_000,
            statement_timeout_ms: 10_000,
            lock_timeout_ms: 5_000,
            idle_in_transaction_timeout_ms: 15_000,
            tcp_user_timeout_ms: 10_000,
            call_deadline_ms: 15_000,
        }
    }
}

impl DbSettings {
    /// The client's deadline on one unit of work.
    pub fn call_deadline(&self) -> Duration {
        Duration::from_millis(self.call_deadline_ms)
    }

    /// Refuses bounds that are zero (PostgreSQL reads 0 as "no bound") or
    /// out of order, naming the setting.
    pub fn check(&self) -> anyhow::Result<()> {
        for (name, value) in [
            ("database.max_connections", u64::from(self.max_connections)),
            ("database.acquire_timeout_ms", self.acquire_timeout_ms),
            ("database.statement_timeout_ms", self.statement_timeout_ms),
            ("database.lock_timeout_ms", self.lock_timeout_ms),
            ("database.idle_in_transaction_timeout_ms", self.idle_in_transaction_timeout_ms),
            ("database.tcp_user_timeout_ms", self.tcp_user_timeout_ms),
            ("database.call_deadline_ms", self.call_deadline_ms),
        ] {
            if value == 0 {
                anyhow::bail!("{name} must be above 0: every wait on PostgreSQL has a bound");
            }
        }
        if self.lock_timeout_ms > self.statement_timeout_ms {
            anyhow::bail!(
                "database.lock_timeout_ms ({}) must not exceed database.statement_timeout_ms ({})",
                self.lock_timeout_ms,
                self.statement_timeout_ms
            );
        }
        if self.call_deadline_ms <= self.statement_timeout_ms {
            anyhow::bail!(
                "database.call_deadline_ms ({}) must exceed database.statement_timeout_ms ({}): a server that answers ends its own statements first",
                self.call_deadline_ms,
                self.statement_timeout_ms
            );
        }
        Ok(())
    }
}

/// Logging, and the spans exported over OTLP.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// JSON log lines instead of text.
    pub json: bool,
    /// Log filter: a level, then `target=level` pairs, comma-separated
    /// (`info,seckill_order=debug`); `RUST_LOG` wins when set; default `info`.
    pub filter: Option<String>,
    /// Where spans are exported, OTLP over HTTP/protobuf (the collector's
    /// base URL, `http://127.0.0.1:4318`; `/v1/traces` is added); unset,
    /// nothing is exported (`SECKILL_OTLP_ENDPOINT`).
    pub otlp_endpoint: Option<String>,
    /// The share of traces started here that are exported (0 to 1); a
    /// trace the buyer's `traceparent` marks sampled, or not, keeps that.
    pub otlp_sample_ratio: f64,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self { json: false, filter: None, otlp_endpoint: None, otlp_sample_ratio: 1.0 }
    }
}

/// Refuses an endpoint that is no `http://` URL with a host (what
/// `--check-config` runs): the exporter speaks plain HTTP only.
pub fn check_endpoint(endpoint: &str) -> anyhow::Result<()> {
    let rest = endpoint.strip_prefix("http://").ok_or_else(|| {
        anyhow::anyhow!("telemetry.otlp_endpoint (SECKILL_OTLP_ENDPOINT) {endpoint:?}: an http:// URL (OTLP over HTTP/protobuf, no TLS), e.g. http://127.0.0.1:4318")
    })?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || host.contains(char::is_whitespace) {
        anyhow::bail!("telemetry.otlp_endpoint (SECKILL_OTLP_ENDPOINT) {endpoint:?}: no host");
    }
    Ok(())
}

impl TelemetrySettings {
    /// Refuses an endpoint the exporter cannot use and a ratio outside 0–1.
    pub fn check(&self) -> anyhow::Result<()> {
        if let Some(endpoint) = &self.otlp_endpoint {
            check_endpoint(endpoint)?;
        }
        if !(0.0..=1.0).contains(&self.otlp_sample_ratio) {
            anyhow::bail!("telemetry.otlp_sample_ratio {} is not between 0 and 1", self.otlp_sample_ratio);
        }
        Ok(())
    }
}

/// The servers a service talks to, and its logging. Flattened into each
/// service's settings: the keys `redis`, `kafka`, `database` and
/// `telemetry` stay top-level sections.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Servers {
    pub redis: RedisSettings,
    pub kafka: KafkaSettings,
    pub database: DbSettings,
    pub telemetry: TelemetrySettings,
}

/// Lease and wait of one use of the distributed lock.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LockSettings {
    /// How long a lock lives without renewal.
    pub lease_ms: u64,
    /// How long an acquire waits before giving up.
    pub wait_ms: u64,
}

impl Default for LockSettings {
    fn default() -> Self {
        // The seed's values.
        Self { lease_ms: 3_000, wait_ms: 200 }
    }
}

impl LockSettings {
    /// The warm-up lock's defaults: a warm-up writes PostgreSQL and Redis
    /// under it, so its lease (renewed by a watchdog) is long, and a second
    /// warm-up of the same sale waits a little, then is told the sale is busy.
    pub fn warmup() -> Self {
        Self { lease_ms: 10_000, wait_ms: 500 }
    }

    /// The lease.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }
    /// The wait.
    pub fn wait(&self) -> Duration {
        Duration::from_millis(self.wait_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_http_url_with_a_host_is_an_endpoint() {
        for (endpoint, ok) in [
            ("http://127.0.0.1:4318", true),
            ("http://otel-collector.observability:4318/", true),
            ("https://collector:4318", false),
            ("collector:4318", false),
            ("http://", false),
            ("http:///v1/traces", false),
        ] {
            assert_eq!(check_endpoint(endpoint).is_ok(), ok, "{endpoint}");
        }
    }
}
