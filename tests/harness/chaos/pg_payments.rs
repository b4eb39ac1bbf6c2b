//! The payment scenario of `make chaos-pg`: signed payment notifications
//! for some orders and the buyers' cancels for the others, each sent until
//! it has a final answer (as a provider retries a 503), while the primary
//! is killed; then every 200 is looked for in the books.

use super::pg::{HaSale, PgOutcome};
use super::pg_faults::{NodeProxies, PgFault, Watch};
use crate::http::{signed_now, Client};
use crate::pg_ha;
use futures::StreamExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Each order's final answer, and the answers it heard before.
pub struct Answers {
    /// (order id, final status, the answers before it) for the payments.
    pub paid: Vec<(String, u16, Vec<u16>)>,
    /// The same for the cancels.
    pub cancelled: Vec<(String, u16, Vec<u16>)>,
}

/// The buyer of each of `orders`, as the order service wrote them.
pub async fn buyers(ha: &HaSale, orders: &[String]) -> Vec<(String, i64)> {
    let rows: Vec<(String, i64)> = sqlx::query_as("SELECT order_id, user_id FROM orders WHERE order_id = ANY($1)")
        .bind(orders)
        .fetch_all(&ha.test.db)
        .await
        .expect("the orders' buyers");
    assert_eq!(rows.len(), orders.len(), "every order has its row");
    rows
}

