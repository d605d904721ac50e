//! The source's layout: no import cycle between modules.
//!
//! A cycle means neither module can be read, tested or moved without the other; the check
//! keeps the layering the crate-level documentation lists. It reads the sources (the
//! library, and the `litejobs` binary as a crate of its own) rather than running
//! `cargo modules dependencies --acyclic`, which judges items, not modules (a type and its own
//! method count as a cycle there), and takes minutes to install.
//!
//! What counts as a dependency: every path in code that names an item of the crate
//! (`use` declarations, `crate::…`, `super::…`, `self::…`, and paths through a child module),
//! resolved through the `use` declarations that re-export it to the module that defines it.
//! Comments, strings and `#[cfg(test)]` items are not read: tests may use anything. Cycles
//! are looked for among the children of each module, so the crate's top-level modules are
//! checked against each other, and `web/`'s files against each other; a module's own file
//! (`mod.rs`, `lib.rs`) is the façade its children are seen through, not one of them.
//! `LAYOUT_EDGES=1 cargo test --test integration layout::` prints every edge it found.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from its crate's root (`["web", "pages"]`); the root is empty.
type ModPath = Vec<String>;

/// The crates of this package: the library, and the binary (a crate of its own).
const ROOTS: [&str; 2] = ["src/lib.rs", "src/bin/litejobs/main.rs"];

/// The check itself finds a cycle through `use`, through a path in code and through a
/// re-export, and ignores tests, comments and strings.
#[test]
fn the_check_finds_a_cycle_and_only_a_cycle() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
        std::fs::write(path, text).expect("written");
    };
    write(
        "src/lib.rs",
        "mod a;\nmod b;\nmod c;\npub use b::Thing;\n// crate::c::Z in a comment\n",
    );
    write("src/a.rs", "use crate::Thing;\npub struct A;\n");
    write(
        "src/b/mod.rs",
        "mod inner;\npub use inner::Thing;\nconst S: &str = \"crate::c::Z\";\n",
    );
    write(
        "src/b/inner.rs",
        "pub struct Thing;\nfn f(_: crate::a::A) {}\n#[cfg(test)]\nmod tests {\n    use crate::c::Z;\n}\n",
    );
    write("src/c.rs", "pub struct Z;\nfn g(_: crate::a::A) {}\n");
    let krate = Crate::read(&dir.path().join("src/lib.rs"), dir.path());
    let report = krate.cycles();
    let groups: Vec<&str> = report.lines().filter(|l| l.starts_with("in ")).collect();
    assert_eq!(groups.len(), 1, "c only uses a: {report}");
    assert!(groups[0].ends_with("among a, b: a -> b -> a"), "{report}");
}

#[test]
fn no_import_cycle_between_modules() {
    let root_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut report = String::new();
    let mut checked = 0;
    for root in ROOTS {
        let krate = Crate::read(&root_dir.join(root), root_dir);
        checked += krate.files.len();
        report.push_str(&krate.cycles());
    }
    assert!(checked > 50, "only {checked} source files found");
    assert!(
        report.is_empty(),
        "import cycles between modules:\n{report}"
    );
}

/// The graph of one crate.
struct Crate {
    /// Every module: where its own items are written (a file, or an inline `mod x { … }`).
    modules: BTreeSet<ModPath>,
    /// Names each module brings into scope with `use` (and re-exports), to their full paths.
    imports: BTreeMap<ModPath, BTreeMap<String, Vec<String>>>,
    /// Each file's module and tokens.
    files: Vec<SourceFile>,
}

struct SourceFile {
    /// Relative to the package, for the report.
    name: String,
    module: ModPath,
    tokens: Vec<Token>,
}

#[derive(Clone, Debug, PartialEq)]
struct Token {
    text: String,
    line: usize,
}

/// A use of one module by another, with where it is written.
struct Edge {
    from: ModPath,
    to: ModPath,
    site: String,
}

impl Crate {
    fn read(root: &Path, package: &Path) -> Crate {
        let mut krate = Crate {
            modules: BTreeSet::new(),
            imports: BTreeMap::new(),
            files: Vec::new(),
        };
        krate.read_file(root, Vec::new(), package);
        // Inline modules (`mod x { … }`) and `use` declarations: one pass over every file.
        let files = std::mem::take(&mut krate.files);
        for file in &files {
            for (module, tokens) in scopes(&file.module, &file.tokens) {
                krate.modules.insert(module.clone());
                for path in use_paths(&tokens) {
                    if let Some((alias, full)) = path.binding() {
                        krate
                            .imports
                            .entry(module.clone())
                            .or_default()
                            .insert(alias, full);
                    }
                }
            }
        }
        krate.files = files;
        krate
    }

