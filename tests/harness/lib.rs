//! The end-to-end test harness: each test gets its own database, Redis key
//! prefix, topic prefix and sale ids, so tests never see each other's data;
//! services run in-process (or as child processes, for `kill -9`) against
//! the real Redis, Kafka and PostgreSQL of `infra/local/up.sh`.
//!
//! Missing infrastructure fails loudly: nothing here skips a test.

pub mod chaos;
mod database;
pub mod doc_commands;
pub mod draw;
pub mod http;
pub mod pg_ha;
pub mod private_postgres;
pub mod proxy;
pub mod redis_cluster;
mod relay_turns;
pub mod rust_code;
mod sale;
pub mod schemas;
mod services;
pub mod sockets;
mod topics;

pub use relay_turns::relay_rows;
pub use services::{Child, CtlOutput, Running};
pub use topics::Group;

/// The hash a script of `lua/` is called by (EVALSHA), as a client that
/// loads it computes it: what a proxy holding calls can look for.
pub fn script_sha(name: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(format!("lua/{name}.lua"))).expect("the script");
    redis::Script::new(&text).get_hash().to_owned()
}

use seckill_shared::config::{DbSettings, KafkaSettings, RedisSettings, Servers};
use seckill_shared::domain::SaleKey;
use seckill_shared::ops::host::{RetrySettings, ServiceSettings};
use seckill_shared::stock::Stock;
use sqlx::{Connection, PgPool};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The admin token the harness configures.
pub const ADMIN_TOKEN: &str = "test-admin-token";

/// The bound on one PostgreSQL call of a warm-up or a close the tests run
/// themselves (as `database.call_deadline_ms` bounds the services').
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

const ADMIN_DATABASE_URL: &str = "postgres://seckill:seckill@127.0.0.1:5432/seckill";

/// Which servers a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One Redis, one Kafka broker (`infra/local/up.sh`): every test but the
    /// replicated topology's.
    Single,
    /// Three Kafka brokers, Redis with Sentinel, HAProxy in front of the
    /// edges (`infra/local/up.sh --cluster`).
    Cluster,
    /// One Kafka broker, a Redis Cluster of three primaries with a replica
    /// each (`infra/local/up.sh --redis-cluster`).
    RedisCluster,
}

/// The Redis Cluster topology's nodes, as every service finds them.
pub const REDIS_CLUSTER_URL: &str = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002";

/// The replicated topology's Redis, as every service finds it.
pub const CLUSTER_REDIS_URL: &str = "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/seckill";
/// The replicated topology's brokers.
pub const CLUSTER_BROKERS: &str = "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096";

/// The Redis Cluster the single-node tests run against instead of the single
/// Redis, when `SECKILL_TEST_REDIS_URL` names one (`make
/// test-redis-cluster`: `redis+cluster://127.0.0.1:7000,...`).
pub fn redis_cluster_url() -> Option<String> {
    std::env::var("SECKILL_TEST_REDIS_URL").ok().filter(|url| !url.is_empty())
}

/// One test's isolated world.
pub struct TestEnv {
    /// Unique id of this test run.
    pub id: String,
    /// The servers it runs against.
    pub topology: Topology,
    /// Redis settings with this test's key prefix.
    pub redis: RedisSettings,
    /// Kafka settings with this test's topic prefix.
    pub kafka: KafkaSettings,
    /// Settings of this test's own database.
    pub database: DbSettings,
    /// Name of this test's database.
    pub database_name: String,
    /// Redis access with the test's prefix.
    pub stock: Stock,
    /// This test's database.
    pub db: PgPool,
    /// The superuser's URL on the server holding the database.
    admin_database_url: String,
}

impl TestEnv {
    /// A fresh, migrated database, a key prefix and a topic prefix (topics
    /// created).
    pub async fn new() -> Self {
        Self::with_partitions(4).await
    }

    /// A test on the replicated topology.
    /// (On the Redis Cluster, every node thawed first: a test that failed
    /// half-way may have left one frozen.)
    pub async fn on(topology: Topology) -> Self {
        if topology == Topology::RedisCluster {
            redis_cluster::thaw_all();
        }
        Self::build(topology, 4).await
    }

    /// Like [`TestEnv::new`] with `partitions` partitions on the orders topic.
    pub async fn with_partitions(partitions: i32) -> Self {
        Self::build(Topology::Single, partitions).await
    }

    /// A test whose database lives on a server of its own.
    pub async fn on_private_postgres(server: &private_postgres::PrivatePostgres) -> Self {
        Self::build_on(Topology::Single, 4, &server.admin_url(), |name| server.url(name)).await
    }

    async fn build(topology: Topology, partitions: i32) -> Self {
        Self::build_on(topology, partitions, ADMIN_DATABASE_URL, |name| {
            format!("postgres://seckill:seckill@127.0.0.1:5432/{name}")
        })
        .await
    }

