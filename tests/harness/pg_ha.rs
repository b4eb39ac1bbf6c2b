//! PostgreSQL with failover (`infra/local/up.sh --postgres-ha`): a test's
//! database on the formation, reached as every service reaches it (the
//! multi-host URL, `target_session_attrs=read-write`), and its nodes killed
//! and brought back as a machine that dies and returns would be
//! (`infra/local/postgres_ha_node.sh`).

use crate::{eventually, repo_root, TestEnv, Topology};
use sqlx::Connection;
use std::time::{Duration, Instant};

/// The formation's nodes.
pub const NODES: [&str; 2] = ["node1", "node2"];

/// A node's port.
pub fn port(node: &str) -> u16 {
    match node {
        "node1" => 5441,
        "node2" => 5442,
        other => panic!("no node {other}"),
    }
}

/// The URL of `database` as the services reach it: both nodes, in the
/// order `pg_autoctl show uri` gives them.
pub fn url(database: &str) -> String {
    format!("postgres://seckill:seckill@127.0.0.1:5441,127.0.0.1:5442/{database}?target_session_attrs=read-write")
}

/// [`url`] with `first` named first: a test's own pool starts on the
/// primary it made the database on (the standby may not have replayed the
/// `CREATE DATABASE` yet; the services retry until the pool follows).
fn url_from(first: &str, database: &str) -> String {
    let other = other(first);
    format!(
        "postgres://seckill:seckill@127.0.0.1:{},127.0.0.1:{}/{database}?target_session_attrs=read-write",
        port(first),
        port(other)
    )
}

/// The superuser on one node (pg_autoctl's trust for it on loopback).
fn node_url(node: &str, database: &str) -> String {
    format!("postgres://postgres@127.0.0.1:{}/{database}", port(node))
}

fn script(args: &[&str]) -> std::process::Output {
    std::process::Command::new(repo_root().join("infra/local/postgres_ha_node.sh"))
        .args(args)
        .output()
        .expect("infra/local/postgres_ha_node.sh")
}

/// The node that is primary now (`None` during a failover).
pub fn primary() -> Option<String> {
    let out = script(&["primary"]);
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The other node.
pub fn other(node: &str) -> &'static str {
    if node == NODES[0] {
        NODES[1]
    } else {
        NODES[0]
    }
}

/// A node ready to be killed at once: its process group, looked up ahead,
/// and the group leader's parent (`runuser`, which reaps it).
pub struct NodeGroup(String, Option<String>);

impl NodeGroup {
    /// `node`'s process group (its pg_autoctl, supervisor and postmaster).
    pub fn of(node: &str) -> Self {
        let out = script(&["group", node]);
        assert!(out.status.success(), "{node} is not running");
        let group = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let parent = processes().into_iter().find(|p| p.pid.to_string() == group).map(|p| p.ppid.to_string());
        Self(group, parent)
    }

    /// `kill -9` of the whole group and the postmaster's children, now.
    pub fn kill(self) -> Instant {
        self.signal("KILL");
        Instant::now()
    }

    /// `SIGSTOP` of the whole group and of the postmaster's children (each
    /// backend is a session of its own: stopping the group alone leaves
    /// every open connection served), now: the host alive, the server
    /// silent (the kernel still acknowledges every byte sent to it).
    pub fn freeze(&self) -> Instant {
        self.signal("STOP");
        Instant::now()
    }

    /// `SIGCONT` of the whole group and its descendants, and of its
    /// leader's parent: `runuser` stops itself when it sees its child
    /// stopped, and a parent left stopped never reaps the node once it is
    /// killed (a zombie whose pid is still in pg_autoctl's pidfile:
    /// "already running").
    pub fn thaw(&self) {
        self.signal("CONT");
        if let Some(parent) = &self.1 {
            let _ = std::process::Command::new("kill").args(["-CONT", parent]).status();
        }
    }