    /// Reads the file of `module` and, through its `mod name;` declarations, its children.
    fn read_file(&mut self, path: &Path, module: ModPath, package: &Path) {
        let source = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let tokens = tokenize(&without_test_items(&strip(&source)));
        let own_dir = match path.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "main.rs" | "mod.rs") => path.parent().expect("a parent").to_owned(),
            _ => path.with_extension(""),
        };
        self.modules.insert(module.clone());
        let mut children = Vec::new();
        for (i, token) in tokens.iter().enumerate() {
            if token.text == "mod" {
                if let (Some(name), Some(end)) = (tokens.get(i + 1), tokens.get(i + 2)) {
                    if end.text == ";" {
                        children.push(name.text.clone());
                    }
                }
            }
        }
        self.files.push(SourceFile {
            name: path
                .strip_prefix(package)
                .unwrap_or(path)
                .display()
                .to_string(),
            module: module.clone(),
            tokens,
        });
        for child in children {
            let flat = own_dir.join(format!("{child}.rs"));
            let nested = own_dir.join(&child).join("mod.rs");
            let file: PathBuf = if flat.exists() { flat } else { nested };
            let mut child_module = module.clone();
            child_module.push(child);
            self.read_file(&file, child_module, package);
        }
    }

    /// Every use of a module by another, resolved to the module that defines the item.
    fn edges(&self) -> Vec<Edge> {
        let mut edges = Vec::new();
        for file in &self.files {
            for (module, tokens) in scopes(&file.module, &file.tokens) {
                let mut paths = use_paths(&tokens);
                paths.extend(code_paths(&tokens, &self.children_of(&module)));
                for path in paths {
                    let Some(to) = self.resolve(&module, &path.segments) else {
                        continue;
                    };
                    if to != module {
                        edges.push(Edge {
                            from: module.clone(),
                            to,
                            site: format!(
                                "{}:{}: {}",
                                file.name,
                                path.line,
                                path.segments.join("::")
                            ),
                        });
                    }
                }
            }
        }
        edges
    }

    fn children_of(&self, module: &ModPath) -> BTreeSet<String> {
        self.modules
            .iter()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .map(|m| m[module.len()].clone())
            .collect()
    }

    /// The module that defines what `segments`, written in `context`, names; None for a path
    /// outside the crate (`std::…`, another crate).
    fn resolve(&self, context: &ModPath, segments: &[String]) -> Option<ModPath> {
        self.resolve_depth(context, segments, 0)
    }

    fn resolve_depth(
        &self,
        context: &ModPath,
        segments: &[String],
        depth: usize,
    ) -> Option<ModPath> {
        let mut current: ModPath;
        let mut rest = segments;
        match segments.first().map(String::as_str) {
            Some("crate") => {
                current = Vec::new();
                rest = &segments[1..];
            }
            Some("super") | Some("self") => {
                current = context.clone();
                while let Some(first) = rest.first() {
                    match first.as_str() {
                        "super" => {
                            current.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
            }
            Some(first) if self.children_of(context).contains(first) => current = context.clone(),
            Some(first) if depth > 0 => {
                // A re-export's own path may start with a name its module imported.
                let target = self.imports.get(context)?.get(first)?.clone();
                let mut full = target;
                full.extend_from_slice(&segments[1..]);
                return self.resolve_depth(context, &full, depth + 1);
            }
            _ => return None,
        }
        for segment in rest {
            let mut child = current.clone();
            child.push(segment.clone());
            if self.modules.contains(&child) {
                current = child;
                continue;
            }
            // A name brought in by `use` (a re-export): follow it to where it is defined.
            if depth < 8 {
                if let Some(target) = self.imports.get(&current).and_then(|i| i.get(segment)) {
                    let owner = current.clone();
                    return self.resolve_depth(&owner, &target.clone(), depth + 1);
                }
            }
            break;
        }
        Some(current)
    }

    /// The cycles, as text; empty when there are none.
    fn cycles(&self) -> String {
        // Each edge belongs to the level of the two modules' closest common ancestor, where
        // it joins two of that ancestor's children.
        let mut levels: BTreeMap<ModPath, BTreeMap<(String, String), Vec<String>>> =
            BTreeMap::new();
        for edge in self.edges() {
            let common: ModPath = edge
                .from
                .iter()
                .zip(&edge.to)
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a.clone())
                .collect();
            // A module's own file (`mod.rs`) is the façade of its children: it re-exports
            // them and they use what it declares, so it is not a node of its own.
            let (Some(from), Some(to)) = (edge.from.get(common.len()), edge.to.get(common.len()))
            else {
                continue;
            };
            let (from, to) = (from.clone(), to.clone());
            if from != to {
                levels
                    .entry(common)
                    .or_default()
                    .entry((from, to))
                    .or_default()
                    .push(edge.site);
            }
        }
        let mut report = String::new();
        if std::env::var_os("LAYOUT_EDGES").is_some() {
            for (level, edges) in &levels {
                for ((from, to), sites) in edges {
                    eprintln!("[{}] {from} -> {to}: {}", level.join("::"), sites[0]);
                }
            }
        }
        for (level, edges) in &levels {
            let name = if level.is_empty() {
                format!("the crate root of {}", self.files[0].name)
            } else {
                format!("`{}`", level.join("::"))
            };
            for (group, cycle) in find_cycles(edges.keys()) {
                report.push_str(&format!(
                    "in {name}, among {}: {} -> {}\n",
                    group.join(", "),
                    cycle.join(" -> "),
                    cycle[0]
                ));
                for (i, from) in cycle.iter().enumerate() {
                    let to = &cycle[(i + 1) % cycle.len()];
                    let sites = &edges[&(from.clone(), to.clone())];
                    report.push_str(&format!("  {from} -> {to}:\n"));
                    for site in sites.iter().take(3) {
                        report.push_str(&format!("    {site}\n"));
                    }
                    if sites.len() > 3 {
                        report.push_str(&format!("    ... and {} more\n", sites.len() - 3));
                    }
                }
            }
        }
        report
    }
}

/// Each strongly connected group of nodes (Tarjan's algorithm), with one cycle through it (a
/// shortest path back to its first node inside the group).
fn find_cycles<'a>(
    edges: impl Iterator<Item = &'a (String, String)>,
) -> Vec<(Vec<String>, Vec<String>)> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    let nodes: Vec<&str> = next.keys().copied().collect();
    let index_of: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let adjacency: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| next[n].iter().map(|t| index_of[t]).collect())
        .collect();
    let groups = strongly_connected(&adjacency);
    let mut cycles = Vec::new();
    for group in groups.into_iter().filter(|g| g.len() > 1) {
        let inside: BTreeSet<usize> = group.iter().copied().collect();
        let start = group[0];
        // Breadth-first from start back to start, staying inside the group.
        let mut parent: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut found = None;
        'search: while let Some(node) = queue.pop_front() {
            for &to in &adjacency[node] {
                if !inside.contains(&to) {
                    continue;
                }
                if to == start {
                    found = Some(node);
                    break 'search;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = parent.entry(to) {
                    e.insert(node);
                    queue.push_back(to);
                }
            }
        }
        let mut path = Vec::new();
        let mut node = found.expect("a strongly connected group has a cycle through each node");
        while node != start {
            path.push(nodes[node].to_owned());
            node = parent[&node];
        }
        path.push(nodes[start].to_owned());
        path.reverse();
        let members = group.iter().map(|&n| nodes[n].to_owned()).collect();
        cycles.push((members, path));
    }
    cycles
}

