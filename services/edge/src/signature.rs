//! The payment provider's signature on a notification, the scheme Stripe
//! uses: `Seckill-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
//! "<t>.<raw body>")>`. Several `v1` entries may be given (the provider
//! signs with an old and a new secret while it rotates them): one matching
//! is enough. A `t` farther than the tolerance from now, either way, is
//! refused, so a captured notification cannot be replayed later; the
//! comparison is constant-time (the MAC's own verify).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header's name.
pub const HEADER: &str = "seckill-signature";

/// Why a signature was refused (logged; the client hears only 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("no Seckill-Signature header")]
    Missing,
    #[error("the Seckill-Signature header is not t=<seconds>,v1=<hex>")]
    Malformed,
    #[error("the signature's time is {0} s away from now")]
    Stale(i64),
    #[error("no v1 signature matches")]
    Mismatch,
    #[error("payment notifications are not configured (SECKILL_PAYMENT_WEBHOOK_SECRET)")]
    NotConfigured,
}

/// Checks `header` (the value of [`HEADER`]) against `body` at `now`.
pub fn verify(secret: &[u8], header: Option<&str>, body: &[u8], now: i64, tolerance_secs: i64) -> Result<(), Refused> {
    let header = header.ok_or(Refused::Missing)?;
    let mut at = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => at = Some(value.parse::<i64>().map_err(|_| Refused::Malformed)?),
            Some(("v1", value)) => signatures.push(hex::decode(value).map_err(|_| Refused::Malformed)?),
            // Other schemes (a future v2) are not ours to judge.
            Some(_) => {}
            None => return Err(Refused::Malformed),
        }
    }
    let at = at.ok_or(Refused::Malformed)?;
    if signatures.is_empty() {
        return Err(Refused::Malformed);
    }
    let away = now.saturating_sub(at);
    if away.abs() > tolerance_secs {
        return Err(Refused::Stale(away));
    }
    let mac = signed_payload(secret, at, body);
    if signatures.iter().any(|signature| mac.clone().verify_slice(signature).is_ok()) {
        Ok(())
    } else {
        Err(Refused::Mismatch)
    }
}

/// The header a provider would send for `body` at `at` (tests, the demo's
/// stand-in provider).
pub fn sign(secret: &[u8], at: i64, body: &[u8]) -> String {
    let code = signed_payload(secret, at, body).finalize().into_bytes();
    format!("t={at},v1={}", hex::encode(code))
}

fn signed_payload(secret: &[u8], at: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(at.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"whsec_0123456789abcdef0123456789abcdef";
    const BODY: &[u8] = br#"{"paymentId":"pay_1","orderId":"1-1-1-ab","status":"SUCCEEDED"}"#;

    #[test]
    fn a_signature_made_with_the_secret_over_the_raw_body_passes() {
        let header = sign(SECRET, 1_000, BODY);
        assert_eq!(verify(SECRET, Some(&header), BODY, 1_000, 300), Ok(()));
        assert_eq!(verify(SECRET, Some(&header), BODY, 1_299, 300), Ok(()), "within the tolerance");
    }

    #[test]
    fn a_forged_altered_or_stale_notification_is_refused() {
        let header = sign(SECRET, 1_000, BODY);
        assert_eq!(verify(b"another secret", Some(&header), BODY, 1_000, 300), Err(Refused::Mismatch));
        let altered = br#"{"paymentId":"pay_1","orderId":"1-1-2-ab","status":"SUCCEEDED"}"#;
        assert_eq!(verify(SECRET, Some(&header), altered, 1_000, 300), Err(Refused::Mismatch));
        assert_eq!(verify(SECRET, Some(&header), BODY, 1_301, 300), Err(Refused::Stale(301)));
        assert_eq!(verify(SECRET, Some(&header), BODY, 699, 300), Err(Refused::Stale(-301)), "from the future");
        // The time is signed: moving it forward breaks the signature.
        let moved = header.replace("t=1000", "t=1200");
        assert_eq!(verify(SECRET, Some(&moved), BODY, 1_200, 300), Err(Refused::Mismatch));
        assert_eq!(verify(SECRET, None, BODY, 1_000, 300), Err(Refused::Missing));
        for malformed in ["", "v1=00", "t=1000", "t=x,v1=00", "t=1000,v1=zz", "garbage"] {
            assert_eq!(verify(SECRET, Some(malformed), BODY, 1_000, 300), Err(Refused::Malformed), "{malformed}");
        }
    }

    #[test]
    fn one_matching_signature_of_several_is_enough() {
        let good = sign(SECRET, 1_000, BODY);
        let old = sign(b"the secret before the rotation", 1_000, BODY);
        let both = format!("{old},{}", good.split_once(',').unwrap().1);
        assert_eq!(verify(SECRET, Some(&both), BODY, 1_000, 300), Ok(()));
    }
}
