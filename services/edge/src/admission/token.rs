//! An admission token: the sale, round, user and ticket it admits and when
//! it expires, signed (`v1.A.S.round.user.ticket.expires_ms.hmac`). Any edge
//! with the shared key verifies it without a lookup; that it is used once
//! is Redis's (`lua/queue_claim.lua`).

use super::Signer;
use seckill_shared::domain::{SaleKey, UserId};

/// The header an order carries its token in.
pub const HEADER: &str = "seckill-admission";

/// What a token admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub sale: SaleKey,
    pub round: i64,
    pub user: UserId,
    pub ticket: String,
    pub expires_ms: i64,
}

/// Why a token was refused (the buyer hears 403 `ADMISSION_REQUIRED`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the admission token is not one this shop signed")]
    Forged,
    #[error("the admission token expired")]
    Expired,
    #[error("the admission token is for another sale or user")]
    Foreign,
}

impl Token {
    /// The token, signed.
    pub fn sign(&self, signer: &Signer) -> String {
        signer.sign(&format!(
            "v1.{}.{}.{}.{}.{}.{}",
            self.sale.activity,
            self.sale.sku,
            self.round,
            self.user.get(),
            self.ticket,
            self.expires_ms
        ))
    }

    /// The token `raw` if this shop signed it, it is unexpired at `now_ms`
    /// and admits `user` to `sale`.
    pub fn verify(signer: &Signer, raw: &str, sale: SaleKey, user: UserId, now_ms: i64) -> Result<Self, Refused> {
        let payload = signer.verify(raw).ok_or(Refused::Forged)?;
        let parts: Vec<&str> = payload.split('.').collect();
        let [version, activity, sku, round, owner, ticket, expires] = parts[..] else {
            return Err(Refused::Forged);
        };
        let number = |text: &str| text.parse::<i64>().map_err(|_| Refused::Forged);
        if version != "v1" {
            return Err(Refused::Forged);
        }
        let token = Token {
            sale: SaleKey::from_raw(number(activity)?, number(sku)?).map_err(|_| Refused::Forged)?,
            round: number(round)?,
            user: UserId::new(number(owner)?).map_err(|_| Refused::Forged)?,
            ticket: ticket.to_owned(),
            expires_ms: number(expires)?,
        };
        if token.sale != sale || token.user != user {
            return Err(Refused::Foreign);
        }
        if token.expires_ms <= now_ms {
            return Err(Refused::Expired);
        }
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_admits_its_user_to_its_sale_until_it_expires() {
        let signer = Signer::new(Some("k".repeat(32).as_str()));
        let sale = SaleKey::from_raw(7, 9).unwrap();
        let user = UserId::new(42).unwrap();
        let token = Token { sale, round: 3, user, ticket: "7-9-ab".into(), expires_ms: 1_000 };
        let raw = token.sign(&signer);
        assert_eq!(Token::verify(&signer, &raw, sale, user, 999), Ok(token));
        assert_eq!(Token::verify(&signer, &raw, sale, user, 1_000), Err(Refused::Expired));
        assert_eq!(Token::verify(&signer, &raw, sale, UserId::new(43).unwrap(), 0), Err(Refused::Foreign));
        let other = SaleKey::from_raw(7, 8).unwrap();
        assert_eq!(Token::verify(&signer, &raw, other, user, 0), Err(Refused::Foreign));
        assert_eq!(Token::verify(&signer, &raw.replace(".42.", ".43."), sale, user, 0), Err(Refused::Forged));
    }
}
