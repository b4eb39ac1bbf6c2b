//! A sale sold by a draw as its warm-up configures it (`draw`): entries
//! taken from `entriesOpenAt` to `drawAt`, then one draw ranks them all by
//! a keyed hash of a seed committed before the first entry
//! ([`crate::draw::proof`]); winners have `claimSeconds` to order,
//! and a right left unused passes down the list. The draw runs on the
//! waiting room's keys and tokens (`seckill_shared::stock::queue`): a
//! winner orders with an admission token as an admitted buyer does.

use crate::sales::Challenge;
use crate::stock::queue::RoomSettings;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The longest a winner may be given to order: a day.
pub const MAX_CLAIM_SECONDS: i64 = 86_400;

/// A draw's most entries when its warm-up names none (`maxEntries`): its
/// draw and its end-of-sale pass are each one script over every entry
/// (about 1 s per 100,000 entries on the Redis primary of its slot).
pub const DEFAULT_MAX_ENTRIES: i64 = 100_000;

/// The most entries a warm-up may allow.
pub const MOST_ENTRIES: i64 = 1_000_000;

/// A draw in front of the round (instead of a waiting room).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Draw {
    /// When entries open.
    pub entries_open_at: DateTime<Utc>,
    /// When entries close and the draw is made.
    pub draw_at: DateTime<Utc>,
    /// How long a winner (or an entry promoted later) has to order.
    #[schema(minimum = 10, maximum = 86_400)]
    #[serde(deserialize_with = "crate::domain::integer::integer")]
    pub claim_seconds: i64,
    /// A proof of work each entry must carry.
    #[serde(default)]
    #[schema(nullable = false)]
    pub challenge: Option<Challenge>,
    /// The most entries the draw takes: one more is answered 409
    /// `ENTRIES_FULL`, nothing kept (default 100,000; at most 1,000,000).
    #[serde(default = "default_max_entries", deserialize_with = "crate::domain::integer::integer")]
    #[schema(minimum = 1, maximum = 1_000_000, default = 100_000)]
    pub max_entries: i64,
}

fn default_max_entries() -> i64 {
    DEFAULT_MAX_ENTRIES
}

impl Draw {
    /// The first thing wrong with it beside the sale's window, said for the
    /// client.
    pub fn invalid(&self, starts_at: Option<DateTime<Utc>>, ends_at: Option<DateTime<Utc>>) -> Option<String> {
        if self.entries_open_at >= self.draw_at {
            return Some("draw.entriesOpenAt must be before draw.drawAt".into());
        }
        if !(10..=MAX_CLAIM_SECONDS).contains(&self.claim_seconds) {
            return Some(format!(
                "draw.claimSeconds must be between 10 and {MAX_CLAIM_SECONDS}, got {}",
                self.claim_seconds
            ));
        }
        if starts_at.is_some_and(|starts| starts > self.draw_at) {
            return Some("startsAt must not be after draw.drawAt: the winners order from the draw on".into());
        }
        if ends_at.is_some_and(|ends| ends <= self.draw_at) {
            return Some("endsAt must be after draw.drawAt".into());
        }
        if !(1..=MOST_ENTRIES).contains(&self.max_entries) {
            return Some(format!("draw.maxEntries must be between 1 and {MOST_ENTRIES}, got {}", self.max_entries));
        }
        match &self.challenge {
            Some(c) if c.kind != "pow" => Some(format!("draw.challenge.kind must be \"pow\", got {}", c.kind)),
            Some(c) if !(1..=28).contains(&c.bits) => {
                Some(format!("draw.challenge.bits must be between 1 and 28, got {}", c.bits))
            }
            _ => None,
        }
    }

    /// The room the draw runs on: entries are its pre-queue (from
    /// `entriesOpenAt` to `drawAt`, never abandoned), nobody is admitted
    /// before the draw, and after it as many at once as the units left can
    /// serve (overbook 1, no rate), each for `claimSeconds`.
    pub fn room(&self) -> RoomSettings {
        RoomSettings {
            active_buyers: 1_000_000,
            admit_per_minute: 0,
            prequeue_ms: (self.draw_at - self.entries_open_at).num_milliseconds(),
            token_ttl_ms: self.claim_seconds * 1000,
            overbook: 1.0,
            challenge_bits: self.challenge.as_ref().map_or(0, |c| c.bits),
            draw: true,
            max_entries: self.max_entries,
        }
    }

    /// When the draw is made (ms).
    pub fn draw_ms(&self) -> i64 {
        self.draw_at.timestamp_millis()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(json: &str) -> Draw {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_draw_is_checked_against_itself_and_the_sales_window() {
        let good =
            draw(r#"{"entriesOpenAt":"2026-12-01T10:00:00Z","drawAt":"2026-12-01T12:00:00Z","claimSeconds":600}"#);
        assert_eq!(good.invalid(None, None), None);
        let room = good.room();
        assert_eq!((room.prequeue_ms, room.token_ttl_ms, room.draw), (7_200_000, 600_000, true));
        assert_eq!(
            (good.max_entries, room.max_entries),
            (DEFAULT_MAX_ENTRIES, DEFAULT_MAX_ENTRIES),
            "the default bound"
        );
        let at = |s: &str| Some(s.parse::<DateTime<Utc>>().unwrap());
        assert!(good.invalid(at("2026-12-01T12:00:01Z"), None).is_some(), "starts after the draw");
        assert!(good.invalid(None, at("2026-12-01T12:00:00Z")).is_some(), "ends at the draw");
        assert_eq!(good.invalid(at("2026-12-01T12:00:00Z"), at("2026-12-02T00:00:00Z")), None);
        for bad in [
            r#"{"entriesOpenAt":"2026-12-01T12:00:00Z","drawAt":"2026-12-01T12:00:00Z","claimSeconds":600}"#,
            r#"{"entriesOpenAt":"2026-12-01T10:00:00Z","drawAt":"2026-12-01T12:00:00Z","claimSeconds":5}"#,
            r#"{"entriesOpenAt":"2026-12-01T10:00:00Z","drawAt":"2026-12-01T12:00:00Z","claimSeconds":60,"challenge":{"kind":"pow","bits":40}}"#,
            r#"{"entriesOpenAt":"2026-12-01T10:00:00Z","drawAt":"2026-12-01T12:00:00Z","claimSeconds":60,"maxEntries":0}"#,
            r#"{"entriesOpenAt":"2026-12-01T10:00:00Z","drawAt":"2026-12-01T12:00:00Z","claimSeconds":60,"maxEntries":1000001}"#,
        ] {
            assert!(draw(bad).invalid(None, None).is_some(), "{bad}");
        }
        assert!(serde_json::from_str::<Draw>(r#"{"drawAt":"2026-12-01T12:00:00Z","claimSeconds":60}"#).is_err());
    }
}
