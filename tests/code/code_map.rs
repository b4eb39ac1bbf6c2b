//! ARCHITECTURE.md's route and code map stay true: every arrow of the
//! route is a real call (the caller's body names the callee), the route is
//! followed in at most 24 files with at most 4 returns to a file already
//! left, and every source file is named in its folder's paragraph.

use crate::architecture::references;
use std::collections::{BTreeMap, BTreeSet};

/// The text of `path`, relative to the repository.
pub(crate) fn read(path: &str) -> String {
    std::fs::read_to_string(seckill_e2e::repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The lines of the section of `doc` under `heading` (up to the next
/// heading of the same or a higher level).
pub(crate) fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = doc.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no section {heading}")) + 1;
    let body = &doc[start + heading.len()..];
    let end = body
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&i| {
            let hashes = body[i..].chars().take_while(|c| *c == '#').count();
            (1..=level).contains(&hashes) && body[i + hashes..].starts_with(' ')
        })
        .unwrap_or(body.len());
    &body[..end]
}

/// Rust source with comments removed and the inside of string and char
/// literals blanked (lengths kept): what is left is code.
pub(crate) fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        if rest.starts_with("//") || rest.starts_with("/*") {
            let end = if rest.starts_with("/*") {
                rest.find("*/").map_or(bytes.len(), |n| i + n + 2)
            } else {
                rest.find('\n').map_or(bytes.len(), |n| i + n)
            };
            out.extend(std::iter::repeat_n(b' ', end - i));
            i = end;
        } else if let Some((prefix, hashes)) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let open = prefix + hashes + 1;
            let end = rest[open..].find(&close).map_or(bytes.len(), |n| i + open + n + close.len());
            out.extend_from_slice(&bytes[i..i + open]);
            out.extend(std::iter::repeat_n(b' ', end - i - open));
            i = end;
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push(b'"');
            out.extend(std::iter::repeat_n(b' ', j.min(bytes.len()) - i - 1));
            i = j + 1;
            if i <= bytes.len() {
                out.push(b'"');
            }
        } else if bytes[i] == b'\'' && char_literal_len(rest).is_some() {
            let n = char_literal_len(rest).unwrap();
            out.push(b'\'');
            out.extend(std::iter::repeat_n(b' ', n - 2));
            out.push(b'\'');
            i += n;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The prefix (`r` or `br`) and the hashes of a raw string opening at the
/// start of `rest`.
fn raw_string_start(rest: &str) -> Option<(usize, usize)> {
    let prefix = if rest.starts_with("br") { 2 } else { 1 };
    let after = rest.strip_prefix('r').or_else(|| rest.strip_prefix("br"))?;
    let hashes = after.chars().take_while(|c| *c == '#').count();
    after[hashes..].starts_with('"').then_some((prefix, hashes))
}

/// The length of a char literal at the start of `rest` (`'a'`, `'\n'`,
/// `'{'`), or `None` for a lifetime.
fn char_literal_len(rest: &str) -> Option<usize> {
    let mut chars = rest.char_indices().skip(1);
    let (_, first) = chars.next()?;
    if first == '\\' {
        let close = rest[2..].find('\'')?;
        return Some(close + 3);
    }
    let (at, second) = chars.next()?;
    (second == '\'').then_some(at + 1)
}

/// Whether `name` occurs in `code` as a whole identifier.
pub(crate) fn names(code: &str, name: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(name).any(|(at, _)| {
        !code[..at].chars().next_back().is_some_and(ident) && !code[at + name.len()..].chars().next().is_some_and(ident)
    })
}

/// The body (braces included) of the function or `macro_rules!` `name` in
/// `code` (from [`code_only`]).
pub(crate) fn body<'a>(code: &'a str, name: &str) -> Option<&'a str> {
    let start = ["fn ", "macro_rules! "].iter().find_map(|kind| {
        code.match_indices(&format!("{kind}{name}")).find_map(|(at, m)| {
            let next = code[at + m.len()..].chars().next()?;
            matches!(next, '(' | '<' | ' ' | '{').then_some(at)
        })
    })?;
    let open = start + code[start..].find('{')?;
    let mut depth = 0;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&code[open..=open + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// One `path` or `path:name` of the route.
type Ref = (String, Option<String>);

/// The items of a numbered list, each joined into one line.
fn items(text: &str) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    for line in text.lines() {
        let numbered =
            line.split_once(". ").is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if numbered {
            items.push(line.to_owned());
        } else if let Some(last) = items.last_mut().filter(|_| !line.trim().is_empty()) {
            last.push(' ');
            last.push_str(line.trim());
        }
    }
    items
}

