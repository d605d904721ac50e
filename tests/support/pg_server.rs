//! A PostgreSQL server of a test's own (feature `postgres`), for tests that restart, stop or
//! fill it, or terminate its backends, without disturbing the shared server of
//! `LITEJOBS_TEST_PG` the other tests use in parallel.
//!
//! Made as scripts/pg-server.sh makes the shared one: `initdb` into a temporary folder and
//! `pg_ctl start` on a free loopback port, `fsync` off, run as the `postgres` user through
//! `runuser` when the tests run as root (PostgreSQL refuses root). Stopped (immediate) and
//! deleted when dropped. Without the server binaries the test is skipped with a note, except
//! under `CI=true`, where that fails the test (`.ci/run` installs them).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use tempfile::TempDir;

/// Where a child process makes its private servers (set by the parent test, which stops
/// whatever is left there when the child is done, even one it had to kill).
pub const ROOT_VAR: &str = "LITEJOBS_TEST_PG_PRIVATE_ROOT";

/// A folder for the private servers of a child process, given to it in [`ROOT_VAR`]: when
/// dropped, every server still running in it is stopped (immediate) and it is deleted.
pub struct ServerRoot {
    dir: TempDir,
}

impl ServerRoot {
    /// A new, empty folder the `postgres` user may use.
    pub fn new() -> ServerRoot {
        let dir = tempfile::Builder::new()
            .prefix("litejobs-pg-root.")
            .tempdir()
            .expect("creating the private servers' folder");
        if running_as_root() {
            run_ok(Command::new("chown").arg("postgres").arg(dir.path()));
        }
        ServerRoot { dir }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for ServerRoot {
    fn drop(&mut self) {
        let (Some(bin), Ok(entries)) = (find_bin(), std::fs::read_dir(self.dir.path())) else {
            return;
        };
        let as_root = running_as_root();
        for entry in entries.flatten() {
            let data = entry.path().join("data");
            if !data.join("postmaster.pid").exists() {
                continue;
            }
            let program = bin.join("pg_ctl");
            let mut cmd = if as_root {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", "postgres", "--"]).arg(program);
                cmd
            } else {
                Command::new(program)
            };
            let _ = cmd
                .arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A private server; stopped and deleted when dropped.
pub struct PgServer {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    /// The server's command-line settings (`pg_ctl -o`), kept for restarts.
    options: String,
    as_root: bool,
}

/// Where the server binaries are (`pg_config --bindir`, an `initdb` on the PATH, or the
/// newest `/usr/lib/postgresql/*/bin`), or `None`.
fn find_bin() -> Option<PathBuf> {
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let on_path = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file()));
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    from_pg_config
        .into_iter()
        .chain(on_path)
        .chain(versions.into_iter().rev().map(|(_, bin)| bin))
        .find(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
}

/// A server's folder: in the parent's [`ServerRoot`] when it gave one, else in the temp dir.
fn new_server_dir(prefix: &str) -> TempDir {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    match std::env::var_os(ROOT_VAR) {
        Some(root) => builder.tempdir_in(root),
        None => builder.tempdir(),
    }
    .expect("creating a private server's folder")
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A port nobody listens on now (the server binds it a moment later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding a free loopback port")
        .port()
}

impl PgServer {
    /// Starts a new server with `settings` (`name=value` each, e.g. `max_connections=12`),
    /// or returns `None` (skip) where the binaries are missing outside CI.
    pub fn start(settings: &[&str]) -> Option<PgServer> {
        let Some(bin) = find_bin() else {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true but no PostgreSQL server binaries (initdb, pg_ctl) were found: .ci/run \
                 installs them"
            );
            eprintln!("skipped: no PostgreSQL server binaries (initdb) here");
            return None;
        };
        let dir = new_server_dir("litejobs-pg-private.");
        let as_root = running_as_root();
        if as_root {
            run_ok(Command::new("chown").arg("postgres").arg(dir.path()));
        }
        let mut server = PgServer {
            dir,
            bin,
            port: 0,
            options: String::new(),
            as_root,
        };
        let data = server.data_dir();
        server.run_ok(&[
            "initdb",
            "-D",
            path_str(&data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
        ]);
        // A port found free can be taken before the server binds it: try a few.
        for _ in 0..5 {
            server.port = free_port();
            // fsync off (a test server's data may go if the machine crashes), but every
            // commit is in the log before it is acknowledged: `synchronous_commit = off`
            // would lose the last commits at an immediate restart, as it would in production.
            let mut options = format!(
                "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off",
                server.port,
                path_str(server.dir.path())
            );
            for setting in settings {
                options.push_str(&format!(" -c {setting}"));
            }
            server.options = options;
            if server.pg_ctl(&["start"]).status.success() {
                return Some(server);
            }
        }
        panic!(
            "the private PostgreSQL server did not start; its log:\n{}",
            server.log()
        );
    }

    /// A streaming replica of this server (a base backup, then `standby.signal`), started on
    /// a port of its own; [`PgServer::promote`] makes it a primary.
    pub fn replica(&self) -> PgServer {
        let dir = new_server_dir("litejobs-pg-replica.");
        if self.as_root {
            run_ok(Command::new("chown").arg("postgres").arg(dir.path()));
        }
        let mut replica = PgServer {
            dir,
            bin: self.bin.clone(),
            port: 0,
            options: String::new(),
            as_root: self.as_root,
        };
        let data = replica.data_dir();
        let port = self.port.to_string();
        replica.run_ok(&[
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-D",
            path_str(&data),
            "-R",
            "-X",
            "stream",
        ]);
        for _ in 0..5 {
            replica.port = free_port();
            replica.options = format!(
                "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off",
                replica.port,
                path_str(replica.dir.path())
            );
            if replica.pg_ctl(&["start"]).status.success() {
                return replica;
            }
        }
        panic!("the replica did not start; its log:\n{}", replica.log());
    }

    /// `pg_ctl promote`: a replica becomes a primary, taking writes when this returns.
    pub fn promote(&self) {
        let out = self.pg_ctl(&["promote"]);
        assert!(
            out.status.success(),
            "pg_ctl promote failed:\n{}",
            self.log()
        );
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://USER@127.0.0.1:PORT/DB`.
    pub fn url_for(&self, user: &str, db: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.port)
    }

    /// The superuser's URL, database `postgres`.
    pub fn url(&self) -> String {
        self.url_for("postgres", "postgres")
    }

    /// A new superuser connection.
    pub fn admin(&self) -> PgConnection {
        PgConnection::establish(&self.url()).unwrap_or_else(|e| {
            panic!(
                "connecting to the private server as postgres: {e}; its log:\n{}",
                self.log()
            )
        })
    }

    /// Runs `sql` as the superuser on a new connection.
    pub fn exec(&self, sql: &str) {
        self.admin()
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// `pg_ctl restart -m immediate`: every backend is killed at once (no clean shutdown),
    /// and the server recovers from its log and accepts connections again before this
    /// returns.
    pub fn restart_immediate(&self) {
        let out = self.pg_ctl(&["-m", "immediate", "restart"]);
        assert!(
            out.status.success(),
            "pg_ctl restart failed:\n{}",
            self.log()
        );
    }

    /// `pg_ctl stop -m immediate`: the server is gone when this returns.
    pub fn stop(&self) {
        let out = self.pg_ctl(&["-m", "immediate", "stop"]);
        assert!(out.status.success(), "pg_ctl stop failed:\n{}", self.log());
    }

    /// Starts the stopped server again, on the same port; it accepts connections when this
    /// returns.
    pub fn start_again(&self) {
        let out = self.pg_ctl(&["start"]);
        assert!(out.status.success(), "pg_ctl start failed:\n{}", self.log());
    }

    /// The server's log so far (its last 4 KiB).
    pub fn log(&self) -> String {
        let text = std::fs::read(self.dir.path().join("log")).unwrap_or_default();
        let start = text.len().saturating_sub(4096);
        String::from_utf8_lossy(&text[start..]).into_owned()
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `pg_ctl ACTION` with the data folder, the log file and the settings, waiting (`-w`).
    fn pg_ctl(&self, args: &[&str]) -> Output {
        let data = self.data_dir();
        let log = self.dir.path().join("log");
        let mut all = vec![
            "pg_ctl",
            "-D",
            path_str(&data),
            "-l",
            path_str(&log),
            "-w",
            "-t",
            "60",
            "-o",
            &self.options,
        ];
        all.extend_from_slice(args);
        self.command(&all)
            .output()
            .expect("running pg_ctl for the private server")
    }

    /// One of the server's programs, as the `postgres` user when running as root.
    fn command(&self, args: &[&str]) -> Command {
        let program = self.bin.join(args[0]);
        let mut cmd = if self.as_root {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(program);
            cmd
        } else {
            Command::new(program)
        };
        cmd.args(&args[1..]).stdin(Stdio::null());
        cmd
    }

    fn run_ok(&self, args: &[&str]) {
        run_ok(&mut self.command(args));
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "stop"]);
    }
}

fn run_ok(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}
