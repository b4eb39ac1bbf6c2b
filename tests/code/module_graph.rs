//! Which file of a crate takes names from which, read from the code: a
//! `use`, or a path in code (`crate::…`, `super::…`, `self::…`, a child
//! module's name), leads to the file of the longest module it names.
//! A re-export (`pub use`) is a module's face, not something it needs, and
//! unit tests (`#[cfg(test)] mod …`) are cut out by their braces. No crate
//! may hold a circle of such imports, and outside the edge's `http/` only
//! `lib.rs`, which builds the edge and mounts its routers, imports it.

use crate::code_map::code_only;
use crate::code_rules::{invariant, rust_sources};
use std::collections::{BTreeMap, BTreeSet};

/// For each file of one crate (paths relative to its `src/`), the files of
/// the crate it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The module path of a file relative to its crate's `src/`.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file.trim_end_matches(".rs").split('/').map(str::to_owned).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

pub(crate) use seckill_e2e::rust_code::without_test_modules;

/// The paths a `use` tree names, its groups spread out (`a::{b, c::d}` is
/// `a::b` and `a::c::d`; `self` in a group is the group's prefix).
pub(crate) fn spread(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or(tree).trim().to_owned()];
    };
    let prefix = tree[..open].trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    let join = |item: String| if item == "self" { prefix.to_owned() } else { format!("{prefix}::{item}") };
    items.into_iter().filter(|item| !item.trim().is_empty()).flat_map(spread).map(join).collect()
}

/// The paths `code` re-exports (`pub use`), spread.
fn re_exports(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for statement in code.split(';') {
        let words: Vec<&str> = statement.split_whitespace().collect();
        if let Some(at) =
            words.iter().position(|w| *w == "use").filter(|&at| at > 0 && words[at - 1].starts_with("pub"))
        {
            found.extend(spread(&words[at + 1..].join(" ")));
        }
    }
    found
}

/// The crate-local paths `code` (one file's, comments and strings blanked)
/// names: its private `use`s, and paths in code from `crate`, `super`,
/// `self` or one of its `children`.
fn named_paths(code: &str, children: &BTreeSet<String>) -> Vec<String> {
    let mut found = Vec::new();
    for statement in code.split(';') {
        let words: Vec<&str> = statement.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "use");
        if let Some(at) = at {
            let public = at > 0 && words[at - 1].starts_with("pub");
            if !public {
                found.extend(spread(&words[at + 1..].join(" ")));
            }
        }
        let before_use = words[..at.unwrap_or(words.len())].join(" ");
        let tokens = before_use.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'));
        for token in tokens.filter(|t| t.contains("::") && !t.starts_with(':')) {
            let head = token.split("::").next().unwrap_or_default();
            if matches!(head, "crate" | "super" | "self") || children.contains(head) {
                found.push(token.trim_end_matches(':').to_owned());
            }
        }
    }
    found
}

/// One file's code as the graph reads it.
struct Source {
    module: Vec<String>,
    code: String,
    /// Its re-exports (`pub use`), each spread and made absolute.
    faces: Vec<Vec<String>>,
}

/// The module names `code` declares (`mod name;`).
fn children(code: &str) -> BTreeSet<String> {
    code.split(';')
        .filter_map(|s| s.split_whitespace().skip_while(|w| *w != "mod").nth(1))
        .filter(|name| name.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .map(str::to_owned)
        .collect()
}

/// `path` (as written in the module `here`) from the crate's root.
fn absolute(path: &str, here: &[String]) -> Vec<String> {
    let mut segments = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut full = if segments.peek() == Some(&"crate") {
        segments.next();
        Vec::new()
    } else {
        here.to_vec()
    };
    for segment in segments {
        match segment {
            "super" => drop(full.pop()),
            "self" => {}
            name => full.push(name.to_owned()),
        }
    }
    full
}

/// Whether `code` defines an item called `name`.
fn defines(code: &str, name: &str) -> bool {
    ["struct", "enum", "fn", "type", "trait", "const", "static", "mod", "macro_rules!"]
        .iter()
        .any(|kind| code.contains(&format!("{kind} {name}")))
}

/// The file that defines what `full` names: the longest module it names,
/// followed through that module's re-exports of the next name.
fn resolve<'a>(full: &[String], sources: &'a BTreeMap<String, Source>, depth: usize) -> Option<&'a String> {
    let (file, source) = (0..=full.len()).rev().find_map(|n| sources.iter().find(|(_, s)| s.module == full[..n]))?;
    let name = full.get(source.module.len());
    let through = name.filter(|name| depth < 8 && !defines(&source.code, name)).and_then(|name| {
        source.faces.iter().find_map(|face| match face.split_last() {
            Some((last, _)) if last == name => resolve(face, sources, depth + 1),
            Some((last, prefix)) if last == "*" => {
                let mut named = prefix.to_vec();
                named.extend(full[source.module.len()..].iter().cloned());
                resolve(&named, sources, depth + 1).filter(|found| *found != file)
            }
            _ => None,
        })
    });
    through.or(Some(file))
}