/// The calls a route item claims: `A` → `B` → `C` (A calls B, B calls C)
/// and `A` → `B` · `C` (A calls B and C).
fn arrows(item: &str) -> Vec<(Ref, Ref)> {
    let pieces: Vec<&str> = item.split('`').collect();
    let mut found = Vec::new();
    let (mut caller, mut last): (Option<Ref>, Option<Ref>) = (None, None);
    for i in (1..pieces.len()).step_by(2) {
        let Some(current) = references(&format!("`{}`", pieces[i])).pop() else {
            (caller, last) = (None, None);
            continue;
        };
        let between = pieces[i - 1].trim();
        let callee_of = match between {
            "→" => last.clone(),
            "·" => caller.clone(),
            _ => None,
        };
        if let Some(from) = callee_of {
            if between == "→" {
                caller = Some(from.clone());
            }
            found.push((from, current.clone()));
        } else {
            caller = None;
        }
        last = Some(current);
    }
    found
}

/// Whether `caller`'s body names `callee` (a function, or a script by its
/// static); `Err` says what is wrong.
fn is_call(caller: &Ref, callee: &Ref, source: impl Fn(&str) -> String) -> Result<(), String> {
    let (path, Some(function)) = caller else { return Err(format!("{} names no function", caller.0)) };
    let code = code_only(&source(path));
    let body = body(&code, function).ok_or_else(|| format!("{path} defines no {function}"))?;
    let wanted = match callee {
        (script, None) if script.starts_with("lua/") => {
            script.trim_start_matches("lua/").trim_end_matches(".lua").to_uppercase()
        }
        (_, Some(name)) => name.clone(),
        (other, None) => return Err(format!("{other} names no function")),
    };
    if names(body, &wanted) {
        Ok(())
    } else {
        Err(format!("{path}:{function} does not call {wanted} ({})", callee.0))
    }
}

/// Files opened and returns to a file already left, reading `refs` in
/// order: a function read once is not read again; a file is opened when
/// the next new function is in another file than the one open.
fn reading(refs: &[Ref]) -> (BTreeSet<String>, Vec<String>) {
    let (mut read, mut opened, mut returns) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
    let mut open: Option<&str> = None;
    for (path, name) in refs {
        if name.is_some() && !read.insert((path.clone(), name.clone())) {
            continue;
        }
        if open != Some(path.as_str()) {
            if !opened.insert(path.clone()) {
                returns.push(path.clone());
            }
            open = Some(path);
        }
    }
    (opened, returns)
}

fn route() -> String {
    section(&read("ARCHITECTURE.md"), "## The route of one order").to_owned()
}

#[test]
fn every_arrow_of_the_route_is_a_real_call() {
    let added = section(&read("ARCHITECTURE.md"), "## What a feature adds to one order's route").to_owned();
    let route = route() + &added;
    let claimed: Vec<(Ref, Ref)> = items(&route).iter().flat_map(|item| arrows(item)).collect();
    assert!(claimed.len() >= 30, "the route is read: {} arrows", claimed.len());
    let problems: Vec<String> = claimed.iter().filter_map(|(a, b)| is_call(a, b, read).err()).collect();
    assert!(problems.is_empty(), "arrows of the route that are no call:\n{}", problems.join("\n"));
}

#[test]
fn the_route_is_followed_in_at_most_24_files_and_4_returns() {
    let refs = references(&route());
    let (opened, returns) = reading(&refs);
    println!("the route: {} files, {} returns {returns:?}", opened.len(), returns.len());
    assert!(opened.len() <= 24, "{} files: {opened:?}", opened.len());
    assert!(returns.len() <= 4, "{} returns: {returns:?}", returns.len());
}

