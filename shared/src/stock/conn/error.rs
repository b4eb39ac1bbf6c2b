//! The one error a Redis call can end in, and what it says about whether
//! the call ran.

use std::time::Duration;

/// What went wrong with one Redis call.
#[derive(Debug, thiserror::Error)]
pub enum RedisCallError {
    /// Redis answered with an error, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The Redis Cluster client failed after sending it, perhaps more than
    /// once: it resends a command after a dropped connection or a
    /// redirection (`retries`), so its last error — even a refused
    /// connection — may follow an attempt that ran.
    #[error("redis cluster: {0}")]
    Resent(redis::RedisError),
    /// Redis did not answer in time. The command may still have run.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The write ran on the primary, but fewer replicas than asked
    /// (`redis.min_replica_acks`) confirmed it in time: a failover now
    /// could lose it. Asked again, an idempotent step is confirmed (or made
    /// again, the same).
    #[error("{script}: {confirmed} of {asked} replicas confirmed the write in time")]
    NotConfirmed {
        /// The script that wrote.
        script: &'static str,
        /// Replicas asked for.
        asked: u32,
        /// Replicas that confirmed.
        confirmed: u32,
    },
    /// A script answered something this code does not understand.
    #[error("unexpected answer from {script}: {answer}")]
    Unexpected {
        /// The script (or command) that answered.
        script: &'static str,
        /// What it answered, as debug text.
        answer: String,
    },
}

impl RedisCallError {
    /// Whether the call certainly did not run: Redis refused the connection
    /// (nothing was sent) or answered with an error (a replica refusing
    /// writes, a script error before any write). A timeout or a connection
    /// lost after sending may have run.
    pub fn never_ran(&self) -> bool {
        match self {
            Self::Redis(error) => error.is_connection_refusal() || matches!(error.kind(), redis::ErrorKind::Server(_)),
            // The cluster client may have sent it before the error it ends
            // with: only its outcome, asked for by the call's id, can say.
            Self::Resent(_) | Self::Timeout(_) | Self::Unexpected { .. } | Self::NotConfirmed { .. } => false,
        }
    }

    /// The server's or client's error, when there is one.
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        match self {
            Self::Redis(error) | Self::Resent(error) => Some(error),
            Self::Timeout(_) | Self::Unexpected { .. } | Self::NotConfirmed { .. } => None,
        }
    }

    /// Whether the answer was not heard (the call may have run): asking
    /// again is how a caller of an idempotent script learns its outcome.
    pub fn unheard(&self) -> bool {
        !self.never_ran() && !matches!(self, Self::Unexpected { .. } | Self::NotConfirmed { .. })
    }
}
