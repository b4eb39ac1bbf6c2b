//! Typed settings: defaults that work with the local infra, an optional TOML
//! file (`SECKILL_CONFIG=path`) and environment overrides on top.
//!
//! The contract's variables (`SECKILL_REDIS_URL`, `SECKILL_DATABASE_URL`,
//! `SECKILL_KAFKA_BROKERS`, `SECKILL_HTTP_ADDR`, `SECKILL_ADMIN_TOKEN`,
//! `SECKILL_TOPIC_PREFIX`, `SECKILL_KEY_PREFIX`, `SECKILL_USER_JWT_SECRET`)
//! map to their keys; any other key is reachable as
//! `SECKILL__SECTION__KEY=value` (e.g. `SECKILL__ORDER__BATCH_SIZE=1000`).
//! Only `main` calls [`load`]; tests build settings in code.

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;
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
}

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
        }
    }
}

impl KafkaSettings {
    /// The bound on administrative calls.
    pub fn admin_timeout(&self) -> Duration {
        Duration::from_millis(self.admin_timeout_ms)
    }
}

/// PostgreSQL connection pool.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DbSettings {
    /// `postgres://user:password@host:port/db`.
    pub url: String,
    pub max_connections: u32,
    /// Bound on waiting for a pooled connection.
    pub acquire_timeout_ms: u64,
}

impl Default for DbSettings {
    fn default() -> Self {
        Self {
            url: "postgres://seckill:seckill@127.0.0.1:5432/seckill".into(),
            max_connections: 10,
            acquire_timeout_ms: 3_000,
        }
    }
}

/// Logging.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// JSON log lines instead of text.
    pub json: bool,
    /// Log filter: a level, then `target=level` pairs, comma-separated
    /// (`info,seckill_order=debug`); `RUST_LOG` wins when set; default `info`.
    pub filter: Option<String>,
}

/// A list setting that also reads from one environment variable: a TOML
/// array, or a comma-separated string (`SECKILL__CORS__ALLOWED_ORIGINS=a,b`).
pub fn list_or_comma_separated<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        List(Vec<String>),
        Text(String),
    }
    Ok(match Either::deserialize(deserializer)? {
        Either::List(list) => list,
        Either::Text(text) => text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect(),
    })
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

/// Environment variables of the contract, and the key each one sets. Their
/// values are always strings.
const CONTRACT_VARS: &[(&str, &[&str])] = &[
    ("SECKILL_REDIS_URL", &["redis", "url"]),
    ("SECKILL_KEY_PREFIX", &["redis", "key_prefix"]),
    ("SECKILL_DATABASE_URL", &["database", "url"]),
    ("SECKILL_KAFKA_BROKERS", &["kafka", "brokers"]),
    ("SECKILL_TOPIC_PREFIX", &["kafka", "topic_prefix"]),
    ("SECKILL_HTTP_ADDR", &["http_addr"]),
    ("SECKILL_ADMIN_TOKEN", &["admin_token"]),
    ("SECKILL_USER_JWT_SECRET", &["user_jwt_secret"]),
    ("SECKILL_PAYMENT_WEBHOOK_SECRET", &["payment_webhook_secret"]),
    ("SECKILL_USER_JWKS", &["user_jwks"]),
    ("SECKILL_USER_JWT_AUDIENCE", &["user_jwt_audience"]),
    ("SECKILL_USER_JWT_ISSUER", &["user_jwt_issuer"]),
];

/// Whether a key the settings do not have is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownKeys {
    /// A service: a misspelt key must not be silently ignored.
    Refuse,
    /// The operator's tool, which shares its environment with every service
    /// and reads only the servers' parts of it.
    Ignore,
}

/// Loads settings: defaults, then the TOML file named by `SECKILL_CONFIG`,
/// then environment overrides. A bad key or value fails naming it.
pub fn load<T: DeserializeOwned + Serialize + Default>(unknown: UnknownKeys) -> anyhow::Result<T> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    load_from(std::env::var("SECKILL_CONFIG").ok().as_deref(), &vars, unknown)
}

