//! What a pay, a cancel or a payment notification answers when the order's
//! state refuses it: the buyer's and the provider's routes both answer a
//! [`PaymentError`] so.

use super::Refused;
use crate::error_codes::ErrorCode;
use crate::ledger::PaymentError;
use crate::lookup::LookupError;

/// What `error` answers.
pub(super) fn refused(error: &PaymentError) -> Refused {
    match error {
        PaymentError::NotFound | PaymentError::Lookup(LookupError::NotFound) => {
            Refused::new(ErrorCode::OrderNotFound, "order not found")
        }
        PaymentError::Pending => {
            Refused::new(ErrorCode::OrderPending, "the order is still being placed; try again in a moment")
                .retry_after(1)
        }
        PaymentError::NotOwner => Refused::new(ErrorCode::Forbidden, "the order is another user's"),
        PaymentError::AlreadyPaid => Refused::new(ErrorCode::AlreadyPaid, "the order is already paid"),
        PaymentError::PaymentConflict(_) => {
            Refused::new(ErrorCode::PaymentConflict, "this payment id was recorded for another order")
        }
        PaymentError::Failed(reason) => Refused::new(
            ErrorCode::OrderFailed,
            format!("the order failed ({reason}); there is nothing to pay or cancel"),
        ),
        PaymentError::Lookup(_) | PaymentError::Db(_) => {
            Refused::new(ErrorCode::TryAgain, super::request::TRY_AGAIN).caused_by(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_of_a_payment_has_its_contract_code() {
        for (error, code) in [
            (PaymentError::NotFound, "ORDER_NOT_FOUND"),
            (PaymentError::Pending, "ORDER_PENDING"),
            (PaymentError::NotOwner, "FORBIDDEN"),
            (PaymentError::AlreadyPaid, "ALREADY_PAID"),
            (PaymentError::PaymentConflict("p".into()), "PAYMENT_CONFLICT"),
            (PaymentError::Failed("NO_DB_STOCK".into()), "ORDER_FAILED"),
            (PaymentError::Db(sqlx::Error::PoolTimedOut), "TRY_AGAIN"),
        ] {
            assert_eq!(refused(&error).body().code.as_str(), code);
        }
    }
}
