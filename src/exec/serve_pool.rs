//! The processes of [`Serve`](super::Serve) handlers: each handler's idle ones wait in its
//! pool, and every live pool is known, so that the end of `litejobs work` can stop them.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use nix::sys::signal::Signal;

use super::process::signal_group;
use super::serve_process::Process;

/// Idle processes wait in the channel; a `None` is a slot whose process is not started yet
/// (or was stopped).
#[derive(Debug)]
pub(crate) struct Pool {
    pub(crate) take: Receiver<Option<Process>>,
    pub(crate) give: Sender<Option<Process>>,
    kill_grace: Duration,
}

impl Drop for Pool {
    fn drop(&mut self) {
        let idle: Vec<Process> = self.take.try_iter().flatten().collect();
        stop_idle(idle, self.kill_grace);
    }
}

impl Pool {
    /// A pool of `processes` slots, known to [`stop_idle_processes`].
    pub(crate) fn shared(processes: usize, kill_grace: Duration) -> Arc<Pool> {
        let (give, take) = crossbeam_channel::bounded(processes);
        for _ in 0..processes {
            let _ = give.send(None);
        }
        let pool = Arc::new(Pool {
            take,
            give,
            kill_grace,
        });
        POOLS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&pool));
        pool
    }
}

/// Every live pool, so that the end of `litejobs work` can stop idle processes whose pool
/// an abandoned handler thread still holds.
static POOLS: Mutex<Vec<Weak<Pool>>> = Mutex::new(Vec::new());

/// Stops the idle processes of every live pool: stdin closed, then SIGTERM and SIGKILL
/// after their kill grace (`hard`: SIGKILL at once).
pub(crate) fn stop_idle_processes(hard: bool) {
    let pools: Vec<Arc<Pool>> = {
        let mut all = POOLS.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|weak| weak.strong_count() > 0);
        all.iter().filter_map(Weak::upgrade).collect()
    };
    for pool in pools {
        let idle: Vec<Process> = pool.take.try_iter().flatten().collect();
        for _ in 0..idle.len() {
            let _ = pool.give.send(None);
        }
        if hard {
            for process in &idle {
                signal_group(process.pid(), Signal::SIGKILL);
            }
        }
        stop_idle(idle, pool.kill_grace);
    }
}

/// Idle processes at the end: stdin closed (a well-behaved worker exits at the end of its
/// input), then stopped like a broken one if they linger.
fn stop_idle(mut idle: Vec<Process>, grace: Duration) {
    for process in &mut idle {
        process.close_input();
    }
    for process in idle {
        let ended = process.retire(grace, grace);
        log::info!("litejobs: {} (pid {})", ended.how, ended.pid);
    }
}
