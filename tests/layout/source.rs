//! Reading Rust sources just enough to find the paths they name: comments, strings and test
//! items blanked, tokens, inline modules, `use` trees expanded.

use std::collections::{BTreeMap, BTreeSet};

use super::ModPath;

/// An identifier, `::`, or one punctuation character, with its line.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Token {
    pub(super) text: String,
    pub(super) line: usize,
}

/// A path as written, with its line.
pub(super) struct WrittenPath {
    pub(super) segments: Vec<String>,
    pub(super) line: usize,
    /// For a `use` declaration: the name it brings into scope (`as` renames it).
    alias: Option<String>,
}

impl WrittenPath {
    /// The name a `use` declaration binds, and the full path it stands for.
    pub(super) fn binding(&self) -> Option<(String, Vec<String>)> {
        let alias = self.alias.clone()?;
        (alias != "*" && alias != "_").then(|| (alias, self.segments.clone()))
    }
}

/// The file's tokens split by module: the file's own, and each inline `mod x { … }`'s.
pub(super) fn scopes(module: &ModPath, tokens: &[Token]) -> Vec<(ModPath, Vec<Token>)> {
    let mut scopes: BTreeMap<ModPath, Vec<Token>> = BTreeMap::new();
    // (module, brace depth at which it closes)
    let mut stack: Vec<(ModPath, usize)> = vec![(module.clone(), 0)];
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        if token.text == "mod" && tokens.get(i + 2).is_some_and(|t| t.text == "{") {
            let mut inner = stack.last().expect("the file's module").0.clone();
            inner.push(tokens[i + 1].text.clone());
            depth += 1;
            stack.push((inner, depth));
            i += 3;
            continue;
        }
        match token.text.as_str() {
            "{" => depth += 1,
            "}" => {
                if stack.len() > 1 && stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                    depth -= 1;
                    i += 1;
                    continue;
                }
                depth -= 1;
            }
            _ => {}
        }
        let current = stack.last().expect("the file's module").0.clone();
        scopes.entry(current).or_default().push(token.clone());
        i += 1;
    }
    scopes.entry(module.clone()).or_default();
    scopes.into_iter().collect()
}

/// The paths of `use` declarations, their trees expanded (`a::{b, c::d}` is `a::b`, `a::c::d`).
pub(super) fn use_paths(tokens: &[Token]) -> Vec<WrittenPath> {
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let starts_use = tokens[i].text == "use"
            && (i == 0 || !matches!(tokens[i - 1].text.as_str(), "::" | "."));
        if !starts_use {
            i += 1;
            continue;
        }
        let end = tokens[i..]
            .iter()
            .position(|t| t.text == ";")
            .map_or(tokens.len(), |p| i + p);
        let mut pos = i + 1;
        use_tree(&tokens[..end], &mut pos, &[], &mut paths);
        i = end + 1;
    }
    paths
}

/// One use tree from `pos`, with the prefix of the braces around it.
fn use_tree(tokens: &[Token], pos: &mut usize, prefix: &[String], out: &mut Vec<WrittenPath>) {
    let mut segments = prefix.to_vec();
    let line = tokens.get(*pos).map_or(0, |t| t.line);
    if tokens.get(*pos).is_some_and(|t| t.text == "::") {
        *pos += 1; // a leading `::` (an extern crate): the path starts outside
    }
    while let Some(token) = tokens.get(*pos) {
        match token.text.as_str() {
            "{" => {
                *pos += 1;
                while tokens.get(*pos).is_some_and(|t| t.text != "}") {
                    use_tree(tokens, pos, &segments, out);
                    if tokens.get(*pos).is_some_and(|t| t.text == ",") {
                        *pos += 1;
                    }
                }
                *pos += 1;
                return;
            }
            "*" => {
                *pos += 1;
                out.push(WrittenPath {
                    segments,
                    line,
                    alias: Some("*".to_owned()),
                });
                return;
            }
            "::" => *pos += 1,
            "," | "}" => break,
            "as" => {
                let alias = tokens.get(*pos + 1).map(|t| t.text.clone());
                *pos += 2;
                push_use(out, segments, line, alias);
                return;
            }
            _ => {
                segments.push(token.text.clone());
                *pos += 1;
            }
        }
    }
    push_use(out, segments, line, None);
}

