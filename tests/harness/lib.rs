//! The end-to-end test harness: each test gets its own database, Redis key
//! prefix, topic prefix and sale ids, so tests never see each other's data;
//! services run in-process (or as child processes, for `kill -9`) against
//! the real Redis, Kafka and PostgreSQL of `infra/local/up.sh`.
//!
//! Missing infrastructure fails loudly: nothing here skips a test.

pub mod chaos;
pub mod http;
pub mod private_postgres;
pub mod proxy;
pub mod redis_cluster;
pub mod schemas;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use seckill_shared::config::{DbSettings, KafkaSettings, LockSettings, RedisSettings, Servers};
use seckill_shared::domain::{OrderId, OrderRecord, SaleKey, UserId};
use seckill_shared::ops::host::{RetrySettings, ServiceSettings};
use seckill_shared::ops::lock::LockClient;
use seckill_shared::ops::shutdown::Background;
use seckill_shared::stock::Stock;
use sqlx::{Connection, PgPool};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The admin token the harness configures.
pub const ADMIN_TOKEN: &str = "test-admin-token";

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
    pub async fn on(topology: Topology) -> Self {
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
        let database = DbSettings { url: database_url(&database_name), max_connections: 8, acquire_timeout_ms: 3_000 };
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

    /// Edge settings for this test (port 0, admin token set).
    pub fn edge_settings(&self) -> seckill_edge::Settings {
        seckill_edge::Settings {
            http_addr: "127.0.0.1:0".into(),
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

    /// One order-service worker over this test's servers, driven by the test
    /// turn by turn ([`seckill_order::consumer::Worker::try_execute_batch`]).
    pub async fn order_worker(&self) -> seckill_order::consumer::Worker {
        let settings = std::sync::Arc::new(self.order_settings());
        let connections = self.connections();
        let dead_letters =
            seckill_order::dead_letters::DeadLetters::new(&settings.servers.kafka, connections.topics.dlq.clone())
                .expect("dead-letter producer");
        seckill_order::consumer::Worker::new(0, settings, connections, dead_letters).expect("a worker")
    }

    /// Starts an edge in this process.
    pub async fn spawn_edge(&self, settings: seckill_edge::Settings) -> Running {
        let app = seckill_edge::Application::build(settings).await.expect("building the edge");
        Self::run_edge(app)
    }

    /// Runs an edge the test built itself (to keep a handle on its parts).
    pub fn run_edge(app: seckill_edge::Application) -> Running {
        let addr = app.local_addr();
        Running::spawn(addr, |shutdown| app.run(shutdown))
    }

    /// Everything the consuming services work with, over this test's servers.
    pub fn connections(&self) -> seckill_shared::ops::host::Connections {
        seckill_shared::ops::host::Connections { stock: self.stock.clone(), db: self.db.clone(), topics: self.topics() }
    }

    /// Starts an order service in this process.
    pub async fn spawn_order(&self, settings: seckill_order::Settings) -> Running {
        let service = seckill_order::Service::build(settings).await.expect("building the order service");
        let addr = service.health_addr();
        Running::spawn(addr, |shutdown| service.run(shutdown))
    }

    /// Starts a compensator in this process.
    pub async fn spawn_compensator(&self, settings: seckill_compensator::Settings) -> Running {
        let service = seckill_compensator::Service::build(settings).await.expect("building the compensator");
        let addr = service.health_addr();
        Running::spawn(addr, |shutdown| service.run(shutdown))
    }

    /// The environment a child process of the project needs to join this test.
    pub fn child_env(&self) -> Vec<(String, String)> {
        vec![
            ("SECKILL_REDIS_URL".into(), self.redis.url.clone()),
            ("SECKILL_KEY_PREFIX".into(), self.redis.key_prefix.clone()),
            ("SECKILL_KAFKA_BROKERS".into(), self.kafka.brokers.clone()),
            ("SECKILL_TOPIC_PREFIX".into(), self.kafka.topic_prefix.clone()),
            ("SECKILL__KAFKA__ORDER_PARTITIONS".into(), self.kafka.order_partitions.to_string()),
            ("SECKILL__KAFKA__SESSION_TIMEOUT_MS".into(), self.kafka.session_timeout_ms.to_string()),
            ("SECKILL_DATABASE_URL".into(), self.database.url.clone()),
            ("SECKILL_ADMIN_TOKEN".into(), ADMIN_TOKEN.into()),
            ("RUST_LOG".into(), "warn".into()),
        ]
    }

    /// Warms a sale up with `stock` units through the shared warm-up code.
    pub async fn warmup(&self, sale: SaleKey, stock: i64) {
        self.warmup_with_window(sale, stock, seckill_shared::sales::DEFAULT_PAYMENT_WINDOW_SECONDS).await;
    }

    /// Warms `sale` up with `stock` units and a payment window of `window` s.
    pub async fn warmup_with_window(&self, sale: SaleKey, stock: i64, window: i64) {
        self.warmup_round(sale, stock, window, 1, true).await.expect("warming up");
    }

    /// Warms `sale` up with `stock` units spread over `buckets` buckets
    /// (`force`: even with orders in flight).
    pub async fn warmup_round(
        &self,
        sale: SaleKey,
        stock: i64,
        window: i64,
        buckets: u32,
        force: bool,
    ) -> Result<seckill_shared::db::SaleRow, seckill_shared::sales::WarmupError> {
        let request = seckill_shared::sales::WarmupRequest {
            id: None,
            sale,
            stock,
            starts_at: None,
            ends_at: None,
            force,
            payment_window_seconds: window,
            buckets,
        };
        let locks = LockClient::new(self.stock.connection(), Background::default());
        seckill_shared::sales::warmup(&self.stock, &self.db, &locks, &LockSettings::warmup(), &request).await
    }

    /// Deducts a unit for `user` as the edge would, without publishing (an
    /// edge that died right after the deduction), and returns the record
    /// the edge would have sent. The publish deadline is 5 s (as an edge
    /// with a 3 s delivery timeout): the sweeper settles the order after
    /// that, not before a test has sent its record or dead letter.
    pub async fn deduct(&self, sale: SaleKey, user: i64) -> OrderRecord {
        self.try_deduct(sale, user).await.unwrap_or_else(|other| panic!("deduction refused: {other:?}"))
    }

    /// [`TestEnv::deduct`], or what the deduction answered instead.
    pub async fn try_deduct(&self, sale: SaleKey, user: i64) -> Result<OrderRecord, seckill_shared::stock::Deduction> {
        let user = UserId::new(user).expect("positive user");
        let nonce = format!("{:016x}", rand::random::<u64>());
        // Right after a Redis failover the first call on the old connection
        // fails while the connection finds the new primary.
        let deduction = eventually("a deduction", Duration::from_secs(30), || async {
            self.stock.deduct(sale, user, &nonce, Duration::from_secs(5)).await.map_err(|e| e.to_string())
        })
        .await;
        match deduction {
            seckill_shared::stock::Deduction::Accepted { order_id, round, accepted_at, .. } => {
                Ok(OrderRecord::new(order_id, sale, user, accepted_at).in_round(round))
            }
            other => Err(other),
        }
    }

    /// Waits (two minutes at most) until the sale has `n` orders of `status`.
    pub async fn wait_orders(&self, sale: SaleKey, status: &str, n: i64) {
        eventually(&format!("{n} orders {status}"), Duration::from_secs(120), || async {
            let found = self.count_orders(sale, status).await;
            if found == n {
                Ok(())
            } else {
                Err(format!("{found} of {n}"))
            }
        })
        .await;
    }

    /// Waits up to `within` until the order's row has `want` (status, reason).
    pub async fn wait_status(&self, order_id: &OrderId, want: (&str, Option<&str>), within: Duration) {
        eventually(&format!("order {order_id} {want:?}"), within, || async {
            match self.order_row(order_id).await {
                Some((status, reason)) if (status.as_str(), reason.as_deref()) == want => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }

    /// The newest fencing token PostgreSQL recorded for `lock`.
    pub async fn fence_of(&self, lock: &str) -> i64 {
        seckill_shared::ops::fence::newest(&self.db, lock).await.expect("the fences")
    }

    /// Waits (a minute at most) until `group` committed every record of its
    /// topic.
    pub async fn wait_drained(&self, group: Group) {
        eventually(&format!("the {group:?} group to commit every record"), Duration::from_secs(60), || async {
            let lag = match group {
                Group::Order => self.order_lag().await,
                Group::Compensator => self.compensator_lag().await,
            };
            if lag == 0 {
                Ok(())
            } else {
                Err(format!("lag {lag}"))
            }
        })
        .await;
    }

    /// Produces a dead letter for `record` as the order service would, with
    /// `reason`.
    pub async fn dead_letter(&self, record: &OrderRecord, reason: &str) {
        use seckill_shared::kafka::dlq_header;
        let payload = serde_json::to_vec(record).expect("json");
        let topics = self.topics();
        let headers = [
            (dlq_header::REASON, reason),
            (dlq_header::ERROR, "test"),
            (dlq_header::ORIGINAL_TOPIC, topics.orders.as_str()),
            (dlq_header::ATTEMPTS, "1"),
            (dlq_header::FAILED_AT, "2026-11-29T00:00:00+00:00"),
        ];
        self.produce(&topics.dlq, &record.user_id.to_string(), &payload, &headers).await;
    }

    /// Orders in PostgreSQL for the sale, by status.
    pub async fn count_orders(&self, sale: SaleKey, status: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE activity_id = $1 AND sku_id = $2 AND status = $3")
            .bind(sale.activity.get())
            .bind(sale.sku.get())
            .bind(status)
            .fetch_one(&self.db)
            .await
            .expect("counting orders")
    }

    /// Redis stock of the sale.
    pub async fn redis_stock(&self, sale: SaleKey) -> i64 {
        self.stock.snapshot(sale).await.expect("reading redis").remaining
    }

    /// Produces one raw record to `topic`.
    pub async fn produce(&self, topic: &str, key: &str, payload: &[u8], headers: &[(&str, &str)]) {
        let producer: FutureProducer = seckill_shared::kafka::producer(&self.kafka).expect("producer");
        let mut owned = OwnedHeaders::new();
        for (k, v) in headers {
            owned = owned.insert(Header { key: k, value: Some(v.as_bytes()) });
        }
        let record = FutureRecord::to(topic).key(key).payload(payload).headers(owned);
        producer.send(record, Duration::from_secs(10)).await.expect("producing a test record");
    }

    /// Order records for `users` of `sale`, not sent anywhere.
    pub fn order_records(&self, sale: SaleKey, users: std::ops::Range<i64>) -> Vec<OrderRecord> {
        users
            .map(|user| {
                let order_id =
                    OrderId::parse(&format!("{}-{}-{user}-{:08x}", sale.activity, sale.sku, rand::random::<u32>()))
                        .expect("valid id");
                OrderRecord::new(order_id, sale, UserId::new(user).expect("positive user"), seckill_shared::now_ms())
            })
            .collect()
    }

    /// Produces order records for `users` of `sale` straight to the orders
    /// topic (as if the edge had accepted them) and returns them.
    pub async fn produce_orders(&self, sale: SaleKey, users: std::ops::Range<i64>) -> Vec<OrderRecord> {
        let records = self.order_records(sale, users);
        self.produce_records(&records).await;
        records
    }

    /// Produces the given order records to the orders topic.
    pub async fn produce_records(&self, records: &[OrderRecord]) {
        let producer: FutureProducer = seckill_shared::kafka::producer(&self.kafka).expect("producer");
        let topic = self.topics().orders;
        let payloads: Vec<(String, Vec<u8>)> =
            records.iter().map(|r| (r.user_id.to_string(), serde_json::to_vec(r).expect("json"))).collect();
        let sends = payloads.iter().map(|(key, payload)| {
            producer.send(FutureRecord::to(&topic).key(key).payload(payload), Duration::from_secs(30))
        });
        for result in futures::future::join_all(sends).await {
            result.expect("producing an order record");
        }
    }

    /// Produces dead letters for `records` with `reason`, as the order
    /// service would.
    pub async fn produce_dead_letters(&self, records: &[OrderRecord], reason: &str) {
        let producer: FutureProducer = seckill_shared::kafka::producer(&self.kafka).expect("producer");
        let topic = self.topics().dlq;
        let payloads: Vec<(String, Vec<u8>)> =
            records.iter().map(|r| (r.user_id.to_string(), serde_json::to_vec(r).expect("json"))).collect();
        let sends = payloads.iter().map(|(key, payload)| {
            let headers = OwnedHeaders::new()
                .insert(Header { key: "dlq.reason", value: Some(reason) })
                .insert(Header { key: "dlq.attempts", value: Some("1") });
            producer.send(FutureRecord::to(&topic).key(key).payload(payload).headers(headers), Duration::from_secs(30))
        });
        for result in futures::future::join_all(sends).await {
            result.expect("producing a dead letter");
        }
    }

    /// Reads every record of `topic` from the start (own throwaway group),
    /// until `expected` arrived or `timeout` passed.
    pub async fn read_topic(&self, topic: &str, expected: usize, timeout: Duration) -> Vec<OwnedMessage> {
        let brokers = self.kafka.brokers.clone();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &brokers)
                .set("group.id", format!("reader-{}", rand::random::<u64>()))
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest")
                .create()
                .expect("reader");
            consumer.subscribe(&[&topic]).expect("subscribing");
            let deadline = Instant::now() + timeout;
            let mut records = Vec::new();
            while records.len() < expected && Instant::now() < deadline {
                if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
                    records.push(message.detach());
                }
            }
            records
        })
        .await
        .expect("reader thread")
    }

    /// The lag of the order service's group (`i64::MAX` when unreadable).
    pub async fn order_lag(&self) -> i64 {
        self.pipeline_lag().await.map(|lag| lag.order.total).unwrap_or(i64::MAX)
    }

    /// The lag of the compensator's group (`i64::MAX` when unreadable).
    pub async fn compensator_lag(&self) -> i64 {
        self.pipeline_lag().await.map(|lag| lag.compensator.total).unwrap_or(i64::MAX)
    }

    async fn pipeline_lag(&self) -> anyhow::Result<seckill_shared::kafka::PipelineLag> {
        seckill_shared::kafka::pipeline_lag(&self.kafka).await
    }

    /// An order's row: its status and reason, if it has one.
    pub async fn order_row(&self, order_id: &OrderId) -> Option<(String, Option<String>)> {
        sqlx::query_as("SELECT status, reason FROM orders WHERE order_id = $1")
            .bind(order_id.as_str())
            .fetch_optional(&self.db)
            .await
            .expect("reading an order row")
    }

    /// The broker (node id) leading partition 0 of the orders topic.
    pub async fn orders_leader(&self) -> i32 {
        let (settings, topic) = (self.kafka.clone(), self.topics().orders);
        tokio::task::spawn_blocking(move || {
            use rdkafka::consumer::Consumer;
            let consumer: BaseConsumer =
                seckill_shared::kafka::consumer_config(&settings, "leader-lookup").create().expect("client");
            let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10)).expect("metadata");
            let leader = metadata.topics()[0].partitions().iter().find(|p| p.id() == 0).expect("partition 0").leader();
            leader
        })
        .await
        .expect("metadata thread")
    }

    /// Uses up transaction ids until the server's next one is past `xid`:
    /// one subtransaction per id, in one statement (about 200,000 a second).
    pub async fn advance_transaction_ids_past(&self, xid: u64) {
        let current: String =
            sqlx::query_scalar("SELECT pg_current_xact_id()::text").fetch_one(&self.db).await.expect("xid");
        let current: u64 = current.parse().expect("a transaction id");
        let burn = xid.saturating_sub(current) + 10;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DO $$ BEGIN
                 CREATE TEMP TABLE IF NOT EXISTS xid_burn (x int);
                 FOR i IN 1..{burn} LOOP
                     BEGIN INSERT INTO xid_burn VALUES (1); EXCEPTION WHEN others THEN NULL; END;
                 END LOOP;
             END $$"
        )))
        .execute(&self.db)
        .await
        .expect("using up transaction ids");
        let now: String =
            sqlx::query_scalar("SELECT pg_current_xact_id()::text").fetch_one(&self.db).await.expect("xid");
        assert!(now.parse::<u64>().expect("a transaction id") > xid, "transaction ids at {now}, not past {xid}");
    }

    /// An empty database beside this test's (`<its name>_<suffix>`, no
    /// migration applied), for tests that migrate step by step; dropped by
    /// [`TestEnv::drop_scratch_database`].
    pub async fn scratch_database(&self, suffix: &str) -> PgPool {
        let name = format!("{}_{suffix}", self.database_name);
        let mut admin = sqlx::PgConnection::connect(&self.admin_database_url).await.expect("admin connection");
        // The harness's own hex id and a suffix of the test's.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("creating the scratch database");
        let url = self.database.url.replace(&self.database_name, &name);
        seckill_shared::db::connect_lazy(&DbSettings { url, ..self.database.clone() }).expect("database settings")
    }

    /// Drops the database [`TestEnv::scratch_database`] made.
    pub async fn drop_scratch_database(&self, suffix: &str, pool: PgPool) {
        pool.close().await;
        let mut admin = sqlx::PgConnection::connect(&self.admin_database_url).await.expect("admin connection");
        let name = format!("{}_{suffix}", self.database_name);
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut admin)
            .await
            .expect("dropping the scratch database");
    }

    /// Blocks or allows new connections to this test's database, and drops
    /// the current ones: PostgreSQL "down" for this test only.
    pub async fn set_database_reachable(&self, reachable: bool) {
        let mut admin = sqlx::PgConnection::connect(&self.admin_database_url).await.expect("admin connection");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS {}",
            self.database_name, reachable
        )))
        .execute(&mut admin)
        .await
        .expect("altering the database");
        if !reachable {
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            )
            .bind(&self.database_name)
            .execute(&mut admin)
            .await
            .expect("terminating connections");
        }
    }
}

