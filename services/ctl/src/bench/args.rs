//! What `seckillctl bench` is asked to do: its command-line arguments.

/// Arguments of `bench`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// The edge.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub(super) url: String,
    /// Activity id of the sale.
    #[arg(long)]
    pub(super) activity: i64,
    /// SKU id of the sale.
    #[arg(long)]
    pub(super) sku: i64,
    /// Distinct users (ids offset+1, offset+1+stride, … : `users` of them).
    #[arg(long, default_value_t = 1000)]
    pub(super) users: u64,
    /// First user id minus one.
    #[arg(long, default_value_t = 0)]
    pub(super) user_offset: i64,
    /// Step between user ids: with a sale in K stock buckets, a stride of
    /// K sends every buyer to one home bucket (the rest of the stock has
    /// to be borrowed).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..))]
    pub(super) user_stride: i64,
    /// Requests in flight at once (one connection each).
    #[arg(long, default_value_t = 64)]
    pub(super) concurrency: usize,
    /// Requests to send (default: one per user; unbounded with --duration).
    #[arg(long)]
    pub(super) requests: Option<u64>,
    /// Units each order asks for (the sale's `maxPerOrder` at most; the
    /// body carries `"quantity"` when it is above 1): one number, or a list
    /// (`1,2`) of which user u asks for the (u mod its length)-th.
    #[arg(long, default_value = "1", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(super) quantity: Vec<u32>,
    /// Share of requests (0..1) that repeat an earlier user: retries.
    #[arg(long, default_value_t = 0.0)]
    pub(super) same_user_ratio: f64,
    /// Stop after this many seconds.
    #[arg(long)]
    pub(super) duration: Option<f64>,
    /// Seed of the user choice, so a run can be replayed.
    #[arg(long, default_value_t = 42)]
    pub(super) seed: u64,
    /// Spread the requests at this many per second in total (open loop);
    /// unpaced when absent.
    #[arg(long)]
    pub(super) rate: Option<f64>,
    /// Write the order id of every 202 to this file, one per line.
    #[arg(long)]
    pub(super) accepted_out: Option<std::path::PathBuf>,
    /// Write every answer to this file, one `user status` per line (what a
    /// buyer was told, for checking each promise afterwards).
    #[arg(long)]
    pub(super) answers_out: Option<std::path::PathBuf>,
    /// Instead of orders, GET this path (e.g. /healthz: the HTTP ceiling).
    #[arg(long)]
    pub(super) get: Option<String>,
    /// Send this `traceparent` with every request: a client asking for all
    /// its requests to be traced (e.g. `00-<32 hex>-<16 hex>-01`).
    #[arg(long)]
    pub(super) traceparent: Option<String>,
    /// Each buyer goes through the sale's waiting room first: joins, polls
    /// the ticket until admitted, then orders with the admission token (a
    /// room-guarded sale's whole journey; the latency counted is the
    /// order's).
    #[arg(long)]
    pub(super) through_room: bool,
    /// After the load, wait for drain and reconcile the sale.
    #[arg(long)]
    pub(super) reconcile: bool,
    /// Longest wait for drain with --reconcile, in seconds.
    #[arg(long, default_value_t = 120)]
    pub(super) wait_drain: u64,
    /// Print JSON.
    #[arg(long)]
    pub(super) json: bool,
    /// Also report each slot of this many milliseconds of the run (by when
    /// its requests were sent): outcomes and latency (the charts of
    /// `make bench`).
    #[arg(long)]
    pub(super) timeline_ms: Option<u64>,
}
