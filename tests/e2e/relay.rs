//! The order-event relay as a consumer of `seckill.order-events` sees it:
//! every event of every order on the topic, once per relay run, in the order
//! of the transactions that wrote them — across the points where
//! transaction ids gain a digit, which a text ordering once skipped.

use rdkafka::message::Message;
use seckill_e2e::private_postgres::PrivatePostgres;
use seckill_e2e::{eventually, TestEnv};
use seckill_order::relay::Relay;
use seckill_shared::ops::leader::Seat;
use seckill_shared::ops::shutdown::Background;
use sqlx::Row;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// 300 orders written while transaction ids have eight digits, then 3,000
/// after they reached nine, all waiting for a relay that was off (a drain,
/// an outage): the relay sends every one of the 3,300 events, each once, and
/// each partition in (xid, id) order. Ordered as text, "100000123" sorted
/// before "99999050", the first turn's cursor jumped past the 300, and they
/// were never sent while the books said nothing was pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_straddling_a_new_digit_in_transaction_ids_are_all_relayed_in_order() {
    const BOUNDARY: u64 = 100_000_000;
    let server = PrivatePostgres::start(BOUNDARY as u32 - 1_000);
    let env = TestEnv::on_private_postgres(&server).await;
    let sale = env.sale();
    env.warmup(sale, 5_000).await;
    let settings = env.order_settings();
    // Orders whose CREATED events go through the outbox (as an older order
    // service writes them), a transaction per hundred.
    let outbox = |from: i64, to: i64| env.created_through_the_outbox(sale, from..to);
    for from in (1..301).step_by(100) {
        outbox(from, from + 100).await;
    }
    let below: i64 = sqlx::query_scalar("SELECT count(*) FROM order_events WHERE xid < $1::text::xid8")
        .bind(BOUNDARY.to_string())
        .fetch_one(&env.db)
        .await
        .unwrap();
    assert_eq!(below, 300, "the first orders' events were written below the boundary");
    env.advance_transaction_ids_past(BOUNDARY).await;
    for from in (301..3_301).step_by(100) {
        outbox(from, from + 100).await;
    }

    let relay = Relay::new(std::sync::Arc::new(settings), env.connections(), Background::default()).expect("a relay");
    let term = relay.lease().take().await.expect("the database").expect("the relay's lease");
    let mut turns = 0;
    while relay.relay_once(&term).await.expect("a turn") > 0 {
        turns += 1;
        assert!(turns < 100, "the relay keeps finding rows");
    }

    let written: Vec<String> =
        sqlx::query_scalar("SELECT event_id FROM order_events ORDER BY xid, id").fetch_all(&env.db).await.unwrap();
    assert_eq!(written.len(), 3_300);
    let rank: HashMap<&str, usize> = written.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    let events = env.read_topic(&env.topics().events, 3_300, Duration::from_secs(30)).await;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut last_rank: HashMap<i32, usize> = HashMap::new();
    for message in &events {
        let value: serde_json::Value = serde_json::from_slice(message.payload().unwrap_or_default()).expect("an event");
        let id = value["eventId"].as_str().expect("an event id").to_owned();
        let at = *rank.get(id.as_str()).unwrap_or_else(|| panic!("an event no transaction wrote: {id}"));
        if let Some(before) = last_rank.insert(message.partition(), at) {
            assert!(before < at, "partition {}: {id} after a later transaction's event", message.partition());
        }
        *seen.entry(id).or_insert(0) += 1;
    }
    let missing = written.iter().filter(|id| !seen.contains_key(*id)).count();
    assert_eq!(missing, 0, "{missing} of 3,300 events never reached the topic ({} read)", events.len());
    assert!(seen.values().all(|n| *n == 1), "an event sent twice by one uninterrupted relay");
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert_eq!((report.events, report.events_pending), (3_300, 0));
    env.verify_events(sale).await;
}

