//! `seckillctl probe URL`: a health check for images without a shell or
//! curl (the runtime image is distroless): exit 0 when the URL answers 2xx
//! in time, 1 otherwise. Compose's health checks run it.

use crate::Failure;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// `probe` arguments.
#[derive(clap::Args)]
pub struct Args {
    /// What to ask, e.g. http://127.0.0.1:8080/readyz.
    url: hyper::Uri,
    /// Longest wait for the answer, in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    timeout_ms: u64,
}

/// Asks once.
pub async fn run(args: Args) -> Result<(), Failure> {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let answer = tokio::time::timeout(Duration::from_millis(args.timeout_ms), client.get(args.url.clone()))
        .await
        .map_err(|_| Failure::failed(anyhow::anyhow!("{} did not answer in {} ms", args.url, args.timeout_ms)))?
        .map_err(|error| Failure::failed(anyhow::anyhow!("{}: {error}", args.url)))?;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(Failure::failed(anyhow::anyhow!("{} answered {}", args.url, answer.status())))
    }
}
