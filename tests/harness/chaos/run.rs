//! One scenario run: the sale warmed, the load driven with its faults, the
//! pipeline drained and reconciled, and every promise checked from the
//! buyers' side (their answers) and the stores'.

use super::faults;
use super::{wait_redis_replicated, Outcome, Pipeline, Scenario};
use crate::{binary, TestEnv, Topology};
use seckill_shared::domain::{Limits, SaleKey};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Runs a scenario and checks every promise; panics naming the broken one.
pub async fn run(scenario: Scenario) -> Outcome {
    if scenario.topology == Topology::Cluster {
        // A scenario starts from a whole topology: the replica in sync.
        wait_redis_replicated().await;
    }
    let test = TestEnv::on(scenario.topology).await;
    let redis_may_lose = scenario.faults.iter().any(|(_, f)| f.loses_redis_writes());
    let sale = test.sale();
    let window = seckill_shared::sales::DEFAULT_PAYMENT_WINDOW_SECONDS;
    let limits = Limits { per_user_limit: scenario.per_user_limit, max_per_order: scenario.per_user_limit };
    test.warmup_request(sale, scenario.stock, window, scenario.buckets, true, limits).await.expect("warming up");
    let mut pipeline = Pipeline::start(&test);
    pipeline.wait_ready().await;

    let files = Files::of(&test);
    let outcomes = load_with_faults(&test, &scenario, sale, &mut pipeline, &files).await;
    let requests: u64 = outcomes.values().filter_map(|v| v.as_u64()).sum();
    let accepted = outcomes.get("202 QUEUED").and_then(|v| v.as_u64()).unwrap_or(0);
    let (created, units, violations, drain) = reconciled(&test, &scenario, sale, redis_may_lose, &pipeline).await;
    let (accepted_failed, lost_by_redis) = promised(&test, &scenario, sale, &files, accepted, redis_may_lose).await;
    // A 503 kept nothing: a buyer told only 503 (never 202, 409 or a lost
    // connection, whose answer nobody heard) holds no order.
    let refused_but_kept = refused_but_kept(&test, sale, &files.answers).await;
    let _ = std::fs::remove_file(&files.answers);
    let _ = std::fs::remove_file(&files.accepted);
    // Every promise held: no 202 ended FAILED, no 503 kept a unit.
    assert!(
        accepted_failed.is_empty() && refused_but_kept == 0,
        "{}: broken promises: 202s that ended FAILED {accepted_failed:?}, 503s that kept a unit {refused_but_kept}",
        scenario.name
    );
    // Downstream sees every change of every order, as a consumer reads it.
    test.verify_events(sale).await;
    let snapshot = test.stock.books().snapshot(sale).await.expect("a redis snapshot");
    let outcome = Outcome {
        name: scenario.name,
        requests,
        accepted,
        created,
        units,
        // Checked 0 by `reconciled`.
        over_limit: 0,
        restored: snapshot.compensated,
        written_off: snapshot.written_off,
        try_again: outcomes.get("503 TRY_AGAIN").and_then(|v| v.as_u64()).unwrap_or(0) as i64,
        unconfirmed: outcomes.get("202 UNCONFIRMED").and_then(|v| v.as_u64()).unwrap_or(0) as i64,
        accepted_failed,
        refused_but_kept,
        lost_by_redis,
        verdict: if violations.is_empty() {
            "consistent".into()
        } else {
            format!("explained: {}", violations.join("; "))
        },
        drain,
    };
    pipeline.stop().await;
    outcome
}

/// Whether `fault` would land on work in hand now: a compensator killed
/// right after dead letters were made while some still wait for it (its
/// group's lag: "mid-record"); an order service killed while records wait
/// for it (its group's lag) or the load flows; any other fault while the
/// load flows (the edges answered orders since the last fault, `since`).
async fn work_in_hand(
    test: &TestEnv,
    pipeline: &Pipeline,
    fault: &faults::Fault,
    since: u64,
    after_dead_letters: bool,
) -> Result<(), String> {
    let lag = || async { test.pipeline_lag().await.map_err(|error| format!("the groups' lag: {error:#}")) };
    match fault {
        faults::Fault::KillCompensator if after_dead_letters => {
            let lag = lag().await?.compensator.total;
            return if lag > 0 { Ok(()) } else { Err(format!("no dead letter waits for the compensator (lag {lag})")) };
        }
        faults::Fault::KillOrder if lag().await?.order.total > 0 => return Ok(()),
        _ => {}
    }
    let now = pipeline.orders_answered().await;
    if now > since {
        Ok(())
    } else {
        Err(format!("{now} orders answered by the edges, {since} at the last fault: the load does not flow"))
    }
}

/// Where the load writes the ids it was answered 202 for and every answer.
struct Files {
    accepted: PathBuf,
    answers: PathBuf,
}

