//! The Redis Cluster topology (`infra/local/up.sh --redis-cluster`) as the
//! tests see it: its nodes, which primary serves a sale's slot, and which
//! replica follows it.

use crate::TestEnv;
use seckill_shared::domain::SaleKey;
use seckill_shared::stock::Bucket;
use std::path::PathBuf;
use std::time::Duration;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    pub primary: bool,
    /// A replica's primary (its id).
    pub replica_of: Option<String>,
    /// The slot ranges a primary serves.
    pub slots: Vec<(u16, u16)>,
}

/// The Redis Cluster's nodes as the first one that answers sees them (the
/// failed ones left out).
pub fn cluster_nodes() -> Vec<ClusterNode> {
    for port in 7000..=7005 {
        let Ok(output) =
            std::process::Command::new("redis-cli").args(["-p", &port.to_string(), "cluster", "nodes"]).output()
        else {
            continue;
        };
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let nodes: Vec<ClusterNode> = text
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 8 || f[2].contains("fail") || f[7] != "connected" {
                    return None;
                }
                let port = f[1].split(['@', ':']).nth(1)?.parse().ok()?;
                let slots = f[8..]
                    .iter()
                    .filter_map(|r| {
                        let (a, b) = r.split_once('-').unwrap_or((r, r));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect();
                Some(ClusterNode {
                    id: f[0].to_owned(),
                    port,
                    primary: f[2].contains("master"),
                    replica_of: (f[3] != "-").then(|| f[3].to_owned()),
                    slots,
                })
            })
            .collect();
        if !nodes.is_empty() {
            return nodes;
        }
    }
    Vec::new()
}

/// The slot of the sale's keys (`CLUSTER KEYSLOT` of its hash tag).
pub fn sale_slot(test: &TestEnv, sale: SaleKey) -> u16 {
    bucket_slot(test, sale, Bucket::FIRST)
}

/// The slot of one stock bucket of the sale.
pub fn bucket_slot(test: &TestEnv, sale: SaleKey, bucket: Bucket) -> u16 {
    let tag = test.stock.keys().bucket_base(sale, bucket);
    let output = std::process::Command::new("redis-cli").args(["-p", "7000", "cluster", "keyslot", &tag]).output();
    output.ok().and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok()).expect("the bucket's slot")
}

