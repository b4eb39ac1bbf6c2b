//! How many units one user may hold in a sale round, and one order.

use serde::{Deserialize, Serialize};

/// The most units one order, or one user in one round, may hold.
pub const MAX_QUANTITY: u32 = 100;

/// A round's limits (warm-up `perUserLimit`, `maxPerOrder`). One unit per
/// user, one per order when absent: a sale as before quantities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Units one user may hold in the round, over all their live orders.
    pub per_user_limit: u32,
    /// Units one order may hold (at most `per_user_limit`).
    pub max_per_order: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self { per_user_limit: 1, max_per_order: 1 }
    }
}

impl Limits {
    /// The limits a warm-up asked for: `max_per_order` defaults to the
    /// limit per user.
    pub fn asked(per_user_limit: Option<u32>, max_per_order: Option<u32>) -> Self {
        let per_user_limit = per_user_limit.unwrap_or(1);
        Self { per_user_limit, max_per_order: max_per_order.unwrap_or(per_user_limit) }
    }

    /// What is wrong with them, in words, if anything.
    pub fn invalid(&self) -> Option<String> {
        if !(1..=MAX_QUANTITY).contains(&self.per_user_limit) {
            return Some(format!("perUserLimit must be between 1 and {MAX_QUANTITY}, got {}", self.per_user_limit));
        }
        if !(1..=self.per_user_limit).contains(&self.max_per_order) {
            return Some(format!(
                "maxPerOrder must be between 1 and perUserLimit ({}), got {}",
                self.per_user_limit, self.max_per_order
            ));
        }
        None
    }
}

/// What one order holds: its units, and which of its user's places in the
/// round (0 to `per_user_limit − 1`; a limit of one has the one place 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    pub quantity: u32,
    pub slot: u32,
}

impl Holding {
    /// One unit in the one place: every order of a sale as before
    /// quantities.
    pub const ONE: Self = Self { quantity: 1, slot: 0 };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_per_order_defaults_to_the_limit_and_stays_within_it() {
        assert_eq!(Limits::asked(None, None), Limits::default());
        assert_eq!(Limits::asked(Some(3), None), Limits { per_user_limit: 3, max_per_order: 3 });
        assert_eq!(Limits::asked(Some(3), Some(2)).invalid(), None);
        for (limit, max) in [(0, None), (101, None), (2, Some(3)), (2, Some(0))] {
            assert!(Limits::asked(Some(limit), max).invalid().is_some(), "{limit} {max:?}");
        }
    }
}