/// The relay's query walks the `(xid, id)` index from the cursor and stops
/// after a batch, under both plans PostgreSQL may choose for a prepared
/// statement: no scan of the whole outbox, no sort of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relays_turn_reads_the_index_from_the_cursor_in_both_plans() {
    let env = TestEnv::new().await;
    sqlx::query(
        "INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type)
         SELECT '1-1-' || g || '-0a:CREATED', '1-1-' || g || '-0a', 1, 1, 1, g, 'CREATED' FROM generate_series(1, 60000) g",
    )
    .execute(&env.db)
    .await
    .unwrap();
    sqlx::query("UPDATE order_events_relayed SET xid = (SELECT min(xid) FROM order_events), id = 30000")
        .execute(&env.db)
        .await
        .unwrap();
    sqlx::query("ANALYZE order_events").execute(&env.db).await.unwrap();
    let mut conn = env.db.acquire().await.unwrap();
    let prepare = format!("PREPARE relay_turn(bigint) AS {}", seckill_shared::db::outbox::NEXT_AFTER_CURSOR);
    sqlx::raw_sql(sqlx::AssertSqlSafe(prepare)).execute(&mut *conn).await.unwrap();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET plan_cache_mode = {mode}"))).execute(&mut *conn).await.unwrap();
        let row = sqlx::query("EXPLAIN (FORMAT JSON) EXECUTE relay_turn(1000)").fetch_one(&mut *conn).await.unwrap();
        let plan: serde_json::Value = serde_json::from_str(&row.try_get_unchecked::<String, _>(0).unwrap()).unwrap();
        let mut nodes = Vec::new();
        walk(&plan[0]["Plan"], &mut nodes);
        let on_outbox: Vec<&(String, String, String)> =
            nodes.iter().filter(|(_, relation, _)| relation == "order_events").collect();
        assert!(
            on_outbox.iter().all(|(kind, _, index)| kind.starts_with("Index") && index == "order_events_relay_order"),
            "{mode}: the outbox is read by the relay's index only: {nodes:?}"
        );
        assert!(!on_outbox.is_empty(), "{mode}: {nodes:?}");
        assert!(
            nodes.iter().all(|(kind, _, _)| kind != "Sort" && kind != "Incremental Sort"),
            "{mode}: nothing sorted: {nodes:?}"
        );
    }
}

/// Every node of a JSON plan: its type, relation and index.
fn walk(node: &serde_json::Value, into: &mut Vec<(String, String, String)>) {
    let text = |key: &str| node[key].as_str().unwrap_or_default().to_owned();
    into.push((text("Node Type"), text("Relation Name"), text("Index Name")));
    for child in node["Plans"].as_array().into_iter().flatten() {
        walk(child, into);
    }
}

/// Events a relay passed without sending (the state the text-ordered
/// cursor left: rows behind the cursor, never on the topic, nothing
/// pending in the books) are found by `seckillctl events verify` and sent
/// by `seckillctl events resend`, once, under their stable ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_a_relay_skipped_are_found_and_sent_once() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 1_000).await;
    let since = chrono::Utc::now() - chrono::Duration::seconds(1);
    // Orders whose CREATED events go through the outbox (as an older order
    // service writes them): the first hundred relayed, the next hundred not.
    let order = env.spawn_order(env.order_settings()).await;
    env.created_through_the_outbox(sale, 1..101).await;
    env.verify_events(sale).await;
    order.stop().await;
    env.created_through_the_outbox(sale, 101..201).await;
    sqlx::query("UPDATE order_events_relayed SET (xid, id) = (SELECT xid, id FROM order_events ORDER BY xid DESC, id DESC LIMIT 1)")
        .execute(&env.db)
        .await
        .unwrap();
    let report = seckill_shared::books::reconcile(&env.stock, &env.db, None, sale, false).await.unwrap();
    assert_eq!(report.events_pending, 0, "the books alone cannot see the loss");

    let (a, s) = (sale.activity.to_string(), sale.sku.to_string());
    let verify = env.ctl(&["events", "verify", "--activity", &a, "--sku", &s, "--json"]).await;
    assert_eq!(verify.code, 1, "{verify:?}");
    let verdict: serde_json::Value = serde_json::from_str(&verify.stdout).unwrap();
    assert_eq!((verdict["missingCount"].as_u64(), verdict["delivered"].as_u64()), (Some(100), Some(100)), "{verdict}");

    let since = since.to_rfc3339();
    let dry = env.ctl(&["events", "resend", "--since", &since, "--dry-run", "--json"]).await;
    assert_eq!(dry.code, 0, "{dry:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&dry.stdout).unwrap()["sent"].as_array().map(Vec::len),
        Some(100)
    );
    let resent = env.ctl(&["events", "resend", "--since", &since, "--json"]).await;
    assert_eq!(resent.code, 0, "{resent:?}");
    let outcome: serde_json::Value = serde_json::from_str(&resent.stdout).unwrap();
    assert_eq!(
        (outcome["sent"].as_array().map(Vec::len), outcome["delivered"].as_u64()),
        (Some(100), Some(100)),
        "{outcome}"
    );
    env.verify_events(sale).await;
    let again = env.ctl(&["events", "resend", "--since", &since, "--json"]).await;
    let outcome: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(outcome["sent"].as_array().map(Vec::len), Some(0), "a second resend sends nothing: {outcome}");
    let events = env.read_topic(&env.topics().events, 200, Duration::from_secs(20)).await;
    assert_eq!(events.len(), 200, "each event on the topic once");
}