    /// `signal` to the group first (the postmaster forks no more), then to
    /// every descendant of its members.
    fn signal(&self, signal: &str) {
        let sent =
            std::process::Command::new("kill").args([&format!("-{signal}"), "--", &format!("-{}", self.0)]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{signal} of process group {}", self.0);
        let all = processes();
        let mut members: Vec<u32> = all.iter().filter(|p| p.pgrp.to_string() == self.0).map(|p| p.pid).collect();
        let mut descendants = Vec::new();
        while let Some(parent) = members.pop() {
            for child in all.iter().filter(|p| p.ppid == parent && p.pgrp.to_string() != self.0) {
                descendants.push(child.pid.to_string());
                members.push(child.pid);
            }
        }
        if !descendants.is_empty() {
            // One may have ended meanwhile: not an error.
            let _ = std::process::Command::new("kill")
                .arg(format!("-{signal}"))
                .args(&descendants)
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// One process, as /proc says.
struct Process {
    pid: u32,
    ppid: u32,
    pgrp: u32,
}

/// Every process now (`/proc/PID/stat`: "pid (comm) state ppid pgrp ...";
/// comm may hold spaces).
fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let mut fields = stat.rsplit_once(") ")?.1.split(' ').skip(1);
            let ppid = fields.next()?.parse().ok()?;
            let pgrp = fields.next()?.parse().ok()?;
            Some(Process { pid, ppid, pgrp })
        })
        .collect()
}

/// `kill -9` of `node`'s pg_autoctl, its supervisor and its postmaster.
pub fn kill(node: &str) -> Instant {
    NodeGroup::of(node).kill()
}

/// `node`'s pg_autoctl started again.
pub fn start(node: &str) {
    let out = script(&["start", node]);
    assert!(out.status.success(), "starting {node}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Brings back whatever node is down (`infra/local/up.sh --postgres-ha`:
/// a scenario that failed half-way left one killed), then waits for the
/// formation to be whole.
pub async fn ensure_whole() {
    // A node a failed scenario left frozen (and its runuser) goes on.
    for node in NODES {
        if script(&["group", node]).status.success() {
            NodeGroup::of(node).thaw();
        }
    }
    let up = std::process::Command::new(repo_root().join("infra/local/up.sh"))
        .arg("--postgres-ha")
        .output()
        .expect("infra/local/up.sh --postgres-ha");
    assert!(up.status.success(), "infra/local/up.sh --postgres-ha: {}", String::from_utf8_lossy(&up.stderr));
    wait_healthy(Duration::from_secs(180)).await;
}

/// Waits until the formation has a primary and a secondary, as assigned.
pub async fn wait_healthy(within: Duration) {
    eventually("the formation whole (a primary and a secondary)", within, || async {
        if script(&["healthy"]).status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&script(&["primary"]).stdout).into_owned())
        }
    })
    .await;
}

/// What `sql` (one number) answers on `node` itself, primary or standby.
pub async fn on_node(node: &str, database: &str, sql: &str) -> Option<i64> {
    let mut connection = sqlx::PgConnection::connect(&node_url(node, database)).await.ok()?;
    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned())).fetch_one(&mut connection).await.ok()
}

/// A setting of `node` as it runs now.
pub async fn setting(node: &str, database: &str, name: &str) -> Option<String> {
    let mut connection = sqlx::PgConnection::connect(&node_url(node, database)).await.ok()?;
    sqlx::query_scalar::<_, String>("SELECT current_setting($1)").bind(name).fetch_one(&mut connection).await.ok()
}

impl TestEnv {
    /// A fresh, migrated database on the formation (Redis and Kafka the
    /// single ones), made on the primary and reached by the multi-host URL.
    pub async fn on_postgres_ha() -> Self {
        let primary = primary().expect("PostgreSQL with failover must run (infra/local/up.sh --postgres-ha)");
        // Made by the application's role, as on the single server: it owns
        // the database and its schema.
        let admin = format!("postgres://seckill:seckill@127.0.0.1:{}/seckill", port(&primary));
        Self::build_on(Topology::Single, 4, &admin, |name| url_from(&primary, name)).await
    }

    /// Drops this test's database from the formation (on whichever node is
    /// primary now).
    pub async fn drop_ha_database(&self) {
        self.db.close().await;
        let primary = primary().expect("a primary");
        let mut admin = sqlx::PgConnection::connect(&node_url(&primary, "postgres")).await.expect("the primary");
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.database_name)))
            .execute(&mut admin)
            .await
            .expect("dropping the test database");
    }
}
