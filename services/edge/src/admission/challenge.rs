//! The bot hurdle of a join: a proof of work. The edge hands out a signed
//! challenge bound to the user and sale, with an expiry
//! (`c1.A.S.user.nonce.expires_ms.bits.hmac`); the join carries it and a
//! solution whose SHA-256 of `challenge:solution` starts with `bits` zero
//! bits. Finding one costs about 2^bits hashes; checking it, one. That it
//! is used once is Redis's (`lua/queue_ticket.lua`).

use super::Signer;
use seckill_shared::domain::{SaleKey, UserId};
use sha2::{Digest, Sha256};

/// A challenge as handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub sale: SaleKey,
    pub user: UserId,
    /// 64 random bits, hex: what makes it usable once.
    pub nonce: String,
    pub expires_ms: i64,
    pub bits: u32,
}

/// Why a solution was refused (the buyer hears 403 `CHALLENGE_FAILED`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("a proof of work is required: GET /api/seckill/queue/challenge")]
    Missing,
    #[error("the challenge is not one this shop signed, or for another sale or user")]
    Forged,
    #[error("the challenge expired")]
    Expired,
    #[error("the solution does not solve the challenge")]
    Wrong,
}

impl Challenge {
    /// A new challenge for `user` in `sale`, valid `ttl_ms` from `now_ms`.
    pub fn new(sale: SaleKey, user: UserId, bits: u32, now_ms: i64, ttl_ms: i64) -> Self {
        Self { sale, user, nonce: format!("{:016x}", rand::random::<u64>()), expires_ms: now_ms + ttl_ms, bits }
    }

    /// The challenge, signed.
    pub fn sign(&self, signer: &Signer) -> String {
        signer.sign(&format!(
            "c1.{}.{}.{}.{}.{}.{}",
            self.sale.activity,
            self.sale.sku,
            self.user.get(),
            self.nonce,
            self.expires_ms,
            self.bits
        ))
    }

    /// The challenge `raw` if this shop signed it for `user` in `sale`, it
    /// is unexpired at `now_ms`, asks at least `bits` and `solution`
    /// solves it.
    pub fn check(
        signer: &Signer,
        raw: Option<&str>,
        solution: Option<&str>,
        (sale, user, bits): (SaleKey, UserId, u32),
        now_ms: i64,
    ) -> Result<Self, Refused> {
        let (raw, solution) = raw.zip(solution).ok_or(Refused::Missing)?;
        let payload = signer.verify(raw).ok_or(Refused::Forged)?;
        let parts: Vec<&str> = payload.split('.').collect();
        let ["c1", activity, sku, owner, nonce, expires, asked] = parts[..] else {
            return Err(Refused::Forged);
        };
        let number = |text: &str| text.parse::<i64>().map_err(|_| Refused::Forged);
        let challenge = Self {
            sale: SaleKey::from_raw(number(activity)?, number(sku)?).map_err(|_| Refused::Forged)?,
            user: UserId::new(number(owner)?).map_err(|_| Refused::Forged)?,
            nonce: nonce.to_owned(),
            expires_ms: number(expires)?,
            bits: asked.parse().map_err(|_| Refused::Forged)?,
        };
        if challenge.sale != sale || challenge.user != user || challenge.bits < bits {
            return Err(Refused::Forged);
        }
        if challenge.expires_ms <= now_ms {
            return Err(Refused::Expired);
        }
        if solution.len() > 64 || leading_zero_bits(raw, solution) < challenge.bits {
            return Err(Refused::Wrong);
        }
        Ok(challenge)
    }
}

/// The zero bits SHA-256(`challenge:solution`) starts with.
pub fn leading_zero_bits(challenge: &str, solution: &str) -> u32 {
    let digest = Sha256::new().chain_update(challenge).chain_update(":").chain_update(solution).finalize();
    let mut bits = 0;
    for byte in digest {
        bits += byte.leading_zeros();
        if byte != 0 {
            break;
        }
    }
    bits
}

/// A solution of `challenge` at `bits`: counts up from 0 (what the queue
/// page and the tests do; about 2^bits hashes).
pub fn solve(challenge: &str, bits: u32) -> String {
    (0u64..).map(|n| n.to_string()).find(|s| leading_zero_bits(challenge, s) >= bits).expect("a solution")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_solution_passes_and_each_bad_case_is_refused() {
        let signer = Signer::new(Some("k".repeat(32).as_str()));
        let sale = SaleKey::from_raw(7, 9).unwrap();
        let user = UserId::new(42).unwrap();
        let raw = Challenge::new(sale, user, 8, 0, 1_000).sign(&signer);
        let solution = solve(&raw, 8);
        let check = |raw: Option<&str>, solution: Option<&str>, now| {
            Challenge::check(&signer, raw, solution, (sale, user, 8), now)
        };
        assert!(check(Some(&raw), Some(&solution), 10).is_ok());
        assert_eq!(check(Some(&raw), None, 10), Err(Refused::Missing));
        assert_eq!(check(Some(&raw), Some(&solution), 1_000), Err(Refused::Expired));
        let wrong = (0u64..).map(|n| n.to_string()).find(|s| leading_zero_bits(&raw, s) < 8).unwrap();
        assert_eq!(check(Some(&raw), Some(&wrong), 10), Err(Refused::Wrong));
        let theirs = Challenge::new(sale, UserId::new(43).unwrap(), 8, 0, 1_000).sign(&signer);
        assert_eq!(check(Some(&theirs), Some(&solve(&theirs, 8)), 10), Err(Refused::Forged));
        let easy = Challenge::new(sale, user, 1, 0, 1_000).sign(&signer);
        assert_eq!(check(Some(&easy), Some(&solve(&easy, 1)), 10).err().unwrap_or(Refused::Forged), Refused::Forged);
    }
}
