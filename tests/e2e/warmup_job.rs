//! A warm-up is all or nothing, whoever stops waiting for it: it runs to
//! its end apart from its caller, a run that stopped short is named by the
//! reconciliation and finished by repeating it (the same warm-up id), and
//! a warm-up answered 200 is on the replicas.

use hyper::Method;
use seckill_e2e::http::Client;
use seckill_e2e::{eventually, Child, TestEnv, ADMIN_TOKEN};
use seckill_shared::domain::SaleKey;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Each bucket's (round, total, warming) as Redis holds it.
async fn buckets(env: &TestEnv, sale: SaleKey) -> Vec<(i64, i64, bool)> {
    let mut conn = env.stock.connection();
    let mut seen = Vec::new();
    for bucket in env.stock.bucket_moves().directory(sale).await.expect("the buckets").buckets {
        let meta = format!("{}:meta", env.stock.keys().bucket_base(sale, bucket));
        let (round, total, warming): (Option<i64>, Option<i64>, Option<i64>) =
            redis::AsyncCommands::hmget(&mut conn, &meta, &["round", "total", "warming"])
                .await
                .expect("a bucket's meta");
        seen.push((round.unwrap_or(0), total.unwrap_or(0), warming.is_some()));
    }
    seen
}

/// PostgreSQL's round of the sale.
async fn db_round(env: &TestEnv, sale: SaleKey) -> i32 {
    seckill_shared::db::find_sale(&env.db, sale).await.unwrap().map_or(0, |row| row.round)
}

