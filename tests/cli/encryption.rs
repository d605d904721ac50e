//! Encrypted payloads from the command line: `enqueue --encrypt`, a type marked with `keys
//! encrypt-type` honoured by `enqueue`, views with and without the keys, `work` refusing to
//! start without the keys its jobs need, `keys new`, `keys rotate`, and the Python program of
//! docs/schema.md enqueueing an encrypted job for `work --exec` and reading its result.

use super::work::{initialized_db, WorkChild};
use super::*;

const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const K2: &str = "k2:IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI=";
const K9: &str = "k9:CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk=";
const SECRET: &str = "4111-CLI-SECRET";

/// The binary with `keys` in LITEJOBS_ENCRYPTION_KEYS (none when empty).
fn run_keys(db: &Path, keys: &str, args: &[&str]) -> Run {
    let mut cmd = litejobs(db);
    if !keys.is_empty() {
        cmd.env("LITEJOBS_ENCRYPTION_KEYS", keys);
    }
    Run::from(cmd.args(args).output().expect("running litejobs"))
}

fn stored_secret(fx: &Fx) -> i64 {
    fx.sql_i64(&format!(
        "SELECT count(*) FROM jobs WHERE payload LIKE '%{SECRET}%' \
         OR coalesce(result, '') LIKE '%{SECRET}%'"
    ))
}

#[test]
fn enqueue_encrypt_stores_an_envelope_that_views_open_only_with_the_key() {
    let fx = Fx::new();
    let payload = json!({"card": SECRET, "password": "pw"}).to_string();
    let id: i64 = run_keys(&fx.path, K1, &["enqueue", "--encrypt", "charge", &payload])
        .ok()
        .stdout
        .trim()
        .parse()
        .expect("an id");
    assert_eq!(stored_secret(&fx), 0);
    // Without a key: refused, one line, nothing written.
    run_keys(&fx.path, "", &["enqueue", "--encrypt", "charge", &payload])
        .refused("no encryption key");
    assert_eq!(fx.sql_i64("SELECT count(*) FROM jobs"), 1);

    let shown = run_keys(&fx.path, K1, &["show", &id.to_string(), "--json"]).json();
    assert_eq!(shown["job"]["payload"]["card"], SECRET);
    assert_eq!(
        shown["job"]["payload"]["password"], "[masked]",
        "then masked"
    );
    assert_eq!(shown["job"]["encryption_key"], "k1");
    let listed = run_keys(&fx.path, K1, &["list", "--json"]).json();
    assert_eq!(listed["jobs"][0]["payload"]["card"], SECRET);

    let keyless = run_keys(&fx.path, "", &["show", &id.to_string(), "--json"]).json();
    assert_eq!(keyless["job"]["payload"], "encrypted (key k1)");
    assert_eq!(keyless["job"]["encryption_key"], "k1");
    let text = run_keys(&fx.path, "", &["show", &id.to_string()])
        .ok()
        .stdout;
    assert!(
        text.contains("encrypted  at rest, with key k1 (not held here"),
        "{text}"
    );
    assert!(!text.contains(SECRET), "{text}");
    // A key file works as the variable does; a bad entry is refused without showing it.
    let keys_file = fx._dir.path().join("keys");
    std::fs::write(&keys_file, format!("# the current key\n{K1}\n")).expect("key file");
    let from_file = run_keys(
        &fx.path,
        "",
        &[
            "--keys-file",
            &keys_file.to_string_lossy(),
            "show",
            &id.to_string(),
            "--json",
        ],
    )
    .json();
    assert_eq!(from_file["job"]["payload"]["card"], SECRET);
    run_keys(&fx.path, "k1:c2VjcmV0LXNob3J0", &["list"])
        .refused("LITEJOBS_ENCRYPTION_KEYS: entry 1");
}

