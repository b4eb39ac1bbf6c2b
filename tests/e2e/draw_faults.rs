//! A draw under what goes wrong: an entry before entries open or after the
//! draw (refused, nothing written), a won order cancelled (its unit passes
//! down the list), and a warm-up while the draw's outcomes wait for their
//! topic; a draw that asks a proof of work takes no entry without one; a
//! right spent while a pass reads the units promotes nobody. (The edge
//! making the draw killed: `draw_makers.rs`.)

use seckill_e2e::draw::{draw_json, drawn, enter, enter_with, outcomes, read_draw, warm, warm_with_draw};
use seckill_e2e::http::Client;
use seckill_e2e::{eventually, TestEnv};
use seckill_shared::domain::SaleKey;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Entries before they open and after the draw are refused and change
/// nothing; a sale with a draw has no waiting room to join and sells
/// nothing without a token; a winner who cancels their order passes the
/// unit to the first on the waitlist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_out_of_time_changes_nothing_and_a_cancelled_win_passes_down_the_list() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(crate::waiting_room::settings(&env)).await;
    let order_service = env.spawn_order(env.order_settings()).await;
    let client = Client::new(edge.url());
    let opens = chrono::Utc::now() + chrono::Duration::seconds(6);
    warm_with_draw(&edge, sale, 2, &draw_json(6, 10, 60), "").await;

    let early = enter(&client, sale, 1).await;
    assert_eq!((early.status.as_u16(), early.code()), (403, "SALE_NOT_ACTIVE"), "{}", early.text);
    assert!(early.json["opensAt"].is_string(), "{}", early.text);
    let join = crate::waiting_room::join(&client, sale, 1, None).await;
    assert_eq!(
        (join.status.as_u16(), join.code()),
        (404, "SALE_NOT_FOUND"),
        "a draw is no room to join: {}",
        join.text
    );
    tokio::time::sleep((opens - chrono::Utc::now()).to_std().unwrap_or_default()).await;
    for user in 1..=6 {
        let reply = enter(&client, sale, user).await;
        assert_eq!(reply.json["status"], "ENTERED", "{}", reply.text);
    }
    let draw = drawn(&client, sale).await;
    assert_eq!((draw["entries"].as_i64(), draw["winners"].as_i64()), (Some(6), Some(2)));

    a_late_entry_changes_nothing(&env, &client, sale).await;

    // The winners: one orders and cancels; the first on the list is promoted.
    let by_type = |events: &[(Value, String)]| -> BTreeMap<String, BTreeSet<i64>> {
        let mut by: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
        for (e, _) in events {
            by.entry(e["type"].as_str().unwrap().to_owned()).or_default().insert(e["userId"].as_i64().unwrap());
        }
        by
    };
    let events = outcomes(&env, sale, 6).await;
    let first_waiting = events.iter().find(|(e, _)| e["type"] == "WAITLISTED" && e["place"] == 1).unwrap().0["userId"]
        .as_i64()
        .unwrap();
    let winner = *by_type(&events)["WON"].first().unwrap();
    let unsigned = crate::waiting_room::order_with(&client, sale, winner, None).await;
    assert_eq!((unsigned.status.as_u16(), unsigned.code()), (403, "ADMISSION_REQUIRED"), "{}", unsigned.text);
    let entry = enter(&client, sale, winner).await;
    let token = entry.json["admission"].as_str().unwrap();
    let theirs = crate::waiting_room::order_with(&client, sale, first_waiting, Some(token)).await;
    assert_eq!(theirs.status, 403, "another's token: {}", theirs.text);
    let placed = crate::waiting_room::order_with(&client, sale, winner, Some(token)).await;
    assert_eq!(placed.status, 202, "{}", placed.text);
    let order_id = placed.json["orderId"].as_str().unwrap().to_owned();
    let cancel = format!(r#"{{"userId":{winner}}}"#);
    eventually("the order cancelled", Duration::from_secs(30), || async {
        let reply = client
            .send(hyper::Method::POST, &format!("/api/seckill/order/{order_id}/cancel"), Some(cancel.as_bytes()), &[])
            .await;
        if reply.status == 200 {
            Ok(())
        } else {
            Err(reply.text)
        }
    })
    .await;
    let events = outcomes(&env, sale, 7).await;
    assert_eq!(by_type(&events)["PROMOTED"], BTreeSet::from([first_waiting]), "the unit passes to the list's first");
    the_dashboard_shows_the_draw(&edge, sale, &draw).await;
    order_service.stop().await;
    edge.stop().await;
}

