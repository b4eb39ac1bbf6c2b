//! The invariants ARCHITECTURE.md says each folder keeps, checked by
//! reading the code: each test names the invariant it checks, and fails
//! when the map claims one the code breaks (or the map drops it).

use crate::code_map::{code_only, names, read, section};
use std::collections::{BTreeMap, BTreeSet};

/// Every `.rs` file under `services/` and `shared/src`, with its text.
pub(crate) fn rust_sources() -> Vec<(String, String)> {
    let root = seckill_e2e::repo_root();
    let mut found = Vec::new();
    let mut pending = vec!["services".to_owned(), "shared/src".to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(root.join(&dir)).unwrap().filter_map(Result::ok) {
            let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                pending.push(path);
            } else if path.ends_with(".rs") {
                found.push((path.clone(), read(&path)));
            }
        }
    }
    found.sort();
    found
}

/// The code of a source without its unit tests: each `#[cfg(test)]`
/// module cut at its matching brace (an item after one is still read).
fn shipped(text: &str) -> String {
    crate::module_graph::without_test_modules(text)
}

/// The invariant's bullet in ARCHITECTURE.md, by the start of its bold title.
pub(crate) fn invariant(title: &str) -> String {
    let map = read("ARCHITECTURE.md");
    let invariants = section(&map, "## Invariants");
    let start =
        invariants.find(&format!("- **{title}")).unwrap_or_else(|| panic!("the map keeps no invariant '{title}'"));
    let rest = &invariants[start + 2..];
    let end = rest.find("\n- **").map_or(rest.len(), |n| n + 1);
    rest[..end].to_owned()
}

/// The repository paths a text names in backticks.
fn paths(text: &str) -> BTreeSet<String> {
    text.split('`').skip(1).step_by(2).filter(|q| q.contains('/') && q.ends_with(".rs")).map(str::to_owned).collect()
}

/// Each file of `sources` whose shipped code `breaks`, outside `allowed`.
fn offenders(sources: &[(String, String)], allowed: &BTreeSet<String>, breaks: impl Fn(&str) -> bool) -> Vec<String> {
    sources
        .iter()
        .filter(|(path, text)| !allowed.contains(path) && breaks(&code_only(&shipped(text))))
        .map(|(path, _)| path.clone())
        .collect()
}

const SERVICES: [&str; 4] = ["edge", "order", "compensator", "ctl"];

#[test]
fn services_never_import_each_other_and_shared_imports_no_service() {
    invariant("Services never import each other");
    for (path, text) in rust_sources() {
        let own = path.split('/').nth(1).unwrap_or_default();
        for service in SERVICES.iter().filter(|s| **s != own) {
            let name = format!("seckill_{service}");
            assert!(!names(&code_only(&text), &name), "{path} imports {name}");
        }
    }
    let manifests =
        std::iter::once("shared/Cargo.toml".to_owned()).chain(SERVICES.map(|s| format!("services/{s}/Cargo.toml")));
    for manifest in manifests {
        let text = read(&manifest);
        let own = manifest.split('/').nth(1).unwrap_or_default();
        for service in SERVICES.iter().filter(|s| **s != own) {
            assert!(!text.contains(&format!("seckill-{service}")), "{manifest} depends on seckill-{service}");
        }
    }
}

/// Whether `code` spells a Redis key of the project's layout.
fn spells_a_key(code: &str) -> bool {
    code.contains("seckill:{") || code.contains("seckill:sales")
}

#[test]
fn every_redis_key_is_built_in_keys_rs() {
    let allowed = paths(&invariant("Every Redis key is built in"));
    assert_eq!(allowed, BTreeSet::from(["shared/src/stock/keys.rs".to_owned()]));
    // Keys are in format strings: read the code with its strings.
    let sources: Vec<(String, String)> =
        rust_sources().into_iter().map(|(p, t)| (p, strip_comments(&shipped(&t)))).collect();
    let spelled: Vec<&String> =
        sources.iter().filter(|(p, t)| !allowed.contains(p) && spells_a_key(t)).map(|(p, _)| p).collect();
    assert!(spelled.is_empty(), "keys spelled outside keys.rs: {spelled:?}");
    for script in scripts() {
        assert!(!read(&format!("lua/{script}")).contains("seckill:"), "lua/{script} spells a key");
    }
}

fn strip_comments(text: &str) -> String {
    text.lines().map(|l| l.split_once("//").map_or(l, |(code, _)| code)).collect::<Vec<_>>().join("\n")
}

fn scripts() -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(seckill_e2e::repo_root().join("lua"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".lua"))
        .collect();
    found.sort();
    found
}

