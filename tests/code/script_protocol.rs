//! The scripts of `lua/` speak only what `shared/src/stock/protocol.rs`
//! defines: every code a script answers is named there (or is a count the
//! definition says it answers), every order status a script writes is an
//! `OrderStatus`, every ticket state a `TicketState`, and every value a
//! script writes has the fields its reader in `shared/src/stock/values.rs`
//! parses.

use crate::code_map::read;
use seckill_shared::domain::OrderStatus;
use seckill_shared::stock::protocol::{Answers, TicketState, ALL};

/// A script's code without its comments (`--` to the end of the line, when
/// not inside a string).
fn without_comments(lua: &str) -> String {
    lua.lines()
        .map(|line| {
            let mut quoted = None;
            for (at, c) in line.char_indices() {
                match (quoted, c) {
                    (None, '\'' | '"') => quoted = Some(c),
                    (Some(q), c) if c == q => quoted = None,
                    (None, '-') if line[at..].starts_with("--") => return &line[..at],
                    _ => {}
                }
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The integer right after `at` in `code` (spaces and one `{` or `'`
/// skipped), when one stands there whole.
fn integer_at(code: &str, at: usize) -> Option<i64> {
    let rest = code[at..].trim_start();
    let rest = rest.strip_prefix(['{', '\'']).map_or(rest, str::trim_start);
    let sign = usize::from(rest.starts_with('-'));
    let digits = rest[sign..].chars().take_while(char::is_ascii_digit).count();
    let end = rest[sign + digits..].chars().next();
    if digits == 0 || end.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
        return None;
    }
    rest[..sign + digits].parse().ok()
}

/// Every literal code a script answers: `return N`, `return {N, ...}`, and
/// an answer built as `... = {N, ...}`, `{N}` or a string `'N'`, `'N:...'`
/// (`lua/deduct.lua`'s entries).
fn codes_answered(lua: &str) -> Vec<i64> {
    let code = without_comments(lua);
    let mut found = Vec::new();
    for (at, _) in code.match_indices("return") {
        if let Some(n) = integer_at(&code, at + "return".len()) {
            found.push(n);
        }
    }
    for (at, _) in code.match_indices("= {").chain(code.match_indices("= '")) {
        if let Some(n) = integer_at(&code, at + 1) {
            found.push(n);
        }
    }
    // Redis's own reply passed on: DEL and PEXPIRE of one key answer 1
    // when they acted (0, when not, is answered by the script itself).
    for command in ["return redis.call('DEL', KEYS[1])", "return redis.call('PEXPIRE', KEYS[1]"] {
        if code.contains(command) {
            found.push(1);
        }
    }
    found.sort_unstable();
    found.dedup();
    found
}

/// What `answers` lacks of the `codes` its script answers.
fn unnamed(answers: &Answers, codes: &[i64]) -> Vec<i64> {
    codes
        .iter()
        .copied()
        .filter(|c| !answers.codes.iter().any(|(named, _, _)| named == c) && (*c < 0 || answers.otherwise.is_none()))
        .collect()
}

/// The codes `answers` names that are not among the `codes` its script
/// answers, as `CONSTANT = code`.
fn never_answered(answers: &Answers, codes: &[i64]) -> Vec<String> {
    answers
        .codes
        .iter()
        .filter(|(code, _, _)| !codes.contains(code))
        .map(|(c, name, _)| format!("{name} = {c}"))
        .collect()
}

/// The words in `code` right after each of `starts` and before `end`
/// (`'FAILED|` → `FAILED`), upper-case letters and `_` only.
fn words_between(code: &str, start: &str, end: char) -> Vec<String> {
    let mut found: Vec<String> = code
        .match_indices(start)
        .filter_map(|(at, _)| {
            let rest = &code[at + start.len()..];
            let word: String = rest.chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
            (!word.is_empty() && rest[word.len()..].starts_with(end)).then_some(word)
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

fn scripts() -> Vec<(String, String)> {
    let dir = seckill_e2e::repo_root().join("lua");
    let mut found: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".lua"))
        .map(|name| (name.clone(), read(&format!("lua/{name}"))))
        .collect();
    found.sort();
    found
}

#[test]
fn every_code_a_script_answers_is_defined_once_in_rust() {
    let scripts = scripts();
    assert!(scripts.len() >= 20, "{} scripts: the walk missed some", scripts.len());
    let mut wrong = Vec::new();
    for (name, lua) in &scripts {
        let Some(answers) = ALL.iter().find(|a| a.script == name.as_str()) else {
            wrong.push(format!("{name}: not in shared/src/stock/protocol.rs"));
            continue;
        };
        let missing = unnamed(answers, &codes_answered(lua));
        if !missing.is_empty() {
            wrong.push(format!("{name} answers {missing:?}, which protocol.rs does not name"));
        }
    }
    for answers in ALL {
        if !scripts.iter().any(|(name, _)| name == answers.script) {
            wrong.push(format!("protocol.rs defines {}, which lua/ does not hold", answers.script));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn every_order_status_and_ticket_state_a_script_writes_is_defined_in_rust() {
    let mut wrong = Vec::new();
    let (mut statuses, mut states_read) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for (name, lua) in scripts() {
        let code = without_comments(&lua);
        for status in words_between(&code, "'", '|') {
            statuses.insert(status.clone());
            if OrderStatus::parse(&status).is_none() {
                wrong.push(format!("{name} writes the order status {status}"));
            }
        }
        let states = ["'|", "set('", "state == '", "state ~= '"]
            .iter()
            .flat_map(|start| words_between(&code, start, if start.starts_with("'|") { '|' } else { '\'' }));
        for state in states {
            states_read.insert(state.clone());
            if TicketState::parse(&state).is_none() {
                wrong.push(format!("{name} writes or reads the ticket state {state}"));
            }
        }
    }
    // Floors: the scans find what the scripts are known to write (a scan
    // that found nothing would pass).
    assert!(statuses.len() >= 3, "order statuses the scripts write: {statuses:?} (the scan missed them)");
    assert!(states_read.len() >= 3, "ticket states the scripts use: {states_read:?} (the scan missed them)");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn a_code_or_a_state_the_definition_lacks_is_caught() {
    let deduct = ALL.iter().find(|a| a.script == "deduct.lua").unwrap();
    // deduct.lua gains a code -11 its table does not name.
    let lua =
        "-- return -12 in a comment\nif x then\n  answers[i] = {-11, round}\n  return answers\nend\nreturn {1, 2}";
    assert_eq!(codes_answered(lua), [-11, 1]);
    assert_eq!(unnamed(deduct, &codes_answered(lua)), [-11]);
    // The same code as one of deduct.lua's string entries.
    let lua = "answers[i] = '-12:' .. n\nanswers[i] = '-5'\nanswers[i] = '1:' .. id";
    assert_eq!(codes_answered(lua), [-12, -5, 1]);
    assert_eq!(unnamed(deduct, &codes_answered(lua)), [-12]);
    // A count is fine where the script answers counts; a negative is not.
    // A code the table names that the script no longer answers.
    let lua = "answers[i] = {1, id}\nanswers[i] = {-1}\nreturn answers";
    assert!(never_answered(deduct, &codes_answered(lua)).contains(&"SOLD_OUT = -4".to_owned()));
    let lend = ALL.iter().find(|a| a.script == "lend.lua").unwrap();
    assert_eq!(unnamed(lend, &[7, 0, -1, -3]), [-3]);
    // A new status or ticket state is read out of the writes.
    let code = "redis.call('HSET', k, id, 'REFUNDED|' .. user)\nset('Z', now)\nv = user .. '|Q|0'";
    assert_eq!(words_between(code, "'", '|'), ["REFUNDED"]);
    assert_eq!(words_between(code, "set('", '\''), ["Z"]);
    assert_eq!(words_between(code, "'|", '|'), ["Q"]);
}

#[test]
fn every_code_the_definition_names_is_answered_by_its_script() {
    let mut never = Vec::new();
    for (name, lua) in scripts() {
        let Some(answers) = ALL.iter().find(|a| a.script == name.as_str()) else { continue };
        never.extend(never_answered(answers, &codes_answered(&lua)).into_iter().map(|c| format!("{name}: {c}")));
    }
    assert!(never.is_empty(), "named in protocol.rs, never answered by its script: {never:#?}");
}

/// The reply words a script answers first in its reply (`reply('WORD'`,
/// `return {'WORD'`).
fn reply_words(lua: &str) -> Vec<String> {
    let code = without_comments(lua);
    let mut words = words_between(&code, "reply('", '\'');
    words.extend(words_between(&code, "return {'", '\''));
    words.sort();
    words.dedup();
    words
}

/// The reply words a Rust reader matches (`"WORD" =>`, `"WORD" if`).
fn matched_words(rust: &str) -> Vec<String> {
    let mut words: Vec<String> = rust
        .match_indices('"')
        .filter_map(|(at, _)| {
            let rest = &rust[at + 1..];
            let word: String = rest.chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
            let after = rest[word.len()..].strip_prefix('"')?.trim_start();
            (!word.is_empty() && (after.starts_with("=>") || after.starts_with("if "))).then_some(word)
        })
        .collect();
    words.sort();
    words.dedup();
    words
}

/// The waiting room's and the draw's scripts answer words, which their
/// readers match as text: each word a script answers is matched, and each
/// word matched is one the script answers.
#[test]
fn the_rooms_reply_words_are_matched_both_ways() {
    for (script, reader) in [
        ("lua/queue_ticket.lua", "shared/src/stock/queue/ticket.rs"),
        ("lua/queue_draw.lua", "shared/src/draw/entries.rs"),
    ] {
        let (answered, matched) = (reply_words(&read(script)), matched_words(&read(reader)));
        assert!(answered.len() >= 8, "{script}'s replies found: {answered:?}");
        assert_eq!(answered, matched, "{script} answers (left) what {reader} matches (right)");
    }
}

#[test]
fn a_reply_word_on_one_side_only_is_caught() {
    let lua = "if x then\n  return reply('WON', t)\nend\nreturn {'NO_DRAW', ''}\n-- reply('OLD')";
    assert_eq!(reply_words(lua), ["NO_DRAW", "WON"]);
    let rust = r#"match s { "WON" => 1, "NO_DRAW" if x => 2, "LOST" => 3, other => panic!("{other}") }"#;
    assert_eq!(matched_words(rust), ["LOST", "NO_DRAW", "WON"]);
}

/// The fields of the value a concatenation writes, read from where it
/// starts to the end of its line: one more than the `|` inside its string
/// literals.
fn fields_written(from: &str) -> usize {
    let mut quoted = false;
    from.chars().fold(1, |fields, c| match c {
        '\'' => {
            quoted = !quoted;
            fields
        }
        '|' if quoted => fields + 1,
        _ => fields,
    })
}

/// Every line of every script that writes a value starting with one of
/// `starts`, with the fields it writes: (script, line, fields).
fn writes(starts: &[&str]) -> Vec<(String, String, usize)> {
    let mut found = Vec::new();
    for (name, lua) in scripts() {
        for line in without_comments(&lua).lines() {
            if let Some(at) = starts.iter().filter_map(|start| line.find(start)).min() {
                found.push((name.clone(), line.trim().to_owned(), fields_written(&line[at..])));
            }
        }
    }
    found
}

/// Each value's layout, both ways: every write of an order's state, a
/// ticket and a reservation's trace has as many fields as the one typed
/// parser of `values.rs` reads (a field added on one side only fails here).
#[test]
fn every_value_a_script_writes_has_the_fields_its_reader_parses() {
    use seckill_shared::stock::{LoggedTransfer, OrderState, ReservationTrace, TakeValue, TicketValue};
    let statuses = ["'QUEUED|' ..", "'CREATED|' ..", "'FAILED|' ..", "'CANCELLED|' .."];
    for (what, starts, fields, at_least) in [
        ("an order's state", &statuses[..], OrderState::FIELDS, 5),
        ("a ticket", &[", user .. '|", ", (user or '') .. '|"][..], TicketValue::FIELDS, 9),
        ("a reservation's trace", &["round .. '|'"][..], ReservationTrace::FIELDS, 1),
        ("a release's take", &["user .. '|' .. quantity .. '|'"][..], TakeValue::FIELDS, 2),
        ("a bucket move's log", &["ARGV[2] .. '|' .. units .. '|'"][..], LoggedTransfer::FIELDS, 1),
    ] {
        let found = writes(starts);
        assert!(found.len() >= at_least, "{what}: {} writes found: {found:#?}", found.len());
        let wrong: Vec<_> = found.iter().filter(|(_, _, n)| *n != fields).collect();
        assert!(wrong.is_empty(), "{what} is read as {fields} fields; written otherwise: {wrong:#?}");
    }
}

#[test]
fn a_value_written_with_a_field_more_or_less_is_caught() {
    assert_eq!(fields_written("user .. '|A|' .. (now + ttl) .. '|' .. now .. '|0')"), 5);
    assert_eq!(fields_written("'QUEUED|' .. user .. '||' .. now"), 4);
    assert_eq!(fields_written("'QUEUED|' .. user .. '|' .. now"), 3);
}
