//! `litejobs work` and `web` under systemd (`Type=notify`): the `sd_notify` datagrams they
//! send, received on a socket the test binds as `NOTIFY_SOCKET` would be, and the unit
//! files of `contrib/systemd/` checked by `systemd-analyze verify`.

use std::os::unix::net::UnixDatagram;

use super::work::initialized_db;
use super::*;

/// A socket standing in for systemd's notify socket.
struct Notify {
    socket: UnixDatagram,
    path: PathBuf,
    got: Vec<String>,
}

impl Notify {
    fn bind(dir: &TempDir) -> Notify {
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("binding the notify socket");
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("read timeout");
        Notify {
            socket,
            path,
            got: Vec::new(),
        }
    }

    /// Reads datagrams until one has a line equal to `line`; that datagram (bounded: fails
    /// after 30 s without one).
    fn wait_for(&mut self, line: &str) -> String {
        let mut buf = [0u8; 4096];
        loop {
            let n = self
                .socket
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("no {line:?} within 30 s ({e}): {:?}", self.got));
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            self.got.push(text.clone());
            if text.lines().any(|l| l == line) {
                return text;
            }
        }
    }
}

/// `litejobs work --exec noop=/bin/true` on `db`, as systemd starts it with a watchdog of
/// `usec` telling `notify`: it names the process the watchdog is for (WATCHDOG_PID), and
/// `exec` keeps the shell's pid for litejobs. Its stderr is for the caller to set.
fn watched_work(db: &Path, notify: &Notify, usec: &str) -> Command {
    let template = litejobs(db);
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("WATCHDOG_PID=$$ exec \"$0\" \"$@\"")
        .arg(BIN)
        .args(template.get_args())
        .args(["work", "--exec", "noop=/bin/true"]);
    for (key, value) in template.get_envs() {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    command
        .env_remove("WATCHDOG_PID")
        .env("NOTIFY_SOCKET", &notify.path)
        .env("WATCHDOG_USEC", usec)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

#[test]
fn work_tells_systemd_it_is_ready_feeds_the_watchdog_and_says_when_it_stops() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let mut notify = Notify::bind(&dir);
    let mut child = crate::support::KillOnDrop(
        // A watchdog of 200 ms: fed every 100 ms while the dispatcher turns.
        watched_work(&db, &notify, "200000")
            .stderr(Stdio::null())
            .spawn()
            .expect("starting litejobs work"),
    );
    let ready = notify.wait_for("READY=1");
    assert!(
        ready
            .lines()
            .any(|l| l.starts_with("STATUS=worker ") && l.ends_with(" running")),
        "{ready:?}"
    );
    notify.wait_for("WATCHDOG=1");
    notify.wait_for("WATCHDOG=1");
    terminate(&child);
    notify.wait_for("STOPPING=1");
    let status = child.wait().expect("waiting for litejobs work");
    assert_eq!(status.code(), Some(0));
}

/// A dispatcher that stops going round its loop is not vouched for: here it waits for the
/// write lock another program holds on the file (a `sqlite3` shell left in a transaction),
/// the watchdog feeder says so and sends no `WATCHDOG=1`, and feeding resumes once the lock
/// is gone. Under systemd a dispatcher stuck longer than `WatchdogSec=` gets restarted.
#[test]
fn work_stops_feeding_the_watchdog_while_its_dispatcher_is_stuck() {
    if crate::support::sqlite_only() {
        return;
    }
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let mut notify = Notify::bind(&dir);
    let mut child = crate::support::KillOnDrop(
        // Looked at every 500 ms: an idle dispatcher turns at least every poll interval
        // (200 ms), so only a stuck one misses a look.
        watched_work(&db, &notify, "1000000")
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting litejobs work"),
    );
    let (lines_tx, lines) = crossbeam_channel::unbounded::<String>();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    notify.wait_for("READY=1");
    notify.wait_for("WATCHDOG=1");

    // A job due in a second, and the file's write lock taken before then: the dispatcher's
    // claim waits for the lock (up to its 5 s busy timeout) instead of going round.
    run(&db, &["enqueue", "noop", "{}", "--delay", "1s"]).ok();
    let lock = crate::support::raw_conn(&db);
    lock.execute_batch("BEGIN EXCLUSIVE")
        .expect("the write lock");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = lines
            .recv_timeout(left)
            .expect("the feeder never said the dispatcher stood still");
        if line.contains("has not gone round its loop") {
            break;
        }
    }
    lock.execute_batch("COMMIT").expect("the lock released");
    // Fed again once the dispatcher turns (datagrams sent before are read first).
    let mut buf = [0u8; 4096];
    notify
        .socket
        .set_nonblocking(true)
        .expect("draining what was sent");
    while notify.socket.recv(&mut buf).is_ok() {}
    notify
        .socket
        .set_nonblocking(false)
        .expect("blocking again");
    notify.wait_for("WATCHDOG=1");
    terminate(&child);
    notify.wait_for("STOPPING=1");
    assert_eq!(child.wait().expect("waiting").code(), Some(0));
}

fn terminate(child: &std::process::Child) {
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
}

#[test]
fn web_tells_systemd_it_is_ready_and_says_when_it_stops() {
    let dir = temp_dir();
    let (db, _pg) = initialized_db(&dir);
    let mut notify = Notify::bind(&dir);
    let mut child = crate::support::KillOnDrop(
        litejobs(&db)
            .args(["web", "--addr", "127.0.0.1:0"])
            .env("NOTIFY_SOCKET", &notify.path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting litejobs web"),
    );
    let ready = notify.wait_for("READY=1");
    assert!(
        ready
            .lines()
            .any(|l| l.starts_with("STATUS=serving http://127.0.0.1:")),
        "{ready:?}"
    );
    terminate(&child);
    notify.wait_for("STOPPING=1");
    let status = child.wait().expect("waiting for litejobs web");
    assert_eq!(status.code(), Some(0));
}

/// Each unit file of `contrib/systemd/` passes `systemd-analyze verify` with nothing to
/// say, its `litejobs` pointed at this build (the command must exist to be verified).
#[test]
fn the_unit_files_verify() {
    let dir = temp_dir();
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd");
    let mut checked = 0;
    for entry in std::fs::read_dir(&units).expect("contrib/systemd") {
        let path = entry.expect("an entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("service") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a unit file");
        let text = text
            .replace("/usr/local/bin/litejobs", BIN)
            .replace("/usr/local/lib/myapp/resize.sh", "/bin/true");
        let copy = dir.path().join(path.file_name().expect("a name"));
        std::fs::write(&copy, text).expect("writing the copy");
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&copy)
            .output()
            .expect("systemd-analyze (package systemd; .ci/run installs it)");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && said.trim().is_empty(),
            "{}: {said}",
            path.display()
        );
        checked += 1;
    }
    assert_eq!(checked, 2, "litejobs-work.service and litejobs-web.service");
}
