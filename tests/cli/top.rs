//! `litejobs top` in a real terminal: tmux runs it on a pseudo-terminal of a fixed size and
//! answers what is on the screen (`capture-pane`), so the test reads the screen a person
//! would see, presses keys, and sends SIGTERM. tmux is Debian's (`apt-get install tmux`;
//! `.ci/run` installs it).
//!
//! The first screen is kept in `target/tmp/top-screen.txt`; with
//! `LITEJOBS_UPDATE_SCREENSHOT=1` it also replaces the screenshot in docs/operating.md.

use super::*;

/// The bound of every wait on the screen.
const WAIT: Duration = Duration::from_secs(20);
const WIDTH: u16 = 120;
const HEIGHT: u16 = 34;

/// A tmux server of the test's own (its socket in the test's directory), killed when
/// dropped, with one window running `command` through `sh -c`.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(dir: &Path, command: &str) -> Tmux {
        let tmux = Tmux {
            socket: dir.join("tmux.sock"),
        };
        let width = WIDTH.to_string();
        let height = HEIGHT.to_string();
        tmux.run(&[
            "new-session",
            "-d",
            "-x",
            &width,
            "-y",
            &height,
            "sh",
            "-c",
            command,
        ]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("tmux runs (apt-get install tmux, as .ci/run does)");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the screen shows, line by line.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "0"])
    }

    /// Waits until the screen passes `check`; returns it.
    fn wait_for(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let screen = self.screen();
            if check(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {what}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// A format variable of the pane (`alternate_on`, `cursor_flag`, `pane_pid`).
    fn pane(&self, variable: &str) -> String {
        self.run(&[
            "display-message",
            "-p",
            "-t",
            "0",
            &format!("#{{{variable}}}"),
        ])
        .trim()
        .to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

/// The line of the screen that starts (inside the panel's border) with `start`.
fn line<'a>(screen: &'a str, start: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.trim_start_matches('│').starts_with(start))
        .unwrap_or_else(|| panic!("no line starting with {start:?}:\n{screen}"))
}

/// The words of a table line, borders and dots left out.
fn cells(line: &str) -> Vec<&str> {
    line.split(['│', ' '])
        .filter(|w| !w.is_empty() && *w != "·")
        .collect()
}

/// The pid of the pane's shell's child: `litejobs top`.
fn top_pid(tmux: &Tmux) -> i32 {
    let shell = tmux.pane("pane_pid");
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
        .expect("the pane's shell's children");
    children
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("litejobs top runs under the pane's shell {shell}"))
}

