//! In-process wake-up: an enqueue wakes idle dispatchers instead of letting them sleep
//! until the next poll.

use std::sync::Mutex;

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

/// The wake-up channels of this process's dispatchers.
#[derive(Debug, Default)]
pub(crate) struct WakeList {
    senders: Mutex<Vec<Sender<()>>>,
}

impl WakeList {
    /// A new wake-up channel. One pending wake-up is enough: a woken dispatcher looks at
    /// everything that is due.
    pub(crate) fn register(&self) -> Receiver<()> {
        let (tx, rx) = bounded(1);
        self.lock().push(tx);
        rx
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
