//! The short version of `make chaos` that runs in `make test`: process
//! crashes, a database outage seen by this test only, and poison records,
//! all during one load. (Stopping the shared Kafka, PostgreSQL or Redis
//! servers would disturb the tests running beside it: those faults run in
//! `make chaos`.)

use seckill_e2e::chaos::{run, Fault, Scenario, TABLE_HEADER};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_and_outages_lose_nothing() {
    let outcome = run(Scenario {
        name: "short: kill -9 edge, order service, compensator; database blocked 4 s; poison + duplicate",
        seed: 11,
        stock: 1_500,
        users: 4_000,
        requests: 5_000,
        rate: 500.0,
        concurrency: 32,
        retry_ratio: 0.1,
        faults: vec![
            (Duration::from_millis(1_500), Fault::PoisonAndDuplicate),
            (Duration::from_millis(2_500), Fault::KillEdge),
            (Duration::from_millis(4_000), Fault::KillOrder),
            (Duration::from_millis(5_500), Fault::BlockDatabase(Duration::from_secs(4))),
            (Duration::from_millis(7_000), Fault::KillCompensator),
        ],
    })
    .await;
    println!("{TABLE_HEADER}\n{}", outcome.row());
}
