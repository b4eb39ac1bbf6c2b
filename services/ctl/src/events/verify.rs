//! `seckillctl events verify`: reads `seckill.order-events` as a consumer
//! would — every partition, from the start — and checks it against the
//! events a sale's orders call for ([`super::expected`]): each there (at
//! least once), each order's events in the order they happened, and none
//! the orders do not explain. Events the relay has yet to send are
//! counted apart, not as missing; `--wait-drain` waits for them.

use super::expected::{expected, Expected, Scope};
use crate::{Failure, Settings};
use rdkafka::Message;
use seckill_shared::config::KafkaSettings;
use seckill_shared::domain::SaleKey;
use seckill_shared::kafka::read::{read_to_end, Start};
use seckill_shared::kafka::Topics;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Arguments of `events verify`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Activity id.
    #[arg(long)]
    pub activity: i64,
    /// SKU id.
    #[arg(long)]
    pub sku: i64,
    /// Wait up to this many seconds for the relay to send what is pending
    /// and for missing events to arrive, before judging.
    #[arg(long)]
    pub wait_drain: Option<u64>,
    /// Print the verdict as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What the topic holds of a sale's events.
#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub activity_id: i64,
    pub sku_id: i64,
    /// Orders of the sale (every round).
    pub orders: usize,
    /// Events the orders call for.
    pub expected: usize,
    /// Of those, on the topic.
    pub delivered: usize,
    /// Records on the topic that repeat an event already there (at least
    /// once: consumers drop them by eventId).
    pub repeats: usize,
    /// Of the expected, not on the topic yet but ahead of the relay's
    /// cursor: the relay sends them.
    pub pending: usize,
    /// Expected, not on the topic, and not pending: lost unless resent
    /// (`seckillctl events resend`). At most 100 named.
    pub missing: Vec<String>,
    pub missing_count: usize,
    /// Orders whose events reached the topic out of order (a later state
    /// before an earlier one), or in different partitions.
    pub out_of_order: Vec<String>,
    /// Events of the sale on the topic that no order explains.
    pub unexplained: Vec<String>,
    /// Events whose `quantity` is not their order's units.
    pub wrong_quantity: Vec<String>,
    /// Whether every check holds (pending events excepted).
    pub complete: bool,
}

/// Where the first copy of an event sits on the topic.
type Position = (i32, i64);

/// An event as the topic holds it: where its first copy is, how many
/// copies there are, and the units its first copy says its order holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub at: Position,
    pub copies: usize,
    pub quantity: u32,
}

/// Runs `events verify`: exit 0 complete, 1 not, 2 a source unreadable.
pub async fn run(settings: &Settings, args: Args) -> Result<(), Failure> {
    let sale = SaleKey::from_raw(args.activity, args.sku).map_err(Failure::unreadable)?;
    let db = seckill_shared::db::connect_lazy(&settings.servers.database).map_err(Failure::unreadable)?;
    let deadline = Instant::now() + Duration::from_secs(args.wait_drain.unwrap_or(0));
    let verdict = loop {
        let wanted = expected(&db, Scope::Sale(sale)).await.map_err(Failure::unreadable)?;
        let kafka = settings.servers.kafka.clone();
        let seen = tokio::task::spawn_blocking(move || on_topic(&kafka, Some(sale)))
            .await
            .map_err(Failure::failed)?
            .map_err(Failure::unreadable)?;
        let verdict = judge(sale, &wanted, &seen);
        let settled = verdict.complete && verdict.pending == 0;
        if settled || Instant::now() >= deadline {
            break verdict;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&verdict).map_err(Failure::failed)?);
    } else {
        print(&verdict);
    }
    // Asked to wait for the drain, events still pending are late too.
    let drained = args.wait_drain.is_none() || verdict.pending == 0;
    if verdict.complete && drained {
        Ok(())
    } else {
        Err(Failure::failed(anyhow::anyhow!(
            "the events topic does not hold every event of sale {sale} ({} pending)",
            verdict.pending
        )))
    }
}

