//! The commands the docs show, read from the Markdown so that an edit to
//! the docs is what gets tested: each ```sh block of README.md and
//! docs/*.md as its logical lines (a trailing `\` joins the next line, a
//! comment is cut), and every `seckillctl …` form quoted inline.

use std::path::Path;

/// One ```sh block.
#[derive(Debug)]
pub struct Block {
    /// `file:line` of its opening fence.
    pub place: String,
    /// Its commands, one a logical line.
    pub lines: Vec<String>,
}

/// README.md and every page of docs/, as paths from the repository's root.
pub fn documents(root: &Path) -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("a page of docs/").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    pages.insert(0, "README.md".into());
    pages
}

/// Every ```sh block of the documents, in order.
pub fn sh_blocks(root: &Path) -> Vec<Block> {
    let mut blocks = Vec::new();
    for document in documents(root) {
        let text = std::fs::read_to_string(root.join(&document)).expect("a document");
        blocks.extend(blocks_of(&document, &text));
    }
    blocks
}

fn blocks_of(document: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Vec<&str>)> = None;
    let mut fenced = false;
    for (index, line) in text.lines().enumerate() {
        if !line.starts_with("```") {
            if let Some((_, lines)) = open.as_mut() {
                lines.push(line);
            }
            continue;
        }
        match open.take() {
            Some((start, lines)) => {
                blocks.push(Block { place: format!("{document}:{}", start + 1), lines: logical_lines(&lines) });
                fenced = false;
            }
            None if fenced => fenced = false,
            None if line.trim_end() == "```sh" => open = Some((index, Vec::new())),
            None => fenced = true,
        }
    }
    blocks
}

/// Lines joined where one ends in `\`, comments cut, blank ones dropped.
fn logical_lines(lines: &[&str]) -> Vec<String> {
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in lines {
        let line = without_comment(line).trim_end();
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                let whole = current.split_whitespace().collect::<Vec<_>>().join(" ");
                if !whole.is_empty() {
                    joined.push(whole);
                }
                current.clear();
            }
        }
    }
    joined
}

/// The line without a `#` comment (one at the start of a word, outside
/// quotes).
fn without_comment(line: &str) -> &str {
    let mut quote = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if previous.is_whitespace() => return &line[..at],
            _ => {}
        }
        previous = c;
    }
    line
}

/// Every `seckillctl …` quoted inline in the documents (`file`, the form).
pub fn inline_forms(root: &Path) -> Vec<(String, String)> {
    let mut forms = Vec::new();
    for document in documents(root) {
        let text = std::fs::read_to_string(root.join(&document)).expect("a document");
        for (index, line) in text.lines().enumerate().filter(|(_, line)| !line.starts_with("```")) {
            for span in line.split('`').skip(1).step_by(2) {
                if span.starts_with("seckillctl ") {
                    forms.push((format!("{document}:{}", index + 1), span.to_owned()));
                }
            }
        }
    }
    forms
}

/// The form without its optional parts (`[…]`, nested or not).
pub fn required_part(form: &str) -> String {
    let mut depth = 0usize;
    let mut kept = String::new();
    for c in form.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => kept.push(c),
            _ => {}
        }
    }
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every `--flag` the form names, optional or not.
pub fn flags(form: &str) -> Vec<String> {
    form.split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == '=')
        .filter(|word| word.starts_with("--") && word.len() > 2)
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_read_as_a_shell_reads_them() {
        let text =
            "x\n```sh\na --b 1 \\\n   --c 2   # why\n\n# alone\ncurl -d '{\"a\":\"#1\"}' u\n```\n```toml\n[x]\n```\n";
        let blocks = blocks_of("d.md", text);
        assert_eq!(blocks.len(), 1, "{blocks:?}");
        assert_eq!(blocks[0].place, "d.md:2");
        assert_eq!(blocks[0].lines, ["a --b 1 --c 2", "curl -d '{\"a\":\"#1\"}' u"]);
    }

    #[test]
    fn a_form_has_its_required_part_and_its_flags() {
        let form = "seckillctl dlq replay [FILTER] [--to TOPIC [--create-topic]] --note T [--rate=N]";
        assert_eq!(required_part(form), "seckillctl dlq replay --note T");
        assert_eq!(flags(form), ["--to", "--create-topic", "--note", "--rate"]);
    }
}
