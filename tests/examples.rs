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
fn signup_story_runs_a_workflow_retries_dies_and_is_requeued() {
    let out = run("signup");
    for expected in [
        "user 1 signed up; workflow 1 committed with it: account (job 1), then welcome (job 2) \
         and crm (job 3); report (job 4)",
        "job 1 create_account attempt 1: succeeded",
        // The email waited for the account and read the id it returned.
        "  welcome email for account 1001",
        "job 2 send_welcome_email attempt 1: succeeded",
        "job 3 crm_webhook attempt 1: failed (CRM answered 503)",
        "job 3 crm_webhook attempt 3: dead (CRM answered 503)",
        "CRM job 3 is dead after 3 attempts",
        "requeued dead job 3 as job 5",
        "job 5 crm_webhook: succeeded",
        "dead job 3 stays dead, requeued by ops@example.com as job 5 (CRM is back up)",
        "nightly report entries: 1",
        "workflow 1: account succeeded, welcome succeeded, crm dead, report succeeded, crm succeeded",
        "done",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    // No step that waits for the account starts before it has succeeded.
    let line = |text: &str| out.lines().position(|l| l.starts_with(text));
    let account = line("job 1 create_account attempt 1: succeeded").expect("account");
    for after in ["job 2 ", "job 3 "] {
        assert!(
            line(after).expect("ran") > account,
            "{after} before the account:\n{out}"
        );
    }
}
