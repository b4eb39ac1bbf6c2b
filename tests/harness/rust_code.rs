//! Reading the project's Rust sources as the code tests do: a file's
//! shipped code, without its test modules.

/// `code` without its `#[cfg(test)]` modules, cut at their matching brace.
pub fn without_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let Some(open) = after.find(['{', ';']) else { return out };
        if after.as_bytes()[open] == b';' {
            rest = &after[open + 1..];
            continue;
        }
        let mut depth = 0usize;
        let close = after[open..].char_indices().find_map(|(i, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(open + i + 1)
        });
        rest = &after[close.unwrap_or(after.len())..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_modules_are_cut_at_their_braces() {
        let code =
            "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() { if x { y } }\n}\nfn c() {}\n#[cfg(test)]\nmod other;\n";
        assert_eq!(without_test_modules(code), "fn a() {}\n\nfn c() {}\n\n");
    }
}
