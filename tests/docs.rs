//! The README and the guides in docs/, read as a user reads them on GitHub and on docs.rs:
//! every relative link (and image) names a file of this repository, every `#anchor` a heading
//! of its target (GitHub's slug of it), every reference link a definition. A guide is also
//! the rustdoc of a module (src/guide.rs), where a relative path would not resolve: so its
//! links to other guides are reference links that src/guide.rs points at their modules, and
//! it links to no other file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, as paths relative to the repository.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ is there")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| Path::new("docs").join(path.file_name().expect("a file name")))
        .collect();
    docs.sort();
    docs.insert(0, PathBuf::from("README.md"));
    docs
}

fn read(doc: &Path) -> String {
    std::fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{}: {e}", doc.display()))
}

/// The lines outside fenced code blocks, numbered from 1.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        if let Some(c) = marker {
            let run = trimmed.chars().take_while(|x| *x == c).count();
            if run >= 3 {
                match fence {
                    None => fence = Some((c, run)),
                    Some((open, len)) if open == c && run >= len => fence = None,
                    Some(_) => {}
                }
                continue;
            }
        }
        if fence.is_none() {
            lines.push((i + 1, line));
        }
    }
    lines
}

/// `line` with every code span (`` `x` ``, ``` ``x`` ```) replaced by spaces.
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        let close = (i + run..chars.len()).find(|&j| {
            chars[j..].iter().take_while(|c| **c == '`').count() == run
                && (j == 0 || chars[j - 1] != '`')
        });
        match close {
            Some(j) => {
                out.extend(std::iter::repeat_n(' ', j + run - i));
                i = j + run;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// GitHub's anchor for a heading: its text as shown, lower-cased, without punctuation but
/// `-` and `_`, spaces made `-`.
fn slug(heading: &str) -> String {
    let mut shown = String::new();
    let mut rest = heading;
    // A link shows its text only.
    while let Some(open) = rest.find('[') {
        shown.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](") {
            Some(close) => {
                shown.push_str(&after[..close]);
                let tail = &after[close + 2..];
                rest = tail.find(')').map_or("", |end| &tail[end + 1..]);
            }
            None => {
                shown.push('[');
                rest = after;
            }
        }
    }
    shown.push_str(rest);
    shown
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a document's headings, as GitHub numbers repeated ones (`x`, `x-1`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let shown = line[hashes..]
            .trim()
            .trim_end_matches('#')
            .replace(['`', '*'], "");
        let base = slug(&shown);
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// Where a document points.
#[derive(Debug)]
enum Target {
    /// `[text](dest)` or `![alt](dest)`.
    Inline(String),
    /// `[label]: dest`.
    Definition(String, String),
    /// `[text][label]` (or `[label][]`): the label.
    Reference(String),
}

/// The links of one line of prose.
fn links(line: &str) -> Vec<Target> {
    let mut found = Vec::new();
    if let Some(rest) = line.trim_start().strip_prefix('[') {
        let definition = rest
            .split_once("]: ")
            .filter(|(label, _)| !label.contains(']'));
        if let Some((label, dest)) = definition {
            found.push(Target::Definition(
                label.to_lowercase(),
                dest.split_whitespace().next().unwrap_or("").to_string(),
            ));
            return found;
        }
    }
    let bytes = line.as_bytes();
    for (i, _) in line.match_indices(']') {
        let text_start = line[..i].rfind('[');
        match bytes.get(i + 1) {
            Some(b'(') => {
                let dest = &line[i + 2..];
                let end = dest.find(')').unwrap_or(dest.len());
                let dest = dest[..end].split_whitespace().next().unwrap_or("");
                found.push(Target::Inline(dest.trim_matches(['<', '>']).to_string()));
            }
            Some(b'[') => {
                let label = &line[i + 2..];
                if let Some(end) = label.find(']') {
                    let label = if end == 0 {
                        text_start.map_or("", |s| &line[s + 1..i])
                    } else {
                        &label[..end]
                    };
                    found.push(Target::Reference(label.to_lowercase()));
                }
            }
            _ => {}
        }
    }
    found
}

fn is_url(dest: &str) -> bool {
    dest.contains("://") || dest.starts_with("mailto:")
}

/// `dir/dest` without `.` and `..`, or None when it leaves the repository.
fn resolve(dir: &Path, dest: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in dir.join(dest).components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with one destination of `doc`, if anything.
fn check_destination(doc: &Path, dest: &str) -> Option<String> {
    if is_url(dest) {
        return None;
    }
    let (path, anchor) = dest
        .split_once('#')
        .map_or((dest, None), |(p, a)| (p, Some(a)));
    let target = if path.is_empty() {
        doc.to_path_buf()
    } else {
        match resolve(doc.parent().unwrap_or(Path::new("")), path) {
            Some(target) => target,
            None => return Some(format!("{dest}: outside the repository")),
        }
    };
    if !root().join(&target).exists() {
        return Some(format!("{dest}: no file {}", target.display()));
    }
    let anchor = anchor?;
    if target.extension().is_none_or(|ext| ext != "md") {
        return Some(format!(
            "{dest}: an anchor into a file that is not Markdown"
        ));
    }
    if !anchors(&read(&target)).contains(anchor) {
        return Some(format!(
            "{dest}: {} has no heading whose anchor is #{anchor}",
            target.display()
        ));
    }
    None
}

/// `label → destination` of src/guide.rs's links for rustdoc.
fn rustdoc_links() -> BTreeMap<String, String> {
    let source = std::fs::read_to_string(root().join("src/guide.rs")).expect("src/guide.rs");
    source
        .lines()
        .filter_map(|line| {
            let line = line.trim().trim_start_matches('"');
            let (label, dest) = line.strip_prefix('[')?.split_once("]: ")?;
            let dest = dest.split("\\n").next()?.trim();
            Some((label.to_lowercase(), dest.to_string()))
        })
        .collect()
}

/// Every problem of every document, one line each.
fn problems() -> Vec<String> {
    let rustdoc = rustdoc_links();
    let guide_rs = std::fs::read_to_string(root().join("src/guide.rs")).expect("src/guide.rs");
    let mut problems = Vec::new();
    for doc in documents() {
        let text = read(&doc);
        let is_guide = doc.starts_with("docs");
        let lines: Vec<(usize, String)> = prose(&text)
            .into_iter()
            .map(|(n, line)| (n, without_code_spans(line)))
            .collect();
        let defined: BTreeSet<String> = lines
            .iter()
            .flat_map(|(_, line)| links(line))
            .filter_map(|t| match t {
                Target::Definition(label, _) => Some(label),
                _ => None,
            })
            .collect();
        if is_guide {
            let file = doc.file_name().and_then(|f| f.to_str()).unwrap_or("");
            let module = file.trim_end_matches(".md").replace('-', "_");
            if !guide_rs.contains(&format!("guide!({module}, \"{file}\"")) {
                problems.push(format!(
                    "{file}: no `guide!({module}, \"{file}\")` in src/guide.rs"
                ));
            }
        }
        for (n, line) in &lines {
            let at = format!("{}:{n}", doc.display());
            for target in links(line) {
                match target {
                    Target::Inline(dest) => {
                        if is_guide && !is_url(&dest) && !dest.starts_with('#') {
                            problems.push(format!(
                                "{at}: {dest}: a guide links to other guides by reference \
                                 ([text][file.md]) and to no other file (rustdoc cannot follow it)"
                            ));
                        }
                        problems
                            .extend(check_destination(&doc, &dest).map(|p| format!("{at}: {p}")));
                    }
                    Target::Definition(label, dest) => {
                        problems
                            .extend(check_destination(&doc, &dest).map(|p| format!("{at}: {p}")));
                        if !is_guide || is_url(&dest) {
                            continue;
                        }
                        let (file, anchor) = dest
                            .split_once('#')
                            .map_or((dest.as_str(), None), |(f, a)| (f, Some(a)));
                        let Some(stem) = file.strip_suffix(".md").filter(|s| !s.contains('/'))
                        else {
                            problems
                                .push(format!("{at}: {dest}: a guide links only to other guides"));
                            continue;
                        };
                        let module = format!("crate::guide::{}", stem.replace('-', "_"));
                        let expected = anchor.map_or(module.clone(), |a| format!("{module}#{a}"));
                        if rustdoc.get(&label) != Some(&expected) {
                            problems.push(format!(
                                "{at}: [{label}] needs `[{label}]: {expected}` in src/guide.rs's \
                                 guide_links (it has {:?})",
                                rustdoc.get(&label)
                            ));
                        }
                    }
                    Target::Reference(label) => {
                        if !defined.contains(&label) {
                            problems.push(format!(
                                "{at}: [{label}] is not defined in {}",
                                doc.display()
                            ));
                        }
                    }
                }
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_and_anchor_of_the_readme_and_the_guides_resolves() {
    let problems = problems();
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_sees_a_broken_file_anchor_and_reference() {
    let doc = Path::new("docs/jobs.md");
    assert_eq!(
        check_destination(doc, "schema.md#dedupe-needs-idempotency_key"),
        None
    );
    assert_eq!(check_destination(doc, "#testing-your-jobs"), None);
    assert_eq!(check_destination(doc, "../README.md#guides"), None);
    assert!(check_destination(doc, "nowhere.md").is_some());
    assert!(check_destination(doc, "schema.md#no-such-heading").is_some());
    assert!(check_destination(doc, "../../elsewhere/peers").is_some());
    assert!(check_destination(doc, "../Cargo.toml#x").is_some());
    assert_eq!(
        slug("Dedupe needs idempotency_key"),
        "dedupe-needs-idempotency_key"
    );
    assert_eq!(
        slug("`litejobs work`: settings, retries"),
        "litejobs-work-settings-retries"
    );
    assert_eq!(slug("Jobs [in any](x.md) language"), "jobs-in-any-language");
    let found = links(&without_code_spans(
        "see [a](b.md#c), [d][e.md] and `[x](y)`, then [f][]",
    ));
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(links(&without_code_spans("`[x](y)` only")).is_empty());
    assert!(
        matches!(&links("[label]: target.md#x")[..], [Target::Definition(l, d)] if l == "label" && d == "target.md#x")
    );
}
