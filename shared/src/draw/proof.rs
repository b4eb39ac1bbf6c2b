//! What makes a draw checkable by anyone, with no server: the entry list
//! as published, its digest, the seed's commitment and the ranking.
//!
//! - The list: one line per entry, the entrant's user id in decimal,
//!   ascending, each line ended by `\n` (`seckillctl draw export` writes
//!   it; the edge builds the same bytes at the draw).
//! - Its digest: SHA-256 of those bytes, hex (`sha256sum FILE`).
//! - The commitment: SHA-256 of the seed's text, hex (`printf %s SEED |
//!   sha256sum`), published from the warm-up on, before any entry.
//! - The ranking: every entry by HMAC-SHA256 keyed with `SEED:DIGEST` —
//!   the seed's text, a colon, the entry list's digest — over the user
//!   id's text, hex, ascending (`printf %s USER | openssl dgst -sha256
//!   -hmac "SEED:DIGEST"`); ties, which 256 bits make all but impossible,
//!   by user id. The first entries win, as many as the units left at the
//!   draw can serve; the rest are the waitlist, in this order.
//!
//! A seed chosen after the entries were seen would not match the
//! commitment; an entry added, removed or changed after the draw changes
//! the digest. And the order depends on the whole frozen list: whoever
//! learns the seed before the draw (it sits in Redis until then) still
//! cannot rank anyone — one entry more or less reorders everyone — so
//! cannot pick in advance which of their accounts would win.

use crate::domain::UserId;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The entry list's bytes, as published.
pub fn entry_list(users: &[UserId]) -> String {
    let mut sorted: Vec<i64> = users.iter().map(|u| u.get()).collect();
    sorted.sort_unstable();
    sorted.dedup();
    sorted.iter().map(|u| format!("{u}\n")).collect()
}

/// The users of a published list (`None`: a line is not a user id, or the
/// list is not in its published order).
pub fn parse_entry_list(text: &str) -> Result<Vec<UserId>, String> {
    let mut users = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let user = line
            .parse::<i64>()
            .ok()
            .and_then(|u| UserId::new(u).ok())
            .ok_or_else(|| format!("line {}: {line:?} is not a user id", n + 1))?;
        if users.last().is_some_and(|last: &UserId| last.get() >= user.get()) {
            return Err(format!("line {}: {user} is out of order (the list is ascending, each user once)", n + 1));
        }
        users.push(user);
    }
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the last line has no newline: not the list as published".into());
    }
    Ok(users)
}

/// SHA-256 of `bytes`, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// An entry's place-deciding key: HMAC-SHA256 keyed with `seed:digest`
/// (the frozen list's digest) over the user id, hex.
pub fn rank_key(seed: &str, digest: &str, user: UserId) -> String {
    let key = format!("{seed}:{digest}");
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
    mac.update(user.get().to_string().as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Every entry of the list whose digest is `digest` in its drawn order,
/// each with its key.
pub fn ranking(seed: &str, digest: &str, users: &[UserId]) -> Vec<(UserId, String)> {
    let mut ranked: Vec<(UserId, String)> = users.iter().map(|u| (*u, rank_key(seed, digest, *u))).collect();
    ranked.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.get().cmp(&b.0.get())));
    ranked
}

/// What a check of a draw found wrong (empty: nothing).
pub fn check(seed: &str, list: &str, commitment: &str, digest: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let seed_hash = sha256_hex(seed.as_bytes());
    if !seed_hash.eq_ignore_ascii_case(commitment) {
        wrong.push(format!(
            "the seed does not match the commitment: SHA-256(seed) = {seed_hash}, committed {commitment}"
        ));
    }
    let list_hash = sha256_hex(list.as_bytes());
    if !list_hash.eq_ignore_ascii_case(digest) {
        wrong.push(format!("the entry list is not the one drawn: SHA-256(list) = {list_hash}, published {digest}"));
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(ids: &[i64]) -> Vec<UserId> {
        ids.iter().map(|u| UserId::new(*u).unwrap()).collect()
    }

    #[test]
    fn the_list_is_ascending_once_each_and_reads_back() {
        let list = entry_list(&users(&[30, 4, 200, 4]));
        assert_eq!(list, "4\n30\n200\n");
        assert_eq!(parse_entry_list(&list).unwrap(), users(&[4, 30, 200]));
        assert!(parse_entry_list("30\n4\n").is_err(), "out of order");
        assert!(parse_entry_list("4\n4\n").is_err(), "twice");
        assert!(parse_entry_list("4\nx\n").is_err());
        assert!(parse_entry_list("4").is_err(), "no final newline");
        assert_eq!(parse_entry_list("").unwrap(), vec![]);
    }

    #[test]
    fn the_key_is_hmac_sha256_of_the_user_keyed_by_the_seed_and_the_digest() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let key = rank_key("seed", "d1", UserId::new(42).unwrap());
        let mut mac = Hmac::<Sha256>::new_from_slice(b"seed:d1").unwrap();
        mac.update(b"42");
        assert_eq!(key, hex::encode(mac.finalize().into_bytes()));
    }

    #[test]
    fn another_seed_or_another_list_is_caught() {
        let all = users(&(1..=50).collect::<Vec<_>>());
        let list = entry_list(&all);
        let (commitment, digest) = (sha256_hex(b"s1"), sha256_hex(list.as_bytes()));
        assert!(check("s1", &list, &commitment, &digest).is_empty());
        assert_eq!(check("s2", &list, &commitment, &digest).len(), 1, "a changed seed");
        let added = entry_list(&users(&(1..=51).collect::<Vec<_>>()));
        assert_eq!(check("s1", &added, &commitment, &digest).len(), 1, "an added entry");
        let (one, two) = (ranking("s1", &digest, &all), ranking("s2", &digest, &all));
        assert_eq!(one.len(), 50);
        assert_ne!(one, two, "another seed, another order");
        assert!(one.windows(2).all(|w| w[0].1 <= w[1].1));
    }

    /// Whoever knows the seed before the draw — and the entries so far —
    /// cannot tell the order: one entry more reorders the others, so
    /// nobody can keep only the accounts that would win. (Keyed by the seed
    /// alone, each entry's key was fixed from the warm-up on.)
    #[test]
    fn the_seed_alone_ranks_nobody() {
        let so_far = users(&(1..=50).collect::<Vec<_>>());
        let frozen = users(&(1..=51).collect::<Vec<_>>());
        let digest = |list: &[UserId]| sha256_hex(entry_list(list).as_bytes());
        let order = |ranked: Vec<(UserId, String)>| -> Vec<i64> {
            ranked.into_iter().map(|(u, _)| u.get()).filter(|u| *u <= 50).collect()
        };
        let predicted = order(ranking("s1", &digest(&so_far), &so_far));
        let drawn = order(ranking("s1", &digest(&frozen), &frozen));
        assert_ne!(predicted, drawn, "the 50 entries so far rank otherwise once a 51st entered");
        assert_ne!(predicted[..5], drawn[..5], "and the first five, the winners of five units, differ");
    }
}