#[test]
fn a_type_marked_with_keys_encrypt_type_is_encrypted_by_every_enqueue() {
    let fx = Fx::new();
    fx.run(&["keys", "encrypt-type", "charge"]).ok();
    let payload = json!({"card": SECRET}).to_string();
    run_keys(&fx.path, K1, &["enqueue", "charge", &payload]).ok();
    assert_eq!(stored_secret(&fx), 0);
    assert_eq!(
        fx.sql_i64("SELECT count(*) FROM jobs WHERE payload LIKE '{\"litejobs_envelope\":1,%'"),
        1
    );
    run_keys(&fx.path, "", &["enqueue", "charge", &payload])
        .refused("is of a type marked encrypted");
    assert_eq!(fx.sql_i64("SELECT count(*) FROM jobs"), 1);
    let types = run_keys(&fx.path, K1, &["keys", "types", "--json"]).json();
    assert_eq!(types["keys"], json!(["k1"]));
    assert_eq!(types["encrypted_types"][0]["job_type"], "charge");
    let again = fx.run(&["keys", "encrypt-type", "charge"]).ok().stdout;
    assert!(again.contains("was already marked encrypted"), "{again}");
    fx.run(&["keys", "clear-type", "charge"]).ok();
    run_keys(&fx.path, "", &["enqueue", "charge", &payload]).ok();
    assert_eq!(stored_secret(&fx), 1, "in clear again");
}

#[test]
fn work_refuses_to_start_naming_the_types_it_holds_no_key_for() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    run(&db, &["keys", "encrypt-type", "charge"]).ok();
    let work = WorkChild::start_with(&db, &["--exec", "charge=/bin/cat"], &[]);
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(2), "{lines:?}");
    let last = lines.last().cloned().unwrap_or_default();
    assert!(
        last.contains("cannot start the worker: this worker holds no encryption key, but job type charge is marked encrypted"),
        "{lines:?}"
    );
    // A waiting job sealed with a key the worker does not hold.
    run_keys(&db, K9, &["enqueue", "charge", "{}"]).ok();
    let work = WorkChild::start_with(
        &db,
        &["--exec", "charge=/bin/cat"],
        &[("LITEJOBS_ENCRYPTION_KEYS", K1)],
    );
    let (code, lines) = work.exit_code();
    assert_eq!(code, Some(2), "{lines:?}");
    assert!(
        lines
            .last()
            .is_some_and(|l| l.contains("waiting jobs of charge (key k9)")),
        "{lines:?}"
    );
}

#[test]
fn keys_new_prints_a_fresh_key_and_keys_rotate_moves_every_job_to_the_first() {
    let fx = Fx::new();
    let made = fx.run(&["keys", "new"]).ok();
    let line = made.stdout.trim();
    assert!(line.starts_with("k-20"), "{line}");
    assert!(
        litejobs::encryption::Keyring::parse(line).is_ok(),
        "{line} is a key entry"
    );
    assert!(made.stderr.contains("put it first"), "{}", made.stderr);
    assert_ne!(
        fx.run(&["keys", "new", "k5"]).ok().stdout,
        fx.run(&["keys", "new", "k5"]).ok().stdout
    );
    fx.run(&["keys", "new", "bad name"]).refused("holds ' '");

    for n in 0..3 {
        let payload = json!({"card": format!("{SECRET}-{n}")}).to_string();
        run_keys(&fx.path, K1, &["enqueue", "--encrypt", "charge", &payload]).ok();
    }
    let both = format!("{K2},{K1}");
    let out = run_keys(&fx.path, &both, &["keys", "rotate"]).ok().stdout;
    assert!(
        out.contains("key k2: 3 jobs looked at; 3 columns re-encrypted, 0 in clear encrypted, 0 already under it"),
        "{out}"
    );
    assert_eq!(
        fx.sql_i64("SELECT count(*) FROM jobs WHERE payload LIKE '%\"key\":\"k2\"%'"),
        3
    );
    let listed = run_keys(&fx.path, K2, &["list", "--json"]).json();
    assert_eq!(listed["jobs"][2]["payload"]["card"], format!("{SECRET}-0"));
    // A job under a key the rotation does not hold is left, named, and the exit says so.
    run_keys(&fx.path, K9, &["enqueue", "--encrypt", "charge", "{}"]).ok();
    let run = run_keys(&fx.path, &both, &["keys", "rotate", "--json"]);
    assert_eq!(run.code, Some(1), "{run:#?}");
    let report: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(report["current"], 3, "{report}");
    assert_eq!(report["unreadable"], 1, "{report}");
    assert!(
        report["unreadable_examples"][0]
            .as_str()
            .is_some_and(|e| e.contains("payload encrypted with key k9")),
        "{report}"
    );
    run_keys(&fx.path, "", &["keys", "rotate"]).refused("no encryption key");
}