/// [`load`] with the file and the environment given, for tests.
pub fn load_from<T: DeserializeOwned + Serialize + Default>(
    file: Option<&str>,
    vars: &[(String, String)],
    unknown: UnknownKeys,
) -> anyhow::Result<T> {
    let mut table = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading SECKILL_CONFIG file {path}"))?;
            text.parse::<toml::Table>().with_context(|| format!("parsing {path}"))?
        }
        None => toml::Table::new(),
    };
    // Contract variables are shared by every service in an environment; a
    // service whose settings have no such section or key (the order service
    // has no admin token) ignores it, while a file or SECKILL__ key it lacks
    // still fails. The settings' own defaults say which keys exist.
    let schema = serde_json::to_value(T::default()).context("describing the settings")?;
    for (name, value) in vars {
        if let Some((_, path)) = CONTRACT_VARS.iter().find(|(var, _)| var == name) {
            let known = path.iter().try_fold(&schema, |node, part| node.get(part)).is_some();
            if known {
                set_path(&mut table, path, toml::Value::String(value.clone()), name)?;
            }
        } else if let Some(rest) = name.strip_prefix("SECKILL__") {
            let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
            if path.iter().any(String::is_empty) {
                bail!("environment variable {name}: empty key segment");
            }
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            // A secret is text whatever it looks like: read as a number, it
            // would be refused in a message that shows it.
            let secret = path.last().is_some_and(|key| crate::cli::SECRET_KEYS.contains(key));
            let value = if secret { toml::Value::String(value.clone()) } else { infer_value(value) };
            set_path(&mut table, &path, value, name)?;
        }
    }
    match unknown {
        UnknownKeys::Refuse => refuse_unknown_keys(&table, &schema, "")?,
        UnknownKeys::Ignore => drop_unknown_keys(&mut table, &schema),
    }
    // What is given goes over the settings' own defaults, key by key: a
    // service's defaults for the parts it flattens in (its metrics port, its
    // pool size) hold, which serde's per-struct defaults would not do.
    let mut settings = toml::Value::try_from(T::default()).context("describing the settings")?;
    overlay(&mut settings, toml::Value::Table(table));
    T::deserialize(settings).map_err(|e| anyhow::anyhow!("invalid settings: {e}"))
}

