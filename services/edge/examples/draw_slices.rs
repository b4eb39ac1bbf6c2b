//! How long a draw of a million entries holds Redis: the entries taken (the
//! real entry script), the draw made by the edge's own maker (entries
//! frozen, read by HSCAN, ranked, applied in slices) and the end-of-sale
//! passes run until every waiting entry has lost — then the longest call of
//! each kind in Redis's slow log (every call over 1 ms is logged meanwhile,
//! up to 100,000 of them).
//! docs/operators.md gives the figures.
//!
//! `cargo run --release -p seckill-edge --example draw_slices -- [ENTRIES]`
//! (default 1,000,000), against the Redis and PostgreSQL of
//! `infra/local/up.sh`, in a database of its own (made and dropped) and
//! under a key prefix of its own (deleted after).

use futures::stream::{self, StreamExt};
use seckill_shared::config::{DbSettings, LockSettings, RedisSettings};
use seckill_shared::domain::{SaleKey, UserId};
use seckill_shared::draw::Draw;
use seckill_shared::ops::lock::LockClient;
use seckill_shared::sales::WarmupRequest;
use seckill_shared::stock::Stock;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let entries: i64 = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(1_000_000);
    let redis = RedisSettings { key_prefix: format!("draw-slices-{}:", std::process::id()), ..Default::default() };
    let stock = Stock::connect(&redis).await?;
    let own = format!("seckill_draw_slices_{}", std::process::id());
    let admin = seckill_shared::db::connect_lazy(&DbSettings::default())?;
    // A database name is no bind parameter; this one is the program's own.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {own}"))).execute(&admin).await?;
    let server = DbSettings::default().url;
    let url = format!("{}/{own}", server.rsplit_once('/').map_or(server.as_str(), |(base, _)| base));
    let db = seckill_shared::db::connect_lazy(&DbSettings { url, ..DbSettings::default() })?;
    seckill_shared::db::migrate(&db).await?;
    let sale = SaleKey::from_raw(990_000_000 + i64::from(rand::random::<u16>()), 1).expect("positive ids");
    let mut slow = stock.connection();
    redis::cmd("CONFIG").arg("SET").arg("slowlog-log-slower-than").arg(1_000).query_async::<()>(&mut slow).await?;
    redis::cmd("CONFIG").arg("SET").arg("slowlog-max-len").arg(100_000).query_async::<()>(&mut slow).await?;
    redis::cmd("SLOWLOG").arg("RESET").query_async::<()>(&mut slow).await?;

    // A draw that takes entries now and is drawn once they are all in.
    let draw_in = Duration::from_secs(5 + (entries as u64) / 20_000);
    let now = chrono::Utc::now();
    let draw = Draw {
        entries_open_at: now - chrono::Duration::seconds(1),
        draw_at: now + chrono::Duration::from_std(draw_in)?,
        claim_seconds: 600,
        challenge: None,
        max_entries: entries,
    };
    let request = WarmupRequest {
        id: None,
        sale,
        stock: 100,
        starts_at: None,
        ends_at: None,
        force: true,
        payment_window_seconds: 900,
        buckets: 1,
        admission: None,
        draw: Some(draw.clone()),
        limits: Default::default(),
    };
    let locks = LockClient::new(stock.connection(), Default::default());
    seckill_shared::sales::warmup(&stock, &db, DEADLINE, &locks, &LockSettings::warmup(), &request).await?;
    let took = Instant::now();
    let entered = stream::iter(1..=entries)
        .map(|user| {
            let stock = stock.clone();
            async move { stock.draws().enter_draw(sale, UserId::new(user).expect("positive"), None).await }
        })
        .buffer_unordered(256)
        .filter(|answer| std::future::ready(answer.is_ok()))
        .count()
        .await;
    println!("{entered} entries taken in {:.1} s", took.elapsed().as_secs_f64());

    tokio::time::sleep(draw.draw_at.signed_duration_since(chrono::Utc::now()).to_std().unwrap_or_default()).await;
    let took = Instant::now();
    let made = seckill_edge::draw::make::make(&stock, (&db, DEADLINE), sale, 1).await?;
    println!("the draw made in {:.1} s: {made:?}", took.elapsed().as_secs_f64());

    seckill_shared::sales::close(&stock, &db, DEADLINE, &locks, &LockSettings::warmup(), sale).await?;
    let (took, mut passes) = (Instant::now(), 0);
    while !stock.waiting_room().room(sale).await?.is_some_and(|room| room.finalized) {
        stock.waiting_room().admit_pass(sale, 100, Duration::from_secs(10)).await?;
        passes += 1;
    }
    println!("the end-of-sale passes: {passes}, in {:.1} s", took.elapsed().as_secs_f64());

    report_slow_log(&mut slow).await?;
    clean_up(&mut slow, &redis.key_prefix).await?;
    db.close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {own}"))).execute(&admin).await?;
    Ok(())
}

/// The slow log's calls over 1 ms, by what they ran: how many, the longest.
async fn report_slow_log(conn: &mut seckill_shared::stock::conn::RedisConn) -> anyhow::Result<()> {
    // Each entry: id, time, microseconds, the command's words, client, name.
    let all: Vec<Vec<redis::Value>> = redis::cmd("SLOWLOG").arg("GET").arg(10_000).query_async(conn).await?;
    let entries: Vec<(i64, Vec<String>)> = all
        .into_iter()
        .filter_map(|entry| {
            let micros = redis::from_redis_value::<i64>(entry.get(2)?.clone()).ok()?;
            let words = redis::from_redis_value::<Vec<String>>(entry.get(3)?.clone()).ok()?;
            Some((micros, words))
        })
        .collect();
    let mut by_kind: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
    for (micros, command) in entries {
        // EVALSHA sha keys… args…: the step is the first argument after the keys.
        let kind = match command.first().map(String::as_str) {
            Some("EVALSHA" | "EVAL") => {
                let keys: usize = command.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
                match command.get(3 + keys) {
                    // queue_admit.lua's first argument is a count.
                    Some(first) if first.parse::<i64>().is_ok() => "an admission pass (queue_admit.lua)".to_owned(),
                    Some(step) => format!("queue_draw.lua '{step}'"),
                    None => "a script".to_owned(),
                }
            }
            Some(other) => other.to_owned(),
            None => "?".into(),
        };
        by_kind.entry(kind).or_default().push(micros);
    }
    println!("calls over 1 ms in Redis's slow log (kind: count, median, longest):");
    for (kind, mut micros) in by_kind {
        micros.sort_unstable();
        let ms = |us: i64| us as f64 / 1000.0;
        println!(
            "  {kind}: {}, {:.1} ms, {:.1} ms",
            micros.len(),
            ms(micros[micros.len() / 2]),
            ms(micros[micros.len() - 1])
        );
    }
    Ok(())
}

/// Deletes this run's keys; the slow log's threshold and length back to
/// Redis's defaults.
async fn clean_up(conn: &mut seckill_shared::stock::conn::RedisConn, prefix: &str) -> anyhow::Result<()> {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}*")).query_async(conn).await?;
    for key in keys {
        redis::cmd("UNLINK").arg(key).query_async::<()>(conn).await?;
    }
    redis::cmd("CONFIG").arg("SET").arg("slowlog-log-slower-than").arg(10_000).query_async::<()>(conn).await?;
    redis::cmd("CONFIG").arg("SET").arg("slowlog-max-len").arg(128).query_async::<()>(conn).await?;
    Ok(())
}
