//! The operators' dashboard in a real browser: headless Chromium (Debian's,
//! driven by Playwright) signs in through the form, watches the page while
//! `seckillctl bench` sells a sale out, and sees the figures move, the
//! stock reach 0 (in each of the sale's three stock buckets) and the
//! verdict read consistent. The screenshot is kept
//! under `target/debug/e2e-logs/dashboard.png`.

use seckill_e2e::{binary, TestEnv};
use std::path::PathBuf;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_watches_a_sale_sell_out_in_a_real_browser() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = repo.join(".data/venv/bin/python");
    assert!(python.exists(), "{} is missing: `make test` installs it (make test-tools)", python.display());
    let env = TestEnv::new().await;
    let sale = env.sale();
    // In three stock buckets: the page lists each.
    let window = seckill_shared::sales::DEFAULT_PAYMENT_WINDOW_SECONDS;
    env.warmup_round(sale, 3_000, window, 3, true).await.expect("warming up");
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;

    let logs = binary("seckillctl").parent().expect("target dir").join("e2e-logs");
    std::fs::create_dir_all(&logs).expect("the log folder");
    let screenshot = logs.join("dashboard.png");
    let _ = std::fs::remove_file(&screenshot);
    let (activity, sku) = (sale.activity.to_string(), sale.sku.to_string());
    let bench = binary("seckillctl");
    let run = tokio::process::Command::new(&python)
        .arg(repo.join("tests/browser/dashboard_watch.py"))
        .args([edge.console_url().as_str(), seckill_e2e::ADMIN_TOKEN, &activity, &sku])
        .arg(&screenshot)
        .arg("--")
        .arg(&bench)
        .args(["bench", "--url", &edge.url(), "--activity", &activity, "--sku", &sku])
        .args(["--users", "9000", "--requests", "9000", "--concurrency", "32", "--rate", "1500"])
        .envs(env.child_env())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the browser run ended in time")
        .expect("running the browser");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the browser saw:\n{stdout}\n{stderr}");
    eprintln!("dashboard, as the browser saw it: {}; screenshot {}", stdout.trim(), screenshot.display());
    let png = std::fs::read(&screenshot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a real screenshot");

    compensator.stop().await;
    order.stop().await;
    edge.stop().await;
}
