//! The watch on the database's files: an inotify watch of its directory and the thread that
//! reads it (Linux); elsewhere none, and the dispatcher checks on a timer.

pub(crate) use imp::FileWatch;

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::OsString;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use crossbeam_channel::{Receiver, Sender};
    use inotify::{Inotify, WatchDescriptor, WatchMask, Watches};

    use crate::storage::CommitFiles;

    /// An inotify watch of the database's directory and the thread that reads it.
    pub(crate) struct FileWatch {
        pub(in crate::worker::change_watch) hints: Receiver<()>,
        watches: Watches,
        dir: PathBuf,
        active: Option<WatchDescriptor>,
        stop: Arc<AtomicBool>,
    }

    impl FileWatch {
        pub(crate) fn start(files: CommitFiles) -> std::io::Result<FileWatch> {
            let inotify = Inotify::init()?;
            let mut watches = inotify.watches();
            // Fails now, rather than on the first watch, where the directory cannot be watched.
            let probe = watches.add(&files.dir, WatchMask::MODIFY)?;
            watches.remove(probe)?;
            let (tx, hints) = crossbeam_channel::bounded(1);
            let stop = Arc::new(AtomicBool::new(false));
            let thread_stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("litejobs-watch".to_string())
                .spawn(move || read_loop(inotify, &files.names, &tx, &thread_stop))?;
            Ok(FileWatch {
                hints,
                watches,
                dir: files.dir,
                active: None,
                stop,
            })
        }

        pub(crate) fn watch(&mut self) -> std::io::Result<()> {
            if self.active.is_none() {
                self.active = Some(self.watches.add(&self.dir, WatchMask::MODIFY)?);
            }
            Ok(())
        }

        pub(crate) fn is_active(&self) -> bool {
            self.active.is_some()
        }

        pub(crate) fn unwatch(&mut self) {
            if let Some(wd) = self.active.take() {
                // Fails only when the directory is gone, which removed the watch already.
                let _ = self.watches.remove(wd);
            }
        }
    }

    impl Drop for FileWatch {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            // Removing a watch queues an event, which wakes the thread to see `stop`.
            if self.active.is_none() {
                let _ = self.watch();
            }
            self.unwatch();
        }
    }

    fn read_loop(mut inotify: Inotify, names: &[OsString], hints: &Sender<()>, stop: &AtomicBool) {
        let mut buffer = [0u8; 4096];
        loop {
            let events = match inotify.read_events_blocking(&mut buffer) {
                Ok(events) => events,
                // The channel closes with this thread: the dispatcher goes back to timed
                // checks.
                Err(e) => {
                    log::warn!("litejobs: the database's file watch stopped ({e})");
                    return;
                }
            };
            let written = events
                .filter_map(|event| event.name)
                .any(|name| names.iter().any(|n| n == name));
            if stop.load(Ordering::SeqCst) {
                return;
            }
            if written
                && hints.try_send(()) == Err(crossbeam_channel::TrySendError::Disconnected(()))
            {
                return;
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use crossbeam_channel::Receiver;

    use crate::storage::CommitFiles;

    /// No file watch here: the dispatcher checks on a timer.
    pub(crate) struct FileWatch {
        pub(in crate::worker::change_watch) hints: Receiver<()>,
    }

    impl FileWatch {
        pub(crate) fn start(_files: CommitFiles) -> std::io::Result<FileWatch> {
            Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "file watches are used on Linux only",
            ))
        }

        pub(crate) fn watch(&mut self) -> std::io::Result<()> {
            Ok(())
        }

        pub(crate) fn is_active(&self) -> bool {
            false
        }

        pub(crate) fn unwatch(&mut self) {}
    }
}
