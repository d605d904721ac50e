//! `work --help` lists every `LITEJOBS_*` variable litejobs reads, one line each: the list is
//! taken from the source at test time (every `"LITEJOBS_..."` string literal under `src/`),
//! so a new variable without help text fails here.

use super::*;

/// Variables in the source that `work` does not read, and why they need no line in its help.
const NOT_READ_BY_WORK: &[(&str, &str)] = &[
    ("LITEJOBS_WEB_TOKEN", "read by `web` only"),
    // The unit tests that need a server (src/storage/postgres/tests_on_server).
    ("LITEJOBS_TEST_PG", "read by tests only"),
    // Set for the commands of --exec/--serve (src/exec), not read: documented with them.
    ("LITEJOBS_JOB_ID", "given to commands"),
    ("LITEJOBS_JOB_TYPE", "given to commands"),
    ("LITEJOBS_QUEUE", "given to commands"),
    ("LITEJOBS_ATTEMPT", "given to commands"),
    ("LITEJOBS_MAX_ATTEMPTS", "given to commands"),
    ("LITEJOBS_DEADLINE_MS", "given to commands"),
    ("LITEJOBS_IDEMPOTENCY_KEY", "given to commands"),
    ("LITEJOBS_GROUP_KEY", "given to commands"),
];

/// Every `"LITEJOBS_[A-Z_]+"` string literal in the `.rs` files under `src/`.
fn variables_in_source() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                found.extend(literals(&text));
            }
        }
    }
    found
}

/// The `"LITEJOBS_[A-Z_]+"` literals of one file (a quote, the name, a quote).
fn literals(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("\"LITEJOBS_") {
        let after = &rest[at + 1..];
        let len = after
            .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
            .unwrap_or(after.len());
        if after[len..].starts_with('"') {
            names.push(after[..len].to_string());
        }
        rest = &after[len..];
    }
    names
}

/// True when `text` holds `name` as a whole word (not as the start of a longer name).
fn has_word(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !part(before) && !part(after)
    })
}

fn work_help() -> String {
    let output = Command::new(BIN)
        .args(["work", "--help"])
        .env_remove("LITEJOBS_DB")
        .output()
        .expect("running litejobs work --help");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).expect("UTF-8 help")
}

#[test]
fn the_scan_finds_string_literals_only() {
    let text = r#"lookup("LITEJOBS_A_B"); format!("LITEJOBS_C={v}"); // `LITEJOBS_D`"#;
    assert_eq!(literals(text), vec!["LITEJOBS_A_B".to_string()]);
    assert!(has_word("  LITEJOBS_MAIL_DIR  x", "LITEJOBS_MAIL_DIR"));
    assert!(!has_word("LITEJOBS_MAIL_DIRS", "LITEJOBS_MAIL_DIR"));
}

#[test]
fn work_help_lists_every_litejobs_variable_the_code_reads() {
    let found = variables_in_source();
    for known in [
        "LITEJOBS_DB",
        "LITEJOBS_SMTP_URL",
        "LITEJOBS_WEBHOOK_TIMEOUT",
    ] {
        assert!(found.contains(known), "the scan missed {known}: {found:?}");
    }
    for (name, why) in NOT_READ_BY_WORK {
        assert!(
            found.contains(*name),
            "{name} ({why}) is no longer in the source: drop it from NOT_READ_BY_WORK"
        );
    }
    let help = work_help();
    let excluded: BTreeSet<&str> = NOT_READ_BY_WORK.iter().map(|(name, _)| *name).collect();
    let missing: Vec<&String> = found
        .iter()
        .filter(|name| !excluded.contains(name.as_str()) && !has_word(&help, name))
        .collect();
    assert!(
        missing.is_empty(),
        "work --help does not list {missing:?} (add a line to work_startup::env_help):\n{help}"
    );
    // Read by env_logger, not named in litejobs' source.
    assert!(has_word(&help, "RUST_LOG"), "{help}");
}

#[test]
fn each_variable_has_its_own_line_with_a_description() {
    let help = work_help();
    for name in variables_in_source() {
        if NOT_READ_BY_WORK.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line starts with {name}:\n{help}"));
        let what = line.trim_start()[name.len()..].trim();
        assert!(what.len() >= 10, "{name} has no description: {line:?}");
    }
}