/// Every event on the topic (of `sale`, when given), as [`Seen`].
pub fn on_topic(kafka: &KafkaSettings, sale: Option<SaleKey>) -> anyhow::Result<HashMap<String, Seen>> {
    on_topic_from(kafka, sale, Start::Beginning)
}

/// [`on_topic`], reading from `start`.
pub fn on_topic_from(
    kafka: &KafkaSettings,
    sale: Option<SaleKey>,
    start: Start<'_>,
) -> anyhow::Result<HashMap<String, Seen>> {
    let topic = Topics::new(kafka).events;
    let mut seen: HashMap<String, Seen> = HashMap::new();
    read_to_end(kafka, &topic, start, Duration::from_secs(300), |_, message| {
        // Only what is needed to tell events apart: a record that is not an
        // event of ours is not this check's business.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Head {
            event_id: String,
            activity_id: i64,
            sku_id: i64,
            /// Absent from events written before quantities: one unit.
            quantity: Option<u32>,
        }
        let Some(head) = message.payload().and_then(|p| serde_json::from_slice::<Head>(p).ok()) else {
            return Ok(true);
        };
        if sale.is_none_or(|s| (s.activity.get(), s.sku.get()) == (head.activity_id, head.sku_id)) {
            let first =
                Seen { at: (message.partition(), message.offset()), copies: 0, quantity: head.quantity.unwrap_or(1) };
            seen.entry(head.event_id).or_insert(first).copies += 1;
        }
        Ok(true)
    })?;
    Ok(seen)
}

/// Compares what the orders call for with what the topic holds.
fn judge(sale: SaleKey, wanted: &[Expected], seen: &HashMap<String, Seen>) -> Verdict {
    let mut verdict = Verdict {
        activity_id: sale.activity.get(),
        sku_id: sale.sku.get(),
        expected: wanted.len(),
        ..Verdict::default()
    };
    let mut by_order: BTreeMap<&str, Vec<Option<Position>>> = BTreeMap::new();
    for want in wanted {
        let position = seen.get(&want.event.event_id).map(|event| {
            verdict.delivered += 1;
            verdict.repeats += event.copies - 1;
            if i64::from(event.quantity) != i64::from(want.event.quantity) {
                verdict.wrong_quantity.push(want.event.event_id.clone());
            }
            event.at
        });
        if position.is_none() {
            if want.pending {
                verdict.pending += 1;
            } else {
                verdict.missing_count += 1;
                if verdict.missing.len() < 100 {
                    verdict.missing.push(want.event.event_id.clone());
                }
            }
        }
        // `wanted` lists each order's events in the order they happened.
        by_order.entry(&want.event.order_id).or_default().push(position);
    }
    verdict.orders = by_order.len();
    for (order, positions) in &by_order {
        let delivered: Vec<Position> = positions.iter().flatten().copied().collect();
        let in_order = delivered.windows(2).all(|pair| pair[0].0 == pair[1].0 && pair[0].1 < pair[1].1);
        if !in_order {
            verdict.out_of_order.push((*order).to_owned());
        }
    }
    let known: std::collections::HashSet<&str> = wanted.iter().map(|w| w.event.event_id.as_str()).collect();
    verdict.unexplained = seen.keys().filter(|id| !known.contains(id.as_str())).cloned().collect();
    verdict.unexplained.sort();
    verdict.complete = verdict.missing_count == 0
        && verdict.out_of_order.is_empty()
        && verdict.unexplained.is_empty()
        && verdict.wrong_quantity.is_empty();
    verdict
}