/// The screen shows the right counts; `p` pauses a queue, Enter opens a job's details, `r`
/// makes a retrying job due,
/// `c` then `y` cancels it, `R` then `y` requeues an error's dead jobs; SIGTERM ends it
/// with the terminal restored (main screen, cursor shown, line editing and echo back on).
#[test]
fn top_shows_the_queues_acts_on_keys_and_restores_the_terminal_on_sigterm() {
    let fx = Fx::new();
    fx.ago(5 * MINUTE);
    for _ in 0..3 {
        fx.enqueue(NewJob::new("send_receipt", json!({})));
    }
    for _ in 0..2 {
        fx.enqueue(NewJob::new("crm_sync", json!({})).queue("crm"));
    }
    fx.fail_due(
        "crm_sync",
        "crm",
        "ConnectionError: connection refused (pid 4242)",
        true,
    );
    let retrying = fx.enqueue(NewJob::new("render_page", json!({})).queue("reports"));
    fx.fail_due("render_page", "reports", "HTTP 503 from renderer", false);
    // Work done in earlier minutes, for the per-minute bars.
    for (minutes_ago, jobs) in [(12, 4), (9, 7), (6, 5), (3, 9), (1, 6)] {
        fx.ago(minutes_ago * MINUTE);
        for _ in 0..jobs {
            fx.enqueue(NewJob::new("send_email", json!({})).queue("mail"));
        }
        fx.succeed_due("send_email", "mail");
    }
    fx.ago(0);
    assert_eq!(fx.job(retrying).status, JobStatus::Failed);

    let dir = temp_dir();
    // A file is named from its folder, as a person would, for the screenshot.
    let (folder, db) = match (fx.path.parent(), fx.path.file_name()) {
        (Some(folder), Some(name)) if folder.is_dir() => (folder, PathBuf::from(name)),
        _ => (dir.path(), fx.path.clone()),
    };
    let command = format!(
        "cd '{}' && '{BIN}' --db '{}' top; echo \"top exited $?\"; stty -a; echo stty done; sleep 600",
        folder.display(),
        db.display()
    );
    let tmux = Tmux::start(dir.path(), &command);
    let screen = tmux.wait_for("the queues", |s| s.contains("send_receipt"));
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(shots.join("top-screen.txt"), &screen).expect("keeping the screen");
    if std::env::var("LITEJOBS_UPDATE_SCREENSHOT").as_deref() == Ok("1") {
        update_screenshot(&screen);
    }
    assert_eq!(
        cells(line(&screen, "crm ")),
        ["crm", "live", "2"],
        "{screen}"
    );
    assert_eq!(cells(line(&screen, "  crm_sync")), ["crm_sync", "2"]);
    let default = cells(line(&screen, "default"));
    assert_eq!(default[..3], ["default", "live", "3"], "{screen}");
    assert!(default[3].starts_with("5m"), "the oldest due age: {screen}");
    assert_eq!(
        cells(line(&screen, "  send_receipt")),
        ["send_receipt", "3"]
    );
    assert_eq!(cells(line(&screen, "reports")), ["reports", "live", "1"]);
    assert!(
        line(&screen, " waiting").contains("3 due now, 1 scheduled, 0 running"),
        "{screen}"
    );
    assert!(
        line(&screen, " failing").contains("1 retrying, 2 dead"),
        "{screen}"
    );
    let group = screen
        .lines()
        .find(|l| l.contains("ConnectionError") && cells(l)[..2] == ["2", "2"])
        .unwrap_or_else(|| panic!("the error group: 2 jobs, 2 dead:\n{screen}"));
    assert!(group.contains("crm_sync"), "{group}");

    // The queue panel has the focus, on its first row: `crm`.
    tmux.keys(&["p"]);
    tmux.wait_for("crm paused", |s| {
        cells(line(s, "crm ")).get(1) == Some(&"paused")
    });
    assert_eq!(fx.queue.paused_queues().expect("paused"), ["crm"]);

    // The jobs panel: the retrying job comes before the dead ones.
    tmux.keys(&["Tab"]);
    tmux.wait_for("the jobs panel's keys", |s| s.contains("r retry now"));
    // Enter: the job's details over the screen; any key closes them.
    tmux.keys(&["Enter"]);
    let details = tmux.wait_for("the job's details", |s| {
        s.contains(&format!("Job {retrying} · any key closes"))
    });
    assert!(
        details.contains("render_page in queue reports: failed"),
        "{details}"
    );
    assert!(
        details.contains("last error  HTTP 503 from renderer"),
        "{details}"
    );
    tmux.keys(&["x"]);
    tmux.wait_for("the details closed", |s| !s.contains("any key closes"));
    tmux.keys(&["r"]);
    tmux.wait_for("the retry's outcome", |s| {
        s.contains(&format!("job {retrying} is due now"))
    });
    assert!(fx.job(retrying).run_at <= SystemClock.now_ms());
    tmux.keys(&["c"]);
    tmux.wait_for("the question", |s| {
        s.contains(&format!(
            "y/n  Cancel job {retrying} (render_page, retrying)?"
        ))
    });
    tmux.keys(&["y"]);
    tmux.wait_for("the cancel's outcome", |s| {
        s.contains(&format!("job {retrying} cancelled"))
    });
    assert_eq!(fx.job(retrying).status, JobStatus::Cancelled);

    // The most common errors: requeue the group's dead jobs.
    tmux.keys(&["3", "R"]);
    tmux.wait_for("the question", |s| {
        s.contains("Requeue 2 dead jobs failing with")
    });
    tmux.keys(&["y"]);
    tmux.wait_for("the requeue's outcome", |s| {
        s.lines()
            .any(|l| l.contains("2 dead jobs failing with") && l.contains("requeued"))
    });
    assert_eq!(
        fx.sql_i64("SELECT COUNT(*) FROM jobs WHERE status = 'queued' AND job_type = 'crm_sync'"),
        2
    );

    // Too small a terminal: a request for room, and keys that would act on rows nobody
    // sees do nothing.
    tmux.run(&["resize-window", "-t", "0", "-x", "60", "-y", "15"]);
    tmux.wait_for("the request for room", |s| {
        s.contains("needs a terminal of 80×20")
    });
    tmux.keys(&["1", "p"]);
    tmux.run(&[
        "resize-window",
        "-t",
        "0",
        "-x",
        &WIDTH.to_string(),
        "-y",
        &HEIGHT.to_string(),
    ]);
    tmux.wait_for("the screen again", |s| s.contains("1 Queues"));
    assert_eq!(fx.queue.paused_queues().expect("paused"), ["crm"]);

    assert_eq!(
        tmux.pane("alternate_on"),
        "1",
        "top draws on the alternate screen"
    );
    let pid = top_pid(&tmux);
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let screen = tmux.wait_for("top's exit and stty's modes", |s| s.contains("stty done"));
    assert!(screen.contains("top exited 0"), "{screen}");
    let stty = screen.split_whitespace().collect::<Vec<_>>();
    for flag in ["icanon", "echo", "isig", "icrnl"] {
        assert!(stty.contains(&flag), "{flag} is back on: {screen}");
    }
    assert_eq!(tmux.pane("alternate_on"), "0", "the main screen is back");
    assert_eq!(tmux.pane("cursor_flag"), "1", "the cursor is shown");
}

