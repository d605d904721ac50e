//! In-process notice of cancelled running jobs: a cancel through this process's `Queue`
//! tells every worker of the process at once, after its commit, so the one holding the job
//! stops it without waiting for its next look at the database.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::cancel_board::CancelBoard;

/// A running job a person cancelled, and what its handler is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CancelNotice {
    pub(crate) id: i64,
    /// "cancelled by WHO: WHY".
    pub(crate) text: String,
}

/// One dispatcher's notice channel, and its worker's board.
type Registered = (Sender<Vec<CancelNotice>>, Arc<CancelBoard>);

/// The notice channels of this process's dispatchers, each with its worker's board.
#[derive(Debug, Default)]
pub(crate) struct CancelList {
    senders: Mutex<Vec<Registered>>,
}

impl CancelList {
    /// A new notice channel, for one dispatcher. Unbounded in type, small in practice: a
    /// dispatcher drains it at every wake-up, and a notice comes only with a person's cancel.
    /// The worker's `board` gets each cancelled id before the cancel returns.
    pub(crate) fn register(&self, board: Arc<CancelBoard>) -> Receiver<Vec<CancelNotice>> {
        let (tx, rx) = unbounded();
        self.lock().push((tx, board));
        rx
    }

    /// Tells every registered dispatcher; forgets the ones that are gone.
    pub(crate) fn tell(&self, notices: &[CancelNotice]) {
        if notices.is_empty() {
            return;
        }
        let now = Instant::now();
        self.lock().retain(|(tx, board)| {
            // Posted first: a job still waiting in that worker's channel is skipped by the
            // thread that takes it, even before the dispatcher reads the notice.
            for notice in notices {
                board.post(notice.id, &notice.text, now);
            }
            tx.send(notices.to_vec()).is_ok()
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Registered>> {
        self.senders.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dispatcher_hears_of_a_cancel_and_gone_ones_are_forgotten() {
        let list = CancelList::default();
        let board = Arc::new(CancelBoard::default());
        let first = list.register(Arc::clone(&board));
        let gone = list.register(Arc::default());
        drop(gone);
        let notice = CancelNotice {
            id: 7,
            text: "cancelled by ops: wrong list".into(),
        };
        list.tell(std::slice::from_ref(&notice));
        assert_eq!(first.try_recv().ok(), Some(vec![notice]));
        assert_eq!(
            board.take(7).as_deref(),
            Some("cancelled by ops: wrong list"),
            "the board has the job before the cancel returns"
        );
        assert_eq!(
            list.lock().len(),
            1,
            "the dropped receiver's sender is forgotten"
        );
    }
}