/// A function of a migration the route names is its latest definition.
#[test]
fn a_migration_function_the_route_names_is_not_replaced_later() {
    let mut migrations: Vec<String> = std::fs::read_dir(seckill_e2e::repo_root().join("migrations"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    migrations.sort();
    for (path, name) in references(&route()).into_iter().filter(|(p, _)| p.starts_with("migrations/")) {
        let name = name.expect("a migration's function");
        let file = path.trim_start_matches("migrations/");
        for later in migrations.iter().filter(|m| m.as_str() > file) {
            let text = read(&format!("migrations/{later}"));
            assert!(
                !text.contains(&format!("FUNCTION {name}(")),
                "{later} replaces {name}, which the route names in {path}"
            );
        }
    }
}

/// The source folders: under each crate's `src/` (and the edge's assets and
/// examples), `lua/` and `migrations/`, each with its files.
fn folders() -> BTreeMap<String, Vec<String>> {
    let root = seckill_e2e::repo_root();
    let mut folders = BTreeMap::new();
    let mut pending = vec!["services".to_owned(), "shared/src".to_owned(), "lua".to_owned(), "migrations".to_owned()];
    while let Some(dir) = pending.pop() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(root.join(&dir)).unwrap().filter_map(Result::ok) {
            let name = entry.file_name().into_string().unwrap();
            if entry.file_type().unwrap().is_dir() {
                pending.push(format!("{dir}/{name}"));
            } else if dir.contains("/") && name != "Cargo.toml" || dir == "lua" || dir == "migrations" {
                files.push(name);
            }
        }
        if !files.is_empty() {
            files.sort();
            folders.insert(format!("{dir}/"), files);
        }
    }
    folders
}

/// The files of `folders` that `map` does not name in the folder's own
/// section (`### \`folder/\``), and the folders it has no section for.
fn unnamed(map: &str, folders: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut missing = Vec::new();
    for (folder, files) in folders {
        let heading = format!("### `{folder}`");
        if !map.contains(&format!("\n{heading}\n")) {
            missing.push(format!("{folder} (no section)"));
            continue;
        }
        let text = section(map, &heading);
        let quoted: BTreeSet<&str> = text.split('`').skip(1).step_by(2).collect();
        missing.extend(files.iter().filter(|f| !quoted.contains(f.as_str())).map(|f| format!("{folder}{f}")));
    }
    missing
}

#[test]
fn every_source_file_is_named_in_its_folders_paragraph() {
    let folders = folders();
    assert!(folders.values().map(Vec::len).sum::<usize>() > 150, "the sources are found: {folders:?}");
    let missing = unnamed(&read("ARCHITECTURE.md"), &folders);
    assert!(missing.is_empty(), "on no map: {missing:?}");
}

#[test]
fn a_false_map_is_noticed() {
    // An arrow whose caller does not call the callee.
    let source = |_: &str| "fn a() { b(); /* c() */ } fn b() {}".to_owned();
    let arrow = arrows("1. `shared/src/x.rs:a` → `shared/src/x.rs:b` · `shared/src/x.rs:c`.");
    assert_eq!(arrow.len(), 2);
    assert!(is_call(&arrow[0].0, &arrow[0].1, source).is_ok());
    assert!(is_call(&arrow[1].0, &arrow[1].1, source).unwrap_err().contains("does not call c"));
    // A file left and opened again for a new function is a return; a
    // function read before is not read again.
    let r = |p: &str, f: &str| (p.to_owned(), Some(f.to_owned()));
    let (opened, returns) = reading(&[r("a.rs", "f"), r("b.rs", "g"), r("a.rs", "f"), r("c.rs", "h"), r("a.rs", "i")]);
    assert_eq!((opened.len(), returns), (3, vec!["a.rs".to_owned()]));
    // A file its folder's section does not name.
    let folders = BTreeMap::from([("lua/".to_owned(), vec!["a.lua".to_owned(), "b.lua".to_owned()])]);
    assert_eq!(unnamed("x\n### `lua/`\n\n`a.lua` does a.\n## Next\n`b.lua`", &folders), ["lua/b.lua"]);
    // Strings and comments are not code.
    let code = code_only("fn f() { let s = \"}\"; let c = '{'; // }\n g(); }");
    assert!(names(body(&code, "f").unwrap(), "g"));
    // A raw byte string ends at its own closing quote and hashes.
    let code = code_only("fn f() { s(br#\"{\"#); s(br\"}\"); } fn h() { g(); }");
    assert!(names(body(&code, "h").unwrap(), "g"), "{code}");
}
