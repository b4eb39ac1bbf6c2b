//! The dashboard's dead-letters page: a wave of DB_REJECTED dead letters
//! (a bad release's constraint), the constraint dropped, and a redrive from
//! the page in headless Chromium — a dry run, then the run with a note,
//! clicked twice and sent again — after which the buyers read their orders
//! back as CREATED and the audit trail names the operator and the note,
//! once. And the JSON behind it: who may act, a submission sent twice
//! runs once, and a run is `seckillctl` in a process of its own.

use seckill_e2e::http::Client;
use seckill_e2e::{binary, eventually, TestEnv, ADMIN_TOKEN};
use seckill_shared::domain::SaleKey;
use std::path::PathBuf;
use std::time::Duration;

const WAVE: std::ops::RangeInclusive<i64> = 1001..=1010;

/// A bad release refuses the orders of users 1000 and up; ten such buyers
/// are dead-lettered DB_REJECTED and settled FAILED; the release is rolled
/// back (the constraint dropped).
async fn a_bad_release(env: &TestEnv, sale: SaleKey) {
    let refuse =
        "ALTER TABLE orders ADD CONSTRAINT bad_release CHECK (status <> 'CREATED' OR user_id < 1000) NOT VALID";
    sqlx::query(refuse).execute(&env.db).await.unwrap();
    let mut wave = Vec::new();
    for user in WAVE {
        wave.push(env.deduct(sale, user).await);
    }
    env.produce_records(&wave).await;
    env.wait_orders(sale, "FAILED", 10).await;
    sqlx::query("ALTER TABLE orders DROP CONSTRAINT bad_release").execute(&env.db).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_redrives_a_wave_from_the_page_in_a_real_browser() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = repo.join(".data/venv/bin/python");
    assert!(python.exists(), "{} is missing: `make test` installs it (make test-tools)", python.display());
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 20).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let order = env.spawn_order(env.order_settings()).await;
    let compensator = env.spawn_compensator(env.compensator_settings()).await;
    a_bad_release(&env, sale).await;

    let screenshot = binary("seckillctl").parent().expect("target dir").join("e2e-logs/dead-letters.png");
    std::fs::create_dir_all(screenshot.parent().unwrap()).unwrap();
    let note = "bad release rolled back";
    let run = tokio::process::Command::new(&python)
        .arg(repo.join("tests/browser/dead_letters_page.py"))
        .args([edge.console_url().as_str(), ADMIN_TOKEN, "ops-lin", &sale.to_string(), "DB_REJECTED", "10", note])
        .arg(&screenshot)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run).await.expect("in time").expect("the browser");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the browser saw:\n{stdout}\n{stderr}");
    eprintln!("the dead-letters page, as the browser saw it: {}", stdout.trim());
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(seen["runsPosted"], 1, "the double click sent one run");

    // The buyers read their orders back, as CREATED.
    let client = Client::new(edge.url());
    for user in WAVE {
        let path = format!("/api/seckill/result?activityId={}&skuId={}&userId={user}", sale.activity, sale.sku);
        eventually(&format!("buyer {user}'s order"), Duration::from_secs(60), || async {
            let reply = client.get(&path).await;
            match reply.json["status"].as_str() {
                Some("CREATED") => Ok(()),
                _ => Err(reply.text),
            }
        })
        .await;
    }
    // The audit trail, as seckillctl shows it: a dry run and one run, by
    // the operator, with the note; the submission sent again was that run.
    let runs = env.ctl(&["dlq", "runs", "--json"]).await;
    let runs: Vec<serde_json::Value> = serde_json::from_str(&runs.stdout).expect("dlq runs --json");
    let real: Vec<&serde_json::Value> = runs.iter().filter(|r| r["dryRun"] == false).collect();
    assert_eq!((runs.len(), real.len()), (2, 1), "{runs:#?}");
    assert_eq!((real[0]["operator"].as_str(), real[0]["note"].as_str()), (Some("ops-lin"), Some(note)));
    assert_eq!((real[0]["kind"].as_str(), real[0]["sent"].as_i64()), (Some("redrive"), Some(10)));
    assert_eq!(seen["again"], real[0]["runId"], "the submission sent again answered the same run");
    assert!(runs.iter().all(|r| r["operator"] == "ops-lin"), "{runs:#?}");
    env.wait_orders(sale, "CREATED", 10).await;
    compensator.stop().await;
    order.stop().await;
    edge.stop().await;
}

