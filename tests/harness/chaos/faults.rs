//! What goes wrong, and how it is made to go wrong: process signals, the
//! infra scripts, and records injected into the topics. Nothing else.

use super::pipeline::{Kind, Pipeline};
use crate::redis_cluster::{fail_over, sale_slot};
use crate::{TestEnv, Topology};
use seckill_shared::domain::SaleKey;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One thing that goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` an edge, restart it a second later.
    KillEdge,
    /// `kill -9` an order service, restart it a second later.
    KillOrder,
    /// `kill -9` a compensator, restart it a second later.
    KillCompensator,
    /// Stop the Kafka broker (`infra/local/down.sh kafka`) for this long.
    StopKafka(Duration),
    /// Freeze the Kafka broker (SIGSTOP) for `hang` — longer than the
    /// delivery timeout: publishes in flight time out, their records maybe
    /// in the log — then `kill -9` it, and start it again after `down`.
    HangThenKillKafka { hang: Duration, down: Duration },
    /// Pause every Redis client (`CLIENT PAUSE`) for this long — longer
    /// than `redis.timeout_ms`: calls time out while the script may yet run.
    PauseRedis(Duration),
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
    /// Replicated topology: `kill -9` the broker leading partition 0 of the
    /// orders topic; start it again after this long.
    KillLeaderBroker(Duration),
    /// Replicated topology: `kill -9` the Redis primary; Sentinel promotes
    /// the replica; the old primary comes back after this long, as a replica.
    KillRedisPrimary(Duration),
    /// The same, while the replica is this far behind (it is frozen with
    /// SIGSTOP, and the primary killed before it thaws): the
    /// writes the primary acknowledged meanwhile are lost — the seed
    /// article's section 5.3.
    KillRedisPrimaryBehind(Duration),
    /// Redis Cluster topology: the primary holding the sale's slot is
    /// `kill -9`ed while its replica is this far behind (frozen, as above);
    /// the cluster promotes the replica, and the old primary comes back as
    /// its replica five seconds later.
    KillSlotPrimaryBehind(Duration),
}

impl Fault {
    /// Whether Redis may lose acknowledged writes under this fault. A
    /// failover loses none: a deduction is answered only once a replica
    /// confirmed it (`WAIT`). One Redis killed may lose what it had not
    /// written to its append-only file yet.
    pub fn loses_redis_writes(self) -> bool {
        matches!(self, Self::KillRedis)
    }
}

fn infra(script: &str, args: &[&str]) {
    let status = std::process::Command::new(crate::repo_root().join("infra/local").join(script))
        .args(args)
        .status()
        .expect("running an infra script");
    assert!(status.success(), "infra/local/{script} {args:?} failed");
}

async fn infra_async(script: &'static str, args: &'static [&'static str]) {
    tokio::task::spawn_blocking(move || infra(script, args)).await.expect("infra script");
}

fn kill9(pidfile: PathBuf) {
    let pid = std::fs::read_to_string(&pidfile).unwrap_or_else(|_| panic!("{}", pidfile.display())).trim().to_owned();
    let _ = std::process::Command::new("kill").args(["-9", &pid]).status();
}

/// Injects `fault` into the running pipeline.
pub async fn inject(test: &TestEnv, sale: SaleKey, pipeline: &mut Pipeline, fault: Fault) {
    eprintln!("chaos: {fault:?}");
    match fault {
        Fault::KillEdge => pipeline.kill_and_restart(Kind::Edge).await,
        Fault::KillOrder => pipeline.kill_and_restart(Kind::Order).await,
        Fault::KillCompensator => pipeline.kill_and_restart(Kind::Compensator).await,
        Fault::StopKafka(down) => stopped_for(&["kafka"], down).await,
        Fault::HangThenKillKafka { hang, down } => hang_then_kill_kafka(hang, down).await,
        Fault::PauseRedis(pause) => {
            let ms = pause.as_millis().to_string();
            let paused = std::process::Command::new("redis-cli").args(["client", "pause", &ms, "all"]).status();
            assert!(paused.is_ok_and(|s| s.success()), "CLIENT PAUSE");
            // Timed on purpose: the pause lasts `pause`; the fault ends with it.
            tokio::time::sleep(pause).await;
        }
        Fault::StopPostgres(down) => stopped_for(&["postgres"], down).await,
        Fault::BlockDatabase(down) => {
            test.set_database_reachable(false).await;
            // Timed on purpose: the database is unreachable for `down`.
            tokio::time::sleep(down).await;
            test.set_database_reachable(true).await;
        }
        Fault::KillRedis => {
            kill9(crate::repo_root().join(".data/redis/redis.pid"));
            // Timed on purpose: Redis stays down half a second.
            tokio::time::sleep(Duration::from_millis(500)).await;
            infra_async("up.sh", &["redis"]).await;
        }
        Fault::DeadLetters(n) => {
            let mut records = Vec::new();
            for i in 0..i64::from(n) {
                if let Ok(record) = test.try_deduct(sale, 900_000_000 + i).await {
                    records.push(record);
                }
            }
            // Counted: a sale sold out first leaves nothing to dead-letter,
            // and the fault would prove nothing.
            assert!(!records.is_empty(), "no order of {n} could be deducted to dead-letter (sold out first?)");
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
        Fault::KillLeaderBroker(down) => {
            assert_eq!(test.topology, Topology::Cluster, "a leader broker to kill needs the replicated topology");
            let leader = test.orders_leader().await;
            eprintln!("chaos: broker {leader} leads partition 0 of the orders topic");
            kill9(crate::repo_root().join(format!(".data/cluster/kafka-{leader}/kafka.pid")));
            // Timed on purpose: the leader stays down for `down`.
            tokio::time::sleep(down).await;
            infra_async("up.sh", &["--cluster"]).await;
        }
        Fault::KillRedisPrimary(down) => kill_redis_primary(test, None, down).await,
        Fault::KillRedisPrimaryBehind(behind) => kill_redis_primary(test, Some(behind), Duration::from_secs(5)).await,
        Fault::KillSlotPrimaryBehind(behind) => kill_slot_primary(test, sale, behind).await,
    }
}

/// The local `server` stopped (`infra/local/down.sh`) for `down`, then
/// started again.
async fn stopped_for(server: &'static [&'static str], down: Duration) {
    infra_async("down.sh", server).await;
    // Timed on purpose: the server stays down for `down`.
    tokio::time::sleep(down).await;
    infra_async("up.sh", server).await;
}

/// The broker frozen (SIGSTOP) for `hang`, then killed, and down for `down`.
async fn hang_then_kill_kafka(hang: Duration, down: Duration) {
    let pidfile = crate::repo_root().join(".data/kafka/kafka.pid");
    let pid = std::fs::read_to_string(&pidfile).expect("the broker's pid file").trim().to_owned();
    let _ = std::process::Command::new("kill").args(["-STOP", &pid]).status();
    // Timed on purpose: the broker hangs for `hang`, then is killed.
    tokio::time::sleep(hang).await;
    kill9(pidfile);
    let _ = std::process::Command::new("kill").args(["-CONT", &pid]).status();
    // Timed on purpose: and stays down for `down`.
    tokio::time::sleep(down).await;
    infra_async("up.sh", &["kafka"]).await;
}

/// `kill -9` the primary of the sale's slot while its replica is `behind`,
/// let the cluster promote the replica, and bring the old primary back
/// five seconds later.
async fn kill_slot_primary(test: &TestEnv, sale: SaleKey, behind: Duration) {
    assert_eq!(test.topology, Topology::RedisCluster, "a slot's primary to kill needs the Redis Cluster topology");
    fail_over(sale_slot(test, sale), behind).await;
    // Timed on purpose: the old primary stays down five seconds.
    tokio::time::sleep(Duration::from_secs(5)).await;
    infra_async("up.sh", &["--redis-cluster"]).await;
}

/// `kill -9` the primary (once its replica is `behind` when asked), wait for
/// Sentinel to promote the replica, and bring the old primary back after
/// `down`.
pub(super) async fn kill_redis_primary(test: &TestEnv, behind: Option<Duration>, down: Duration) {
    assert_eq!(test.topology, Topology::Cluster, "a primary to kill needs the replicated topology");
    wait_redis_replicated().await;
    let primary = sentinel_primary();
    eprintln!("chaos: redis :{primary} is the primary");
    let replica_pid = || {
        let replica = if primary == 6379 { 6380 } else { 6379 };
        let pidfile = crate::repo_root().join(format!(".data/cluster/redis-{replica}/redis.pid"));
        std::fs::read_to_string(pidfile).expect("the replica's pid file").trim().to_owned()
    };
    let signal = |name: &str, pid: &str| {
        let _ = std::process::Command::new("kill").args([name, pid]).status();
    };
    let stalled = behind.map(|_| replica_pid());
    if let (Some(pid), Some(behind)) = (&stalled, behind) {
        // The replica is frozen (SIGSTOP) and the primary drops its link,
        // which the frozen replica cannot re-open: what the primary
        // acknowledges from now on stays in its memory only, and it is
        // killed before the replica thaws.
        signal("-STOP", pid);
        let _ = std::process::Command::new("redis-cli")
            .args(["-p", &primary.to_string(), "client", "kill", "type", "replica"])
            .status();
        crate::redis_cluster::wait_writes_unreplicated(primary, behind).await;
    }
    kill9(crate::repo_root().join(format!(".data/cluster/redis-{primary}/redis.pid")));
    if let Some(pid) = &stalled {
        signal("-CONT", pid);
    }
    let promoted = Instant::now();
    crate::eventually("Sentinel to promote the replica", Duration::from_secs(60), || async {
        if sentinel_primary() != primary {
            Ok(())
        } else {
            Err(format!(":{primary} is still the primary"))
        }
    })
    .await;
    eprintln!("chaos: Sentinel promoted :{} after {:?}", sentinel_primary(), promoted.elapsed());
    // Timed on purpose: the old primary stays down for `down`.
    tokio::time::sleep(down).await;
    infra_async("up.sh", &["--cluster"]).await;
}

/// Waits (bounded) until the replicated topology's Redis replica is linked to
/// the primary and done syncing: a failover then loses only what the
/// replica had not been sent yet, never a resync in progress.
pub async fn wait_redis_replicated() {
    crate::eventually("the Redis replica to be linked and synced", Duration::from_secs(90), || async {
        let replica = if sentinel_primary() == 6379 { 6380 } else { 6379 };
        let output =
            std::process::Command::new("redis-cli").args(["-p", &replica.to_string(), "info", "replication"]).output();
        let text = output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        if text.contains("role:slave")
            && text.contains("master_link_status:up")
            && text.contains("master_sync_in_progress:0")
        {
            Ok(())
        } else {
            Err(format!(":{replica}: {text}"))
        }
    })
    .await;
}

/// The port of the primary the Sentinels name now.
pub fn sentinel_primary() -> u16 {
    let output = std::process::Command::new("redis-cli")
        .args(["-p", "26379", "sentinel", "get-master-addr-by-name", "seckill"])
        .output()
        .expect("redis-cli");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().nth(1).and_then(|port| port.trim().parse().ok()).expect("a primary's port from Sentinel")
}
