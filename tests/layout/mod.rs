//! The source's layout: no import cycle between modules, and no file in `src/` over 700
//! lines (a file that long holds more than one concept: split it).
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

mod graph;
mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use graph::find_cycles;
use source::{code_paths, scopes, strip, tokenize, use_paths, without_test_items, Token};

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
            Some(first) if depth > 0 && depth < 8 => {
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

/// The most lines a file in `src/` may have.
const MAX_LINES: usize = 700;

#[test]
fn no_source_file_is_over_700_lines() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("a readable directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    assert!(files.len() > 50, "only {} source files found", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path)
                .expect("readable")
                .lines()
                .count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}