/// A terminal that goes away (a dropped SSH session, a killed tmux) ends `top`; it does not
/// stay behind reading a dead terminal.
#[test]
fn top_ends_when_its_terminal_goes_away() {
    let fx = Fx::new();
    let dir = temp_dir();
    let command = format!("exec '{BIN}' --db '{}' top", fx.path.display());
    let tmux = Tmux::start(dir.path(), &command);
    tmux.wait_for("the screen", |s| s.contains("1 Queues"));
    let pid = tmux.pane("pane_pid");
    assert!(
        std::fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.contains("top")),
        "the pane runs top itself"
    );
    tmux.run(&["kill-server"]);
    let deadline = Instant::now() + WAIT;
    // Gone, or a zombie its parent (tmux, now gone) left to init.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "))
    };
    while alive() {
        assert!(
            Instant::now() < deadline,
            "top still runs {WAIT:?} after its terminal went away"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `top` refuses a pipe and `--json`, saying what to use instead.
#[test]
fn top_without_a_terminal_points_to_stats() {
    let fx = Fx::new();
    fx.run(&["top"]).refused("top needs a terminal to draw on");
    fx.run(&["--json", "top"]).refused("stats --json");
    fx.run(&["top", "--interval", "10ms"])
        .refused("--interval must be at least 100ms");
}

/// Puts `screen` in docs/operating.md, between its screenshot markers.
fn update_screenshot(screen: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operating.md");
    let guide = std::fs::read_to_string(&path).expect("reading the guide");
    let (start, end) = (
        "<!-- top screen -->\n```text\n",
        "```\n<!-- /top screen -->",
    );
    let from = guide.find(start).expect("the guide's screenshot marker") + start.len();
    let to = guide[from..].find(end).expect("the marker's end") + from;
    let trimmed: String = screen
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n");
    let updated = format!("{}{}\n{}", &guide[..from], trimmed.trim_end(), &guide[to..]);
    std::fs::write(&path, updated).expect("writing the guide");
}
