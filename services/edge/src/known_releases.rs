//! Which activities are releases (one limit per customer across their
//! sizes), as this edge knows them: the set of declared releases, read
//! from Redis once a second apart from requests, so an order pays one map
//! read and no call — and a Redis that stalls stalls no order here (the set
//! last read stands). A release declared through another edge is held here
//! within a second; one declared through this edge at once.

use parking_lot::RwLock;
use seckill_shared::domain::ActivityId;
use seckill_shared::stock::Stock;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the set is read again.
pub const EVERY: Duration = Duration::from_secs(1);

/// The declared releases this edge last read (`None`: never read yet).
pub struct Releases {
    stock: Stock,
    known: RwLock<Option<BTreeSet<ActivityId>>>,
}

impl Releases {
    /// Read from `stock` (by [`Releases::refresh_every`]).
    pub fn new(stock: Stock) -> Self {
        Self { stock, known: RwLock::default() }
    }

    /// Whether `activity` is a release. Before the set was ever read (the
    /// edge just started and Redis has not answered yet): taken to be one,
    /// so the order asks its release, which answers whether it is one,
    /// rather than pass a limit unseen.
    pub fn is_release(&self, activity: ActivityId) -> bool {
        self.known.read().as_ref().is_none_or(|known| known.contains(&activity))
    }

    /// `activity` declared a release through this edge: held at once.
    pub fn declared(&self, activity: ActivityId) {
        if let Some(known) = self.known.write().as_mut() {
            known.insert(activity);
        }
    }

    /// Reads the set again; a read that fails keeps the set last read.
    pub async fn refresh(&self) {
        match self.stock.releases().declared().await {
            Ok(releases) => *self.known.write() = Some(releases.into_iter().collect()),
            Err(error) => tracing::debug!(%error, "reading the releases failed; the set last read stands"),
        }
    }

    /// Reads the set every [`EVERY`] until `shutdown`.
    pub async fn refresh_every(
        self: std::sync::Arc<Self>,
        shutdown: CancellationToken,
    ) -> Result<(), std::convert::Infallible> {
        loop {
            self.refresh().await;
            if !seckill_shared::ops::shutdown::pause(&shutdown, EVERY).await {
                return Ok(());
            }
        }
    }
}
