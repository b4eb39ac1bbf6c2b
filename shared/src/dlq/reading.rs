//! The one way the dead-letter topic is read by the tools.

use crate::config::Servers;
use crate::kafka::read::{read_to_end, Start};
use crate::kafka::Topics;
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::OwnedMessage;
use std::time::Duration;

/// Reads the DLQ from the beginning (or from `group`'s committed position)
/// up to the high watermarks taken at the start. `visit` returns whether to
/// go on.
pub fn read_dlq(
    servers: &Servers,
    group: Option<&str>,
    visit: impl FnMut(&BaseConsumer, &OwnedMessage) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let topic = Topics::new(&servers.kafka).dlq;
    let start = group.map_or(Start::Beginning, Start::Committed);
    read_to_end(&servers.kafka, &topic, start, Duration::from_secs(120), visit)
}