fn print(verdict: &Verdict) {
    println!(
        "sale {}:{}  {} orders, {} events expected",
        verdict.activity_id, verdict.sku_id, verdict.orders, verdict.expected
    );
    println!("  on the topic     {} ({} repeated copies)", verdict.delivered, verdict.repeats);
    println!("  pending (relay)  {}", verdict.pending);
    println!("  missing          {}", verdict.missing_count);
    for id in &verdict.missing {
        println!("    {id}");
    }
    if !verdict.out_of_order.is_empty() {
        println!("  out of order     {}: {}", verdict.out_of_order.len(), verdict.out_of_order.join(", "));
    }
    if !verdict.unexplained.is_empty() {
        println!("  unexplained      {}: {}", verdict.unexplained.len(), verdict.unexplained.join(", "));
    }
    if !verdict.wrong_quantity.is_empty() {
        println!("  wrong quantity   {}: {}", verdict.wrong_quantity.len(), verdict.wrong_quantity.join(", "));
    }
    println!("{}", if verdict.complete { "COMPLETE" } else { "INCOMPLETE" });
}

#[cfg(test)]
mod tests {
    use super::*;
    use seckill_shared::db::outbox::EventRow;

    fn want(order: &str, kind: &str, pending: bool) -> Expected {
        let event = EventRow {
            event_id: format!("{order}:{kind}"),
            kind: kind.into(),
            order_id: order.into(),
            activity_id: 1,
            sku_id: 2,
            round: 1,
            user_id: 7,
            reason: None,
            occurred_at: chrono::Utc::now(),
            request_id: None,
            traceparent: None,
            payment_id: None,
            redrive_of: None,
            quantity: 1,
        };
        Expected { event, pending }
    }

    #[test]
    fn the_verdict_names_what_is_missing_late_out_of_order_or_unexplained() {
        let sale = SaleKey::from_raw(1, 2).unwrap();
        let wanted = [
            want("a", "CREATED", false),
            want("a", "PAID", false),
            want("b", "CREATED", true),
            want("c", "CREATED", false),
        ];
        let at = |p, o, copies| Seen { at: (p, o), copies, quantity: 1 };
        for (seen, complete, why) in [
            (
                vec![("a:CREATED", at(0, 1, 1)), ("a:PAID", at(0, 5, 2)), ("c:CREATED", at(1, 1, 1))],
                true,
                "all there, one repeated, one pending",
            ),
            (vec![("a:CREATED", at(0, 1, 1)), ("c:CREATED", at(1, 1, 1))], false, "a:PAID missing"),
            (
                vec![("a:CREATED", at(0, 9, 1)), ("a:PAID", at(0, 5, 1)), ("c:CREATED", at(1, 1, 1))],
                false,
                "a's events out of order",
            ),
            (
                vec![("a:CREATED", at(0, 1, 1)), ("a:PAID", at(1, 5, 1)), ("c:CREATED", at(1, 1, 1))],
                false,
                "a's events in two partitions",
            ),
            (
                vec![
                    ("a:CREATED", at(0, 1, 1)),
                    ("a:PAID", at(0, 5, 1)),
                    ("c:CREATED", at(1, 1, 1)),
                    ("z:CREATED", at(1, 2, 1)),
                ],
                false,
                "an event no order explains",
            ),
            (
                vec![
                    ("a:CREATED", at(0, 1, 1)),
                    ("a:PAID", Seen { quantity: 2, ..at(0, 5, 1) }),
                    ("c:CREATED", at(1, 1, 1)),
                ],
                false,
                "a:PAID says 2 units of an order of 1",
            ),
        ] {
            let seen: HashMap<String, Seen> = seen.into_iter().map(|(id, v)| (id.to_owned(), v)).collect();
            let verdict = judge(sale, &wanted, &seen);
            assert_eq!(verdict.complete, complete, "{why}: {verdict:?}");
            assert_eq!(verdict.pending, 1, "{why}: b is the relay's to send");
        }
        let verdict = judge(sale, &wanted, &HashMap::new());
        assert_eq!((verdict.missing_count, verdict.missing.len(), verdict.orders), (3, 3, 3));
    }
}
