//! The tables of the wiring stay true: which part of the edge each
//! audience's state holds (`services/edge/src/http/state.rs`), which
//! singleton sits on which seat (every lease the code names, and only
//! those) — both in ARCHITECTURE.md — and which files run each of the
//! stock's handles (`shared/src/stock/handles.rs`).

use crate::code_map::{code_only, read, section};
use std::collections::{BTreeMap, BTreeSet};

/// The rows of the first Markdown table in `text` whose first cell is a
/// backticked name: name -> the second cell.
fn rows(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
            let name = cells.first()?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_owned(), cells.get(1)?.to_string()))
        })
        .collect()
}

/// The fields of `pub struct NAME { … }` in `code`.
fn fields(code: &str, name: &str) -> BTreeSet<String> {
    let start = code.find(&format!("pub struct {name} {{")).unwrap_or_else(|| panic!("no struct {name}"));
    let body = &code[start..start + code[start..].find("\n}").expect("the struct's end")];
    body.lines()
        .filter_map(|line| line.trim().strip_prefix("pub ")?.split_once(':').map(|(f, _)| f.trim().to_owned()))
        .collect()
}

#[test]
fn the_map_says_which_part_each_audience_holds() {
    let map = read("ARCHITECTURE.md");
    let table = rows(section(&map, "### `services/edge/src/http/`"));
    let code = code_only(&read("services/edge/src/http/state.rs"));
    for state in ["Buyers", "Provider", "Operators"] {
        let row = table.get(state).unwrap_or_else(|| panic!("the map has no row for {state}"));
        let listed: BTreeSet<String> = row.split(',').map(|p| p.trim().to_owned()).collect();
        assert_eq!(listed, fields(&code, &format!("{state}Parts")), "{state}: the map's parts and the code's");
    }
}

#[test]
fn the_singletons_table_names_every_lease_and_only_those() {
    let map = read("ARCHITECTURE.md");
    let table = section(&map, "## Singletons and how each is elected");
    let in_code: BTreeSet<String> = crate::code_rules::rust_sources()
        .iter()
        .flat_map(|(_, text)| {
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("pub const LEASE: &str = \"")?.strip_suffix("\";"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(in_code.len() >= 3, "the leases were found: {in_code:?}");
    let on_map: BTreeSet<String> = table
        .split("PostgreSQL lease `")
        .skip(1)
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_owned)
        .collect();
    assert_eq!(on_map, in_code, "the singletons table's leases and the code's");
}

#[test]
fn a_table_row_and_a_struct_are_read_as_written() {
    let rows = rows("| state | parts |\n|---|---|\n| `A` | x, y |\n| plain | z |\n");
    assert_eq!(rows, BTreeMap::from([("A".to_owned(), "x, y".to_owned())]));
    let code = "pub struct AParts {\n    pub x: u8,\n    /// doc\n    pub y: Arc<Y>,\n    z: u8,\n}\n";
    assert_eq!(fields(code, "AParts"), BTreeSet::from(["x".to_owned(), "y".to_owned()]));
}

/// The files that `impl` each of the stock's handles, by handle (file
/// names only), read from the code under `shared/src/`.
fn handle_impls() -> BTreeMap<String, BTreeSet<String>> {
    let root = seckill_e2e::repo_root().join("shared/src");
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut pending = vec![root];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines() {
                if let Some(name) = line.strip_prefix("impl crate::stock::").and_then(|l| l.strip_suffix("<'_> {")) {
                    let file = path.file_name().unwrap().to_string_lossy().into_owned();
                    found.entry(name.to_owned()).or_default().insert(file);
                }
            }
        }
    }
    found
}

#[test]
fn the_handles_table_names_the_files_of_each_handle() {
    let code = read("shared/src/stock/handles.rs");
    let table: BTreeMap<String, BTreeSet<String>> = code
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.strip_prefix("//! |")?.split('|').map(str::trim).collect();
            let name = cells.first()?.strip_prefix("[`")?.strip_suffix("`]")?;
            let files = cells.get(2)?.split('`').skip(1).step_by(2);
            Some((name.to_owned(), files.map(|f| f.rsplit('/').next().unwrap().to_owned()).collect()))
        })
        .collect();
    let declared: BTreeSet<String> = code_only(&code)
        .lines()
        .filter_map(|l| l.trim().split_once(" => ").map(|(name, _)| name.to_owned()))
        .filter(|name| name.chars().all(char::is_alphanumeric))
        .collect();
    assert!(declared.len() >= 5, "the handles were found: {declared:?}");
    assert_eq!(table.keys().cloned().collect::<BTreeSet<_>>(), declared, "the table names every handle");
    assert_eq!(table, handle_impls(), "each handle's files as the table names them");
}
