//! Runs the examples (built by `cargo test` beside this binary) and checks their output, so
//! the README's stories cannot rot.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/integration-HASH → target/<profile>/examples/<name>
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile> directory");
    profile_dir.join("examples").join(name)
}

fn run(name: &str) -> String {
    let path = example(name);
    assert!(
        path.exists(),
        "{} is not built; run the tests with `cargo test` so examples are compiled",
        path.display()
    );
    let out = Command::new(&path).output().expect("run example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example {name} failed with {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn quickstart_runs_its_job_to_success() {
    let out = run("quickstart");
    assert!(
        out.contains("sending the welcome email to user 42"),
        "{out}"
    );
    assert!(out.contains("job 1: succeeded after 1 attempt(s)"), "{out}");
}

#[test]
fn readme_quick_start_is_the_quickstart_example_verbatim() {
    let readme = include_str!("../README.md");
    let example = include_str!("../examples/quickstart.rs");
    assert!(
        readme.contains(example),
        "README's quick start differs from examples/quickstart.rs; copy the file into the README"
    );
}

#[test]
fn signup_story_retries_dies_and_is_requeued() {
    let out = run("signup");
    for expected in [
        "user 1 signed up; jobs 1 (email), 2 (CRM), 3 (report) committed with it",
        "job 1 send_welcome_email attempt 1: succeeded",
        "job 2 crm_webhook attempt 1: failed (CRM answered 503)",
        "job 2 crm_webhook attempt 3: dead (CRM answered 503)",
        "CRM job 2 is dead after 3 attempts",
        "requeued dead job 2 as job 4",
        "job 4 crm_webhook: succeeded",
        "dead job 2 stays dead, requeued by ops@example.com as job 4 (CRM is back up)",
        "nightly report entries: 1",
        "done",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}