/// The import graph of one crate: `files` are its sources relative to
/// `src/`, with their text.
fn graph(files: &BTreeMap<String, String>) -> Graph {
    let sources: BTreeMap<String, Source> = files
        .iter()
        .filter(|(file, _)| !file.ends_with("main.rs"))
        .map(|(file, text)| {
            let code = without_test_modules(&code_only(text));
            let module = module_of(file);
            let faces = re_exports(&code).iter().map(|path| absolute(path, &module)).collect();
            (file.clone(), Source { module, code, faces })
        })
        .collect();
    let mut graph = Graph::new();
    for (file, source) in &sources {
        let targets = graph.entry(file.clone()).or_default();
        for path in named_paths(&source.code, &children(&source.code)) {
            if let Some(target) = resolve(&absolute(&path, &source.module), &sources, 0).filter(|t| *t != file) {
                targets.insert(target.clone());
            }
        }
    }
    graph
}

/// Every circle of `graph` (its strongly connected parts of two files or
/// more), each with the imports that tie it.
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    let reaches = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut pending = vec![from.clone()];
        while let Some(file) = pending.pop() {
            for next in graph.get(&file).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    pending.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|f| (f, reaches(f))).collect();
    let mut placed = BTreeSet::new();
    let mut found = Vec::new();
    for file in graph.keys() {
        if placed.contains(file) {
            continue;
        }
        let part: BTreeSet<&String> =
            graph.keys().filter(|other| reach[file].contains(*other) && reach[other].contains(file)).collect();
        if part.len() > 1 {
            let ties = part.iter().flat_map(|a| graph[*a].iter().filter(|b| part.contains(b)).map(move |b| (a, b)));
            found.push(ties.map(|(a, b)| format!("{a} -> {b}")).collect());
            placed.extend(part.into_iter().cloned());
        }
    }
    found
}

/// Each crate's root (`services/edge/src`, …) with its sources.
fn crates() -> BTreeMap<String, BTreeMap<String, String>> {
    let mut crates: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (path, text) in rust_sources() {
        let Some(at) = path.find("src/") else { continue };
        crates.entry(path[..at + 3].to_owned()).or_default().insert(path[at + 4..].to_owned(), text);
    }
    crates
}

#[test]
fn no_crate_holds_a_circle_of_imports() {
    invariant("No circles");
    let crates = crates();
    assert!(crates.len() >= 5, "the crates were found: {:?}", crates.keys());
    let edge = graph(&crates["services/edge/src"]);
    assert!(edge.values().map(BTreeSet::len).sum::<usize>() > 100, "the edge's imports were read");
    let found: Vec<(String, Vec<String>)> =
        crates.iter().flat_map(|(root, files)| circles(&graph(files)).into_iter().map(|c| (root.clone(), c))).collect();
    assert!(found.is_empty(), "circles of imports: {found:#?}");
}

#[test]
fn only_the_builder_imports_the_edges_http_room() {
    invariant("No circles");
    let edge = graph(&crates()["services/edge/src"]);
    let inside = |file: &str| file.starts_with("http/");
    let found: Vec<String> = edge
        .iter()
        .filter(|(file, _)| !inside(file) && *file != "lib.rs")
        .flat_map(|(file, targets)| targets.iter().filter(|t| inside(t)).map(move |t| format!("{file} -> {t}")))
        .collect();
    assert!(found.is_empty(), "outside http/, only lib.rs may import it: {found:#?}");
}

#[test]
fn a_planted_circle_is_found_and_a_face_is_not_one() {
    let files = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(f, t)| (f.to_string(), t.to_string())).collect()
    };
    let planted = files(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub use a::Thing;\n"),
        ("a/mod.rs", "mod inner;\npub struct Thing;\nfn f() { inner::g(); }\n"),
        ("a/inner.rs", "use crate::b::{self, Other as O};\npub fn g() {}\n"),
        ("b.rs", "pub struct Other;\nfn h(_: super::a::Thing) {}\n"),
    ]);
    let found = circles(&graph(&planted));
    assert_eq!(found, [["a/inner.rs -> b.rs", "a/mod.rs -> a/inner.rs", "b.rs -> a/mod.rs"]]);
    // A parent that only re-exports its child, and a test module that
    // names its parent, tie no circle.
    let face = files(&[
        ("lib.rs", "mod a;\npub use a::Thing;\npub struct Root;\n#[cfg(test)]\nmod tests { use super::a::Thing; }\n"),
        ("a.rs", "pub struct Thing(crate::Root);\n#[cfg(test)]\nmod tests {\n    use crate::Root;\n}\n"),
    ]);
    assert_eq!(circles(&graph(&face)), Vec::<Vec<String>>::new());
    assert_eq!(graph(&face)["a.rs"], BTreeSet::from(["lib.rs".to_owned()]));
}
