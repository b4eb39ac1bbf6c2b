//! `seckillctl probe URL`: a health check for images without a shell or
//! curl (the runtime image is distroless): exit 0 when the URL answers 2xx
//! in time, 1 otherwise. Compose's health checks run it; `--wait-secs`
//! asks again until a service that is starting answers (the README's
//! walkthrough waits for the edge this way).

use crate::Failure;
use backon::Retryable;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use seckill_shared::ops::retry;
use std::time::Duration;

/// `probe` arguments.
#[derive(clap::Args)]
pub struct Args {
    /// What to ask, e.g. http://127.0.0.1:8080/readyz.
    url: hyper::Uri,
    /// Longest wait for each answer, in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    timeout_ms: u64,
    /// Ask again (a quarter of a second apart, then up to a second) until
    /// a 2xx answer or this many seconds passed; 0: ask once.
    #[arg(long, default_value_t = 0)]
    wait_secs: u64,
}

/// Asks once, or until answered within `--wait-secs`.
pub async fn run(args: Args) -> Result<(), Failure> {
    let client: Http = Client::builder(TokioExecutor::new()).build_http();
    let ask = || ask(&client, &args);
    let asking = retry::within(Duration::from_millis(250), Duration::from_secs(1), Duration::from_secs(args.wait_secs));
    ask.retry(asking).when(|_| args.wait_secs > 0).await.map_err(Failure::failed)
}

type Http = Client<HttpConnector, Empty<Bytes>>;

async fn ask(client: &Http, args: &Args) -> anyhow::Result<()> {
    let answer = tokio::time::timeout(Duration::from_millis(args.timeout_ms), client.get(args.url.clone()))
        .await
        .map_err(|_| anyhow::anyhow!("{} did not answer in {} ms", args.url, args.timeout_ms))?
        .map_err(|error| anyhow::anyhow!("{}: {error}", args.url))?;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(anyhow::anyhow!("{} answered {}", args.url, answer.status()))
    }
}
