//! `make chaos-cluster`: the replicated topology (three Kafka brokers, Redis
//! with Sentinel, two of each service behind HAProxy) under flash-sale load
//! through the load balancer, with each fault of the topology. Runs
//! serially against `infra/local/up.sh --cluster` and prints the table.
//! `make test` runs the short version (`chaos_cluster_short`): every fault
//! of the topology once, in one smaller sale.

use seckill_e2e::chaos::draw::draw_through_failovers;
use seckill_e2e::chaos::release::release_through_faults;
use seckill_e2e::chaos::{run, Fault, Scenario, TABLE_HEADER};
use seckill_e2e::Topology;
use std::time::Duration;

fn scenario(name: &'static str, seed: u64, faults: Vec<(u64, Fault)>) -> Scenario {
    Scenario::flash_sale(Topology::Cluster, name, seed, faults)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_cluster() {
    let secs = Duration::from_secs;
    let only = std::env::var("CHAOS_ONLY").ok();
    let scenarios = [
        scenario(
            "a kill -9 the leader broker of the orders topic",
            21,
            vec![(4_000, Fault::KillLeaderBroker(secs(8)))],
        ),
        scenario(
            "b1 kill -9 the Redis primary (Sentinel failover)",
            22,
            vec![(4_000, Fault::KillRedisPrimary(secs(5)))],
        ),
        scenario(
            "b2 the replica stopped 2 s, then the primary killed (a lagging failover)",
            26,
            vec![(4_000, Fault::KillRedisPrimaryBehind(secs(2)))],
        ),
        scenario("c kill -9 one edge", 23, vec![(3_000, Fault::KillEdge), (9_000, Fault::KillEdge)]),
        scenario(
            "d kill -9 one order service and one compensator",
            24,
            // The compensator right after the dead letters: mid-record.
            vec![(2_500, Fault::DeadLetters(300)), (2_700, Fault::KillCompensator), (3_200, Fault::KillOrder)],
        ),
        Scenario {
            requests: 14_000,
            users: 11_000,
            stock: 4_000,
            ..scenario(
                "e all of a-d together",
                25,
                vec![
                    (3_000, Fault::DeadLetters(200)),
                    (3_200, Fault::KillCompensator),
                    (3_500, Fault::KillOrder),
                    (4_000, Fault::KillEdge),
                    (5_000, Fault::KillLeaderBroker(secs(8))),
                    (7_000, Fault::KillRedisPrimary(secs(5))),
                ],
            )
        },
    ];
    let names: Vec<&str> = scenarios.iter().map(|s| s.name).collect();
    // CHAOS_ONLY=b2 runs the scenarios whose name starts with it.
    let chosen: Vec<Scenario> =
        scenarios.iter().filter(|s| only.as_deref().is_none_or(|o| s.name.starts_with(o))).cloned().collect();
    assert!(!chosen.is_empty(), "CHAOS_ONLY={only:?} names no scenario of {names:?}");
    let mut rows = Vec::new();
    for scenario in chosen {
        let outcome = run(scenario).await;
        println!("{}", outcome.row());
        rows.push(outcome.row());
    }
    println!("\n{TABLE_HEADER}\n{}", rows.join("\n"));
    if only.is_none() {
        let draw = "e a draw: the Redis primary killed during entries, the draw and claims (Sentinel failovers)";
        println!("{}", draw_through_failovers(Topology::Cluster, draw, 2_000, 100).await.row());
        let release = "f a release of 4 sizes, limit 2, two edges: the Redis primary killed 1 s behind, an edge killed";
        let faults = [Fault::KillRedisPrimaryBehind(Duration::from_secs(1)), Fault::KillEdge];
        println!("{}", release_through_faults(Topology::Cluster, release, 400, &faults).await.row());
    }
}

/// A draw whose Redis primary is killed three times — while buyers enter,
/// as the draw is made, while the winners claim — with its replica cut off
/// first each time: Sentinel promotes the replica, and every entry answered
/// 200 is drawn, the draw is one, one unit per winner is sold and the books
/// reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_cluster_short_draw() {
    let outcome = draw_through_failovers(Topology::Cluster, "short: a draw, three Sentinel failovers", 200, 20).await;
    println!("{}", outcome.row());
}

/// A release of four sizes (limit two per customer) sold through both
/// edges behind HAProxy while the Redis primary is killed with its replica
/// a second behind (Sentinel promotes it): no customer above the limit,
/// every 202 kept, the books consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_cluster_short_release() {
    let name = "short: a release of 4 sizes, limit 2, two edges: the Redis primary killed 1 s behind";
    let faults = [Fault::KillRedisPrimaryBehind(Duration::from_secs(1))];
    println!("{}", release_through_faults(Topology::Cluster, name, 150, &faults).await.row());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_cluster_short() {
    // Each fault waits for the one before (a failover, a broker back up):
    // the load lasts long enough for the last to land on it (30 s), with
    // units left for the dead letters made after the failover.
    let outcome = run(Scenario {
        stock: 12_000,
        users: 20_000,
        requests: 15_000,
        ..scenario("short: Redis primary (replica 1 s behind), one edge, one order service, one compensator, the leader broker", 31, vec![
            (1_500, Fault::KillRedisPrimaryBehind(Duration::from_secs(1))),
            (5_000, Fault::DeadLetters(100)),
            (5_200, Fault::KillCompensator),
            (5_500, Fault::KillOrder),
            (6_000, Fault::KillEdge),
            (7_000, Fault::KillLeaderBroker(Duration::from_secs(5))),
        ])
    })
    .await;
    println!("{TABLE_HEADER}\n{}", outcome.row());
}
