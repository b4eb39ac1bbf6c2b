//! A draw as its tests drive it: warmed up through the admin API or the
//! library, entered and read as a buyer would, its outcomes read from
//! `seckill.draw-events` as the shop's notifier reads them.

use crate::http::{Client, Reply};
use crate::{eventually, Running, TestEnv, ADMIN_TOKEN};
use hyper::Method;
use seckill_shared::domain::SaleKey;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Warms `sale` up with `stock` units sold by the draw `draw` (JSON),
/// through `edge`'s admin API (`extra`: more fields of the body): the
/// answer.
pub async fn warm_with_draw(edge: &Running, sale: SaleKey, stock: i64, draw: &str, extra: &str) -> Reply {
    let client = Client::new(edge.console_url());
    let body = format!(r#"{{"stock":{stock},"force":true,"draw":{draw}{extra}}}"#);
    let path = format!("/admin/sales/{}/{}", sale.activity, sale.sku);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let reply = client.send(Method::PUT, &path, Some(body.as_bytes()), &[("authorization", &auth)]).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply
}

/// A draw's JSON: entries from `opens` to `draw_at` seconds from now.
pub fn draw_json(opens: i64, draw_at: i64, claim_seconds: i64) -> String {
    let at = |s: i64| (chrono::Utc::now() + chrono::Duration::seconds(s)).to_rfc3339();
    format!(r#"{{"entriesOpenAt":"{}","drawAt":"{}","claimSeconds":{claim_seconds}}}"#, at(opens), at(draw_at))
}

pub async fn enter(client: &Client, sale: SaleKey, user: i64) -> Reply {
    enter_with(client, sale, user, None).await
}

/// An entry bringing `proof` (a challenge and its solution).
pub async fn enter_with(client: &Client, sale: SaleKey, user: i64, proof: Option<(&str, &str)>) -> Reply {
    let proof = proof.map(|(c, s)| format!(r#","challenge":"{c}","solution":"{s}""#)).unwrap_or_default();
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}{proof}}}"#, sale.activity, sale.sku);
    client.send(Method::POST, "/api/seckill/draw/entries", Some(body.as_bytes()), &[]).await
}

pub async fn read_draw(client: &Client, sale: SaleKey) -> Reply {
    client.get(&format!("/api/seckill/draw/{}/{}", sale.activity, sale.sku)).await
}

/// Waits until `sale`'s draw is made: the draw as published.
pub async fn drawn(client: &Client, sale: SaleKey) -> Value {
    eventually("the draw to be made", Duration::from_secs(60), || async {
        let reply = read_draw(client, sale).await;
        match reply.json["state"].as_str() {
            Some("DRAWN") => Ok(reply.json),
            _ => Err(reply.text),
        }
    })
    .await
}

/// Every record of `seckill.draw-events` of `sale` once `expected` distinct
/// events are there, as a notifier reads them: (payload, ce_type).
pub async fn outcomes(env: &TestEnv, sale: SaleKey, expected: usize) -> Vec<(Value, String)> {
    eventually("the draw's outcomes on the topic", Duration::from_secs(90), || async {
        let records = env.read_topic(&env.topics().draw_events, usize::MAX, Duration::from_secs(3)).await;
        let mine = of_sale(&records, sale);
        let distinct: BTreeSet<&str> = mine.iter().filter_map(|(v, _)| v["eventId"].as_str()).collect();
        if distinct.len() >= expected {
            Ok(mine)
        } else {
            Err(format!("{} of {expected} distinct outcomes", distinct.len()))
        }
    })
    .await
}

/// Warms `sale` up with `stock` units and `draw`, as the edge's admin API
/// would.
pub async fn warm(
    env: &TestEnv,
    sale: SaleKey,
    stock: i64,
    draw: seckill_shared::draw::Draw,
    force: bool,
) -> Result<seckill_shared::db::SaleRow, seckill_shared::sales::WarmupError> {
    env.run_warmup(&draw_request(sale, stock, draw, force)).await
}

/// The warm-up [`warm`] runs: a payment window of 900 s, one bucket.
pub fn draw_request(
    sale: SaleKey,
    stock: i64,
    draw: seckill_shared::draw::Draw,
    force: bool,
) -> seckill_shared::sales::WarmupRequest {
    seckill_shared::sales::WarmupRequest { draw: Some(draw), ..crate::sale::plain_warmup(sale, stock, force) }
}

/// The records of `records` (of `seckill.draw-events`) about `sale`:
/// (payload, ce_type).
pub fn of_sale(records: &[rdkafka::message::OwnedMessage], sale: SaleKey) -> Vec<(Value, String)> {
    use rdkafka::message::{Headers, Message};
    records
        .iter()
        .filter_map(|m| {
            let value: Value = serde_json::from_slice(m.payload()?).ok()?;
            let ce_type = m.headers()?.iter().find(|h| h.key == "ce_type")?.value?;
            (value["activityId"] == sale.activity.get() && value["skuId"] == sale.sku.get())
                .then(|| (value, String::from_utf8_lossy(ce_type).into_owned()))
        })
        .collect()
}

/// Each user's outcomes on the topic.
pub fn outcomes_by_user(events: &[(serde_json::Value, String)]) -> BTreeMap<i64, BTreeSet<String>> {
    let mut outcome_of: BTreeMap<i64, BTreeSet<String>> = Default::default();
    for (e, _) in events {
        outcome_of.entry(e["userId"].as_i64().unwrap()).or_default().insert(e["type"].as_str().unwrap().to_owned());
    }
    outcome_of
}
