//! What people see while the PostgreSQL server is down, and how the processes show on the
//! server: the read commands and the dashboard answer at once with a clear error naming the
//! server without its password (503 pages, exit 2), and serve again once it is back;
//! `litejobs work` takes a two-host URL (libpq tries the hosts in turn), shows it without
//! the password, and names its connections in `pg_stat_activity`. On a private server
//! (tests/support/pg_server.rs), which these tests stop.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use diesel::sql_types::{BigInt, Text};
use diesel::{sql_query, QueryableByName, RunQueryDsl};
use litejobs::{NewJob, Queue};
use serde_json::json;

use crate::support::pg_server::PgServer;
use crate::support::KillOnDrop;

const BIN: &str = env!("CARGO_BIN_EXE_litejobs");
/// In the URLs (the test servers trust every local connection, so it is never checked): no
/// output may show it, nor a piece of it. With its `/` and `?` percent-encoded, as libpq
/// needs in a URL's user part.
const PASSWORD: &str = "s3cr3t/pw?xyz";
const ENCODED: &str = "s3cr3t%2Fpw%3Fxyz";

/// True when `text` shows the password or a piece of it.
fn leaks(text: &str) -> bool {
    ["s3cr3t", "pw?xyz", "%2Fpw", "xyz"]
        .iter()
        .any(|piece| text.contains(piece))
}
/// The bound on every wait here.
const WAIT: Duration = Duration::from_secs(30);

/// The binary with `--db URL ARGS`, its exit code and stderr, waited for at most [`WAIT`]
/// (a command that hung on a server that is down would fail here, not hang the suite).
fn run(url: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut child = KillOnDrop(
        Command::new(BIN)
            .arg("--db")
            .arg(url)
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("LITEJOBS_DB")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running litejobs"),
    );
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for litejobs") {
            break status;
        }
        assert!(Instant::now() < deadline, "litejobs {args:?} hung");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().expect("piped"), &mut stderr)
        .expect("reading stderr");
    (status.code(), stderr)
}

#[cfg(feature = "web")]
#[test]
fn while_the_server_is_down_the_cli_and_the_dashboard_answer_with_a_clear_error() {
    use litejobs::web::{Dashboard, DashboardOptions};

    let Some(server) = PgServer::start(&[]) else {
        return;
    };
    let shown = format!(
        "postgres://postgres:***@127.0.0.1:{}/postgres",
        server.port()
    );
    // Unencoded, the password's `?` starts the query for libpq: refused, without a piece of
    // the password in the message.
    let raw = format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres",
        server.port()
    );
    let refused = Queue::open(&raw)
        .expect_err("libpq cannot read it")
        .to_string();
    assert!(
        refused.contains("percent-encoded") && !leaks(&refused),
        "{refused}"
    );
    let (code, stderr) = run(&raw, &["stats"]);
    assert!(code == Some(2) && !leaks(&stderr), "{stderr}");

    let url = format!(
        "postgres://postgres:{ENCODED}@127.0.0.1:{}/postgres",
        server.port()
    );
    let queue = Queue::open(&url).expect("opening the queue");
    let id = queue
        .enqueue(NewJob::new("work", json!({})))
        .expect("enqueue");
    let dashboard = Dashboard::start(&queue, DashboardOptions::new().addr("127.0.0.1:0"))
        .expect("starting the dashboard");
    let mut client = crate::web::Client::new(&dashboard.url());
    let job = format!("/jobs/{id}");
    let paths = ["/", "/jobs", &job[..], "/dead", "/api/stats"];
    for path in paths {
        client.get(path).expect(200);
    }

    server.stop();
    // Twice: the first request finds the pool's connections cut, later ones find none.
    for round in 1..=2 {
        for path in paths {
            let asked = Instant::now();
            let page = client.get(path);
            println!(
                "GET {path} while down (round {round}): {} in {:?}",
                page.status,
                asked.elapsed()
            );
            assert_eq!(
                page.status, 503,
                "GET {path} while the server is down: {page:#?}"
            );
            assert!(
                page.body.contains("cannot reach the PostgreSQL server")
                    && page.body.contains(&shown),
                "GET {path} says what is wrong, naming the server: {}",
                page.body
            );
            if !path.starts_with("/api") {
                assert!(page.body.contains("Database unavailable"), "{}", page.body);
            }
            assert!(!leaks(&page.body), "no password: {}", page.body);
        }
    }
    for args in [
        vec!["list"],
        vec!["show", &id.to_string()],
        vec!["stats"],
        vec!["dead", "list"],
    ] {
        let (code, stderr) = run(&url, &args);
        println!("litejobs {args:?} while down: {code:?} {stderr}");
        assert_eq!(code, Some(2), "litejobs {args:?} while down: {stderr}");
        assert!(
            stderr.contains(&format!("cannot connect to {shown}"))
                && stderr.contains("Connection refused"),
            "litejobs {args:?} says why, naming the server: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(!leaks(&stderr), "no password: {stderr}");
    }

    // Back: the dashboard serves again on its own (its pool reconnects with back-off).
    server.start_again();
    let deadline = Instant::now() + WAIT;
    for path in paths {
        loop {
            let page = client.get(path);
            if page.status == 200 {
                break;
            }
            assert!(
                page.status == 503 && Instant::now() < deadline,
                "GET {path} after the server came back: {page:#?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    dashboard.stop();
}

#[derive(QueryableByName)]
struct Backend {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[test]
fn work_takes_a_two_host_url_shows_it_without_password_and_names_its_connections() {
    let Some(server) = PgServer::start(&[]) else {
        return;
    };
    // The first host refuses (nobody listens there); libpq goes on to the second. The
    // password as a parameter.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let hosts = format!("127.0.0.1:{closed},127.0.0.1:{}", server.port());
    let url = format!(
        "postgres://postgres@{hosts}/postgres?target_session_attrs=read-write&password={ENCODED}"
    );
    let shown = format!(
        "postgres://postgres@{hosts}/postgres?target_session_attrs=read-write&password=[masked]"
    );
    let mut work = KillOnDrop(
        Command::new(BIN)
            .args(["--db", &url, "work", "--exec", "work=true"])
            .env_remove("RUST_LOG")
            .env_remove("PGAPPNAME")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting litejobs work"),
    );
    let stderr = work.stderr.take().expect("piped stderr");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let running = loop {
        let line = lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("litejobs work said no \"running on\" ({e}): {seen:#?}"));
        seen.push(line.clone());
        if line.contains("running on") {
            break line;
        }
    };
    assert!(
        running.contains(&format!("running on {shown}")),
        "{running}"
    );
    assert!(
        seen.iter()
            .all(|l| !leaks(l) && !l.contains("does not parse")),
        "{seen:#?}"
    );

    // Its connections, the LISTEN one among them, carry its name.
    let name = format!("litejobs work (%:{})", work.id());
    let deadline = Instant::now() + WAIT;
    loop {
        let mut conn = server.admin();
        let backends: Vec<Backend> = sql_query(
            "SELECT application_name AS name, count(*) AS n FROM pg_stat_activity \
             WHERE application_name LIKE $1 AND query = 'LISTEN litejobs_jobs' \
             GROUP BY application_name",
        )
        .bind::<Text, _>(&name)
        .load(&mut conn)
        .expect("reading pg_stat_activity");
        if let Some(b) = backends.first() {
            println!("pg_stat_activity: {} ({} listening)", b.name, b.n);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no backend named {name:?} listens; the worker said: {seen:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &work.id().to_string()])
        .status();
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = work.try_wait().expect("waiting for litejobs work") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "litejobs work did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "litejobs work stopped with {status}");
}