/// `keys rotate` names the first ten columns it left and says how many more there are.
#[test]
fn keys_rotate_says_how_many_left_columns_it_does_not_name() {
    let fx = Fx::new();
    for _ in 0..12 {
        run_keys(&fx.path, K9, &["enqueue", "--encrypt", "charge", "{}"]).ok();
    }
    let run = run_keys(&fx.path, K1, &["keys", "rotate"]);
    assert_eq!(run.code, Some(1), "{run:#?}");
    assert!(
        run.stdout.contains("12 columns left as they are:"),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.stdout.matches("payload encrypted with key k9").count(),
        10,
        "{}",
        run.stdout
    );
    assert!(run.stdout.ends_with("  and 2 more\n"), "{}", run.stdout);
}

/// The ```python block of docs/schema.md that names this file.
fn guide_program() -> String {
    let guide = include_str!("../../docs/schema.md");
    let at = guide
        .find("(tests/cli/encryption.rs runs this)")
        .expect("docs/schema.md has the marked Python program");
    let start = guide[..at].rfind("```python\n").expect("in a python block") + "```python\n".len();
    let end = start + guide[start..].find("```").expect("the block ends");
    guide[start..end].to_string()
}

/// True when python3 with a `cryptography` that has AES-GCM-SIV (42 or later) runs here;
/// in CI (which installs it) its absence fails the test.
fn have_python_cryptography() -> bool {
    let ok = Command::new("python3")
        .args([
            "-c",
            "from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 with cryptography >= 42 is needed by this test and must be installed in CI"
        );
        eprintln!("skipped: python3 with cryptography >= 42 is not installed here");
    }
    ok
}

#[test]
fn the_python_example_enqueues_an_encrypted_job_for_work_exec_and_reads_its_result() {
    if crate::support::sqlite_only() || !have_python_cryptography() {
        return;
    }
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let program = dir.path().join("charge.py");
    std::fs::write(&program, guide_program()).expect("writing the guide's program");
    let python = |args: &[&str]| {
        let out = Command::new("python3")
            .arg(&program)
            .arg(&db)
            .args(args)
            .env("LITEJOBS_ENCRYPTION_KEYS", format!("{K1},{K2}"))
            .output()
            .expect("running python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let id: i64 = python(&["enqueue"])
        .parse()
        .expect("the program prints the id");
    let card = "4111 1111 1111 1111";
    let stored = |column: &str| -> i64 {
        raw_conn(&db)
            .query_row(
                &format!("SELECT count(*) FROM jobs WHERE id = ?1 AND {column} LIKE '%4111%'"),
                [id],
                |r| r.get(0),
            )
            .expect("count")
    };
    assert_eq!(stored("payload"), 0);
    assert_eq!(
        python(&["result", &id.to_string()]),
        "null",
        "a result not written yet reads as null"
    );

    let handler = crate::support::write_script(
        dir.path(),
        "charge_handler.py",
        "#!/usr/bin/env python3\nimport json, sys\njob = json.load(sys.stdin)\nprint(json.dumps({'charged': job['cents'], 'card': job['card']}))\n",
    );
    let exec = format!("charge={}", handler.display());
    let mut work = WorkChild::start_with(
        &db,
        &["--exec", &exec, "--queue", "billing=1"],
        &[("LITEJOBS_ENCRYPTION_KEYS", K1)],
    );
    assert!(work.wait_for_line("running on"), "{:?}", work.seen);
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let job = run(&db, &["show", &id.to_string(), "--json"]).json();
        if job["job"]["status"] == "succeeded" {
            break;
        }
        assert!(Instant::now() < end, "job {id} did not succeed: {job}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        stored("result"),
        0,
        "the command's result is stored encrypted"
    );
    let result: Value = serde_json::from_str(&python(&["result", &id.to_string()])).expect("JSON");
    assert_eq!(result, json!({"charged": 1250, "card": card}));
}
