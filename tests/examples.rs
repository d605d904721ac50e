//! Runs the examples (built by `cargo test` beside this binary) and checks their output, so
//! the README's stories cannot rot.

fn run(name: &str) -> String {
    crate::support::run_example(name, &[])
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
