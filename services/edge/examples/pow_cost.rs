//! What the waiting room's proof of work costs on this machine: for each
//! number of bits, the mean time a client takes to solve a challenge
//! (counting up, as the queue page and the tests do; SHA-256 in Rust — a
//! browser's WebCrypto loop is slower per hash) over several fresh
//! challenges, and the edge's cost to check one. One JSON line per bits.
//!
//! `cargo run --release -p seckill-edge --example pow_cost [-- MAX_BITS]`

use seckill_edge::admission::challenge::{leading_zero_bits, solve, Challenge};
use seckill_edge::admission::Signer;
use seckill_shared::domain::{SaleKey, UserId};
use std::time::Instant;

fn main() {
    let max_bits: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let signer = Signer::new(Some("pow-cost-signing-key-0123456789abcdef"));
    let sale = SaleKey::from_raw(1, 1).expect("ids");
    for bits in (4..=max_bits).step_by(2) {
        let tries = if bits <= 14 { 64 } else { 8 };
        let started = Instant::now();
        let mut hashes = 0u64;
        let mut checked = 0u32;
        for n in 0..tries {
            let raw = Challenge::new(sale, UserId::new(1 + n).expect("id"), bits, 0, i64::MAX / 2).sign(&signer);
            let solution = solve(&raw, bits);
            hashes += solution.parse::<u64>().expect("a number") + 1;
            checked += u32::from(leading_zero_bits(&raw, &solution) >= bits);
        }
        let solve_ms = started.elapsed().as_secs_f64() * 1000.0 / f64::from(tries as u32);
        let check = Instant::now();
        for _ in 0..10_000 {
            std::hint::black_box(leading_zero_bits("c1.1.1.1.00.0.8.ab", "12345"));
        }
        let check_us = check.elapsed().as_secs_f64() * 1e6 / 10_000.0;
        let line = serde_json::json!({
            "bits": bits,
            "solveMsMean": (solve_ms * 1000.0).round() / 1000.0,
            "hashesMean": hashes / tries as u64,
            "checkMicros": (check_us * 1000.0).round() / 1000.0,
            "solved": checked,
        });
        println!("{line}");
    }
}
