//! The maps stay true to the code: every `path` and `path:function` that
//! ARCHITECTURE.md and the README name exists — a renamed file or function
//! fails here, not in a newcomer's first hour.

use std::path::Path;

/// The `path` or `path:name` references in backticks of a Markdown text.
pub(crate) fn references(text: &str) -> Vec<(String, Option<String>)> {
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
        file.contains(&format!("fn {name}("))
            || file.contains(&format!("fn {name}<"))
            || file.contains(&format!("macro_rules! {name} "))
    } else {
        file.contains(name)
    }
}

/// ARCHITECTURE.md, the README and every page of `docs/`.
fn documents() -> Vec<String> {
    let root = seckill_e2e::repo_root();
    let mut docs = vec!["ARCHITECTURE.md".to_owned(), "README.md".to_owned()];
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

/// The targets of a Markdown text's links (`[text](target)`), anchors cut.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or_default();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            found.push(target.to_owned());
        }
        rest = &rest[end..];
    }
    found
}

/// Every page of `docs/` is linked from the README or another page, and
/// every relative link of every document leads to a file that exists.
#[test]
fn every_docs_page_is_linked_and_every_link_resolves() {
    let root = seckill_e2e::repo_root();
    let mut linked = std::collections::BTreeSet::new();
    for doc in documents() {
        let text = std::fs::read_to_string(root.join(&doc)).expect("the document");
        let dir = Path::new(&doc).parent().unwrap_or(Path::new(""));
        for target in links(&text) {
            let path = dir.join(&target);
            assert!(root.join(&path).exists(), "{doc} links {target}, which does not exist");
            let normal: std::path::PathBuf = path.components().fold(std::path::PathBuf::new(), |mut acc, c| {
                match c {
                    std::path::Component::ParentDir => {
                        acc.pop();
                    }
                    std::path::Component::CurDir => {}
                    other => acc.push(other),
                }
                acc
            });
            if normal.starts_with("docs") && normal != Path::new(&doc) {
                linked.insert(normal.display().to_string());
            }
        }
    }
    for page in documents().into_iter().filter(|d| d.starts_with("docs/")) {
        assert!(linked.contains(&page), "{page} is linked from no document");
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.lines().count() <= 250, "the README is a front page: {} lines", readme.lines().count());
}

#[test]
fn every_path_and_function_the_maps_name_exists() {
    let root = seckill_e2e::repo_root();
    for doc in documents() {
        let doc = doc.as_str();
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
    assert_eq!(links("a [b](docs/x.md#y), [c](https://e.x) and [d](../a.md)"), ["docs/x.md", "../a.md"]);
    let found = references("see `shared/src/fence.rs:check` and `lua/deduct.lua`, not `make test` or `a/b c`");
    assert_eq!(
        found,
        [("shared/src/fence.rs".to_owned(), Some("check".to_owned())), ("lua/deduct.lua".to_owned(), None)]
    );
}
