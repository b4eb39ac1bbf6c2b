//! One hot sale's deductions per second on a Redis (`redis://`) or a Redis
//! Cluster (`redis+cluster://`), and each server's CPU per order, from
//! /proc: what one sale costs the shard that holds it.
//!
//! `hot_sale URL [SECONDS] [CONCURRENCY] [BATCH] [BUCKETS] [PIDFILE...]`:
//! CONCURRENCY tasks each run `lua/deduct.lua` calls of BATCH new buyers (as
//! the edge's batching does, one call per bucket) on one sale with more
//! units than can be sold, spread over BUCKETS stock buckets (placed as a
//! warm-up places them: on a cluster, one per primary), for SECONDS; the
//! servers named by their pid files are read before and after; then, with
//! two buckets or more, the time of one borrowing between two of them.
//! Prints one JSON line. `make bench-redis-cluster` runs it on the single Redis and on
//! the Redis Cluster with 1, 2 and 3 buckets.

use seckill_shared::config::RedisSettings;
use seckill_shared::domain::{SaleKey, UserId};
use seckill_shared::stock::warmup::Round;
use seckill_shared::stock::{Borrowed, DeductCall, DeductRequest, Deduction, Stock};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A process's user + system CPU time in seconds (/proc/PID/stat).
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line: 12 and 13 after ")".
    (ticks(11) + ticks(12)) / 100.0
}

/// The cross-bucket path's own cost: the mean time (µs) of one borrowing
/// (`BucketMoves::borrow`: lend, receive, forget, on two primaries) when the
/// first other bucket has units, over 2,000 of them, one at a time, the
/// first two buckets taking turns as borrower. `None` with one bucket.
async fn borrow_micros(
    stock: &Stock,
    sale: SaleKey,
    buckets: &[seckill_shared::stock::Bucket],
) -> anyhow::Result<Option<f64>> {
    if buckets.len() < 2 {
        return Ok(None);
    }
    let pair = [buckets[0], buckets[1]];
    const BORROWINGS: u32 = 2_000;
    let started = Instant::now();
    for i in 0..BORROWINGS {
        let home = pair[i as usize % 2];
        let borrowed = stock.bucket_moves().borrow(sale, &pair, home, 1).await?;
        anyhow::ensure!(matches!(borrowed, Borrowed::Units(_)), "borrowing found no units: {borrowed:?}");
    }
    Ok(Some(started.elapsed().as_secs_f64() * 1e6 / f64::from(BORROWINGS)))
}

/// Each server's CPU over the run, and per order.
fn servers_cpu(pids: &[(String, String)], before: &[f64], orders: u64) -> Vec<serde_json::Value> {
    pids.iter()
        .zip(before)
        .map(|((file, pid), before)| {
            let used = cpu_seconds(pid) - before;
            serde_json::json!({
                "server": file,
                "cpuSeconds": used,
                "cpuMicrosPerOrder": used * 1e6 / orders.max(1) as f64,
            })
        })
        .collect()
}

/// What each task of the load shares.
struct Load {
    stock: Stock,
    sale: SaleKey,
    next_user: Arc<AtomicI64>,
    orders: Arc<AtomicU64>,
    calls: Arc<AtomicU64>,
    until: Instant,
    batch: usize,
}

impl Load {
    /// Calls of `batch` buyers, all at home in `bucket` (the `home`-th of
    /// `count`), until the load's time is up.
    async fn run(self, bucket: seckill_shared::stock::Bucket, home: i64, count: i64) {
        while Instant::now() < self.until {
            let requests = (0..self.batch)
                .map(|_| {
                    let user = self.next_user.fetch_add(1, Ordering::Relaxed) * count + home;
                    DeductRequest {
                        user: UserId::new(user).expect("positive"),
                        nonce: format!("{:016x}", rand::random::<u64>()),
                        request_id: String::new(),
                        traceparent: String::new(),
                        admitted: false,
                        quantity: 1,
                    }
                })
                .collect();
            let call = DeductCall::new(requests, Duration::from_secs(60)).in_bucket(bucket);
            let answers = self.stock.orders().deduct_batch(self.sale, &call).await.expect("a deduction");
            let accepted = answers.iter().filter(|a| matches!(a, Deduction::Accepted { .. })).count();
            self.orders.fetch_add(accepted as u64, Ordering::Relaxed);
            self.calls.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args
        .first()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("usage: hot_sale URL [SECONDS] [CONCURRENCY] [BATCH] [BUCKETS] [PIDFILE...]"))?;
    let number = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (seconds, concurrency, batch) = (number(1, 5), number(2, 32) as usize, number(3, 16) as usize);
    let buckets_wanted = number(4, 1).max(1) as u32;
    let pids: Vec<(String, String)> = args
        .iter()
        .skip(5)
        .map(|file| (file.clone(), std::fs::read_to_string(file).unwrap_or_default().trim().to_owned()))
        .collect();
    let settings = RedisSettings { url, key_prefix: format!("hot{}:", std::process::id()), ..RedisSettings::default() };
    let stock = Stock::connect(&settings).await?;
    let sale = SaleKey::from_raw(1, 1)?;
    let buckets = stock.bucket_moves().place_buckets(sale, buckets_wanted).await?;
    let units = (1 << 40) * buckets.len() as i64;
    let round = Round {
        stock: units,
        starts_ms: 0,
        ends_ms: 0,
        round: 1,
        expire_at_ms: 0,
        force: true,
        admission: false,
        limits: Default::default(),
    };
    anyhow::ensure!(stock.warm_ups().warmup(sale, &buckets, round).await?, "warm-up refused");

    let next_user = Arc::new(AtomicI64::new(1));
    let (orders, calls) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let cpu_before: Vec<f64> = pids.iter().map(|(_, pid)| cpu_seconds(pid)).collect();
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let load = Load {
                stock: stock.clone(),
                sale,
                next_user: next_user.clone(),
                orders: orders.clone(),
                calls: calls.clone(),
                until,
                batch,
            };
            // A task's buyers share a home bucket (user mod buckets): one
            // call per bucket, as the edge batches per bucket.
            let (home, count) = (task % buckets.len(), buckets.len() as i64);
            tokio::spawn(load.run(buckets[home], home as i64, count))
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let orders = orders.load(Ordering::Relaxed);
    let cpu = servers_cpu(&pids, &cpu_before, orders);
    println!(
        "{}",
        serde_json::json!({
            "url": settings.url,
            "seconds": elapsed,
            "concurrency": concurrency,
            "batch": batch,
            "buckets": buckets.iter().map(|b| b.0).collect::<Vec<_>>(),
            "calls": calls.load(Ordering::Relaxed),
            "ordersPerSecond": orders as f64 / elapsed,
            "callsPerSecond": calls.load(Ordering::Relaxed) as f64 / elapsed,
            "servers": cpu,
            "borrowMicros": borrow_micros(&stock, sale, &buckets).await?,
        })
    );
    // What the run wrote goes (hundreds of thousands of orders per run).
    for bucket in &buckets {
        stock.warm_ups().delete_bucket(sale, *bucket).await?;
    }
    Ok(())
}