/// A draw that asks a proof of work refuses an entry without one, with a
/// wrong solution and with another user's solved challenge (403
/// CHALLENGE_FAILED, nothing entered); a solved challenge of the user's
/// own enters, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_without_the_proof_of_work_the_draw_asks_is_refused_and_changes_nothing() {
    use seckill_edge::admission::challenge::{leading_zero_bits, solve};
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(crate::waiting_room::settings(&env)).await;
    let client = Client::new(edge.url());
    let plain = draw_json(-1, 60, 60);
    let draw = format!(r#"{},"challenge":{{"kind":"pow","bits":12}}}}"#, plain.strip_suffix('}').unwrap());
    warm_with_draw(&edge, sale, 2, &draw, "").await;
    let path = format!("/api/seckill/queue/challenge?activityId={}&skuId={}&userId=1", sale.activity, sale.sku);
    let issued = client.get(&path).await;
    assert_eq!((issued.status.as_u16(), issued.json["bits"].as_u64()), (200, Some(12)), "{}", issued.text);
    let challenge = issued.json["challenge"].as_str().unwrap().to_owned();
    let solution = solve(&challenge, 12);
    let wrong = (0u64..).map(|n| format!("w{n}")).find(|s| leading_zero_bits(&challenge, s) < 12).unwrap();
    for (user, proof, what) in [
        (1, None, "no proof"),
        (1, Some((challenge.as_str(), wrong.as_str())), "wrong"),
        (2, Some((&challenge, &solution)), "another's"),
    ] {
        let refused = enter_with(&client, sale, user, proof).await;
        assert_eq!((refused.status.as_u16(), refused.code()), (403, "CHALLENGE_FAILED"), "{what}: {}", refused.text);
    }
    assert_eq!(read_draw(&client, sale).await.json["entries"], 0, "nothing entered");
    let entered = enter_with(&client, sale, 1, Some((&challenge, &solution))).await;
    assert_eq!(entered.json["status"], "ENTERED", "{}", entered.text);
    let again = enter_with(&client, sale, 1, Some((&challenge, &solution))).await;
    assert_eq!(again.json["entry"], entered.json["entry"], "the same entry, asked again: {}", again.text);
    assert_eq!(read_draw(&client, sale).await.json["entries"], 1);
    edge.stop().await;
}

/// A winner's order spent between an admission pass's read of the units
/// and its script: the pass, on the units as it read them, promotes
/// nobody — no unit is left for a promotion. (Before: it counted the spent
/// right out of the admitted and the units still in, and promoted the
/// first waitlisted entry; a clean-clone run saw one promoted while the
/// winners were still ordering.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_right_spent_while_a_pass_reads_the_units_promotes_nobody() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let edge = env.spawn_edge(crate::waiting_room::settings(&env)).await;
    let client = Client::new(edge.url());
    warm_with_draw(&edge, sale, 2, &draw_json(-1, 4, 60), "").await;
    for user in 1..=4 {
        assert_eq!(enter(&client, sale, user).await.json["status"], "ENTERED");
    }
    assert_eq!(drawn(&client, sale).await["winners"], 2);
    let winner = eventually("a winner", Duration::from_secs(10), || async {
        for user in 1..=4 {
            let entry = enter(&client, sale, user).await;
            if entry.json["status"] == "WON" {
                return Ok((user, entry.json["admission"].as_str().unwrap_or_default().to_owned()));
            }
        }
        Err("no winner read".to_owned())
    })
    .await;

    let stale = env.stock.waiting_room().pass_reads(sale).await.expect("the reads");
    assert_eq!((stale.used, stale.orders), (0, 2), "read before the order");
    let placed = crate::waiting_room::order_with(&client, sale, winner.0, Some(&winner.1)).await;
    assert_eq!(placed.status, 202, "{}", placed.text);
    eventually("the right spent", Duration::from_secs(10), || async {
        let state = env.stock.draws().draw_state(sale).await.map_err(|e| e.to_string())?.unwrap();
        (state.claimed == 1).then_some(()).ok_or(format!("{} spent", state.claimed))
    })
    .await;
    let pass = env.stock.waiting_room().admit_after(sale, stale, 100, Duration::from_secs(10)).await.expect("a pass");
    assert_eq!(pass.now, 0, "a pass on the units read before the order promoted someone");
    let state = env.stock.draws().draw_state(sale).await.unwrap().unwrap();
    assert_eq!((state.promoted, state.waitlisted), (0, 2), "{state:?}");
    edge.stop().await;
}

/// The dashboard's sale card, read in a real browser: the draw's entries,
/// winners and proof, and no waiting-room rows.
async fn the_dashboard_shows_the_draw(edge: &seckill_e2e::Running, sale: SaleKey, draw: &Value) {
    let repo = seckill_e2e::repo_root();
    let python = repo.join(".data/venv/bin/python");
    let (activity, sku) = (sale.activity.to_string(), sale.sku.to_string());
    let figure = |name: &str| draw[name].as_str().map_or_else(|| draw[name].to_string(), str::to_owned);
    let read = tokio::process::Command::new(&python)
        .arg(repo.join("tests/browser/draw_card.py"))
        .args([edge.console_url().as_str(), seckill_e2e::ADMIN_TOKEN, &activity, &sku])
        .args([figure("entries"), figure("winners"), figure("seed"), figure("entriesDigest")])
        .output()
        .await
        .expect("running the browser");
    let shown = String::from_utf8_lossy(&read.stdout);
    assert!(read.status.success(), "{shown}{}", String::from_utf8_lossy(&read.stderr));
}