fn push_use(
    out: &mut Vec<WrittenPath>,
    mut segments: Vec<String>,
    line: usize,
    alias: Option<String>,
) {
    // `a::{self}` names `a`.
    if segments.last().is_some_and(|s| s == "self") && segments.len() > 1 {
        segments.pop();
    }
    let alias = alias.or_else(|| segments.last().cloned());
    if !segments.is_empty() {
        out.push(WrittenPath {
            segments,
            line,
            alias,
        });
    }
}

/// Paths in code (not `use`): those starting with `crate`, `super`, `self` or a child module.
pub(super) fn code_paths(tokens: &[Token], children: &BTreeSet<String>) -> Vec<WrittenPath> {
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        let after_path = i > 0 && matches!(tokens[i - 1].text.as_str(), "::" | "use");
        let starts = matches!(token.text.as_str(), "crate" | "super" | "self")
            || children.contains(&token.text);
        if after_path || !starts || tokens.get(i + 1).is_none_or(|t| t.text != "::") {
            i += 1;
            continue;
        }
        let mut segments = vec![token.text.clone()];
        let mut j = i + 1;
        while tokens.get(j).is_some_and(|t| t.text == "::")
            && tokens.get(j + 1).is_some_and(|t| is_ident(&t.text))
        {
            segments.push(tokens[j + 1].text.clone());
            j += 2;
        }
        paths.push(WrittenPath {
            segments,
            line: token.line,
            alias: None,
        });
        i = j;
    }
    paths
}

fn is_ident(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Identifiers, `::`, and single punctuation characters, with their lines.
pub(super) fn tokenize(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token {
                text: chars[start..i].iter().collect(),
                line,
            });
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push(Token {
                text: "::".to_owned(),
                line,
            });
            i += 2;
        } else {
            tokens.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    tokens
}

/// The source with comments, strings and character literals blanked (lines kept).
pub(super) fn strip(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |out: &mut String, text: &[char]| {
        for &c in text {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p);
            blank(&mut out, &chars[i..end]);
            i = end;
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            let mut j = i;
            while j < chars.len() {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &chars[i..j.min(chars.len())]);
            i = j;
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && (i == 0 || !ident(chars[i - 1]))
            && raw_string_hashes(&chars[i + usize::from(c == 'b') + 1..]).is_some()
        {
            let open = i + usize::from(c == 'b') + 1;
            let hashes = raw_string_hashes(&chars[open..]).expect("checked");
            let body = open + hashes + 1;
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let end = (body..chars.len())
                .find(|&j| chars[j..].starts_with(&closing))
                .map_or(chars.len(), |j| j + closing.len());
            blank(&mut out, &chars[i..end]);
            i = end;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(chars.len());
            blank(&mut out, &chars[i..end]);
            i = end;
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            let end = if next == Some('\\') {
                (i + 3..chars.len())
                    .find(|&j| chars[j] == '\'')
                    .map(|j| j + 1)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    blank(&mut out, &chars[i..end]);
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// For text right after an `r`: how many `#` open a raw string there, if one opens.
fn raw_string_hashes(chars: &[char]) -> Option<usize> {
    let hashes = chars.iter().take_while(|&&c| c == '#').count();
    (chars.get(hashes) == Some(&'"')).then_some(hashes)
}

/// The code with each `#[cfg(test)]` item blanked (a test module, a test-only function).
pub(super) fn without_test_items(code: &str) -> String {
    const ATTRIBUTE: &str = "#[cfg(test)]";
    let mut out = code.to_owned();
    let mut from = 0;
    while let Some(found) = out[from..].find(ATTRIBUTE) {
        let start = from + found;
        let bytes = out.as_bytes();
        let mut end = start + ATTRIBUTE.len();
        let mut depth = 0usize;
        while end < bytes.len() {
            match bytes[end] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end += 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end += 1;
                    break;
                }
                _ => {}
            }
            end += 1;
        }
        let blanked: String = out[start..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(start..end, &blanked);
        from = start + blanked.len();
    }
    out
}
