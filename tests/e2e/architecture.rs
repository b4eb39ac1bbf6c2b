//! The maps stay true to the code: every `path` and `path:function` that
//! ARCHITECTURE.md and the README name exists — a renamed file or function
//! fails here, not in a newcomer's first hour.

use std::path::Path;

/// The `path` or `path:name` references in backticks of a Markdown text.
fn references(text: &str) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    for (i, quoted) in text.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || quoted.contains(' ') || !quoted.contains('/') {
            continue;
        }
        let (path, name) = match quoted.split_once(':') {
            Some((path, name)) if !name.is_empty() && !name.contains('/') => (path, Some(name.to_owned())),
            _ => (quoted, None),
        };
        let known_kind = ["rs", "lua", "sql", "sh", "py", "md", "toml", "json", "yaml"]
            .iter()
            .any(|ext| path.ends_with(&format!(".{ext}")));
        let looks_local =
            ["services/", "shared/", "lua/", "migrations/", "infra/", "tests/", "schemas/", "deploy/", "api/"]
                .iter()
                .any(|dir| path.starts_with(dir));
        if known_kind && looks_local {
            found.push((path.to_owned(), name));
        }
    }
    found
}

/// Whether `file` defines or holds `name`.
fn defines(file: &str, path: &str, name: &str) -> bool {
    if path.ends_with(".rs") {
        file.contains(&format!("fn {name}(")) || file.contains(&format!("fn {name}<"))
    } else {
        file.contains(name)
    }
}

#[test]
fn every_path_and_function_the_maps_name_exists() {
    let root = seckill_e2e::repo_root();
    for doc in ["ARCHITECTURE.md", "README.md"] {
        let text = std::fs::read_to_string(root.join(doc)).expect("the document");
        let references = references(&text);
        assert!(
            doc != "ARCHITECTURE.md" || references.len() > 40,
            "{doc}: the route table is read ({} references)",
            references.len()
        );
        for (path, name) in references {
            let file = root.join(&path);
            assert!(Path::new(&file).exists(), "{doc} names {path}, which does not exist");
            if let Some(name) = name {
                let text = std::fs::read_to_string(&file).expect("a readable file");
                assert!(defines(&text, &path, &name), "{doc} names {path}:{name}, which {path} does not define");
            }
        }
    }
}

#[test]
fn references_are_read_as_written() {
    let found = references("see `shared/src/fence.rs:check` and `lua/deduct.lua`, not `make test` or `a/b c`");
    assert_eq!(
        found,
        [("shared/src/fence.rs".to_owned(), Some("check".to_owned())), ("lua/deduct.lua".to_owned(), None)]
    );
}