/// Who may act, and a submission sent twice: without a session or the
/// admin token, 401 and no run; with the token, a run must name its
/// operator and a real one its note (400, no run); the same submission
/// twice is one run, and what it sent was sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_needs_an_admin_and_a_submission_runs_once() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 5).await;
    let edge = env.spawn_edge(env.edge_settings()).await;
    let records: Vec<_> = (1..=3).map(|user| env.order_records(sale, user..user + 1).remove(0)).collect();
    for record in &records {
        env.dead_letter(record, "DB_REJECTED").await;
    }
    let client = Client::new(edge.console_url());
    let post = |body: serde_json::Value, auth: bool| {
        let client = client.clone();
        async move {
            let bearer = format!("Bearer {ADMIN_TOKEN}");
            let headers: Vec<(&str, &str)> = if auth { vec![("authorization", bearer.as_str())] } else { vec![] };
            let body = body.to_string();
            client.send(hyper::Method::POST, "/admin/dead-letters/runs", Some(body.as_bytes()), &headers).await
        }
    };
    let filter = serde_json::json!({"sale": sale.to_string()});
    let replay = |submission: &str, note: &str, operator: Option<&str>| {
        serde_json::json!({"kind": "replay", "filter": filter, "dryRun": false, "note": note,
                           "submission": submission, "operator": operator})
    };
    let refused = [
        (post(replay("a", "why", Some("ops")), false).await, 401, "no session, no token"),
        (post(replay("b", "why", None), true).await, 400, "the token, no operator"),
        (post(replay("c", " ", Some("ops")), true).await, 400, "no note"),
    ];
    for (reply, status, case) in refused {
        assert_eq!(reply.status.as_u16(), status, "{case}: {}", reply.text);
    }
    let runs = || async { env.ctl(&["dlq", "runs", "--json"]).await.stdout };
    assert_eq!(runs().await.trim(), "[]", "a refused request runs nothing");

    // The name a script gives is cleaned as the page's sign-in is: no
    // control characters (a terminal's escapes, a forged log line), at
    // most 64 characters.
    let first = post(replay("once", "test", Some(" ops-kim\u{7}\u{1b}\n ")), true).await;
    let second = post(replay("once", "test", Some("ops-kim")), true).await;
    assert_eq!((first.status.as_u16(), second.status.as_u16()), (200, 200), "{} {}", first.text, second.text);
    assert_eq!(first.json["run"]["runId"], second.json["run"]["runId"], "one run");
    assert_eq!(first.json["records"].as_array().map(Vec::len), Some(3), "{}", first.text);
    assert_eq!(second.json["records"], first.json["records"], "answered with what the run did");
    let all: Vec<serde_json::Value> = serde_json::from_str(&runs().await).unwrap();
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!((all[0]["operator"].as_str(), all[0]["sent"].as_i64()), (Some("ops-kim"), Some(3)));
    // Sent once: the orders topic holds the three replayed records (a
    // fourth is waited for, and does not come).
    let orders = env.read_topic(&env.topics().orders, 4, Duration::from_secs(5)).await;
    assert_eq!(orders.len(), 3);
    let long = "o".repeat(200);
    let dry =
        serde_json::json!({"kind": "replay", "filter": filter, "dryRun": true, "submission": "long", "operator": long});
    let dry = post(dry, true).await;
    assert_eq!(dry.json["run"]["operator"].as_str().map(str::len), Some(64), "{}", dry.text);
    edge.stop().await;
}