/// An entry after the draw is refused and writes nothing; an entrant
/// reads their entry.
async fn a_late_entry_changes_nothing(env: &TestEnv, client: &Client, sale: SaleKey) {
    let late = enter(client, sale, 99).await;
    assert_eq!((late.status.as_u16(), late.code()), (409, "ENTRIES_CLOSED"), "{}", late.text);
    let after = read_draw(client, sale).await.json;
    assert_eq!(after["entries"], 6, "the late entry wrote nothing: {after}");
    let state = env.stock.draws().draw_state(sale).await.unwrap().unwrap();
    assert_eq!(state.events, 6, "six outcomes, none for the late entry");
    assert!(env.stock.draws().draw_entries(sale).await.unwrap().iter().all(|(_, user)| user.get() != 99));
    let again = enter(client, sale, 1).await;
    let status = again.json["status"].as_str();
    assert!(matches!(status, Some("WON" | "WAITLISTED")), "an entrant reads their entry: {}", again.text);
}

/// A draw made with nobody to publish its outcomes (no edge runs): the
/// publisher's cursor refuses a write of an older lease term; a new
/// warm-up of the sale is refused while the outcomes wait, unless forced;
/// a draw already due is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_up_waits_for_the_draws_outcomes_to_be_published() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    let draw: seckill_shared::draw::Draw = serde_json::from_str(&draw_json(-1, 4, 60)).unwrap();
    let draw_at = draw.draw_at;
    warm(&env, sale, 3, draw.clone(), true).await.expect("warmed up");
    for user in 1..=5 {
        let user = seckill_shared::domain::UserId::new(user).unwrap();
        env.stock.draws().enter_draw(sale, user, None).await.unwrap();
    }
    tokio::time::sleep((draw_at - chrono::Utc::now()).to_std().unwrap_or_default()).await;
    let made = eventually("the draw made", Duration::from_secs(10), || async {
        seckill_edge::draw::make::make(&env.stock, (&env.db, seckill_e2e::CALL_DEADLINE), sale, 1)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("not yet".to_owned())
    })
    .await;
    assert_eq!((made.entries, made.winners), (5, 3));
    assert_eq!(env.stock.draws().draw_state(sale).await.unwrap().unwrap().events_unpublished, 5);
    // The publisher's cursor carries its lease's fence: a holder of an
    // older term (frozen past it) cannot move it once a later one did.
    assert!(env.stock.draws().outcomes_published(sale, "0-1", 0, 5).await.unwrap());
    assert!(!env.stock.draws().outcomes_published(sale, "9999999999999-0", 5, 4).await.unwrap(), "an older term's");
    let after = env.stock.draws().draw_state(sale).await.unwrap().unwrap();
    assert_eq!((after.published_through.as_str(), after.events_unpublished), ("0-1", 5));

    let later: seckill_shared::draw::Draw = serde_json::from_str(&draw_json(-1, 60, 60)).unwrap();
    let again = warm(&env, sale, 3, later.clone(), false).await;
    assert!(matches!(again, Err(seckill_shared::sales::WarmupError::InFlight(_))), "{again:?}");
    assert!(env.stock.draws().draw_state(sale).await.unwrap().unwrap().drawn, "the drawn round is left as it was");
    let past = warm(&env, sale, 3, draw, true).await;
    assert!(matches!(past, Err(seckill_shared::sales::WarmupError::Invalid(_))), "drawAt past: {past:?}");
    warm(&env, sale, 3, later, true).await.expect("a forced warm-up replaces the round");
    let fresh = env.stock.draws().draw_state(sale).await.unwrap().unwrap();
    assert_eq!((fresh.drawn, fresh.entries, fresh.events), (false, 0, 0));
}

/// Two makers of the draws' lease — one frozen past its term, and the
/// holder of the term after it — are fenced inside the script: once the
/// later term acted on the draw (its cursor moved, here), the older one's
/// apply writes nothing and is told so; the later one makes the draw.
/// (Before: whoever applied first made it, whatever its term.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maker_of_an_older_term_makes_no_draw() {
    use seckill_edge::draw::make::{make, LaterTerm};
    let env = TestEnv::new().await;
    let sale = env.sale();
    let draw: seckill_shared::draw::Draw = serde_json::from_str(&draw_json(-1, 2, 60)).unwrap();
    warm(&env, sale, 2, draw, true).await.expect("warmed up");
    for user in 1..=3 {
        env.stock.draws().enter_draw(sale, seckill_shared::domain::UserId::new(user).unwrap(), None).await.unwrap();
    }
    assert!(env.stock.draws().outcomes_published(sale, "0-0", 0, 7).await.unwrap(), "the later term acted first");
    eventually("the older term's maker refused once the draw is due", Duration::from_secs(10), || async {
        match make(&env.stock, (&env.db, seckill_e2e::CALL_DEADLINE), sale, 6).await {
            Err(error) if error.is::<LaterTerm>() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(!env.stock.draws().draw_state(sale).await.unwrap().unwrap().drawn, "nothing made by the older term");
    let made = make(&env.stock, (&env.db, seckill_e2e::CALL_DEADLINE), sale, 7)
        .await
        .unwrap()
        .expect("made by the later term");
    assert_eq!((made.entries, made.winners), (3, 2));
}
