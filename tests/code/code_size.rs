//! The map's invariants that files and functions stay short, checked on
//! every Rust and Python source of the project, tests included, and that a
//! file's name is its crate's only one.

use crate::code_map::{code_only, read};
use crate::code_rules::{invariant, rust_sources};

/// Each function of a Rust source with a body, and its length in lines
/// (from `fn` to its closing brace).
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let code = code_only(text);
    let bytes = code.as_bytes();
    let word = |i: usize| bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_';
    let mut found = Vec::new();
    for (start, _) in code.match_indices("fn ") {
        let name: String = code[start + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if (start > 0 && word(start - 1)) || name.is_empty() {
            continue;
        }
        // The body opens at the first `{` outside the signature's brackets;
        // a `;` there first is a declaration without one.
        let (mut depth, mut at) = (0i32, start);
        while at < bytes.len() && !(depth == 0 && matches!(bytes[at], b'{' | b';')) {
            depth += match bytes[at] {
                b'(' | b'[' => 1,
                b')' | b']' => -1,
                _ => 0,
            };
            at += 1;
        }
        if at == bytes.len() || bytes[at] == b';' {
            continue;
        }
        let mut open = 0;
        let close = (at..bytes.len()).find(|&i| {
            open += match bytes[i] {
                b'{' => 1,
                b'}' => -1,
                _ => 0,
            };
            open == 0
        });
        found.push((name, text[start..=close.unwrap_or(bytes.len() - 1)].lines().count()));
    }
    found
}

/// Each function (`def`, methods and nested ones included) of a Python
/// source, and its length in lines: from `def` to its last line before the
/// next line indented no deeper than it (a closing bracket aside), blank
/// lines at its end not counted.
fn python_function_lengths(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |line: &str| line.len() - line.trim_start().len();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let Some(rest) = code.strip_prefix("def ").or_else(|| code.strip_prefix("async def ")) else { continue };
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let depth = indent(line);
        let mut end = at + 1;
        while end < lines.len() {
            let next = lines[end];
            let closing = next.trim_start().starts_with([')', ']', '}']);
            if !next.trim().is_empty() && indent(next) <= depth && !closing {
                break;
            }
            end += 1;
        }
        while end > at + 1 && lines[end - 1].trim().is_empty() {
            end -= 1;
        }
        found.push((name, end - at));
    }
    found
}

/// Each file over 400 lines and each function over 80 in `sources` (Rust
/// or Python, by the path's extension).
fn too_long(sources: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in sources {
        let lines = text.lines().count();
        if lines > 400 {
            found.push(format!("{path}: {lines} lines"));
        }
        let functions = if path.ends_with(".py") { python_function_lengths(text) } else { function_lengths(text) };
        for (name, lines) in functions.into_iter().filter(|(_, n)| *n > 80) {
            found.push(format!("{path}:{name}: {lines} lines"));
        }
    }
    found
}

#[test]
fn files_and_functions_fit_on_a_screen_or_two() {
    invariant("Files and functions fit on a screen or two");
    let mut sources = rust_sources();
    sources.extend(walk(&["tests"], ".rs"));
    assert!(sources.len() > 150, "{} sources: the walk missed some", sources.len());
    let python = walk(&["infra", "tests", "deploy"], ".py");
    assert!(python.len() > 20, "{} Python sources: the walk missed some", python.len());
    sources.extend(python);
    let found = too_long(&sources);
    assert!(found.is_empty(), "too long: {found:#?}");
}

/// Every file under `dirs` whose name ends with `ext`, with its text
/// (`__pycache__` folders skipped).
fn walk(dirs: &[&str], ext: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut pending: Vec<String> = dirs.iter().map(|d| d.to_string()).collect();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(seckill_e2e::repo_root().join(&dir)).unwrap().filter_map(Result::ok) {
            let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                if !path.ends_with("__pycache__") {
                    pending.push(path);
                }
            } else if path.ends_with(ext) {
                found.push((path.clone(), read(&path)));
            }
        }
    }
    found
}

#[test]
fn a_long_python_function_is_noticed() {
    let body = "    x = [\n        1,\n    ]\n\n".repeat(20);
    let text = format!("def f(a,\n      b):\n{body}\n\ndef g():\n    return 1\n");
    assert_eq!(python_function_lengths(&text), [("f".to_owned(), 81), ("g".to_owned(), 2)]);
    let file = ("infra/x.py".to_owned(), text);
    assert_eq!(too_long(&[file]), ["infra/x.py:f: 81 lines"]);
}

#[test]
fn a_long_file_or_function_is_noticed() {
    let long_fn = format!("fn g(x: [u8; 2]) {{\n{}}}\nfn h();\n", "    let s = \"}\";\n".repeat(80));
    assert_eq!(function_lengths(&long_fn), [("g".to_owned(), 82)]);
    let long_file = ("tests/x.rs".to_owned(), "// a line\n".repeat(401));
    assert_eq!(too_long(&[long_file]), ["tests/x.rs: 401 lines"]);
}

/// The file names two files of one crate share (`mod.rs`, `lib.rs` and
/// `main.rs` aside), each with its paths; a crate is `shared/` or a folder
/// of `services/`.
fn shared_names(paths: &[&str]) -> Vec<String> {
    let mut by_crate: std::collections::BTreeMap<(&str, &str), Vec<&str>> = Default::default();
    for path in paths {
        let mut parts = path.split('/');
        let krate = match parts.next() {
            Some("services") => parts.next().unwrap_or(""),
            _ => "shared",
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        if !matches!(name, "mod.rs" | "lib.rs" | "main.rs") {
            by_crate.entry((krate, name)).or_default().push(path);
        }
    }
    by_crate
        .into_iter()
        .filter(|(_, paths)| paths.len() > 1)
        .map(|((_, name), paths)| format!("{name}: {paths:?}"))
        .collect()
}

#[test]
fn no_two_files_of_a_crate_share_a_name() {
    invariant("A file's name says where it lives");
    let sources = rust_sources();
    let paths: Vec<&str> = sources.iter().map(|(path, _)| path.as_str()).collect();
    assert!(paths.len() > 100, "{} sources: the walk missed some", paths.len());
    let found = shared_names(&paths);
    assert!(found.is_empty(), "names shared within a crate: {found:#?}");
    let twice = shared_names(&["shared/src/a/record.rs", "shared/src/b/record.rs", "services/x/src/record.rs"]);
    assert_eq!(twice, [r#"record.rs: ["shared/src/a/record.rs", "shared/src/b/record.rs"]"#]);
}
