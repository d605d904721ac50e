//! In-process wake-up: an enqueue wakes idle dispatchers instead of letting them sleep
//! until the next poll.

use std::sync::Mutex;

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

/// The wake-up channels of this process's dispatchers.
#[derive(Debug, Default)]
pub(crate) struct WakeList {
    senders: Mutex<Vec<Sender<()>>>,
    /// The queue of the latest in-process enqueue: a woken dispatcher wakes an executor of
    /// that queue early, and of no other (a hint: a wake-up still looks at every queue).
    hint: Mutex<String>,
}

impl WakeList {
    /// A new wake-up channel. One pending wake-up is enough: a woken dispatcher looks at
    /// everything that is due.
    pub(crate) fn register(&self) -> Receiver<()> {
        let (tx, rx) = bounded(1);
        self.lock().push(tx);
        rx
    }

    /// [`WakeList::wake_all`] after an enqueue into `queue`, which becomes the hint.
    pub(crate) fn wake_all_for(&self, queue: &str) {
        {
            let mut hint = self.hint.lock().unwrap_or_else(|p| p.into_inner());
            if *hint != queue {
                hint.clear();
                hint.push_str(queue);
            }
        }
        self.wake_all();
    }

    /// True when `queue` had the latest in-process enqueue.
    pub(crate) fn hinted(&self, queue: &str) -> bool {
        *self.hint.lock().unwrap_or_else(|p| p.into_inner()) == queue
    }

    /// Wakes every registered dispatcher; forgets the ones that are gone.
    pub(crate) fn wake_all(&self) {
        self.lock()
            .retain(|tx| !matches!(tx.try_send(()), Err(TrySendError::Disconnected(()))));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Sender<()>>> {
        self.senders.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An enqueue wakes every dispatcher and names its queue as the hint; a plain wake-up
    /// (a requeue, `Queue::notify`) wakes them without changing the hint.
    #[test]
    fn a_wake_up_after_an_enqueue_names_its_queue() {
        let wakes = WakeList::default();
        let rx = wakes.register();
        assert!(!wakes.hinted("mail"), "no enqueue yet");
        wakes.wake_all_for("mail");
        assert!(rx.try_recv().is_ok(), "woken");
        assert!(wakes.hinted("mail") && !wakes.hinted("default"));
        wakes.wake_all_for("default");
        wakes.wake_all();
        assert!(rx.try_recv().is_ok(), "one pending wake-up for both");
        assert!(wakes.hinted("default") && !wakes.hinted("mail"));
    }
}
