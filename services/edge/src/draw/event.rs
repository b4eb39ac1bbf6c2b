//! A draw's outcome as a record of `seckill.draw-events`: JSON
//! (`schemas/draw-events.v1.json`) with the CloudEvents binary-mode headers
//! the order events carry (`ce_type` `com.seckill.draw.<type>`), keyed by
//! user so one user's outcomes keep their order.

use chrono::{DateTime, Utc};
use rdkafka::message::OwnedHeaders;
use seckill_shared::domain::SaleKey;
use seckill_shared::draw::OutcomeRow;
use seckill_shared::kafka::cloud_event::{self, Attributes};
use seckill_shared::kafka::Trace;
use serde::Serialize;

/// `ce_dataschema`: the schema's `$id`.
pub const DATA_SCHEMA: &str = "https://seckill.dev/schemas/draw-events.v1.json";

/// One outcome of one entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrawEvent {
    /// `<entryId>:<type>`: an entry has each outcome at most once, so a
    /// record published again is told apart by it.
    pub event_id: String,
    /// `WON`, `WAITLISTED`, `PROMOTED`, `EXPIRED`, `LOST`.
    #[serde(rename = "type")]
    pub kind: String,
    pub entry_id: String,
    pub activity_id: i64,
    pub sku_id: i64,
    pub round: i64,
    pub user_id: i64,
    /// `WON`: the entry's rank in the draw; `WAITLISTED`: its place on the
    /// list (from 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub place: Option<i64>,
    /// `WON`, `PROMOTED`: order before this (ms since the epoch), with the
    /// entry's admission token; `EXPIRED`: the deadline that passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_by: Option<i64>,
    /// When it happened: ms since the epoch, Redis's clock.
    pub occurred_at: i64,
    /// The schema's version.
    pub v: u8,
}

fn time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

impl DrawEvent {
    /// The event of `row`, an outcome of `sale`'s draw in `round`.
    pub fn of(sale: SaleKey, round: i64, row: &OutcomeRow) -> Self {
        let kind = row.kind.to_ascii_uppercase();
        let place = matches!(kind.as_str(), "WON" | "WAITLISTED").then_some(row.place);
        let claim_by = (row.until_ms > 0).then_some(row.until_ms);
        Self {
            event_id: format!("{}:{kind}", row.entry),
            entry_id: row.entry.clone(),
            activity_id: sale.activity.get(),
            sku_id: sale.sku.get(),
            round,
            user_id: row.user.get(),
            place,
            claim_by,
            occurred_at: row.at_ms,
            v: 1,
            kind,
        }
    }

    /// Its record's headers: CloudEvents attributes, `ce_subject` the entry.
    pub fn headers(&self, source: &str) -> OwnedHeaders {
        let time = time(self.occurred_at);
        let attributes = Attributes { id: &self.event_id, kind: &self.kind, subject: &self.entry_id, time, source };
        let kind = format!("com.seckill.draw.{}", self.kind.to_ascii_lowercase());
        cloud_event::binary_headers(Trace { request_id: None, traceparent: None }, attributes, &kind, DATA_SCHEMA)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Headers;
    use seckill_shared::domain::UserId;

    #[test]
    fn an_outcome_is_an_event_with_its_cloudevents_headers() {
        let sale = SaleKey::from_raw(7, 9).unwrap();
        let row = OutcomeRow {
            id: "1-0".into(),
            kind: "won".into(),
            entry: "7-9-ab".into(),
            user: UserId::new(42).unwrap(),
            until_ms: 1_700_000_060_000,
            place: 3,
            at_ms: 1_700_000_000_000,
        };
        let event = DrawEvent::of(sale, 2, &row);
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["eventId"], "7-9-ab:WON");
        assert_eq!((json["type"].as_str(), json["place"].as_i64()), (Some("WON"), Some(3)));
        assert_eq!(
            (json["claimBy"].as_i64(), json["occurredAt"].as_i64()),
            (Some(1_700_000_060_000), Some(1_700_000_000_000))
        );
        let headers = event.headers("urn:x");
        let ce_time = headers.iter().find(|h| h.key == "ce_time").and_then(|h| h.value).unwrap();
        assert_eq!(ce_time, b"2023-11-14T22:13:20.000Z");
        let ce_type = headers.iter().find(|h| h.key == "ce_type").and_then(|h| h.value).unwrap();
        assert_eq!(ce_type, b"com.seckill.draw.won");
        let lost = DrawEvent::of(sale, 2, &OutcomeRow { kind: "lost".into(), until_ms: 0, place: 0, ..row });
        let json = serde_json::to_value(&lost).unwrap();
        assert!(json.get("place").is_none() && json.get("claimBy").is_none(), "{json}");
    }
}
