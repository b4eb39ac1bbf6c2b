//! A sale's waiting room as its warm-up configures it (`admission`): how
//! many buyers may be in at once, how fast they are let in, the pre-queue,
//! the tokens' life, the overbooking allowed and the bot hurdle.

use crate::stock::queue::RoomSettings;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The waiting room of a sale (absent: none; the sale sells to whoever
/// comes, as without one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Admission {
    /// Most buyers admitted and not yet ordered or expired at once.
    #[schema(minimum = 1, maximum = 1_000_000)]
    #[serde(deserialize_with = "crate::domain::integer::integer")]
    pub active_buyers: i64,
    /// Most admissions in any minute, spread evenly (absent: unlimited).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10_000_000, nullable = false)]
    #[serde(deserialize_with = "crate::domain::integer::optional_integer")]
    pub admit_per_minute: Option<i64>,
    /// How long before `startsAt` joining opens; everyone who joined by the
    /// start is placed in one random order.
    #[serde(default = "default_prequeue")]
    #[schema(minimum = 0, maximum = 86_400, default = 300)]
    #[serde(deserialize_with = "crate::domain::integer::integer")]
    pub prequeue_seconds: i64,
    /// How long an admission token may be used.
    #[serde(default = "default_ttl")]
    #[schema(minimum = 10, maximum = 3_600, default = 120)]
    #[serde(deserialize_with = "crate::domain::integer::integer")]
    pub token_ttl_seconds: i64,
    /// Most admitted-and-unused buyers per unit still on sale.
    #[serde(default = "default_overbook")]
    #[schema(minimum = 1.0, maximum = 10.0, default = 1.2)]
    pub overbook: f64,
    /// A proof of work each join must carry.
    #[serde(default)]
    #[schema(nullable = false)]
    pub challenge: Option<Challenge>,
}

/// The bot hurdle: `pow` — find a solution whose SHA-256 with the
/// challenge starts with `bits` zero bits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Challenge {
    /// `pow`, the only kind.
    #[schema(pattern = "^pow$")]
    pub kind: String,
    #[schema(minimum = 1, maximum = 28)]
    #[serde(deserialize_with = "crate::domain::integer::integer")]
    pub bits: u32,
}

fn default_prequeue() -> i64 {
    300
}

fn default_ttl() -> i64 {
    120
}

fn default_overbook() -> f64 {
    1.2
}

impl Admission {
    /// The first thing wrong with it, said for the client.
    pub fn invalid(&self) -> Option<String> {
        let out =
            |name: &str, value: String, range: &str| Some(format!("admission.{name} must be {range}, got {value}"));
        if !(1..=1_000_000).contains(&self.active_buyers) {
            return out("activeBuyers", self.active_buyers.to_string(), "between 1 and 1000000");
        }
        if let Some(rate) = self.admit_per_minute.filter(|r| !(1..=10_000_000).contains(r)) {
            return out("admitPerMinute", rate.to_string(), "between 1 and 10000000");
        }
        if !(0..=86_400).contains(&self.prequeue_seconds) {
            return out("prequeueSeconds", self.prequeue_seconds.to_string(), "between 0 and 86400");
        }
        if !(10..=3_600).contains(&self.token_ttl_seconds) {
            return out("tokenTtlSeconds", self.token_ttl_seconds.to_string(), "between 10 and 3600");
        }
        if !(1.0..=10.0).contains(&self.overbook) {
            return out("overbook", self.overbook.to_string(), "between 1.0 and 10.0");
        }
        match &self.challenge {
            Some(c) if c.kind != "pow" => out("challenge.kind", c.kind.clone(), "\"pow\""),
            Some(c) if !(1..=28).contains(&c.bits) => out("challenge.bits", c.bits.to_string(), "between 1 and 28"),
            _ => None,
        }
    }

    /// The room's settings, as Redis keeps them.
    pub fn room(&self) -> RoomSettings {
        RoomSettings {
            max_entries: 0,
            active_buyers: self.active_buyers,
            admit_per_minute: self.admit_per_minute.unwrap_or(0),
            prequeue_ms: self.prequeue_seconds * 1000,
            token_ttl_ms: self.token_ttl_seconds * 1000,
            overbook: self.overbook,
            challenge_bits: self.challenge.as_ref().map_or(0, |c| c.bits),
            draw: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_active_buyers_is_required_and_the_rest_is_checked() {
        let plain: Admission = serde_json::from_str(r#"{"activeBuyers": 50}"#).unwrap();
        assert_eq!(plain.invalid(), None);
        let room = plain.room();
        assert_eq!(
            (room.admit_per_minute, room.prequeue_ms, room.token_ttl_ms, room.overbook),
            (0, 300_000, 120_000, 1.2)
        );
        for bad in [
            r#"{"activeBuyers": 0}"#,
            r#"{"activeBuyers": 5, "admitPerMinute": 0}"#,
            r#"{"activeBuyers": 5, "tokenTtlSeconds": 1}"#,
            r#"{"activeBuyers": 5, "overbook": 0.5}"#,
            r#"{"activeBuyers": 5, "challenge": {"kind": "captcha", "bits": 8}}"#,
            r#"{"activeBuyers": 5, "challenge": {"kind": "pow", "bits": 40}}"#,
        ] {
            let admission: Admission = serde_json::from_str(bad).unwrap();
            assert!(admission.invalid().is_some(), "{bad}");
        }
        assert!(serde_json::from_str::<Admission>(r#"{"activeBuyers": 5, "extra": 1}"#).is_err());
    }
}