    async fn build_on(
        topology: Topology,
        partitions: i32,
        admin_url: &str,
        database_url: impl Fn(&str) -> String,
    ) -> Self {
        let id = format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
        let mut redis = RedisSettings { key_prefix: format!("t{id}:"), ..RedisSettings::default() };
        let mut kafka = KafkaSettings {
            topic_prefix: format!("t{id}."),
            order_partitions: partitions,
            dlq_partitions: 2,
            session_timeout_ms: 6_000,
            ..KafkaSettings::default()
        };
        if topology == Topology::Cluster {
            redis.url = CLUSTER_REDIS_URL.into();
            kafka.brokers = CLUSTER_BROKERS.into();
        } else if topology == Topology::RedisCluster {
            redis.url = REDIS_CLUSTER_URL.into();
        } else if let Some(url) = redis_cluster_url() {
            redis.url = url;
        }
        let database_name = format!("seckill_t{id}");
        let mut admin = sqlx::PgConnection::connect(admin_url)
            .await
            .expect("PostgreSQL must run on 127.0.0.1:5432 (infra/local/up.sh)");
        // A database name cannot be a bind parameter; this one is the harness's own hex id.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database_name}")))
            .execute(&mut admin)
            .await
            .expect("creating the test database");
        let database = DbSettings { url: database_url(&database_name), max_connections: 8, ..DbSettings::default() };
        let db = seckill_shared::db::connect_lazy(&database).expect("database settings");
        seckill_shared::db::migrate(&db).await.expect("migrating the test database");
        let stock = Stock::connect(&redis).await.unwrap_or_else(|e| {
            panic!("Redis must answer at {} (infra/local/up.sh [--redis-cluster]): {e}", redis.url)
        });
        seckill_shared::kafka::ensure_topics(&kafka)
            .await
            .expect("Kafka must run on 127.0.0.1:9092 (infra/local/up.sh)");
        Self {
            id,
            topology,
            redis,
            kafka,
            database,
            database_name,
            stock,
            db,
            admin_database_url: admin_url.to_owned(),
        }
    }

    /// A sale id pair no other test uses.
    pub fn sale(&self) -> SaleKey {
        let activity = 1_000 + (rand::random::<u32>() % 1_000_000) as i64;
        SaleKey::from_raw(activity, 2_001).expect("positive ids")
    }

    /// The topic names.
    pub fn topics(&self) -> seckill_shared::kafka::Topics {
        seckill_shared::kafka::Topics::new(&self.kafka)
    }

    /// Edge settings for this test (port 0 for buyers and for operators,
    /// admin token set).
    pub fn edge_settings(&self) -> seckill_edge::Settings {
        seckill_edge::Settings {
            http_addr: "127.0.0.1:0".into(),
            admin_addr: "127.0.0.1:0".into(),
            console: seckill_edge::settings::ConsoleSettings {
                ctl_binary: binary("seckillctl").display().to_string(),
                ..Default::default()
            },
            admin_token: Some(ADMIN_TOKEN.into()),
            payment_webhook_secret: Some(http::WEBHOOK_SECRET.into()),
            // The tests act for users by id; tests of identity turn it off.
            auth: seckill_edge::settings::AuthSettings { allow_anonymous: true, ..Default::default() },
            servers: self.servers(),
            ..seckill_edge::Settings::default()
        }
    }

    /// The servers of this test (its prefixes, its database).
    pub fn servers(&self) -> Servers {
        Servers {
            redis: self.redis.clone(),
            kafka: self.kafka.clone(),
            database: self.database.clone(),
            ..Servers::default()
        }
    }

    /// What both consuming services get in tests: a free port, short retries.
    fn service(&self) -> ServiceSettings {
        ServiceSettings {
            retry: RetrySettings { max_ms: 1_000, ..RetrySettings::default() },
            ..ServiceSettings::default()
        }
    }

    /// Order service settings for this test (port 0).
    pub fn order_settings(&self) -> seckill_order::Settings {
        seckill_order::Settings {
            service: self.service(),
            servers: self.servers(),
            ..seckill_order::Settings::default()
        }
    }

    /// Compensator settings for this test (port 0, short sweeper grace).
    pub fn compensator_settings(&self) -> seckill_compensator::Settings {
        let mut settings = seckill_compensator::Settings {
            service: self.service(),
            servers: self.servers(),
            ..seckill_compensator::Settings::default()
        };
        settings.servers.kafka.message_timeout_ms = 1_000;
        settings.servers.database.max_connections = 4;
        settings.sweeper.grace_ms = 1_000;
        settings.sweeper.interval_ms = 300;
        settings.sweeper.lock_lease_ms = 3_000;
        settings
    }
}

/// Polls `check` until it returns `Some`, or panics after `timeout` with
/// `what` and the last value seen.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        match check().await {
            Ok(value) => return value,
            Err(seen) => last = seen,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
}

/// Waits until the edge behind `client` answers `/readyz` with 200 (its
/// producer gets its id with its first statistics, about a second after it
/// starts) and returns that answer.
pub async fn wait_ready(client: &http::Client) -> http::Reply {
    eventually("the edge to be ready", Duration::from_secs(30), || async {
        let reply = client.get("/readyz").await;
        if reply.status == 200 {
            Ok(reply)
        } else {
            Err(format!("{} {}", reply.status, reply.text))
        }
    })
    .await
}

/// The repository's root (where `Cargo.toml` of the workspace is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A project binary built next to the test executable.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (make test does)",
        path.display()
    );
    path
}