/// A relay that is frozen (SIGSTOP, a VM pause) keeps no one from relaying:
/// its lease runs out and another order service's relay takes over; woken
/// again, the old one moves the cursor no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_relay_is_replaced() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 1_000).await;
    let mut child_env = env.child_env();
    child_env.push(("SECKILL__METRICS_ADDR".into(), "127.0.0.1:0".into()));
    // The host's "running" line (its tasks started) is what is waited for.
    child_env.push(("RUST_LOG".into(), "info".into()));
    let first = seckill_e2e::Child::start("seckill-order", &child_env);
    let holder = eventually("the first order service relaying", Duration::from_secs(60), || async {
        let holder: Option<String> =
            sqlx::query_scalar("SELECT holder FROM leases WHERE name = $1 AND expires_at > now()")
                .bind(seckill_order::relay::LEASE)
                .fetch_optional(&env.db)
                .await
                .map_err(|e| e.to_string())?;
        holder.ok_or_else(|| "no lease yet".to_owned())
    })
    .await;
    let second = seckill_e2e::Child::start("seckill-order", &child_env);
    // The other one runs (its relay started, asking for the lease) before
    // the holder is frozen.
    eventually("the second order service running", Duration::from_secs(60), || async {
        if second.logged("running") {
            Ok(())
        } else {
            Err(second.warnings(3).join("; "))
        }
    })
    .await;
    first.signal("STOP");
    // Orders whose CREATED events go through the outbox (the order service
    // produces its own orders' CREATED events itself, without the relay).
    env.created_through_the_outbox(sale, 1..21).await;
    eventually("their events relayed by the other", Duration::from_secs(30), || async {
        let events = env.read_topic(&env.topics().events, 20, Duration::from_millis(500)).await.len();
        if events >= 20 {
            Ok(())
        } else {
            Err(format!("{events} events"))
        }
    })
    .await;
    let now: String = sqlx::query_scalar("SELECT holder FROM leases WHERE name = $1")
        .bind(seckill_order::relay::LEASE)
        .fetch_one(&env.db)
        .await
        .unwrap();
    assert_ne!(now, holder, "another relay holds the lease");
    first.signal("CONT");
    env.created_through_the_outbox(sale, 21..31).await;
    env.verify_events(sale).await;
    assert!(first.terminate().await && second.terminate().await, "both stop cleanly");
}