/// Each script's loader as the map's `lua/` list names it.
fn loaders_on_the_map(map: &str) -> BTreeMap<String, String> {
    let mut loaders = BTreeMap::new();
    for line in section(map, "### `lua/`").lines().filter(|l| l.starts_with("- ")) {
        let quoted: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
        let Some(loader) = quoted.iter().find(|q| q.ends_with(".rs")) else { continue };
        for script in quoted.iter().filter(|q| q.ends_with(".lua")) {
            loaders.insert((*script).to_owned(), (*loader).to_owned());
        }
    }
    loaders
}

#[test]
fn a_script_is_loaded_in_one_place_as_a_static_named_like_it() {
    invariant("A script is loaded in one place");
    let on_map = loaders_on_the_map(&read("ARCHITECTURE.md"));
    let sources = rust_sources();
    for script in scripts() {
        let loaders: Vec<&String> =
            sources.iter().filter(|(_, t)| t.contains(&format!("lua/{script}\""))).map(|(p, _)| p).collect();
        assert_eq!(loaders.len(), 1, "lua/{script} is loaded by {loaders:?}");
        assert_eq!(on_map.get(&script), Some(loaders[0]), "the map's loader of {script}");
        let static_name = script.trim_end_matches(".lua").to_uppercase();
        let text = read(loaders[0]);
        let declared = text.lines().any(|l| l.starts_with(&format!("static {static_name}:")) && l.contains("LazyLock"))
            || text.contains(&format!("static {static_name}: LazyLock"));
        assert!(declared, "{} loads {script} as no static {static_name}", loaders[0]);
    }
}

