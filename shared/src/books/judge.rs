//! The books' judgement: the invariant's checks on a report, each
//! violation naming its terms and figures — pure, so every term's check is
//! tested on reports made in code.

use super::Report;

impl Report {
    /// Units held: left in Redis, sold (awaiting payment or paid), and in
    /// flight. Equals `total_stock` when the books balance.
    pub fn balance(&self) -> i64 {
        self.redis_remaining + self.units_created + self.units_paid + self.units_in_flight
    }

    /// Runs the checks again; with `require_drained`, anything still in
    /// flight is a violation too.
    pub fn judge(&mut self, require_drained: bool) {
        self.violations = check(self, require_drained);
        self.consistent = self.violations.is_empty();
    }
}

/// The invariant's checks, each violation naming its terms and figures.
pub fn check(r: &Report, require_drained: bool) -> Vec<String> {
    let mut violations = stock_checks(r);
    violations.extend(flow_checks(r));
    violations.extend(draw_checks(r));
    if require_drained && !r.drained() {
        violations.push(format!(
            "not drained: orders_in_flight {}, order lag {:?}, compensator lag {:?}, events pending {}, cancels pending {}",
            r.orders_in_flight, r.order_lag, r.compensator_lag, r.events_pending, r.cancels_pending
        ));
    }
    violations
}

/// The round and its units: the warm-up finished, Redis and PostgreSQL on
/// one round, every unit accounted for, never oversold.
fn stock_checks(r: &Report) -> Vec<String> {
    let mut violations = Vec::new();
    if let Some(warmup) = &r.unfinished_warmup {
        violations.push(format!(
            "warm-up {} is half done ({}): repeat it with the same id (warmupId, or seckillctl warmup --id {}) to finish it",
            warmup.warmup_id, warmup.step, warmup.warmup_id
        ));
    }
    if !r.redis.exists {
        violations.push("redis has no such sale (expired, never warmed, or Redis lost its data)".to_owned());
    } else if r.redis.total != r.total_stock || i64::from(r.round) != r.redis.round {
        violations.push(format!(
            "redis total/round {}/{} != postgresql total/round {}/{}",
            r.redis.total, r.redis.round, r.total_stock, r.round
        ));
    }
    let balance = r.balance();
    if balance != r.total_stock {
        violations.push(format!(
            "total_stock {} != redis_remaining {} + units_created {} + units_paid {} + units_in_flight {} (= {balance}; redis off by {}){}",
            r.total_stock,
            r.redis_remaining,
            r.units_created,
            r.units_paid,
            r.units_in_flight,
            balance - r.total_stock,
            match r.created_unknown_to_redis {
                Some(lost) if lost > 0 => format!(
                    "; {lost} CREATED or PAID orders are unknown to Redis: deductions it acknowledged and lost, whose units it counted again"
                ),
                _ => String::new(),
            }
        ));
    }
    if r.units_created + r.units_paid > r.total_stock {
        violations.push(format!(
            "oversold: units_created {} + units_paid {} > total_stock {}",
            r.units_created, r.units_paid, r.total_stock
        ));
    }
    if r.db_remaining != r.total_stock - r.units_created - r.units_paid {
        violations.push(format!(
            "db_remaining {} != total_stock {} - units_created {} - units_paid {}",
            r.db_remaining, r.total_stock, r.units_created, r.units_paid
        ));
    }
    violations
}

/// What flowed through the round: one live order per user, nothing parked,
/// every payment and event, every unit given back or compensated.
fn flow_checks(r: &Report) -> Vec<String> {
    let mut violations = Vec::new();
    if r.duplicate_users > 0 {
        violations.push(format!("duplicate_users {} > 0", r.duplicate_users));
    }
    if r.users_over_limit > 0 {
        violations.push(format!(
            "users_over_limit {} > 0: their live orders hold more than the {} units one user may",
            r.users_over_limit, r.per_user_limit
        ));
    }
    if r.parked > 0 {
        violations.push(format!(
            "parked {} > 0: records no service could settle wait for an operator (seckillctl dlq parked)",
            r.parked
        ));
    }
    if r.orders_paid != r.payments_applied {
        violations.push(format!(
            "orders_paid {} != payments_applied {}: every PAID order was paid by one recorded payment",
            r.orders_paid, r.payments_applied
        ));
    }
    // A PAID or CANCELLED order was CREATED first: two events each.
    let expected_events = r.orders_created
        + r.orders_failed
        + 2 * (r.orders_paid + r.orders_cancelled)
        + r.orders_paid_late
        + r.refund_events;
    // The order service produces the CREATED events of the orders it
    // wrote itself; every other event has its outbox row.
    if r.events + r.events_created_directly != expected_events {
        violations.push(format!(
            "order events {} (outbox) + {} (CREATED by the order service) != orders_created {} + orders_failed {} + 2 × (orders_paid {} + orders_cancelled {}) + orders_paid_late {} + refund_events {}: every order has one event per state, every refund due one",
            r.events, r.events_created_directly, r.orders_created, r.orders_failed, r.orders_paid, r.orders_cancelled, r.orders_paid_late, r.refund_events
        ));
    }
    if r.returned != r.cancelled_accepted {
        violations
            .push(format!("returned {} != cancelled orders redis had accepted {}", r.returned, r.cancelled_accepted));
    }
    if r.compensated + r.written_off != r.failed_accepted {
        violations.push(format!(
            "compensated {} + written_off {} != failed orders redis had accepted {}",
            r.compensated, r.written_off, r.failed_accepted
        ));
    }
    violations
}

/// A draw's: no order used a right the draw never gave, and every entry is
/// drawn once (a winner, or on the waitlist) with nothing beyond.
fn draw_checks(r: &Report) -> Vec<String> {
    let Some(draw) = &r.draw else {
        return Vec::new();
    };
    let mut violations = Vec::new();
    if draw.claimed > draw.winners + draw.promoted {
        violations.push(format!(
            "draw: rights used {} > winners {} + promoted {}: an order used a right the draw never gave",
            draw.claimed, draw.winners, draw.promoted
        ));
    }
    if draw.winners + draw.promoted > draw.entries {
        violations
            .push(format!("draw: winners {} + promoted {} > entries {}", draw.winners, draw.promoted, draw.entries));
    }
    violations
}
