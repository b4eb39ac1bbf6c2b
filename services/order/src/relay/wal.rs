//! The relay's stream of the WAL: this database's logical replication slot
//! streamed with pgoutput (proto 1, the events' publication, messages on),
//! and of what it sends only the triggers' messages of committed
//! transactions, in commit order. Whole transactions only: a batch ends at
//! a commit, and a transaction still open when a read ends is kept for the
//! next one. The server is told a position only once the relay recorded it
//! ([`WalStream::confirm`]); until then it streams again from the slot's
//! last confirmed position to whoever asks next.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use pgwire_replication::{Lsn as WireLsn, PgWireError, ReplicationClient, ReplicationConfig, ReplicationEvent};
use seckill_shared::event_stream::{Lsn, MESSAGE_PREFIX, PUBLICATION};
use std::time::Duration;
use tokio::time::Instant;

/// How long a read goes on gathering transactions after the first commit
/// it saw: a drain's transactions come back to back, and a larger batch of
/// events costs less per event to send and to record.
const GATHER: Duration = Duration::from_millis(20);

/// Most message bytes one read gathers (it ends at the next commit).
const MOST_BYTES: usize = 8 << 20;

/// PostgreSQL counts time from 2000-01-01, in microseconds.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// One committed transaction's event messages.
#[derive(Debug)]
pub struct Committed {
    /// Each message: where it is in the WAL, and its content (a JSON array
    /// of events).
    pub messages: Vec<(Lsn, Bytes)>,
    /// The end of its commit record: the position after it.
    pub end: Lsn,
    /// When it committed.
    pub at: DateTime<Utc>,
}

/// What a read found.
#[derive(Debug)]
pub enum Read {
    /// Transactions with events, oldest first.
    Transactions(Vec<Committed>),
    /// No event, and the server has streamed everything before this
    /// position: a relay that sent all it read may record it.
    Quiet(Lsn),
    /// Nothing yet.
    Nothing,
}

/// The slot, streaming.
pub struct WalStream {
    client: ReplicationClient,
    /// The messages of a transaction whose commit has not come yet.
    open: Option<Vec<(Lsn, Bytes)>>,
}

/// What the stream is asked for: which server, database and slot, and
/// from where.
pub struct Target<'a> {
    /// The service's PostgreSQL URL (`postgres://user:password@host:port/db`).
    pub url: &'a str,
    pub slot: &'a str,
    /// The relay's recorded position (`None`: the slot's own).
    pub start: Option<Lsn>,
}

impl WalStream {
    /// Starts streaming `target.slot`.
    pub async fn open(target: Target<'_>) -> anyhow::Result<Self> {
        let url = url::Url::parse(target.url)?;
        let query: std::collections::HashMap<_, _> = url.query_pairs().collect();
        if let Some(mode) = query.get("sslmode").filter(|mode| !matches!(mode.as_ref(), "disable" | "prefer")) {
            // sqlx is built without TLS too: the services reach PostgreSQL
            // in the clear (a private network, or a sidecar that encrypts).
            anyhow::bail!("sslmode={mode}: TLS to PostgreSQL is not built into the services");
        }
        let decode = |text: &str| percent_decode(text);
        let config = ReplicationConfig::new(
            url.host_str().unwrap_or("127.0.0.1"),
            decode(url.username()),
            decode(url.password().unwrap_or("")),
            decode(url.path().trim_start_matches('/')),
            target.slot,
            PUBLICATION,
        )
        .with_port(url.port().unwrap_or(5432))
        .with_start_lsn(WireLsn::from_u64(target.start.map_or(0, |lsn| lsn.0)))
        // Confirmed positions reach the server within a second: the WAL
        // behind them can go.
        .with_status_interval(Duration::from_secs(1))
        .with_application_name("seckill-order-event-relay");
        let client = ReplicationClient::connect(config).await?;
        Ok(Self { client, open: None })
    }

    /// Reads what the slot streams: waits up to `wait` for a first event,
    /// then gathers whole transactions for a little while. Messages under
    /// other prefixes (another application's) and non-transactional ones
    /// are passed over.
    pub async fn read(&mut self, wait: Duration) -> Result<Read, PgWireError> {
        let mut done: Vec<Committed> = Vec::new();
        let mut bytes = 0usize;
        let mut quiet: Option<Lsn> = None;
        let mut until = Instant::now() + wait;
        let mut gathering = false;
        loop {
            let event = match tokio::time::timeout_at(until, self.client.recv()).await {
                // Waited long enough.
                Err(_) => break,
                Ok(Ok(Some(event))) => event,
                Ok(Ok(None)) => return Err(PgWireError::Task("the replication stream ended".into())),
                Ok(Err(error)) => return Err(error),
            };
            match event {
                ReplicationEvent::Begin { .. } => self.open = Some(Vec::new()),
                ReplicationEvent::Message { transactional: true, lsn, prefix, content } if prefix == MESSAGE_PREFIX => {
                    bytes += content.len();
                    self.open.get_or_insert_with(Vec::new).push((Lsn(lsn.as_u64()), content));
                }
                ReplicationEvent::Commit { end_lsn, commit_time_micros, .. } => {
                    let messages = self.open.take().unwrap_or_default();
                    let end = Lsn(end_lsn.as_u64());
                    if messages.is_empty() {
                        quiet = Some(end);
                        continue;
                    }
                    let micros = commit_time_micros + PG_EPOCH_MICROS;
                    let at = DateTime::from_timestamp_micros(micros).unwrap_or_else(Utc::now);
                    done.push(Committed { messages, end, at });
                    if bytes >= MOST_BYTES {
                        break;
                    }
                    if !gathering {
                        gathering = true;
                        until = Instant::now() + GATHER;
                    }
                }
                // Everything before wal_end was streamed; nothing is open.
                ReplicationEvent::KeepAlive { wal_end, .. } if self.open.is_none() => {
                    quiet = Some(Lsn(wal_end.as_u64()));
                    if !done.is_empty() {
                        // The server is idle: no reason to wait for more.
                        break;
                    }
                }
                _ => {}
            }
        }
        Ok(if !done.is_empty() {
            Read::Transactions(done)
        } else if let Some(lsn) = quiet {
            Read::Quiet(lsn)
        } else {
            Read::Nothing
        })
    }

    /// Tells the server the relay recorded everything before `lsn`: the
    /// slot may let that WAL go.
    pub fn confirm(&self, lsn: Lsn) {
        self.client.update_applied_lsn(WireLsn::from_u64(lsn.0));
    }

    /// Stops streaming (the slot is free for the next relay at once).
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.client.shutdown()).await;
    }
}

/// `%XX` escapes of a URL part decoded (a password may hold any byte).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parts_are_decoded() {
        assert_eq!(percent_decode("p%40ss%2Fw0rd"), "p@ss/w0rd");
        assert_eq!(percent_decode("plain"), "plain");
        assert_eq!(percent_decode("50%"), "50%", "a lone % stays");
    }
}