fn warmup_body(stock: i64, buckets: u32, id: Option<&str>) -> String {
    let id = id.map(|id| format!(r#","warmupId":"{id}""#)).unwrap_or_default();
    format!(r#"{{"stock":{stock},"buckets":{buckets},"force":true{id}}}"#)
}

/// The client hangs up once a re-warm of a sale in three buckets has begun
/// (the edge's Redis 300 ms away: a warm-up of some seconds): the
/// warm-up runs to its end anyway — PostgreSQL and every bucket on round 2,
/// none held still. (Before: the handler was dropped with the connection,
/// leaving buckets held still and PostgreSQL rolled back to round 1.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_does_not_cut_a_warm_up_in_half() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let window = seckill_shared::sales::DEFAULT_PAYMENT_WINDOW_SECONDS;
    env.warmup_round(sale, 30, window, 3, true).await.expect("round 1");
    let slow = seckill_e2e::proxy::delaying("127.0.0.1:6379".parse().unwrap(), Duration::from_millis(300)).await;
    let mut settings = env.edge_settings();
    settings.servers.redis.url = format!("redis://{slow}/0");
    settings.servers.redis.timeout_ms = 30_000;
    let edge = env.spawn_edge(settings).await;
    let body = warmup_body(60, 3, None);
    let mut stream = tokio::net::TcpStream::connect(edge.console).await.unwrap();
    let request = format!(
        "PUT /admin/sales/{}/{} HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        sale.activity, sale.sku, body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // Hung up once the warm-up has begun: its row written, not finished.
    eventually("the warm-up to begin", Duration::from_secs(30), || async {
        match seckill_shared::sales::warmup_rows::unfinished(&env.db, sale).await {
            Ok(Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    drop(stream);
    eventually("the warm-up to end", Duration::from_secs(90), || async {
        let done = seckill_shared::sales::warmup_rows::unfinished(&env.db, sale).await.unwrap().is_none();
        let seen = (db_round(&env, sale).await, buckets(&env, sale).await, done);
        if seen == (2, vec![(2, 20, false); 3], true) {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert!(report.unfinished_warmup.is_none() && report.consistent, "{:?}", report.violations);
    edge.stop().await;
}

/// `seckillctl warmup` killed once the round is committed, before Redis is
/// loaded: the reconciliation names the half-done warm-up (and says how to
/// finish it); run again with the same id it is finished — the same round,
/// not a third — and asked once more, it answers the same. The same id with
/// another request is refused. (Before: nothing recorded a warm-up; a
/// half-done one could only be replaced.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_done_warm_up_is_named_and_finished_by_repeating_it() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let window = seckill_shared::sales::DEFAULT_PAYMENT_WINDOW_SECONDS;
    env.warmup_round(sale, 30, window, 3, true).await.expect("round 1");
    let slow = seckill_e2e::proxy::delaying("127.0.0.1:6379".parse().unwrap(), Duration::from_millis(300)).await;
    let (a, s) = (sale.activity.to_string(), sale.sku.to_string());
    let args = ["warmup", "--activity", &a, "--sku", &s, "--stock", "60", "--buckets", "3", "--force", "--id", "job-7"];
    let mut child_env = env.child_env();
    child_env.push(("SECKILL_REDIS_URL".into(), format!("redis://{slow}/0")));
    child_env.push(("SECKILL__REDIS__TIMEOUT_MS".into(), "30000".into()));
    let ctl = Child::start_with_args("seckillctl", &args, &child_env);
    eventually("the round committed", Duration::from_secs(60), || async {
        let step = seckill_shared::sales::warmup_rows::find(&env.db, "job-7").await.unwrap().map(|w| w.step);
        if step == Some(seckill_shared::sales::warmup_rows::Step::Committed) {
            Ok(())
        } else {
            Err(format!("{step:?}"))
        }
    })
    .await;
    ctl.kill9().await;
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    let unfinished = report.unfinished_warmup.as_ref().expect("the half-done warm-up is named");
    assert_eq!(
        (unfinished.warmup_id.as_str(), unfinished.step.as_str(), unfinished.round),
        ("job-7", "COMMITTED", Some(2))
    );
    assert!(report.violations.iter().any(|v| v.contains("--id job-7")), "{:?}", report.violations);

    // The killed run held the warm-up lock: once its lease has run out.
    eventually("the warm-up finished by repeating it", Duration::from_secs(60), || async {
        let run = env.ctl(&args).await;
        if run.code == 0 {
            Ok(())
        } else {
            Err(format!("{}{}", run.stdout, run.stderr))
        }
    })
    .await;
    assert_eq!((db_round(&env, sale).await, buckets(&env, sale).await), (2, vec![(2, 20, false); 3]));
    assert_eq!(env.ctl(&args).await.code, 0, "asked again once done");
    assert_eq!(db_round(&env, sale).await, 2, "the same warm-up: no new round");
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert!(report.unfinished_warmup.is_none() && report.consistent, "{:?}", report.violations);
    let other = ["warmup", "--activity", &a, "--sku", &s, "--stock", "61", "--force", "--id", "job-7"];
    let reused = env.ctl(&other).await;
    assert_ne!(reused.code, 0, "the id of another request: {}", reused.stdout);
    assert!(reused.stderr.contains("another request"), "{}", reused.stderr);
}

/// Where a warm-up must be confirmed by a replica and none confirms it
/// (here: there is none), it is answered 503, not 200 — a 200 is never lost
/// in a failover — and the reconciliation names it; repeated with its id
/// where no replica is asked for, it is finished. (Before: 200 at once,
/// whatever the replicas had.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_up_no_replica_confirmed_is_not_answered_200() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let mut settings = env.edge_settings();
    settings.servers.redis.min_replica_acks = Some(1);
    settings.servers.redis.replica_ack_timeout_ms = 100;
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.console_url());
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let body = warmup_body(10, 1, Some("confirm-1"));
    let unconfirmed = client.send(Method::PUT, &path, Some(body.as_bytes()), &[("authorization", &auth)]).await;
    assert_eq!((unconfirmed.status.as_u16(), unconfirmed.code()), (503, "TRY_AGAIN"), "{}", unconfirmed.text);
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert_eq!(report.unfinished_warmup.map(|w| w.warmup_id), Some("confirm-1".to_owned()));
    edge.stop().await;

    let edge = env.spawn_edge(env.edge_settings()).await;
    let client = Client::new(edge.console_url());
    let done = client.send(Method::PUT, &path, Some(body.as_bytes()), &[("authorization", &auth)]).await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert_eq!(done.headers["seckill-warmup-id"], "confirm-1");
    assert_eq!(done.json["round"], 1, "the same warm-up finished: round 1");
    edge.stop().await;
}

/// A warm-up the edge accepted is judged by the clock once, when it is
/// accepted. A draw's warm-up cut short right after it was recorded (its
/// edge killed: the job's row, nothing more) and repeated with its id only
/// once its `drawAt` passed is finished, not refused, and its draw made,
/// late; a finished warm-up asked again after its `endsAt` answers its own
/// sale. A new warm-up is still refused either way. (Before: both repeats
/// answered 400 "must be in the future", and the resumer gave the cut one
/// up, the sale answering 503 until warmed up anew.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_up_already_accepted_is_finished_whatever_the_clock_says() {
    use seckill_shared::draw::Draw;
    use seckill_shared::sales::{warmup, warmup_rows, WarmupError, WarmupRequest};
    let env = TestEnv::new().await;
    let locks = seckill_shared::ops::lock::LockClient::new(env.stock.connection(), Default::default());
    let lock = seckill_shared::config::LockSettings::warmup();
    let sale = env.sale();
    let draw: Draw = serde_json::from_str(&seckill_e2e::draw::draw_json(-1, 2, 60)).unwrap();
    let cut = WarmupRequest {
        id: Some(format!("cut-{}", sale.sku)),
        sale,
        stock: 3,
        starts_at: None,
        ends_at: None,
        force: true,
        payment_window_seconds: 900,
        buckets: 1,
        admission: None,
        draw: Some(draw.clone()),
        limits: Default::default(),
    };
    let id = cut.id.clone().unwrap();
    warmup_rows::begin(&env.db, &id, &cut).await.unwrap().expect("the job recorded, as the edge accepted it");
    // The clock passes the draw's time while the warm-up waits.
    tokio::time::sleep((draw.draw_at - chrono::Utc::now()).to_std().unwrap_or_default()).await;
    let new = WarmupRequest { id: Some(format!("new-{}", sale.sku)), ..cut.clone() };
    let refused = warmup(&env.stock, &env.db, seckill_e2e::CALL_DEADLINE, &locks, &lock, &new).await;
    assert!(matches!(refused, Err(WarmupError::Invalid(_))), "a new warm-up with drawAt past: {refused:?}");
    let row = warmup(&env.stock, &env.db, seckill_e2e::CALL_DEADLINE, &locks, &lock, &cut)
        .await
        .expect("the accepted one finished");
    assert_eq!(row.round, 1);
    let made = eventually("the draw made, late", Duration::from_secs(10), || async {
        seckill_edge::draw::make::make(&env.stock, (&env.db, seckill_e2e::CALL_DEADLINE), sale, 1)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("not yet".to_owned())
    })
    .await;
    assert_eq!((made.entries, made.winners), (0, 0));
    assert!(env.stock.draws().draw_state(sale).await.unwrap().unwrap().drawn);

    let short = env.sale();
    let ends = chrono::Utc::now() + chrono::Duration::seconds(2);
    let done = WarmupRequest {
        id: Some(format!("short-{}", short.sku)),
        sale: short,
        ends_at: Some(ends),
        draw: None,
        stock: 5,
        ..cut.clone()
    };
    let first = warmup(&env.stock, &env.db, seckill_e2e::CALL_DEADLINE, &locks, &lock, &done).await.expect("warmed up");
    tokio::time::sleep((ends - chrono::Utc::now()).to_std().unwrap_or_default()).await;
    let again = warmup(&env.stock, &env.db, seckill_e2e::CALL_DEADLINE, &locks, &lock, &done)
        .await
        .expect("its own answer, after endsAt");
    assert_eq!((again.round, again.total_stock), (first.round, first.total_stock), "the same warm-up, no new round");
    let late = WarmupRequest { id: Some(format!("late-{}", short.sku)), ..done };
    let refused = warmup(&env.stock, &env.db, seckill_e2e::CALL_DEADLINE, &locks, &lock, &late).await;
    assert!(matches!(refused, Err(WarmupError::Invalid(_))), "a new warm-up with endsAt past: {refused:?}");
}
