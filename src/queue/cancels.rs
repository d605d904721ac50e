//! In-process notice of cancelled running jobs: a cancel through this process's `Queue`
//! tells every worker of the process at once, after its commit, so the one holding the job
//! stops it without waiting for its next look at the database.

use std::sync::Mutex;

use crossbeam_channel::{unbounded, Receiver, Sender};

/// A running job a person cancelled, and what its handler is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CancelNotice {
    pub(crate) id: i64,
    /// "cancelled by WHO: WHY".
    pub(crate) text: String,
}

/// The notice channels of this process's dispatchers.
#[derive(Debug, Default)]
pub(crate) struct CancelList {
    senders: Mutex<Vec<Sender<Vec<CancelNotice>>>>,
}

impl CancelList {
    /// A new notice channel, for one dispatcher. Unbounded in type, small in practice: a
    /// dispatcher drains it at every wake-up, and a notice comes only with a person's cancel.
    pub(crate) fn register(&self) -> Receiver<Vec<CancelNotice>> {
        let (tx, rx) = unbounded();
        self.lock().push(tx);
        rx
    }

    /// Tells every registered dispatcher; forgets the ones that are gone.
    pub(crate) fn tell(&self, notices: &[CancelNotice]) {
        if notices.is_empty() {
            return;
        }
        self.lock().retain(|tx| tx.send(notices.to_vec()).is_ok());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Sender<Vec<CancelNotice>>>> {
        self.senders.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dispatcher_hears_of_a_cancel_and_gone_ones_are_forgotten() {
        let list = CancelList::default();
        let first = list.register();
        let gone = list.register();
        drop(gone);
        let notice = CancelNotice {
            id: 7,
            text: "cancelled by ops: wrong list".into(),
        };
        list.tell(std::slice::from_ref(&notice));
        assert_eq!(first.try_recv().ok(), Some(vec![notice]));
        assert_eq!(
            list.lock().len(),
            1,
            "the dropped receiver's sender is forgotten"
        );
    }
}
