//! Which dead letters a run takes (`--reason`, `--order`, `--since`,
//! `--sale`, `--position`; the same names in the dashboard's JSON), and one
//! record as `list` and `show` print it.

use crate::domain::{OrderRecord, SaleKey};
use crate::kafka::{dlq_header, header_str, headers_map};
use chrono::{DateTime, Utc};
use rdkafka::message::{Message, OwnedMessage};
use serde::Deserialize;
use std::collections::BTreeMap;

/// A sale as `ACTIVITY:SKU`.
pub fn parse_sale(text: &str) -> Result<SaleKey, String> {
    let (activity, sku) = text.split_once(':').ok_or_else(|| format!("expected ACTIVITY:SKU, got '{text}'"))?;
    let number = |part: &str| part.parse::<i64>().map_err(|_| format!("expected ACTIVITY:SKU, got '{text}'"));
    SaleKey::from_raw(number(activity)?, number(sku)?).map_err(|e| e.to_string())
}

pub(super) fn as_text<S: serde::Serializer>(sale: &Option<SaleKey>, to: S) -> Result<S::Ok, S::Error> {
    to.collect_str(&sale.map(|s| s.to_string()).unwrap_or_default())
}

/// A record's place as `PARTITION:OFFSET`.
pub fn parse_position(text: &str) -> Result<(i32, i64), String> {
    text.split_once(':')
        .and_then(|(p, o)| Some((p.parse::<i32>().ok()?, o.parse::<i64>().ok()?)))
        .ok_or_else(|| format!("expected PARTITION:OFFSET, got '{text}'"))
}

fn sale_from_text<'de, D: serde::Deserializer<'de>>(from: D) -> Result<Option<SaleKey>, D::Error> {
    Option::<String>::deserialize(from)?.map(|text| parse_sale(&text).map_err(serde::de::Error::custom)).transpose()
}

/// A position as the audit trail keeps it (`[partition, offset]`) or as
/// the dashboard sends it (`"partition:offset"`).
fn position_from_text<'de, D: serde::Deserializer<'de>>(from: D) -> Result<Option<(i32, i64)>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Pair(i32, i64),
        Text(String),
    }
    Option::<Either>::deserialize(from)?
        .map(|either| match either {
            Either::Pair(partition, offset) => Ok((partition, offset)),
            Either::Text(text) => parse_position(&text).map_err(serde::de::Error::custom),
        })
        .transpose()
}

/// Which records.
#[derive(clap::Args, Clone, Default, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Filter {
    /// Only this `dlq.reason` (e.g. NO_DB_STOCK).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Only this order id.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// Only records dead-lettered at or after this time (RFC 3339).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Only this sale's records (`ACTIVITY:SKU`).
    #[arg(long, value_parser = parse_sale)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "as_text",
        deserialize_with = "sale_from_text"
    )]
    pub sale: Option<SaleKey>,
    /// Only the record at `PARTITION:OFFSET` (as `list` shows it).
    #[arg(long, value_parser = parse_position)]
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "position_from_text")]
    pub position: Option<(i32, i64)>,
}

impl Filter {
    /// Whether it takes `message`.
    pub fn matches(&self, message: &OwnedMessage) -> bool {
        if self.position.is_some_and(|p| p != (message.partition(), message.offset())) {
            return false;
        }
        let headers = message.headers();
        let header = |key| headers.and_then(|h| header_str(h, key));
        if let Some(reason) = &self.reason {
            if header(dlq_header::REASON) != Some(reason.as_str()) {
                return false;
            }
        }
        if let Some(since) = &self.since {
            let failed_at = header(dlq_header::FAILED_AT).and_then(|t| DateTime::parse_from_rfc3339(t).ok());
            if failed_at.is_none_or(|t| t < *since) {
                return false;
            }
        }
        if self.order.is_some() || self.sale.is_some() {
            let record = message.payload().and_then(|p| OrderRecord::decode(p).ok());
            let Some(record) = record else { return false };
            if self.order.as_ref().is_some_and(|order| record.order_id.as_str() != order)
                || self.sale.is_some_and(|sale| record.sale() != sale)
            {
                return false;
            }
        }
        true
    }

