//! The dead-letter topic read in a consumer group of its own, from where
//! the group stopped: each chosen record is handed over, and the group
//! commits past it only once the caller is done with it. An interrupted
//! run resumes where it stopped; a crash between a record's effect and its
//! commit hands that one record over once more.

use super::reading::read_dlq;
use super::Filter;
use crate::config::Servers;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};

/// A resumable read of the dead-letter topic.
pub struct Resumable {
    chosen: tokio::sync::mpsc::Receiver<OwnedMessage>,
    done: std::sync::mpsc::Sender<bool>,
    reader: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Resumable {
    /// Starts reading in `group`; with `commit` false (a dry run) the group
    /// never moves.
    pub fn start(servers: &Servers, group: String, filter: Filter, commit: bool) -> Self {
        // The reader runs on a blocking thread and hands records over one at
        // a time; each is committed only after the caller said it is done.
        let (to_send, chosen) = tokio::sync::mpsc::channel::<OwnedMessage>(1);
        let (done, done_rx) = std::sync::mpsc::channel::<bool>();
        let servers = servers.clone();
        let reader = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            read_dlq(&servers, Some(&group), |consumer, message| {
                if !filter.matches(message) {
                    return Ok(true);
                }
                if to_send.blocking_send(message.clone()).is_err() {
                    return Ok(false);
                }
                if !done_rx.recv().unwrap_or(false) {
                    return Ok(false);
                }
                if commit {
                    let mut list = TopicPartitionList::new();
                    let next = Offset::Offset(message.offset() + 1);
                    list.add_partition_offset(message.topic(), message.partition(), next)?;
                    consumer.commit(&list, CommitMode::Sync)?;
                }
                Ok(true)
            })
        });
        Self { chosen, done, reader }
    }

    /// The next chosen record, `None` at the end of the topic (as it was
    /// when the read started).
    pub async fn next(&mut self) -> Option<OwnedMessage> {
        self.chosen.recv().await
    }

    /// The last record handed over is dealt with: commit past it, go on.
    pub fn done(&self) {
        let _ = self.done.send(true);
    }

    /// Stops without committing the record handed over last (if any): the
    /// next run starts with it.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.done.send(false);
        drop(self.chosen);
        drop(self.done);
        self.reader.await?
    }
}
