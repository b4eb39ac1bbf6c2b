//! Fault injection: the real binaries as child processes, a sale driven by
//! `seckillctl bench`, faults injected while it runs (process signals and
//! the infra scripts only), then drain, reconcile and check every accepted
//! order.

use crate::{binary, Child, TestEnv};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One thing that goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` the edge, restart it a second later.
    KillEdge,
    /// `kill -9` the order service, restart it a second later.
    KillOrder,
    /// `kill -9` the compensator, restart it a second later.
    KillCompensator,
    /// Stop the Kafka broker (`infra/local/down.sh kafka`) for this long.
    StopKafka(Duration),
    /// Stop the PostgreSQL server for this long (all databases).
    StopPostgres(Duration),
    /// Refuse connections to this test's database only, for this long (a
    /// PostgreSQL outage that other tests running beside this one do not see).
    BlockDatabase(Duration),
    /// `kill -9` Redis and start it again (AOF everysec: up to a second of
    /// writes may be lost).
    KillRedis,
    /// Produce an undecodable record and a duplicate of an accepted one to
    /// the orders topic.
    PoisonAndDuplicate,
    /// Deduct this many units for users outside the load (as the edge
    /// would) and dead-letter their orders (`DB_REJECTED`), so the
    /// compensator has work to be killed in the middle of.
    DeadLetters(u32),
}

/// A scenario: a sale, a load, and faults at given times into the load.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Its name in the report.
    pub name: &'static str,
    /// Seed of the load's user choice (the run can be replayed).
    pub seed: u64,
    /// Units on sale.
    pub stock: i64,
    /// Distinct users.
    pub users: u64,
    /// Requests sent.
    pub requests: u64,
    /// Requests per second.
    pub rate: f64,
    /// Connections.
    pub concurrency: usize,
    /// Share of requests that retry an earlier user.
    pub retry_ratio: f64,
    /// Faults, each at its time after the load starts.
    pub faults: Vec<(Duration, Fault)>,
}

/// What a scenario run showed.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The scenario.
    pub name: &'static str,
    /// Requests sent.
    pub requests: u64,
    /// 202 answers.
    pub accepted: u64,
    /// Orders CREATED.
    pub created: i64,
    /// Units restored by the compensator and sweeper.
    pub restored: i64,
    /// Units written off.
    pub written_off: i64,
    /// 503 TRY_AGAIN answers: definite publish failures (rolled back) or
    /// Redis unreachable (nothing deducted).
    pub try_again: i64,
    /// The reconciliation verdict.
    pub verdict: String,
    /// From the end of the load to a drained pipeline.
    pub drain: Duration,
}

impl Outcome {
    /// A Markdown table row.
    pub fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} s |",
            self.name,
            self.requests,
            self.accepted,
            self.created,
            self.restored,
            self.written_off,
            self.try_again,
            self.verdict,
            self.drain.as_secs_f64()
        )
    }
}

/// The header of [`Outcome::row`].
pub const TABLE_HEADER: &str = "| scenario | requests | 202s | orders created | units restored | written off | 503 TRY_AGAIN | reconciliation | drain |\n|---|---|---|---|---|---|---|---|---|";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn infra(script: &str, server: &str) {
    let status = std::process::Command::new(repo_root().join("infra/local").join(script))
        .arg(server)
        .status()
        .expect("running an infra script");
    assert!(status.success(), "infra/local/{script} {server} failed");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port()
}

/// The three services as child processes.
struct Pipeline {
    edge_addr: String,
    env: Vec<(String, String)>,
    edge: Option<Child>,
    order: Option<Child>,
    compensator: Option<Child>,
}

impl Pipeline {
    fn start(test: &TestEnv) -> Self {
        let edge_addr = format!("127.0.0.1:{}", free_port());
        let mut env = test.child_env();
        // Every service agrees on the delivery timeout (the sweeper's grace
        // is derived from it).
        env.push(("SECKILL__KAFKA__MESSAGE_TIMEOUT_MS".into(), "3000".into()));
        let mut pipeline = Self { edge_addr, env, edge: None, order: None, compensator: None };
        pipeline.edge = Some(pipeline.spawn("seckill-edge"));
        pipeline.order = Some(pipeline.spawn("seckill-order"));
        pipeline.compensator = Some(pipeline.spawn("seckill-compensator"));
        pipeline
    }

    fn spawn(&self, name: &str) -> Child {
        let own: &[(&str, &str)] = match name {
            "seckill-edge" => &[("SECKILL_HTTP_ADDR", &self.edge_addr), ("SECKILL__SOLD_OUT_FLAG_MS", "500")],
            "seckill-order" => &[("SECKILL__METRICS_ADDR", "127.0.0.1:0"), ("SECKILL__RETRY__MAX_MS", "1000")],
            _ => &[
                ("SECKILL__METRICS_ADDR", "127.0.0.1:0"),
                ("SECKILL__RETRY__MAX_MS", "1000"),
                ("SECKILL__SWEEPER__GRACE_MS", "1000"),
                ("SECKILL__SWEEPER__INTERVAL_MS", "500"),
                ("SECKILL__SWEEPER__LOCK_LEASE_MS", "3000"),
            ],
        };
        let mut env = self.env.clone();
        env.extend(own.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        Child::start(name, &env)
    }

    async fn wait_edge(&self) {
        let url = format!("http://{}/readyz", self.edge_addr);
        crate::eventually("the edge to be ready", Duration::from_secs(60), || async {
            let client = crate::http::Client::new(format!("http://{}", self.edge_addr));
            match tokio::time::timeout(Duration::from_secs(2), client.try_send(hyper::Method::GET, "/readyz", None, &[])).await {
                Ok(Ok(reply)) if reply.status == 200 => Ok(()),
                _ => Err(url.clone()),
            }
        })
        .await;
    }

    async fn kill_and_restart(&mut self, name: &str) {
        let slot = match name {
            "seckill-edge" => &mut self.edge,
            "seckill-order" => &mut self.order,
            _ => &mut self.compensator,
        };
        if let Some(child) = slot.take() {
            child.kill9().await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let child = self.spawn(name);
        match name {
            "seckill-edge" => self.edge = Some(child),
            "seckill-order" => self.order = Some(child),
            _ => self.compensator = Some(child),
        }
    }

    async fn stop(self) {
        for child in [self.edge, self.order, self.compensator].into_iter().flatten() {
            assert!(child.terminate().await, "a service did not stop cleanly on SIGTERM");
        }
    }
}

async fn inject(test: &TestEnv, sale: seckill_shared::domain::SaleKey, pipeline: &mut Pipeline, fault: Fault) {
    eprintln!("chaos: {fault:?}");
    match fault {
        Fault::KillEdge => pipeline.kill_and_restart("seckill-edge").await,
        Fault::KillOrder => pipeline.kill_and_restart("seckill-order").await,
        Fault::KillCompensator => pipeline.kill_and_restart("seckill-compensator").await,
        Fault::StopKafka(down) => {
            tokio::task::spawn_blocking(|| infra("down.sh", "kafka")).await.expect("infra");
            tokio::time::sleep(down).await;
            tokio::task::spawn_blocking(|| infra("up.sh", "kafka")).await.expect("infra");
        }
        Fault::StopPostgres(down) => {
            tokio::task::spawn_blocking(|| infra("down.sh", "postgres")).await.expect("infra");
            tokio::time::sleep(down).await;
            tokio::task::spawn_blocking(|| infra("up.sh", "postgres")).await.expect("infra");
        }
        Fault::BlockDatabase(down) => {
            test.set_database_reachable(false).await;
            tokio::time::sleep(down).await;
            test.set_database_reachable(true).await;
        }
        Fault::KillRedis => {
            let pidfile = repo_root().join(".data/redis/redis.pid");
            let pid = std::fs::read_to_string(&pidfile).expect("redis pid file").trim().to_owned();
            let _ = std::process::Command::new("kill").args(["-9", &pid]).status();
            tokio::time::sleep(Duration::from_millis(500)).await;
            tokio::task::spawn_blocking(|| infra("up.sh", "redis")).await.expect("infra");
        }
        Fault::DeadLetters(n) => {
            let mut records = Vec::new();
            for i in 0..i64::from(n) {
                if let Ok(record) = test.try_deduct(sale, 900_000_000 + i).await {
                    records.push(record);
                }
            }
            eprintln!("chaos: dead-lettering {} orders", records.len());
            test.produce_dead_letters(&records, "DB_REJECTED").await;
        }
        Fault::PoisonAndDuplicate => {
            let topic = test.topics().orders;
            test.produce(&topic, "1", b"\x00poison{", &[]).await;
            if let Some(first) = test.read_topic(&topic, 1, Duration::from_secs(5)).await.first() {
                use rdkafka::Message;
                let key = first.key().map(|k| String::from_utf8_lossy(k).into_owned()).unwrap_or_default();
                test.produce(&topic, &key, first.payload().unwrap_or_default(), &[]).await;
            }
        }
    }
}

/// Runs a scenario and checks every promise; panics naming the broken one.
pub async fn run(scenario: Scenario) -> Outcome {
    let test = TestEnv::new().await;
    let redis_may_lose = scenario.faults.iter().any(|(_, f)| matches!(f, Fault::KillRedis));
    let sale = test.sale();
    test.warmup(sale, scenario.stock).await;
    let mut pipeline = Pipeline::start(&test);
    pipeline.wait_edge().await;

    let accepted_file = binary("seckillctl").parent().expect("dir").join(format!("accepted-{}.txt", test.id));
    let (a, s) = (sale.activity.to_string(), sale.sku.to_string());
    let args: Vec<String> = [
        "bench", "--url", &format!("http://{}", pipeline.edge_addr), "--activity", &a, "--sku", &s,
        "--users", &scenario.users.to_string(), "--requests", &scenario.requests.to_string(),
        "--rate", &scenario.rate.to_string(), "--concurrency", &scenario.concurrency.to_string(),
        "--same-user-ratio", &scenario.retry_ratio.to_string(), "--seed", &scenario.seed.to_string(),
        "--accepted-out", accepted_file.to_str().expect("utf-8 path"), "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let bench_env = test.child_env();
    let bench = tokio::spawn(async move {
        tokio::process::Command::new(binary("seckillctl")).args(&args).envs(bench_env).output().await.expect("bench")
    });

    let started = Instant::now();
    for (at, fault) in scenario.faults.clone() {
        if let Some(wait) = at.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        inject(&test, sale, &mut pipeline, fault).await;
    }
    let bench = bench.await.expect("bench task");
    assert!(bench.status.success(), "bench failed: {}", String::from_utf8_lossy(&bench.stderr));
    let result: serde_json::Value = serde_json::from_slice(&bench.stdout).expect("bench JSON");
    let outcomes = result["bench"]["outcomes"].as_object().expect("outcomes").clone();
    let requests: u64 = outcomes.values().filter_map(|v| v.as_u64()).sum();
    let accepted = outcomes.get("202 QUEUED").and_then(|v| v.as_u64()).unwrap_or(0);
    eprintln!("chaos {}: {outcomes:?}", scenario.name);

    // Drain and reconcile.
    let drain_started = Instant::now();
    let reconcile = test.ctl(&["reconcile", "--activity", &a, "--sku", &s, "--wait-drain", "240", "--json"]).await;
    let drain = drain_started.elapsed();
    let report: serde_json::Value = serde_json::from_str(&reconcile.stdout)
        .unwrap_or_else(|_| panic!("reconcile printed no report: {reconcile:?}"));
    let violations: Vec<String> =
        report["violations"].as_array().map(|v| v.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default();
    let created = report["ordersCreated"].as_i64().unwrap_or(-1);
    assert!(created <= scenario.stock, "{}: oversold: {created} > {}", scenario.name, scenario.stock);
    assert_eq!(report["duplicateUsers"], 0, "{}: a user holds two orders", scenario.name);
    assert_eq!(report["dbRemaining"].as_i64(), Some(scenario.stock - created), "{}: database stock guard", scenario.name);
    let drained = report["ordersInFlight"] == 0 && report["orderLag"] == 0 && report["compensatorLag"] == 0;
    if redis_may_lose {
        // Redis may have lost up to a second of writes: the books may show
        // it (the balance term), but nothing else may break, and nothing
        // may be left in the pipeline.
        for violation in &violations {
            assert!(
                violation.starts_with("total_stock") || violation.starts_with("compensated") || violation.starts_with("not drained: orders_in_flight"),
                "{}: unexpected violation after a Redis restart: {violation}",
                scenario.name
            );
        }
        assert!(report["orderLag"] == 0 && report["compensatorLag"] == 0, "{}: pipeline not drained", scenario.name);
    } else {
        assert!(violations.is_empty() && reconcile.code == 0, "{}: reconciliation failed: {violations:?}\n{}", scenario.name, reconcile.stdout);
        assert!(drained, "{}: something left in flight", scenario.name);
    }

    // Every 202 ended as exactly one of CREATED or FAILED-with-its-unit-settled.
    let ids: Vec<String> = std::fs::read_to_string(&accepted_file)
        .expect("accepted ids")
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    assert_eq!(ids.len() as u64, accepted, "{}: every 202 carried an order id", scenario.name);
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT order_id, status FROM orders WHERE order_id = ANY($1)")
        .bind(&ids)
        .fetch_all(&test.db)
        .await
        .expect("order rows");
    assert_eq!(rows.len(), ids.len(), "{}: an accepted order has no row after drain", scenario.name);
    if !redis_may_lose {
        let failed: Vec<String> = rows.iter().filter(|(_, s)| s == "FAILED").map(|(id, _)| id.clone()).collect();
        let settled = test.stock.count_settled(sale, &failed).await.expect("settled sets");
        assert_eq!(settled, failed.len() as i64, "{}: a FAILED order's unit was not restored or written off", scenario.name);
    }
    // After a Redis restart the first command on an old connection may fail
    // while it reconnects.
    let snapshot = crate::eventually("a redis snapshot", Duration::from_secs(30), || async {
        test.stock.snapshot(sale).await.map_err(|e| e.to_string())
    })
    .await;
    let outcome = Outcome {
        name: scenario.name,
        requests,
        accepted,
        created,
        restored: snapshot.compensated,
        written_off: snapshot.written_off,
        try_again: outcomes.get("503 TRY_AGAIN").and_then(|v| v.as_u64()).unwrap_or(0) as i64,
        verdict: if violations.is_empty() { "consistent".into() } else { format!("redis lost writes: {}", violations.join("; ")) },
        drain,
    };
    pipeline.stop().await;
    outcome
}
