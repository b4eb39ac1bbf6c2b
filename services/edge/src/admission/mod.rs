//! The edge's side of a sale's waiting room: admission tokens signed with
//! the key every edge shares ([`token`]), the proof-of-work challenge of a
//! join ([`challenge`]), and the admission passes every edge runs
//! ([`ticker`]). The room itself lives in Redis (`seckill_shared::stock::queue`).

pub mod challenge;
pub mod ticker;
pub mod token;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Signs and checks what the edges hand out: admission tokens and
/// challenges, each under a prefix of its own so one is never taken for
/// the other.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
}

impl Signer {
    /// A signer with `key` (`admission.signing_key`); with none, a random
    /// key of this process alone: its tokens pass only at this edge.
    pub fn new(key: Option<&str>) -> Self {
        match key {
            Some(key) => Self { key: key.as_bytes().to_vec() },
            None => {
                tracing::warn!(
                    "admission.signing_key is not set: admission tokens and challenges of this edge pass at this edge only"
                );
                Self { key: rand::random::<[u8; 32]>().to_vec() }
            }
        }
    }

    fn mac(&self, payload: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(payload.as_bytes());
        mac
    }

    /// `payload` and its signature, `payload.hex`.
    pub fn sign(&self, payload: &str) -> String {
        format!("{payload}.{}", hex::encode(self.mac(payload).finalize().into_bytes()))
    }

    /// The payload of a signed text whose signature is this key's
    /// (compared in constant time).
    pub fn verify<'a>(&self, signed: &'a str) -> Option<&'a str> {
        let (payload, signature) = signed.rsplit_once('.')?;
        let signature = hex::decode(signature).ok()?;
        self.mac(payload).verify_slice(&signature).ok().map(|()| payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_keys_signature_passes() {
        let signer = Signer::new(Some("k".repeat(32).as_str()));
        let signed = signer.sign("a.b.c");
        assert_eq!(signer.verify(&signed), Some("a.b.c"));
        let other = Signer::new(Some("o".repeat(32).as_str()));
        assert_eq!(other.verify(&signed), None);
        assert_eq!(signer.verify(&signed.replace("a.b", "a.x")), None);
        assert_eq!(signer.verify("a.b.c.zz"), None);
    }
}