/// Puts `given` over `base`: tables merge key by key, anything else replaces.
fn overlay(base: &mut toml::Value, given: toml::Value) {
    match (base, given) {
        (toml::Value::Table(base), toml::Value::Table(given)) => {
            for (key, value) in given {
                match base.get_mut(&key) {
                    Some(existing) => overlay(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, given) => *base = given,
    }
}

/// Removes the keys of `table` the settings do not have.
fn drop_unknown_keys(table: &mut toml::Table, schema: &serde_json::Value) {
    let Some(known) = schema.as_object() else { return };
    table.retain(|key, _| known.contains_key(key));
    for (key, value) in table.iter_mut() {
        if let toml::Value::Table(inner) = value {
            drop_unknown_keys(inner, &known[key]);
        }
    }
}

/// Fails naming the first key of `table` that the settings do not have
/// (`schema`: the defaults, serialized). Settings structs flatten shared
/// parts, which serde's `deny_unknown_fields` cannot check, so the check is
/// made here, once, for every service.
fn refuse_unknown_keys(table: &toml::Table, schema: &serde_json::Value, path: &str) -> anyhow::Result<()> {
    let Some(known) = schema.as_object() else { return Ok(()) };
    for (key, value) in table {
        let name = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
        let Some(expected) = known.get(key) else { bail!("unknown setting '{name}'") };
        if let toml::Value::Table(inner) = value {
            refuse_unknown_keys(inner, expected, &name)?;
        }
    }
    Ok(())
}

fn infer_value(raw: &str) -> toml::Value {
    if let Ok(n) = raw.parse::<i64>() {
        return toml::Value::Integer(n);
    }
    if let Ok(b) = raw.parse::<bool>() {
        return toml::Value::Boolean(b);
    }
    if let Ok(f) = raw.parse::<f64>() {
        return toml::Value::Float(f);
    }
    toml::Value::String(raw.to_owned())
}

fn set_path(table: &mut toml::Table, path: &[&str], value: toml::Value, var: &str) -> anyhow::Result<()> {
    let (last, parents) = path.split_last().expect("paths are never empty");
    let mut current = table;
    for part in parents {
        let entry = current.entry((*part).to_owned()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = match entry {
            toml::Value::Table(t) => t,
            _ => bail!("environment variable {var}: '{part}' is not a section"),
        };
    }
    current.insert((*last).to_owned(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Serialize, Deserialize, Default)]
    #[serde(default, deny_unknown_fields)]
    struct Sample {
        http_addr: String,
        admin_token: Option<String>,
        redis: RedisSettings,
        kafka: KafkaSettings,
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn contract_variables_set_their_keys_as_strings() {
        let s: Sample = load_from(
            None,
            &vars(&[
                ("SECKILL_ADMIN_TOKEN", "12345"),
                ("SECKILL_KEY_PREFIX", "t1:"),
                ("SECKILL_HTTP_ADDR", "0.0.0.0:1"),
            ]),
            UnknownKeys::Refuse,
        )
        .unwrap();
        assert_eq!(s.admin_token.as_deref(), Some("12345"), "a numeric-looking token stays a string");
        assert_eq!(s.redis.key_prefix, "t1:");
        assert_eq!(s.http_addr, "0.0.0.0:1");
        assert_eq!(s.kafka.brokers, "127.0.0.1:9092", "untouched keys keep their defaults");
    }

    #[derive(Debug, Serialize, Deserialize, Default)]
    #[serde(default, deny_unknown_fields)]
    struct NoHttp {
        redis: RedisSettings,
    }

    #[test]
    fn contract_variables_a_service_lacks_are_ignored() {
        let s: NoHttp = load_from(
            None,
            &vars(&[("SECKILL_ADMIN_TOKEN", "x"), ("SECKILL_HTTP_ADDR", "y"), ("SECKILL_KEY_PREFIX", "p:")]),
            UnknownKeys::Refuse,
        )
        .unwrap();
        assert_eq!(s.redis.key_prefix, "p:");
    }

    #[test]
    fn nested_overrides_are_typed() {
        let s: Sample =
            load_from(None, &vars(&[("SECKILL__KAFKA__ORDER_PARTITIONS", "3")]), UnknownKeys::Refuse).unwrap();
        assert_eq!(s.kafka.order_partitions, 3);
    }

    #[test]
    fn unknown_keys_in_a_file_are_named() {
        let dir = std::env::temp_dir().join(format!("seckill-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "[kafka]\nbrokers = \"b:1\"\nlinger = 3\n").unwrap();
        let err = load_from::<Sample>(path.to_str(), &[], UnknownKeys::Refuse).unwrap_err();
        assert!(err.to_string().contains("kafka.linger"), "{err}");
        std::fs::write(&path, "typo_addr = \"x\"\n").unwrap();
        let err = load_from::<Sample>(path.to_str(), &[], UnknownKeys::Refuse).unwrap_err();
        assert!(err.to_string().contains("typo_addr"), "{err}");
    }

    #[test]
    fn a_bad_key_is_named() {
        let err =
            load_from::<Sample>(None, &vars(&[("SECKILL__KAFKA__NO_SUCH_KEY", "1")]), UnknownKeys::Refuse).unwrap_err();
        assert!(err.to_string().contains("no_such_key"), "{err}");
        let err =
            load_from::<Sample>(None, &vars(&[("SECKILL__KAFKA__ORDER_PARTITIONS", "many")]), UnknownKeys::Refuse)
                .unwrap_err();
        assert!(err.to_string().contains("order_partitions") || err.to_string().contains("invalid type"), "{err}");
    }
}