    /// The same filter as `seckillctl dlq` arguments (the console's runs are
    /// that tool, in a process of its own).
    pub fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let mut given = |flag: &str, value: Option<String>| {
            if let Some(value) = value {
                args.extend([flag.to_owned(), value]);
            }
        };
        given("--reason", self.reason.clone());
        given("--order", self.order.clone());
        given("--since", self.since.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)));
        given("--sale", self.sale.map(|s| s.to_string()));
        given("--position", self.position.map(|(partition, offset)| format!("{partition}:{offset}")));
        args
    }

    /// A stable name for this filter, for the replay group: the text is the
    /// one versions before `--sale` and `--position` hashed (so a replay
    /// begun by one resumes after an upgrade), those two added when given.
    pub(super) fn group_suffix(&self) -> String {
        let mut text =
            format!("Filter {{ reason: {:?}, order: {:?}, since: {:?} }}", self.reason, self.order, self.since);
        if let Some(sale) = self.sale {
            text.push_str(&format!(" sale {sale}"));
        }
        if let Some((partition, offset)) = self.position {
            text.push_str(&format!(" position {partition}:{offset}"));
        }
        stable_hash(&text)
    }
}

/// One record as `list` and `show` print it (and the dashboard lists it).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// `partition:offset`.
    pub position: String,
    pub reason: String,
    pub error: String,
    /// `-` when the record names no order.
    pub order_id: String,
    pub failed_at: String,
    pub attempts: String,
    pub headers: BTreeMap<String, String>,
    pub value: serde_json::Value,
}

/// `message` as an [`Entry`].
pub fn entry(message: &OwnedMessage) -> Entry {
    let headers = message.headers().map(headers_map).unwrap_or_default();
    let value = message
        .payload()
        .map(|p| {
            serde_json::from_slice(p)
                .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(p).into_owned()))
        })
        .unwrap_or(serde_json::Value::Null);
    Entry {
        position: format!("{}:{}", message.partition(), message.offset()),
        reason: headers.get(dlq_header::REASON).cloned().unwrap_or_default(),
        error: headers.get(dlq_header::ERROR).cloned().unwrap_or_default(),
        order_id: value["orderId"].as_str().unwrap_or("-").to_owned(),
        failed_at: headers.get(dlq_header::FAILED_AT).cloned().unwrap_or_default(),
        attempts: headers.get(dlq_header::ATTEMPTS).cloned().unwrap_or_default(),
        headers,
        value,
    }
}

/// A stable hex name for a text (FNV-1a).
pub(super) fn stable_hash(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3));
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_as_arguments_is_read_back_the_same() {
        #[derive(clap::Parser)]
        struct Tool {
            #[command(flatten)]
            filter: Filter,
        }
        use clap::Parser;
        let filter = Filter {
            reason: Some("DB_REJECTED".into()),
            order: Some("o-1".into()),
            since: Some(chrono::DateTime::parse_from_rfc3339("2026-12-05T10:00:00.123456789Z").unwrap().to_utc()),
            sale: Some(SaleKey::from_raw(1, 2).unwrap()),
            position: Some((3, 42)),
        };
        let read = Tool::parse_from(std::iter::once("tool".to_owned()).chain(filter.args())).filter;
        assert_eq!(read.group_suffix(), filter.group_suffix(), "{:?}", filter.args());
        assert!(Filter::default().args().is_empty());
    }

    #[test]
    fn a_filter_names_the_replay_group_of_earlier_versions() {
        // What the version before --sale and --position named a replay of
        // `--reason DB_REJECTED` (its Debug text, hashed): a replay begun
        // then resumes after an upgrade.
        let filter = Filter { reason: Some("DB_REJECTED".into()), ..Filter::default() };
        assert_eq!(
            filter.group_suffix(),
            stable_hash(r#"Filter { reason: Some("DB_REJECTED"), order: None, since: None }"#)
        );
        let sale = Filter { sale: Some(SaleKey::from_raw(1, 2).unwrap()), ..filter.clone() };
        assert_ne!(sale.group_suffix(), filter.group_suffix());
        let one = Filter { position: Some((0, 7)), ..filter.clone() };
        assert_ne!(one.group_suffix(), filter.group_suffix());
        assert_eq!(serde_json::to_value(&sale).unwrap(), serde_json::json!({"reason": "DB_REJECTED", "sale": "1:2"}));
        // As the dashboard sends it, and as the audit trail keeps it.
        let sent = serde_json::json!({"reason": "DB_REJECTED", "sale": "1:2", "position": "0:7"});
        let read: Filter = serde_json::from_value(sent).unwrap();
        assert_eq!((read.sale, read.position), (sale.sale, Some((0, 7))));
        let kept = serde_json::json!({"reason": "DB_REJECTED", "sale": "1:2", "position": [0, 7]});
        assert_eq!(serde_json::to_value(&read).unwrap(), kept);
        assert_eq!(serde_json::from_value::<Filter>(kept).unwrap().position, Some((0, 7)));
        assert!(serde_json::from_value::<Filter>(serde_json::json!({"sale": "1"})).is_err(), "a sale is A:S");
        assert!(serde_json::from_value::<Filter>(serde_json::json!({"sku": 1})).is_err(), "no unknown field");
    }
}