/// Pays the first `paying` of `orders` (one notification each) and cancels
/// the rest (as their buyers), 4 at a time each; `done` counts the final
/// answers as they come.
pub async fn pay_and_cancel(client: &Client, orders: &[(String, i64)], paying: usize, done: &AtomicUsize) -> Answers {
    let pay = futures::stream::iter(orders[..paying].iter().map(|(order, _)| order.clone()))
        .map(|order| {
            let client = client.clone();
            async move {
                let body = serde_json::json!({"paymentId": format!("pay-{order}"), "orderId": order,
                    "status": "SUCCEEDED", "amount": 9900, "currency": "CNY"})
                .to_string();
                let signature = signed_now(&body);
                let headers = [("seckill-signature", signature.as_str()), ("content-type", "application/json")];
                let (status, before) = super::pg::until_final(&client, "/api/payments/notify", &body, &headers).await;
                done.fetch_add(1, Ordering::Relaxed);
                (order, status, before)
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<_>>();
    let cancel = futures::stream::iter(orders[paying..].iter().cloned())
        .map(|(order, user)| {
            let client = client.clone();
            async move {
                let body = serde_json::json!({ "userId": user }).to_string();
                let path = format!("/api/seckill/order/{order}/cancel");
                let headers = [("content-type", "application/json")];
                let (status, before) = super::pg::until_final(&client, &path, &body, &headers).await;
                done.fetch_add(1, Ordering::Relaxed);
                (order, status, before)
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<_>>();
    let (paid, cancelled) = tokio::join!(pay, cancel);
    Answers { paid, cancelled }
}

/// What the books hold of the answers.
pub async fn judge(ha: &HaSale, accepted: &[String], answers: &Answers) -> PgOutcome {
    let db = &ha.test.db;
    let mut not_recorded = 0;
    for (order, status, _) in &answers.paid {
        if *status == 200 {
            let applied: Option<String> = sqlx::query_scalar("SELECT outcome FROM payments WHERE payment_id = $1")
                .bind(format!("pay-{order}"))
                .fetch_optional(db)
                .await
                .expect("the ledger");
            let paid: Option<String> = sqlx::query_scalar("SELECT status FROM orders WHERE order_id = $1")
                .bind(order)
                .fetch_optional(db)
                .await
                .expect("the order");
            if applied.as_deref() != Some("APPLIED") || paid.as_deref() != Some("PAID") {
                not_recorded += 1;
            }
        }
    }
    for (order, status, _) in &answers.cancelled {
        let row: Option<String> = sqlx::query_scalar("SELECT status FROM orders WHERE order_id = $1")
            .bind(order)
            .fetch_optional(db)
            .await
            .expect("the order");
        if *status == 200 && row.as_deref() != Some("CANCELLED") {
            not_recorded += 1;
        }
    }
    let finals = |list: &[(String, u16, Vec<u16>)], want: u16| list.iter().filter(|(_, s, _)| *s == want).count();
    let mut other: std::collections::BTreeMap<u16, usize> = std::collections::BTreeMap::new();
    for (_, status, _) in answers.paid.iter().chain(&answers.cancelled).filter(|(_, s, _)| *s != 200) {
        *other.entry(*status).or_default() += 1;
    }
    let mut retried: std::collections::BTreeMap<u16, usize> = std::collections::BTreeMap::new();
    for status in answers.paid.iter().chain(&answers.cancelled).flat_map(|(_, _, before)| before) {
        *retried.entry(*status).or_default() += 1;
    }
    let payments: i64 =
        sqlx::query_scalar("SELECT count(*) FROM payments WHERE activity_id = $1 AND outcome = 'APPLIED'")
            .bind(ha.sale.activity.get())
            .fetch_one(db)
            .await
            .expect("the ledger");
    PgOutcome {
        payments,
        rows: ha.rows(&["CREATED", "PAID", "CANCELLED"]).await,
        events: ha.created_events(accepted.len()).await,
        broken_202: ha.broken(accepted).await,
        not_recorded_200: not_recorded,
        notes: format!(
            "{} payments and {} cancels answered 200 in the end (other final answers {other:?}); answers on the \
             way, each asked again: {retried:?} (0: no answer)",
            finals(&answers.paid, 200),
            finals(&answers.cancelled, 200)
        ),
        ..PgOutcome::default()
    }
}

/// Orders CREATED, then payments for most and cancels for the rest while
/// the primary is killed, frozen or cut off (`fault`): every 200 is in the
/// books afterwards.
pub async fn payments_through(name: &'static str, orders: i64, fault: PgFault) -> PgOutcome {
    let proxies = if fault == PgFault::Cut { Some(NodeProxies::start().await) } else { None };
    let ha = HaSale::start_via(orders, 3_600, proxies.as_ref()).await;
    let accepted = ha.buy(orders as u64, 0).await;
    ha.wait_rows(&["CREATED"], accepted.len() as i64).await;
    let client = Client::new(ha.pipeline.url.clone());
    let buyers = buyers(&ha, &accepted).await;
    let paying = accepted.len() * 2 / 3;
    // The primary killed once a quarter of the payments and cancels have
    // their answer: the rest meet the failover.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let node = pg_ha::primary().expect("a primary");
    let paid_sql = format!("SELECT count(*) FROM payments WHERE activity_id = {}", ha.sale.activity);
    let striker = async {
        let quarter = accepted.len() / 4;
        while done.load(std::sync::atomic::Ordering::Relaxed) < quarter {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let strike = || fault.strike(&node, proxies.as_ref()).timed();
        let (struck, watch) = Watch::around(&ha.test.db, paid_sql, strike).await;
        let (seen, relayed) = watch.seen().await;
        (struck, seen, relayed)
    };
    let (answers, (struck, seen, relayed)) = tokio::join!(pay_and_cancel(&client, &buyers, paying, &done), striker);
    let unfinished: Vec<_> = answers.paid.iter().chain(&answers.cancelled).filter(|(_, s, _)| *s != 200).collect();
    assert!(
        unfinished.is_empty(),
        "{name}: every payment and cancel ends 200 (asked again after a 503): {unfinished:?}"
    );
    ha.wait_writable().await;
    let outcome = judge(&ha, &accepted, &answers).await;
    struck.end();
    pg_ha::wait_healthy(Duration::from_secs(180)).await;
    let back = super::pg::came_back_with_every_row(&ha, &node).await;
    let outcome = PgOutcome {
        name,
        accepted: accepted.len(),
        first_write: seen,
        first_event: relayed,
        notes: format!("{node} {} (the primary); {}; {back}", fault.verb(), outcome.notes),
        ..outcome
    };
    ha.finish().await;
    outcome
}