/// Tarjan's strongly connected components over node indexes.
fn strongly_connected(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adjacency: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next_index: usize,
        groups: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next_index);
        s.low[v] = s.next_index;
        s.next_index += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for i in 0..s.adjacency[v].len() {
            let w = s.adjacency[v][i];
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(w_index) if s.on_stack[w] => s.low[v] = s.low[v].min(w_index),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                group.push(w);
                if w == v {
                    break;
                }
            }
            group.sort_unstable();
            s.groups.push(group);
        }
    }
    let n = adjacency.len();
    let mut state = State {
        adjacency,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next_index: 0,
        groups: Vec::new(),
    };
    for v in 0..n {
        if state.index[v].is_none() {
            visit(&mut state, v);
        }
    }
    state.groups
}

/// A path as written, with its line.
struct WrittenPath {
    segments: Vec<String>,
    line: usize,
    /// For a `use` declaration: the name it brings into scope (`as` renames it).
    alias: Option<String>,
}

impl WrittenPath {
    /// The name a `use` declaration binds, and the full path it stands for.
    fn binding(&self) -> Option<(String, Vec<String>)> {
        let alias = self.alias.clone()?;
        (alias != "*" && alias != "_").then(|| (alias, self.segments.clone()))
    }
}

/// The file's tokens split by module: the file's own, and each inline `mod x { … }`'s.
fn scopes(module: &ModPath, tokens: &[Token]) -> Vec<(ModPath, Vec<Token>)> {
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
fn use_paths(tokens: &[Token]) -> Vec<WrittenPath> {
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
fn code_paths(tokens: &[Token], children: &BTreeSet<String>) -> Vec<WrittenPath> {
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
fn tokenize(code: &str) -> Vec<Token> {
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
fn strip(source: &str) -> String {
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
fn without_test_items(code: &str) -> String {
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
