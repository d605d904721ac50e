//! Starting a command in a process group of its own, reading its output, and stopping the
//! whole group: the watchdog sends SIGTERM when the attempt must stop (past its deadline, or
//! a shutdown past its grace) and SIGKILL when the group outlives the kill grace.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::handler::stop::StopSignal;

/// How often the watchdog looks at the stop flags of running commands. Flags cannot be
/// waited on; 25 ms keeps a timeout's kill prompt and costs nothing while nothing runs.
const WATCH_TICK: Duration = Duration::from_millis(25);

/// The variables that describe a job to its command.
pub(crate) const JOB_VARIABLES: [&str; 8] = [
    "LITEJOBS_JOB_ID",
    "LITEJOBS_JOB_TYPE",
    "LITEJOBS_QUEUE",
    "LITEJOBS_ATTEMPT",
    "LITEJOBS_MAX_ATTEMPTS",
    "LITEJOBS_DEADLINE_MS",
    "LITEJOBS_IDEMPOTENCY_KEY",
    "LITEJOBS_GROUP_KEY",
];

/// What to run: a program with its arguments, extra environment and directory.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) envs: Vec<(String, String)>,
    pub(crate) dir: Option<PathBuf>,
}

impl Program {
    /// The command line as given, for messages.
    pub(crate) fn shown(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Starts it in a new process group, stdin, stdout and stderr piped.
    pub(crate) fn spawn(&self, job_env: &[(&str, String)]) -> std::io::Result<Child> {
        let mut command = std::process::Command::new(&self.program);
        // This process's own values of the job variables (say, `litejobs work` run from a
        // command handler) must not pass for the job's.
        for name in JOB_VARIABLES {
            command.env_remove(name);
        }
        command
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .envs(job_env.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so a timeout stops the children it started too.
            .process_group(0);
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        command.spawn()
    }
}

/// Sends `signal` to the process group `pgid`; a group that is gone already is no error.
pub(crate) fn signal_group(pgid: u32, signal: Signal) {
    let Ok(raw) = i32::try_from(pgid) else {
        return;
    };
    if let Err(e) = killpg(Pid::from_raw(raw), signal) {
        if e != nix::errno::Errno::ESRCH {
            log::warn!("litejobs: cannot send {signal} to process group {pgid}: {e}");
        }
    }
}

/// True when no process is left in the process group `pgid` (one that cannot be signalled
/// for lack of permission is there).
pub(crate) fn group_is_empty(pgid: u32) -> bool {
    let Ok(raw) = i32::try_from(pgid) else {
        return true;
    };
    killpg(Pid::from_raw(raw), None) == Err(nix::errno::Errno::ESRCH)
}

/// The process-wide watchdog over running commands' process groups.
pub(crate) fn watchdog() -> &'static Watchdog {
    static WATCHDOG: OnceLock<Watchdog> = OnceLock::new();
    WATCHDOG.get_or_init(|| Watchdog {
        state: Mutex::new(WatchState::default()),
        started: Condvar::new(),
        idle: Condvar::new(),
    })
}

/// Watches process groups until their [`Watch`] is dropped.
pub(crate) struct Watchdog {
    state: Mutex<WatchState>,
    /// Wakes the watchdog's thread when the first command starts (while commands run it
    /// ticks by itself, so a start or an end costs no wake-up).
    started: Condvar,
    /// Wakes [`Watchdog::wait_idle`] when the last command ends.
    idle: Condvar,
}

#[derive(Default)]
struct WatchState {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    running: bool,
}

struct Entry {
    pgid: u32,
    stop: Arc<StopSignal>,
    until: Option<Instant>,
    kill_grace: Duration,
    /// When SIGTERM was sent, and why.
    terminated: Option<(Instant, &'static str)>,
    killed: bool,
}

/// A process group under watch; dropping it ends the watch. Says whether the watchdog had
/// to stop the group.
pub(crate) struct Watch {
    id: u64,
}

impl Watch {
    /// Why the watchdog stopped the group (`None` when it did not).
    pub(crate) fn stopped(&self) -> Option<&'static str> {
        let state = watchdog().lock();
        state
            .entries
            .get(&self.id)
            .and_then(|e| e.terminated.map(|(_, why)| why))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let dog = watchdog();
        let mut state = dog.lock();
        state.entries.remove(&self.id);
        if state.entries.is_empty() {
            dog.idle.notify_all();
        }
    }
}

impl Watchdog {
    fn lock(&self) -> MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Watches `pgid`: SIGTERM once `stop` is set or `until` has passed, SIGKILL
    /// `kill_grace` later.
    pub(crate) fn watch(
        &'static self,
        pgid: u32,
        stop: Arc<StopSignal>,
        until: Option<Instant>,
        kill_grace: Duration,
    ) -> Watch {
        let mut state = self.lock();
        let first = state.entries.is_empty();
        let id = state.next_id;
        state.next_id += 1;
        state.entries.insert(
            id,
            Entry {
                pgid,
                stop,
                until,
                kill_grace,
                terminated: None,
                killed: false,
            },
        );
        if !state.running {
            let started = std::thread::Builder::new()
                .name("litejobs-exec-watchdog".into())
                .spawn(move || self.run());
            match started {
                Ok(_) => state.running = true,
                Err(e) => log::error!(
                    "litejobs: cannot start the command watchdog ({e}); commands past their \
                     timeout will not be stopped"
                ),
            }
        }
        drop(state);
        if first {
            self.started.notify_all();
        }
        Watch { id }
    }

    /// SIGKILL to every watched group, now.
    pub(crate) fn kill_all(&self) {
        let state = self.lock();
        for entry in state.entries.values() {
            signal_group(entry.pgid, Signal::SIGKILL);
        }
    }

    /// Waits until no watched command runs, at most `timeout`. True when none runs.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        let mut state = self.lock();
        while !state.entries.is_empty() {
            let now = Instant::now();
            if now >= end {
                return false;
            }
            state = self
                .idle
                .wait_timeout(state, end - now)
                .map(|(s, _)| s)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        true
    }

    fn run(&self) {
        let mut state = self.lock();
        loop {
            if state.entries.is_empty() {
                state = self.started.wait(state).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            let now = Instant::now();
            for entry in state.entries.values_mut() {
                match entry.terminated {
                    None => {
                        let why = if entry.stop.is_set() {
                            Some("stopped: past its timeout, cancelled, or the worker is shutting down")
                        } else if entry.until.is_some_and(|u| now >= u) {
                            Some("stopped: past its timeout")
                        } else {
                            None
                        };
                        if let Some(why) = why {
                            signal_group(entry.pgid, Signal::SIGTERM);
                            entry.terminated = Some((now, why));
                        }
                    }
                    Some((at, _)) if !entry.killed && now >= at + entry.kill_grace => {
                        signal_group(entry.pgid, Signal::SIGKILL);
                        entry.killed = true;
                    }
                    Some(_) => {}
                }
            }
            state = self
                .started
                .wait_timeout(state, WATCH_TICK)
                .map(|(s, _)| s)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}
