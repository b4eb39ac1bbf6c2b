//! The edge against its own OpenAPI document: the document it serves is the
//! one committed (`api/openapi.json`), and Schemathesis (bounded: a few
//! hundred generated cases, a fixed seed, loopback only) finds no 5xx and no
//! response outside the document — and the cases it generates change no
//! stock, buyer or order.

use seckill_e2e::http::Client;
use seckill_e2e::TestEnv;

/// Everything a request could change: the sale in Redis, every key of this
/// test's prefix, every order, sale and event row.
async fn state(env: &TestEnv, sale: seckill_shared::domain::SaleKey) -> (String, usize, i64, i64, i64) {
    let snapshot = env.stock.snapshot(sale).await.expect("redis");
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
    let client = Client::new(edge.url());
    let served = client.get("/openapi.json").await;
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(seckill_e2e::repo_root().join("api/openapi.json")).expect("api/openapi.json"),
    )
    .unwrap();
    assert_eq!(served.json, committed, "the served document is the committed one");

    let sale = env.sale();
    env.warmup(sale, 10).await;
    let before = state(&env, sale).await;
    let run = tokio::process::Command::new(&schemathesis)
        .arg("run")
        .arg(seckill_e2e::repo_root().join("api/openapi.json"))
        .args(["--url", &edge.url(), "--max-examples", "30", "--seed", "42", "--workers", "1"])
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "ignored_auth,positive_data_acceptance,use_after_free,ensure_resource_availability",
        ])
        .args(["--no-shrink", "--request-timeout", "10"])
        .current_dir(seckill_e2e::repo_root().join(".data")) // it keeps a cache folder where it runs
        .env("NO_COLOR", "1")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(300), run)
        .await
        .expect("schemathesis finished within 5 minutes")
        .expect("running schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Vec<&str> =
        stdout.lines().filter(|l| l.contains("generated") || l.contains("passed") || l.contains("failed")).collect();
    println!("schemathesis: {}", summary.join(" | "));
    if std::env::var_os("SCHEMATHESIS_VERBOSE").is_some() {
        println!("{stdout}");
    }
    assert!(
        output.status.success(),
        "schemathesis found problems:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(state(&env, sale).await, before, "the generated requests changed state");
    edge.stop().await;
}