/// A consumer group of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// The order service's, on the orders topic.
    Order,
    /// The compensator's, on the dead-letter topic.
    Compensator,
}

/// A service running in this process.
pub struct Running {
    /// Its HTTP (edge) or health (others) address.
    pub addr: SocketAddr,
    shutdown: CancellationToken,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    fn spawn<F, Fut>(addr: SocketAddr, run: F) -> Self
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(run(shutdown.clone()));
        Self { addr, shutdown, handle }
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops it gracefully and waits (bounded).
    pub async fn stop(self) {
        self.shutdown.cancel();
        match tokio::time::timeout(Duration::from_secs(40), self.handle).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => panic!("service failed: {error:#}"),
            Ok(Err(join)) => panic!("service panicked: {join}"),
            Err(_) => panic!("service did not stop within 40s"),
        }
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

/// What a finished `seckillctl` run printed.
#[derive(Debug)]
pub struct CtlOutput {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl TestEnv {
    /// Runs `seckillctl args...` against this test's servers.
    pub async fn ctl(&self, args: &[&str]) -> CtlOutput {
        self.ctl_with_env(args, &[]).await
    }

    /// [`TestEnv::ctl`] with more environment variables.
    pub async fn ctl_with_env(&self, args: &[&str], extra: &[(&str, &str)]) -> CtlOutput {
        let output = tokio::process::Command::new(binary("seckillctl"))
            .args(args)
            .envs(self.child_env())
            .envs(extra.iter().copied())
            .output()
            .await
            .expect("running seckillctl");
        CtlOutput {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl TestEnv {
    /// Checks the events topic as a consumer would (`seckillctl events
    /// verify`): every event the sale's orders call for is there, each
    /// order's in order, waiting up to a minute for the relay.
    pub async fn verify_events(&self, sale: SaleKey) {
        let (a, s) = (sale.activity.to_string(), sale.sku.to_string());
        let verify = self.ctl(&["events", "verify", "--activity", &a, "--sku", &s, "--wait-drain", "60"]).await;
        assert_eq!(verify.code, 0, "the events topic lacks events of sale {sale}:\n{}{}", verify.stdout, verify.stderr);
    }
}

/// A project binary running as a child process, killed when dropped.
pub struct Child {
    inner: tokio::process::Child,
}

impl Child {
    /// Starts `name` with `env` (stdout/stderr to a log file under target/).
    pub fn start(name: &str, env: &[(String, String)]) -> Self {
        Self::start_with_args(name, &[], env)
    }

    /// Starts `name args...` with `env`.
    pub fn start_with_args(name: &str, args: &[&str], env: &[(String, String)]) -> Self {
        let log_dir = binary(name).parent().expect("dir").join("e2e-logs");
        std::fs::create_dir_all(&log_dir).expect("log dir");
        let log =
            std::fs::File::create(log_dir.join(format!("{name}-{}.log", rand::random::<u32>()))).expect("log file");
        let inner = tokio::process::Command::new(binary(name))
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("starting a child process");
        Self { inner }
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.inner.id().expect("a running child has a pid")
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.inner.id().expect("running child has a pid");
        let sent =
            std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().expect("kill");
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// `kill -9`.
    pub async fn kill9(mut self) {
        self.inner.start_kill().expect("SIGKILL");
        let _ = self.inner.wait().await;
    }

    /// SIGTERM, then waits (bounded) for a clean exit; returns its success.
    pub async fn terminate(mut self) -> bool {
        let pid = self.inner.id().expect("running child has a pid");
        let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        match tokio::time::timeout(Duration::from_secs(40), self.inner.wait()).await {
            Ok(Ok(status)) => status.success(),
            _ => false,
        }
    }
}