/// The tables the migrations create.
fn tables() -> BTreeSet<String> {
    let mut tables = BTreeSet::new();
    for entry in std::fs::read_dir(seckill_e2e::repo_root().join("migrations")).unwrap().filter_map(Result::ok) {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        for piece in text.split("CREATE TABLE ").skip(1) {
            let name = piece.trim_start_matches("IF NOT EXISTS ");
            tables.insert(name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    tables
}

/// Where each table is written (`INSERT INTO`, `UPDATE`, `DELETE FROM`)
/// in the shipped code of `sources`.
fn writers(sources: &[(String, String)], tables: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut found: BTreeMap<String, BTreeSet<String>> = tables.iter().map(|t| (t.clone(), BTreeSet::new())).collect();
    for (path, text) in sources {
        let sql = strip_comments(&shipped(text)).split_whitespace().collect::<Vec<_>>().join(" ");
        for table in tables {
            if ["INSERT INTO", "UPDATE", "DELETE FROM"].iter().any(|verb| names(&sql, &format!("{verb} {table}"))) {
                found.get_mut(table).unwrap().insert(path.clone());
            }
        }
    }
    found
}

/// The map's list: each table (in backticks, before the colon) and the
/// files after it.
fn homes_on_the_map(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut homes = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| l.starts_with("- `")) {
        let Some((names, places)) = line[2..].split_once(':') else { continue };
        for table in names.split('`').skip(1).step_by(2) {
            homes.insert(table.to_owned(), paths(places));
        }
    }
    homes
}

#[test]
fn each_table_is_written_only_where_the_map_says() {
    let tables = tables();
    let on_map = homes_on_the_map(&invariant("Each table is written only where"));
    assert_eq!(on_map.keys().cloned().collect::<BTreeSet<_>>(), tables, "every table, on the map");
    let found = writers(&rust_sources(), &tables);
    let wrong: Vec<String> = found
        .iter()
        .filter(|(table, files)| on_map.get(*table) != Some(files))
        .map(|(table, files)| format!("{table}: written in {files:?}, the map says {:?}", on_map.get(table)))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The paths every `use` of `code` imports, its groups spread out
/// (`use std::sync::{Arc, Mutex};` imports `std::sync::Arc` and
/// `std::sync::Mutex`).
fn imported(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("use ") {
        let starts_item = code[..at].chars().next_back().is_none_or(|c| c.is_whitespace() || c == ';' || c == '{');
        if !starts_item {
            continue;
        }
        let tree = code[at + 4..].split(';').next().unwrap_or_default();
        found.extend(crate::module_graph::spread(tree).into_iter().map(|p| p.replace(char::is_whitespace, "")));
    }
    found
}

/// Whether `code` runs a query sqlx cannot check at compile time: the
/// functions `sqlx::query`, `query_as`, `query_scalar`, called by their
/// path or imported (the macros `query!` and friends are checked).
fn runtime_query(code: &str) -> bool {
    const FUNCTIONS: [&str; 3] = ["query", "query_as", "query_scalar"];
    let called =
        FUNCTIONS.iter().any(|f| code.contains(&format!("sqlx::{f}(")) || code.contains(&format!("sqlx::{f}::<")));
    let imported = imported(code).iter().any(|path| FUNCTIONS.iter().any(|f| *path == format!("sqlx::{f}")));
    called || imported
}

/// Whether `code` uses a lock that poisons: std's `Mutex` or `RwLock`,
/// by path or imported, or a poisoned lock unwrapped.
fn poisoning_lock(code: &str) -> bool {
    let named = code.contains("std::sync::Mutex") || code.contains("std::sync::RwLock");
    let imported =
        imported(code).iter().any(|path| path.starts_with("std::sync::Mutex") || path.starts_with("std::sync::RwLock"));
    named || imported || code.contains(".lock().expect(") || code.contains(".lock().unwrap(")
}

#[test]
fn every_query_is_checked_at_compile_time() {
    let allowed = paths(&invariant("Every query is checked at compile time"));
    let found = offenders(&rust_sources(), &allowed, runtime_query);
    assert!(found.is_empty(), "queries not checked at compile time in {found:?}");
}

#[test]
fn no_lock_poisons() {
    invariant("No lock poisons");
    let found = offenders(&rust_sources(), &BTreeSet::new(), poisoning_lock);
    assert!(found.is_empty(), "std locks (or their poisoning) in {found:?}");
}

/// Setting fields named like a secret whose type is not `Secret`.
fn plain_secrets(code: &str) -> Vec<String> {
    code.lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("pub ")?.split_once(':'))
        .filter(|(name, _)| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .filter(|(name, _)| ["token", "secret", "password"].iter().any(|w| name.contains(w)))
        .filter(|(_, ty)| !matches!(ty.trim().trim_end_matches(','), "Secret" | "Option<Secret>"))
        .map(|(name, ty)| format!("{name}:{ty}"))
        .collect()
}

#[test]
fn secrets_are_secrets() {
    invariant("Secrets are `Secret`s");
    let settings: Vec<(String, String)> = rust_sources()
        .into_iter()
        .filter(|(p, _)| p.contains("/settings") || p.starts_with("shared/src/config/") || p.ends_with("src/lib.rs"))
        .collect();
    let plain: Vec<String> = settings
        .iter()
        .flat_map(|(p, t)| plain_secrets(&shipped(t)).into_iter().map(move |f| format!("{p}: {f}")))
        .collect();
    assert!(plain.is_empty(), "secrets in plain strings: {plain:?}");
}

/// Whether `code` builds a backoff of its own (naming the builder's type,
/// as a function returning retry.rs's does, is no build).
fn builds_backoff(code: &str) -> bool {
    ["ExponentialBuilder::", "ConstantBuilder::", "FibonacciBuilder::", "backoff::"].iter().any(|b| code.contains(b))
}

/// Whether `code` sleeps: tokio's or std's sleep, by path or imported.
fn sleeps(code: &str) -> bool {
    let by_path =
        code.contains("time::sleep(") || code.contains("time::sleep_until(") || code.contains("thread::sleep(");
    let imported = imported(code)
        .iter()
        .any(|path| ["tokio::time::sleep", "tokio::time::sleep_until", "std::thread::sleep"].contains(&path.as_str()));
    by_path || imported
}

#[test]
fn backoff_is_built_only_in_retry_rs() {
    let allowed = paths(&invariant("One retry policy"));
    let found = offenders(&rust_sources(), &allowed, builds_backoff);
    assert!(found.is_empty(), "backoff built in {found:?}");
}

#[test]
fn a_sleep_is_only_where_the_map_says_why() {
    let allowed = paths(&invariant("A wait ends with the service"));
    let sources = rust_sources();
    let found = offenders(&sources, &allowed, sleeps);
    assert!(found.is_empty(), "a sleep in files the map does not list: {found:?}");
    let stale: Vec<&String> =
        allowed.iter().filter(|p| !sources.iter().any(|(s, t)| s == *p && sleeps(&code_only(t)))).collect();
    assert!(stale.is_empty(), "the map lists files that no longer sleep: {stale:?}");
}

#[test]
fn a_broken_invariant_is_noticed() {
    let sources = [
        ("services/edge/src/a.rs".to_owned(), "fn f() { let k = format!(\"seckill:{{{}}}\", 1); }".to_owned()),
        ("services/edge/src/b.rs".to_owned(), "const Q: &str = \"UPDATE orders SET x = 1\";".to_owned()),
    ];
    assert!(spells_a_key(&sources[0].1));
    let found = writers(&sources, &BTreeSet::from(["orders".to_owned(), "sales".to_owned()]));
    assert_eq!(found["orders"], BTreeSet::from(["services/edge/src/b.rs".to_owned()]));
    assert!(found["sales"].is_empty());
    assert_eq!(plain_secrets("pub admin_token: String,\npub admin_secret: Option<Secret>,"), ["admin_token: String,"]);
    let map = "x\n### `lua/`\n\n- `a.lua`, `b.lua` (`shared/src/x.rs`) — a.\n## Next";
    assert_eq!(loaders_on_the_map(map)["b.lua"], "shared/src/x.rs");
    assert!(
        offenders(&sources, &BTreeSet::new(), |c| c.contains("fn f")).contains(&"services/edge/src/a.rs".to_owned())
    );
    // Code after a unit-test module is read; the module is not.
    let after =
        [("services/edge/src/c.rs".to_owned(), "#[cfg(test)]\nmod tests {\n    fn f() {}\n}\nfn g() {}\n".to_owned())];
    assert_eq!(offenders(&after, &BTreeSet::new(), |c| c.contains("fn g")), ["services/edge/src/c.rs"]);
    assert!(offenders(&after, &BTreeSet::new(), |c| c.contains("fn f")).is_empty());
    // Locks and queries however they are imported.
    assert!(poisoning_lock("use std::sync::{Arc, Mutex};\nfn f(m: Mutex<u8>) {}"));
    assert!(poisoning_lock("use std::{collections::HashMap, sync::RwLock};"));
    assert!(!poisoning_lock("use std::sync::Arc;\nuse parking_lot::Mutex;"));
    assert!(runtime_query("use sqlx::query;\nasync fn f() { query(\"SELECT 1\"); }"));
    assert!(runtime_query("use sqlx::{query_as, Row};"));
    assert!(runtime_query("let r = sqlx::query_scalar::<_, i64>(q);"));
    assert!(!runtime_query("let r = sqlx::query!(\"SELECT 1\");\nuse sqlx::PgPool;"));
    // A sleep, a backoff, another service's crate.
    assert!(sleeps("use tokio::time::sleep;\nasync fn f() { sleep(d).await }"));
    assert!(sleeps("std::thread::sleep(d);") && !sleeps("shutdown::pause(&token, d).await"));
    assert!(builds_backoff("let b = backon::ExponentialBuilder::default();"));
    assert!(!builds_backoff("fn asking(&self) -> backon::ExponentialBuilder { retry::within(a, b, c) }"));
    assert!(crate::code_map::names("use seckill_order::consumer::Worker;", "seckill_order"));
}

/// Each `--skip module::test` in the Makefile, as (module, test).
fn skipped_tests(makefile: &str) -> Vec<(String, String)> {
    let words: Vec<&str> = makefile.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "--skip")
        .filter_map(|w| w[1].split_once("::"))
        .map(|(m, t)| (m.to_owned(), t.to_owned()))
        .collect()
}

/// A test skipped by a name that no longer exists runs where it cannot
/// pass: the Makefile's skip lists name real tests of `tests/e2e`.
#[test]
fn every_skipped_test_exists() {
    let skipped = skipped_tests(&read("Makefile"));
    assert!(!skipped.is_empty(), "the Makefile skips nothing: the reader is wrong");
    let missing: Vec<String> = skipped
        .iter()
        .filter(|(module, test)| {
            let path = seckill_e2e::repo_root().join(format!("tests/e2e/{module}.rs"));
            let text = std::fs::read_to_string(path).unwrap_or_default();
            !text.contains(&format!("async fn {test}(")) && !text.contains(&format!("fn {test}("))
        })
        .map(|(m, t)| format!("{m}::{t}"))
        .collect();
    assert!(missing.is_empty(), "the Makefile skips tests that are not there: {missing:?}");
}

#[test]
fn every_service_main_is_one_call_to_the_skeleton() {
    let map = read("ARCHITECTURE.md");
    let skeleton = section(&map, "## The skeleton of a service");
    assert!(skeleton.contains("Every service binary's `main`"), "the map's claim moved: {skeleton}");
    for service in ["edge", "order", "compensator"] {
        let path = format!("services/{service}/src/main.rs");
        let code = code_only(&read(&path));
        let body = code.split("fn main() -> anyhow::Result<()> {").nth(1).unwrap_or_else(|| panic!("{path}: no main"));
        let body = body[..body.rfind('}').expect("main's closing brace")].trim();
        assert!(
            body.starts_with("seckill_shared::ops::host::run::<") && !body.contains(';'),
            "{path}: main is not one call to host::run: {body}"
        );
    }
}