/// The primary serving `slot`.
pub fn slot_primary(nodes: &[ClusterNode], slot: u16) -> Option<&ClusterNode> {
    nodes.iter().find(|n| n.primary && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
}

/// The primary serving `slot` and its connected replica, by port.
pub fn slot_primary_and_replica(slot: u16) -> Result<(u16, u16), String> {
    let nodes = cluster_nodes();
    let primary = slot_primary(&nodes, slot).ok_or_else(|| format!("no primary serves slot {slot}: {nodes:?}"))?;
    let replica = nodes
        .iter()
        .find(|n| n.replica_of.as_deref() == Some(primary.id.as_str()))
        .ok_or_else(|| format!("the primary :{} of slot {slot} has no connected replica", primary.port))?;
    Ok((primary.port, replica.port))
}

/// Waits (bounded) until the Redis Cluster's primary for `slot` has a
/// replica linked and done syncing.
pub async fn wait_slot_replicated(slot: u16) -> (u16, u16) {
    crate::eventually("the slot's replica to be linked and synced", Duration::from_secs(90), || async {
        let (primary, replica) = slot_primary_and_replica(slot)?;
        let output =
            std::process::Command::new("redis-cli").args(["-p", &replica.to_string(), "info", "replication"]).output();
        let text = output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        if text.contains("master_link_status:up") && text.contains("master_sync_in_progress:0") {
            Ok((primary, replica))
        } else {
            Err(format!(":{replica}: {text}"))
        }
    })
    .await
}

/// Thaws every node of the cluster (`SIGCONT`; a running one is left as
/// it is): a test that failed half-way may have left one frozen, and a
/// frozen node holds every call to it, `redis-cli`'s included.
pub fn thaw_all() {
    for port in 7000..=7005 {
        if node_pidfile(port).exists() {
            signal_node(port, "-CONT");
        }
    }
}

/// A node's pid file.
pub fn node_pidfile(port: u16) -> PathBuf {
    crate::repo_root().join(format!(".data/redis-cluster/{port}/redis.pid"))
}

/// Sends `signal` (`-STOP`, `-CONT`) to the node on `port`.
pub fn signal_node(port: u16, signal: &str) {
    let pid = std::fs::read_to_string(node_pidfile(port)).expect("the node's pid file").trim().to_owned();
    let _ = std::process::Command::new("kill").args([signal, &pid]).status();
}

/// `kill -9` the primary serving `slot` while its replica is `behind`
/// ([`cut_off_replica`], then [`kill_and_promote`]). Answers (the killed
/// primary, the promoted one).
pub async fn fail_over(slot: u16, behind: Duration) -> (u16, u16) {
    let (primary, replica) = cut_off_replica(slot).await;
    wait_writes_unreplicated(primary, behind).await;
    kill_and_promote(slot, primary, replica).await;
    (primary, replica)
}

/// The primary on `port`'s replication offset (`master_repl_offset`).
fn replication_offset(port: u16) -> Option<i64> {
    let info = std::process::Command::new("redis-cli").args(["-p", &port.to_string(), "info", "replication"]).output();
    let info = String::from_utf8_lossy(&info.ok()?.stdout).into_owned();
    info.lines().find_map(|line| line.strip_prefix("master_repl_offset:")?.trim().parse().ok())
}

/// Waits until the primary on `port`, its replica cut off, has taken
/// writes the replica does not have (its offset moved on) and at least
/// `behind` has passed: a failover now loses acknowledged writes, which is
/// what the fault is for. Fails when no write comes within a minute (the
/// fault would prove nothing).
pub async fn wait_writes_unreplicated(port: u16, behind: Duration) {
    let cut = replication_offset(port).expect("the primary's replication offset");
    let since = std::time::Instant::now();
    crate::eventually("writes the cut-off replica does not have", Duration::from_secs(60), || async {
        match replication_offset(port) {
            Some(now) if now > cut && since.elapsed() >= behind => Ok(()),
            seen => Err(format!("offset {seen:?}, {cut} when cut off, {:?} since", since.elapsed())),
        }
    })
    .await;
    eprintln!("redis :{port} took writes its replica does not have ({:?} after the cut)", since.elapsed());
}

/// Freezes the replica of `slot`'s primary (SIGSTOP) and drops its link:
/// what the primary acknowledges from now on stays with it. Answers (the
/// primary, the replica).
pub async fn cut_off_replica(slot: u16) -> (u16, u16) {
    let (primary, replica) = wait_slot_replicated(slot).await;
    eprintln!("redis :{primary} serves slot {slot}, :{replica} replicates it; cutting :{replica} off");
    signal_node(replica, "-STOP");
    let _ = std::process::Command::new("redis-cli")
        .args(["-p", &primary.to_string(), "client", "kill", "type", "replica"])
        .status();
    (primary, replica)
}

/// `kill -9` the `primary` of `slot`, thaws its `replica` and waits until the
/// cluster promoted it. The killed node stays down (`infra/local/up.sh
/// --redis-cluster` brings it back, as a replica).
pub async fn kill_and_promote(slot: u16, primary: u16, replica: u16) {
    let pid = std::fs::read_to_string(node_pidfile(primary)).expect("the primary's pid file").trim().to_owned();
    let _ = std::process::Command::new("kill").args(["-9", &pid]).status();
    signal_node(replica, "-CONT");
    let promoted = std::time::Instant::now();
    crate::eventually("the cluster to promote the replica", Duration::from_secs(60), || async {
        match slot_primary(&cluster_nodes(), slot) {
            Some(node) if node.port != primary => Ok(()),
            _ => Err(format!(":{primary} still serves slot {slot}")),
        }
    })
    .await;
    eprintln!("the cluster promoted :{replica} after {:?}", promoted.elapsed());
}

/// Brings the killed node back as a replica (`infra/local/up.sh
/// --redis-cluster`).
pub fn bring_back() {
    let status = std::process::Command::new(crate::repo_root().join("infra/local/up.sh"))
        .arg("--redis-cluster")
        .status()
        .expect("up.sh");
    assert!(status.success());
}