/// Every connection to PostgreSQL and Redis has TCP keepalives: a peer that
/// vanished without a reset is noticed in about 25 s, not two hours. For
/// PostgreSQL the server keeps them (sqlx leaves its sockets alone): a
/// frozen client loses its session, and whatever it held, that soon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_to_postgres_and_redis_keep_alive() {
    let env = TestEnv::new().await;
    let pool = seckill_shared::db::connect_lazy(&env.database).unwrap();
    let shown: (String, String, String) = sqlx::query_as(
        "SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'),
                current_setting('tcp_keepalives_count')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(shown, ("10".into(), "5".into(), "3".into()), "the session's keepalives");

    let stock = seckill_shared::stock::Stock::connect(&env.redis).await.unwrap();
    stock.connection().ping().await.unwrap();
    let port = env.redis.url.rsplit(':').next().and_then(|p| p.split('/').next()).unwrap().to_owned();
    // A connection with data in flight at the moment `ss` looks shows its
    // retransmission timer instead (other tests of this process use Redis
    // meanwhile): look again until each has been seen idle, with keepalive.
    // One without keepalive shows no timer when idle, and never passes.
    eventually("every Redis connection seen with its keepalive timer", Duration::from_secs(30), || async {
        let ss = std::process::Command::new("ss")
            .args(["-tnpo", "state", "established", &format!("( dport = :{port} )")])
            .output()
            .expect("ss (iproute2)");
        let ours: Vec<String> = String::from_utf8_lossy(&ss.stdout)
            .lines()
            .filter(|line| line.contains(&format!("pid={},", std::process::id())))
            .map(str::to_owned)
            .collect();
        assert!(!ours.is_empty(), "this process's connections to Redis: {}", String::from_utf8_lossy(&ss.stdout));
        let busy = ours.iter().any(|line| line.contains("timer:(on"));
        let without: Vec<&String> = ours.iter().filter(|line| !line.contains("timer:(keepalive")).collect();
        match (without.is_empty(), busy) {
            (true, _) => Ok(()),
            (false, true) => Err(format!("a connection busy, looking again: {without:?}")),
            (false, false) => panic!("a Redis connection without keepalive: {without:?}"),
        }
    })
    .await;
    drop(stock);
}

/// Each user's events leave one after another, the users side by side: a
/// delivery that fails for now holds back that user's next event (the turn
/// fails and the next one sends again from the cursor, in order), while an
/// event refused for good — here over the broker's size limit — is parked
/// and the user's next goes on after it (blocking it would stop the relay
/// for good). (Before per-user chains, the user's CANCELLED could reach the
/// topic while its CREATED was still to be retried.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_users_events_leave_in_order_and_one_refused_for_good_is_parked() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let order = |n: i64| format!("{}-{}-{n}-00000000000000aa", sale.activity, sale.sku);
    let insert = |event_id: &'static str, order_id: String, user: i64, kind: &'static str, reason: Option<String>| {
        let db = env.db.clone();
        async move {
            sqlx::query(
                "INSERT INTO order_events (event_id, order_id, activity_id, sku_id, round, user_id, type, reason)
                 VALUES ($1, $2, $3, $4, 1, $5, $6, $7)",
            )
            .bind(event_id)
            .bind(order_id)
            .bind(sale.activity.get())
            .bind(sale.sku.get())
            .bind(user)
            .bind(kind)
            .bind(reason)
            .execute(&db)
            .await
            .unwrap();
        }
    };
    seckill_shared::kafka::ensure_topics(&env.kafka).await.expect("the topics");
    insert("e-created-7", order(1), 7, "CREATED", Some("x".repeat(2_000_000))).await;
    insert("e-created-8", order(2), 8, "CREATED", None).await;
    insert("e-cancelled-7", order(1), 7, "CANCELLED", Some("BUYER_CANCELLED".into())).await;

    let mut settings = env.order_settings();
    settings.events.enabled = true;
    let relay = Relay::new(std::sync::Arc::new(settings), env.connections(), Background::default()).expect("a relay");
    let term = relay.lease().take().await.expect("the database").expect("the relay's lease");
    seckill_e2e::relay_rows(&relay, &term, 3).await;

    let events = env.read_topic(&env.topics().events, 2, Duration::from_secs(5)).await;
    let mut ids: Vec<String> = events
        .iter()
        .map(|m| serde_json::from_slice::<serde_json::Value>(m.payload().unwrap()).unwrap()["eventId"].to_string())
        .collect();
    ids.sort();
    assert_eq!(ids, [r#""e-cancelled-7""#, r#""e-created-8""#], "the refused one parked, the rest sent once");
    let parked: Vec<String> = sqlx::query_scalar("SELECT reason FROM parked_records").fetch_all(&env.db).await.unwrap();
    assert_eq!(parked, ["UNDELIVERABLE_EVENT"]);
}