impl Files {
    fn of(test: &TestEnv) -> Self {
        let dir = binary("seckillctl").parent().expect("dir").to_path_buf();
        Self {
            accepted: dir.join(format!("accepted-{}.txt", test.id)),
            answers: dir.join(format!("answers-{}.txt", test.id)),
        }
    }
}

/// The load's `seckillctl bench` arguments.
fn bench_args(scenario: &Scenario, url: &str, sale: SaleKey, files: &Files) -> Vec<String> {
    let (a, s) = (sale.activity.to_string(), sale.sku.to_string());
    [
        "bench",
        "--url",
        url,
        "--activity",
        &a,
        "--sku",
        &s,
        "--users",
        &scenario.users.to_string(),
        "--requests",
        &scenario.requests.to_string(),
        "--rate",
        &scenario.rate.to_string(),
        "--concurrency",
        &scenario.concurrency.to_string(),
        "--same-user-ratio",
        &scenario.retry_ratio.to_string(),
        "--quantity",
        scenario.quantities,
        "--seed",
        &scenario.seed.to_string(),
        "--accepted-out",
        files.accepted.to_str().expect("utf-8 path"),
        "--answers-out",
        files.answers.to_str().expect("utf-8 path"),
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs the load with the scenario's faults at their times; the answers
/// counted by `status code`.
async fn load_with_faults(
    test: &TestEnv,
    scenario: &Scenario,
    sale: SaleKey,
    pipeline: &mut Pipeline,
    files: &Files,
) -> serde_json::Map<String, serde_json::Value> {
    let args = bench_args(scenario, &pipeline.url, sale, files);
    let bench_env = test.child_env();
    let bench = tokio::spawn(async move {
        tokio::process::Command::new(binary("seckillctl")).args(&args).envs(bench_env).output().await.expect("bench")
    });

    let started = Instant::now();
    let mut answered = pipeline.orders_answered().await;
    let mut dead_letters_made = false;
    for (at, fault) in scenario.faults.clone() {
        // Due at its time into the load, and only once the process it hits
        // has work in hand (a fault on an idle process, on a slow machine,
        // would prove nothing).
        let since = answered;
        crate::eventually(&format!("{fault:?} due with work in hand"), Duration::from_secs(120), || async {
            if started.elapsed() < at {
                return Err(format!("{:?} into the load", started.elapsed()));
            }
            work_in_hand(test, pipeline, &fault, since, dead_letters_made).await
        })
        .await;
        dead_letters_made = matches!(fault, faults::Fault::DeadLetters(_));
        faults::inject(test, sale, pipeline, fault).await;
        answered = pipeline.orders_answered().await;
    }
    let bench = bench.await.expect("bench task");
    assert!(bench.status.success(), "bench failed: {}", String::from_utf8_lossy(&bench.stderr));
    let result: serde_json::Value = serde_json::from_slice(&bench.stdout).expect("bench JSON");
    let outcomes = result["bench"]["outcomes"].as_object().expect("outcomes").clone();
    eprintln!("chaos {}: {outcomes:?}", scenario.name);
    outcomes
}

/// Drains and reconciles the sale, checking what PostgreSQL guarantees
/// whatever happened to Redis; the orders created and the units they hold,
/// the violations the books explain, and how long the drain took.
async fn reconciled(
    test: &TestEnv,
    scenario: &Scenario,
    sale: SaleKey,
    redis_may_lose: bool,
    pipeline: &Pipeline,
) -> (i64, i64, Vec<String>, Duration) {
    let (a, s) = (sale.activity.to_string(), sale.sku.to_string());
    let drain_started = Instant::now();
    let reconcile = test.ctl(&["reconcile", "--activity", &a, "--sku", &s, "--wait-drain", "240", "--json"]).await;
    let drain = drain_started.elapsed();
    let report: serde_json::Value = serde_json::from_str(&reconcile.stdout)
        .unwrap_or_else(|_| panic!("reconcile printed no report: {reconcile:?}"));
    let violations: Vec<String> = report["violations"]
        .as_array()
        .map(|v| v.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let created = report["ordersCreated"].as_i64().unwrap_or(-1);
    let units = report["unitsCreated"].as_i64().unwrap_or(-1);
    // PostgreSQL's guarantees hold whatever happened to Redis.
    assert!(units <= scenario.stock, "{}: oversold: {units} units > {}", scenario.name, scenario.stock);
    assert_eq!(report["duplicateUsers"], 0, "{}: two live orders in one buyer's place", scenario.name);
    assert_eq!(report["usersOverLimit"], 0, "{}: a buyer holds more than the limit", scenario.name);
    assert_eq!(report["dbRemaining"].as_i64(), Some(scenario.stock - units), "{}: database stock guard", scenario.name);
    assert_eq!(report["parked"], 0, "{}: records parked", scenario.name);
    assert!(
        report["orderLag"] == 0 && report["compensatorLag"] == 0,
        "{}: pipeline not drained: {report}{}",
        scenario.name,
        pipeline.warnings()
    );
    if redis_may_lose {
        // Redis may have lost acknowledged writes: the books may show it in
        // the balance — and must say why — but nothing else may break.
        for violation in &violations {
            let explained = (violation.starts_with("total_stock") && violation.contains("unknown to Redis"))
                || violation.starts_with("redis has no such sale");
            assert!(
                explained
                    || violation.starts_with("compensated")
                    || violation.starts_with("not drained: orders_in_flight"),
                "{}: unexplained violation after Redis lost writes: {violation}",
                scenario.name
            );
        }
    } else {
        assert!(
            violations.is_empty() && reconcile.code == 0,
            "{}: reconciliation failed: {violations:?}\n{}",
            scenario.name,
            reconcile.stdout
        );
        assert_eq!(report["ordersInFlight"], 0, "{}: something left in flight", scenario.name);
    }

    (created, units, violations, drain)
}

/// Every 202 ended as exactly one of CREATED or FAILED with its unit
/// settled: the 202s that ended FAILED (by reason), and the accepted orders
/// Redis lost.
async fn promised(
    test: &TestEnv,
    scenario: &Scenario,
    sale: SaleKey,
    files: &Files,
    accepted: u64,
    redis_may_lose: bool,
) -> (BTreeMap<String, i64>, i64) {
    let ids: Vec<String> = std::fs::read_to_string(&files.accepted)
        .expect("accepted ids")
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    assert_eq!(ids.len() as u64, accepted, "{}: every 202 carried an order id", scenario.name);
    let rows: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT order_id, status, reason FROM orders WHERE order_id = ANY($1)")
            .bind(&ids)
            .fetch_all(&test.db)
            .await
            .expect("order rows");
    assert_eq!(rows.len(), ids.len(), "{}: an accepted order has no row after drain", scenario.name);
    let mut accepted_failed = BTreeMap::new();
    for (_, status, reason) in &rows {
        if status == "FAILED" {
            *accepted_failed.entry(reason.clone().unwrap_or_default()).or_insert(0) += 1;
        }
    }
    // After a Redis restart or failover the first command on an old
    // connection may fail while it reconnects.
    let known = crate::eventually("redis answering", Duration::from_secs(30), || async {
        test.stock.books().count_known_orders(sale, &ids).await.map_err(|e| e.to_string())
    })
    .await;
    let lost_by_redis = ids.len() as i64 - known;
    if !redis_may_lose {
        assert_eq!(lost_by_redis, 0, "{}: Redis lost accepted orders without a Redis fault", scenario.name);
        let failed: Vec<String> = rows.iter().filter(|(_, s, _)| s == "FAILED").map(|(id, _, _)| id.clone()).collect();
        let settled = test.stock.books().count_settled(sale, &failed).await.expect("settled sets");
        assert_eq!(
            settled,
            failed.len() as i64,
            "{}: a FAILED order's unit was not restored or written off",
            scenario.name
        );
    }
    (accepted_failed, lost_by_redis)
}

/// Buyers whose every answer was 503 (or 429, 410) and who hold an order in
/// PostgreSQL (CREATED or PAID) after the drain.
async fn refused_but_kept(test: &TestEnv, sale: seckill_shared::domain::SaleKey, answers: &std::path::Path) -> i64 {
    let mut told: BTreeMap<i64, Vec<u16>> = BTreeMap::new();
    for line in std::fs::read_to_string(answers).expect("the answers").lines() {
        let mut parts = line.split(' ');
        if let (Some(Ok(user)), Some(Ok(status))) = (parts.next().map(str::parse), parts.next().map(str::parse)) {
            told.entry(user).or_default().push(status);
        }
    }
    let refused: Vec<i64> = told
        .into_iter()
        .filter(|(_, answers)| answers.contains(&503) && answers.iter().all(|s| matches!(s, 503 | 429 | 410)))
        .map(|(user, _)| user)
        .collect();
    let holding: Vec<i64> = sqlx::query_scalar(
        "SELECT DISTINCT user_id FROM orders
          WHERE activity_id = $1 AND sku_id = $2 AND status IN ('CREATED', 'PAID') AND user_id = ANY($3)",
    )
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .bind(&refused)
    .fetch_all(&test.db)
    .await
    .expect("orders of refused buyers");
    if !holding.is_empty() {
        eprintln!("chaos: buyers told only 503 who hold an order: {:?}", &holding[..holding.len().min(20)]);
    }
    holding.len() as i64
}
