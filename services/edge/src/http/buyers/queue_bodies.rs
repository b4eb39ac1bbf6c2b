//! The waiting room's bodies: a join, a challenge, and what a ticket reads.

use seckill_shared::stock::queue::TicketStatus;
use serde::Serialize;
use utoipa::ToSchema;

/// A ticket, as its holder polls it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = QueueTicket)]
pub struct TicketBody {
    pub ticket: String,
    #[schema(value_type = String, example = "WAITING")]
    pub status: TicketStatus,
    /// Place in line from 1 (absent before the start: the line is shuffled
    /// then).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub position: Option<u64>,
    /// The estimated wait, by the admissions of the last minute (or the
    /// room's rate before any).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub wait_seconds: Option<u64>,
    /// `ADMITTED` only: the admission token; the order carries it in the
    /// `Seckill-Admission` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub admission: Option<String>,
    /// `ADMITTED` only: when the token expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub admission_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When to poll again (ms).
    pub poll_after_ms: u64,
    /// A join's answer only: SHA-256 (hex) of the room's shuffle seed,
    /// fixed at the warm-up. The seed, shown after the start (`seckillctl
    /// queue stats`, the sale's report), must hash to it: it was not chosen
    /// after the joins were seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub seed_commitment: Option<String>,
}

/// A proof-of-work challenge for a join.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = QueueChallenge)]
pub struct ChallengeBody {
    pub challenge: String,
    /// Zero bits SHA-256(`challenge:solution`) must start with.
    pub bits: u32,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}
