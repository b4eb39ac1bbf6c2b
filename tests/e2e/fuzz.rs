//! The edge against its own OpenAPI document: the document it serves is the
//! one committed (`api/openapi.json`), and Schemathesis (bounded: its
//! examples, coverage and fuzzing phases, 30 cases an operation in each
//! (seconds), and its stateful phase, which follows the document's links
//! from a placed order, a join and an entry to their reads and from a
//! warm-up to its report; a fixed seed, loopback only), run on each of the
//! edge's two addresses with the operations the document says answer there
//! (the buyers' and the provider's on one, `/admin/…` on the operators'),
//! passes every check
//! but `positive_data_acceptance` and warns of no schema looser than the
//! edge's validation — and the cases it generates change no stock, buyer or
//! order. `make fuzz-long` runs it longer (`SCHEMATHESIS_ARGS`).

use seckill_e2e::http::Client;
use seckill_e2e::TestEnv;

/// Everything a request could change: the sale in Redis, every key of this
/// test's prefix, every order, sale and event row.
async fn state(env: &TestEnv, sale: seckill_shared::domain::SaleKey) -> (String, usize, i64, i64, i64) {
    let snapshot = env.stock.books().snapshot(sale).await.expect("redis");
    let mut conn = env.stock.connection();
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}*", env.redis.key_prefix)).query_async(&mut conn).await.expect("keys");
    // A sale lock's key is a lease that expires by itself: the warm-up's,
    // when its release did not answer in time (a loaded machine: CI saw 5
    // keys before the run and 4 after), goes meanwhile.
    let lock = |key: &str| key.ends_with(":warmup") || key.ends_with(":lock");
    let keys: Vec<String> = keys.into_iter().filter(|key| !lock(key)).collect();
    let count =
        |sql: &'static str| async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(&env.db).await.expect("a count") };
    (
        format!("{snapshot:?}"),
        keys.len(),
        count("SELECT count(*) FROM orders").await,
        count("SELECT sum(remaining_stock + total_stock + round)::bigint FROM sales").await,
        count("SELECT count(*) FROM order_events").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_and_changes_nothing() {
    let schemathesis = seckill_e2e::repo_root().join(".data/venv/bin/schemathesis");
    assert!(schemathesis.exists(), "{} is missing: `make test` installs it (make test-tools)", schemathesis.display());
    let env = TestEnv::new().await;
    // Schemathesis sends the admin API requests without credentials on
    // purpose, from one address: throttled after ten, the rest would be
    // 429 and the logic behind them untested (the throttle has its own
    // test, admin_access).
    let mut settings = env.edge_settings();
    settings.admin_auth.failure_burst = 1_000_000;
    let edge = env.spawn_edge(settings).await;
    assert_ne!(edge.addr, edge.console, "two addresses");
    let client = Client::new(edge.url());
    let served = client.get("/openapi.json").await;
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(seckill_e2e::repo_root().join("api/openapi.json")).expect("api/openapi.json"),
    )
    .unwrap();
    assert_eq!(served.json, committed, "the served document is the committed one");
    let admin_paths =
        committed["paths"].as_object().expect("paths").iter().filter(|(_, item)| item.get("servers").is_some());
    let admin_paths: Vec<&String> = admin_paths.map(|(path, _)| path).collect();
    assert!(
        !admin_paths.is_empty() && admin_paths.iter().all(|p| p.starts_with("/admin/")),
        "the operators' paths, and only they, name their own address: {admin_paths:?}"
    );

    let sale = env.sale();
    env.warmup(sale, 10).await;
    // A 503 of /readyz before the edge's first check of Kafka is the truth,
    // but a server error to Schemathesis: it starts once the edge is ready.
    seckill_e2e::eventually("the edge to be ready", std::time::Duration::from_secs(30), || async {
        match client.get("/readyz").await {
            reply if reply.status == 200 => Ok(()),
            reply => Err(reply.text),
        }
    })
    .await;
    let before = state(&env, sale).await;
    // The buyers' and the provider's operations on theirs, the operators'
    // on theirs: each run only what the document says answers there.
    let buyers = schemathesis_on(&schemathesis, &edge.url(), ["--exclude-path-regex", "^/admin/"]).await;
    let operators = schemathesis_on(&schemathesis, &edge.console_url(), ["--include-path-regex", "^/admin/"]).await;
    for stdout in [&buyers, &operators] {
        // Generated bodies the document calls valid are not refused as
        // invalid (before: the order, cancel, join and warm-up bodies and
        // the order id paths were looser in the document than in the edge).
        assert!(!stdout.contains("Schema validation mismatch"), "the document is looser than the edge:\n{stdout}");
    }
    assert_eq!(state(&env, sale).await, before, "the generated requests changed state");
    edge.stop().await;
}

/// Schemathesis over the operations `filter` selects, against `url`: its
/// output, once it passed.
async fn schemathesis_on(schemathesis: &std::path::Path, url: &str, filter: [&str; 2]) -> String {
    let run = tokio::process::Command::new(schemathesis)
        .arg("run")
        .arg(seckill_e2e::repo_root().join("api/openapi.json"))
        .args(["--url", url, "--max-examples", "30", "--seed", "42", "--workers", "1"])
        .args(filter)
        // Every check but one: a valid body for a sale that does not exist
        // is refused (404), as it must be.
        .args(["--checks", "all", "--exclude-checks", "positive_data_acceptance"])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--no-shrink", "--request-timeout", "10"])
        // More of a run (`make fuzz-long` says how): its arguments come last.
        .args(std::env::var("SCHEMATHESIS_ARGS").unwrap_or_default().split_whitespace())
        .current_dir(seckill_e2e::repo_root().join(".data")) // it keeps a cache folder where it runs
        .env("NO_COLOR", "1")
        .kill_on_drop(true)
        .output();
    let minutes = if std::env::var_os("SCHEMATHESIS_ARGS").is_some() { 20 } else { 5 };
    let output = tokio::time::timeout(std::time::Duration::from_secs(minutes * 60), run)
        .await
        .unwrap_or_else(|_| panic!("schemathesis did not finish within {minutes} minutes"))
        .expect("running schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let summary: Vec<&str> =
        stdout.lines().filter(|l| l.contains("generated") || l.contains("passed") || l.contains("failed")).collect();
    println!("schemathesis on {url} ({}): {}", filter.join(" "), summary.join(" | "));
    if std::env::var_os("SCHEMATHESIS_VERBOSE").is_some() {
        println!("{stdout}");
    }
    assert!(
        output.status.success(),
        "schemathesis on {url} found problems:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