/// A run asked for on the console is `seckillctl`, in a process of its own:
/// the edge (in this test's process) runs a wrapper that notes its pid and
/// arguments before it becomes the tool; without the tool, no run starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_from_the_console_is_the_tool_in_a_process_of_its_own() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 3).await;
    let record = env.order_records(sale, 1..2).remove(0);
    env.dead_letter(&record, "DB_REJECTED").await;
    let dir = std::env::temp_dir().join(format!("console-run-{}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let (wrapper, seen) = (dir.join("seckillctl"), dir.join("seen"));
    let script =
        format!("#!/bin/sh\necho \"$$ $*\" >> {}\nexec {} \"$@\"\n", seen.display(), binary("seckillctl").display());
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let ask = |submission: &str| {
        serde_json::json!({"kind": "redrive", "filter": {"sale": sale.to_string()}, "dryRun": true,
                           "submission": submission, "operator": "ops-ann"})
        .to_string()
    };
    for (tool, submission, want) in
        [("/nonexistent/seckillctl", "missing", 500), (wrapper.to_str().unwrap(), "apart", 200)]
    {
        let mut settings = env.edge_settings();
        settings.console.ctl_binary = tool.to_owned();
        let edge = env.spawn_edge(settings).await;
        let body = ask(submission);
        let reply = Client::new(edge.console_url())
            .send(hyper::Method::POST, "/admin/dead-letters/runs", Some(body.as_bytes()), &[("authorization", &bearer)])
            .await;
        assert_eq!(reply.status.as_u16(), want, "{tool}: {}", reply.text);
        edge.stop().await;
    }
    let runs: Vec<serde_json::Value> = serde_json::from_str(&env.ctl(&["dlq", "runs", "--json"]).await.stdout).unwrap();
    assert_eq!(runs.len(), 1, "no tool, no run: {runs:#?}");
    assert_eq!(runs[0]["operator"], "ops-ann");
    let seen = std::fs::read_to_string(&seen).expect("the wrapper ran");
    let (pid, args) = seen.trim().split_once(' ').unwrap();
    assert_ne!(pid.parse::<u32>().unwrap(), std::process::id(), "another process than the edge's");
    assert!(args.starts_with("dlq redrive --sale") && args.contains("--submission apart --dry-run"), "{args}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A dead-letter run from the console that runs past its deadline
/// (`console.run_deadline_secs`; here a tool that never ends) is ended: its
/// process killed, the operator answered 503 naming the run, and the audit
/// trail records the run, ended at its deadline. (Before: the console
/// waited on the child for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_deadline_is_ended_and_recorded_so() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new().await;
    let sale = env.sale();
    let dir = std::env::temp_dir().join(format!("console-run-{}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let (tool, pid_file) = (dir.join("seckillctl"), dir.join("pid"));
    std::fs::write(&tool, format!("#!/bin/sh\necho $$ > {}\nexec sleep 600\n", pid_file.display())).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut settings = env.edge_settings();
    settings.console.ctl_binary = tool.display().to_string();
    settings.console.run_deadline_secs = 1;
    let edge = env.spawn_edge(settings).await;
    let body = serde_json::json!({"kind": "replay", "filter": {"sale": sale.to_string()}, "submission": "endless", "dryRun": false,
                                  "operator": "ops-lee", "note": "a tool that never ends"})
    .to_string();
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let console = Client::new(edge.console_url());
    let headers = [("authorization", bearer.as_str())];
    let ask = console.send(hyper::Method::POST, "/admin/dead-letters/runs", Some(body.as_bytes()), &headers);
    let reply = tokio::time::timeout(Duration::from_secs(60), ask).await.expect("answered in 60 s");
    assert_eq!((reply.status.as_u16(), reply.code()), (503, "TRY_AGAIN"), "{}", reply.text);
    assert!(reply.text.contains("dead-letter run"), "{}", reply.text);
    let pid: i32 = std::fs::read_to_string(&pid_file).expect("the tool ran").trim().parse().unwrap();
    eventually("the tool's process ended", Duration::from_secs(10), || async {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let running = state.split(") ").nth(1).is_some_and(|rest| !rest.starts_with('Z'));
        if running {
            Err(state)
        } else {
            Ok(())
        }
    })
    .await;
    let runs: Vec<serde_json::Value> = serde_json::from_str(&env.ctl(&["dlq", "runs", "--json"]).await.stdout).unwrap();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["operator"], "ops-lee");
    assert!(runs[0]["finishedAt"].is_string(), "{:#?}", runs[0]);
    assert!(runs[0]["error"].as_str().unwrap_or_default().contains("deadline"), "{:#?}", runs[0]);
    edge.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
