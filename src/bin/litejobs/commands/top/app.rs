//! The screen's state and its keys: which panel has the focus, which row is selected, the
//! action waiting for a `y`, the last action's outcome. Keys turn into [`Request`]s that the
//! reading thread carries out, so nothing here touches the database.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use litejobs::{JobRecord, JobStatus};

use super::snapshot::{QueueRow, Snapshot};
use crate::output::{clip, one_line};

/// A status as the screen says it: a failed job waits for its retry.
pub fn status_word(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Failed => "retrying",
        other => other.as_str(),
    }
}

/// The three panels, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Panel {
    Queues,
    Jobs,
    Errors,
}

impl Panel {
    const ALL: [Panel; 3] = [Panel::Queues, Panel::Jobs, Panel::Errors];

    fn index(self) -> usize {
        match self {
            Panel::Queues => 0,
            Panel::Jobs => 1,
            Panel::Errors => 2,
        }
    }
}

/// Something to change in the database, asked for by a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Pause(String),
    Resume(String),
    Retry(i64),
    Cancel(i64),
    /// Requeue the dead jobs of a queue, of one type in it, or of an error group.
    Requeue(Requeue),
}

/// Which dead jobs a bulk requeue takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requeue {
    Queue(String),
    Type { queue: String, job_type: String },
    Group { group: String, headline: String },
}

impl Requeue {
    /// The dead jobs it takes, in words.
    pub fn describe(&self) -> String {
        match self {
            Requeue::Queue(q) => format!("dead jobs of queue {}", one_line(q)),
            Requeue::Type { queue, job_type } => format!(
                "dead {} jobs of queue {}",
                one_line(job_type),
                one_line(queue)
            ),
            Requeue::Group { headline, .. } => {
                format!("dead jobs failing with \"{}\"", clip(headline, 60))
            }
        }
    }
}

/// What the screen asks of the reading thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Carry the action out, then read again.
    Act(Action),
    /// Count what a bulk requeue would take (a dry run), to ask before doing it.
    CountRequeue(Requeue),
    /// Read a job whole, for its details.
    Show(i64),
}

/// What a key did to the screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing beyond a redraw.
    Redraw,
    /// Send this to the reading thread.
    Send(Request),
    /// Leave.
    Quit,
}

/// The outcome line at the bottom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub text: String,
    pub is_error: bool,
    /// When it came, by the last snapshot's clock (ms).
    pub at_ms: Option<i64>,
}

/// Everything the view draws beyond the snapshot.
#[derive(Debug)]
pub struct App {
    /// The database as shown in the title (a URL's password masked).
    pub source: String,
    /// Read-only: the keys that change something say so instead.
    pub read_only: bool,
    /// The last snapshot read; `None` until the first arrives.
    pub snapshot: Option<Snapshot>,
    /// Why the last read failed, while it keeps failing (the old figures stay on screen).
    pub read_error: Option<String>,
    pub focus: Panel,
    /// The selected row of each panel.
    pub selected: [usize; 3],
    /// An action waiting for `y`, with its question.
    pub confirm: Option<(Action, String)>,
    pub message: Option<Message>,
    pub help: bool,
    /// A job's details, line by line, while they are open (any key closes them).
    pub detail: Option<(i64, Vec<String>)>,
    /// The terminal is smaller than the screen needs: nothing is drawn but a request for
    /// room, and the keys that act are ignored (they would act on rows nobody sees).
    pub too_small: bool,
}

impl App {
    pub fn new(source: String, read_only: bool) -> App {
        App {
            source,
            read_only,
            snapshot: None,
            read_error: None,
            focus: Panel::Queues,
            selected: [0; 3],
            confirm: None,
            message: None,
            help: false,
            detail: None,
            too_small: false,
        }
    }

    /// A fresh snapshot, or why it could not be read.
    pub fn on_snapshot(&mut self, read: Result<Snapshot, String>) {
        match read {
            Ok(snapshot) => {
                // The selection follows its queue, job or error, wherever it moved.
                let keys = Panel::ALL.map(|p| self.key_at(p, self.selection(p)));
                self.snapshot = Some(snapshot);
                for (panel, key) in Panel::ALL.into_iter().zip(keys) {
                    if let Some(i) = key.and_then(|k| self.position(panel, &k)) {
                        self.selected[panel.index()] = i;
                    }
                }
                self.read_error = None;
                self.clamp();
            }
            Err(e) => self.read_error = Some(e),
        }
    }

    /// A job's details came back.
    pub fn on_detail(&mut self, id: i64, detail: Result<Vec<String>, String>) {
        match detail {
            Ok(lines) => self.detail = Some((id, lines)),
            Err(e) => self.on_done(Err(e)),
        }
    }

    /// Nothing was written since the last snapshot: its ages move on to `now`.
    pub fn on_aged(&mut self, now: i64) {
        if let Some(s) = &mut self.snapshot {
            s.age_to(now);
        }
        self.read_error = None;
    }

    /// The outcome of an action or of a requeue's count.
    pub fn on_done(&mut self, outcome: Result<String, String>) {
        let at_ms = self.snapshot.as_ref().map(|s| s.at_ms);
        let (text, is_error) = match outcome {
            Ok(text) => (text, false),
            Err(text) => (text, true),
        };
        self.message = Some(Message {
            text,
            is_error,
            at_ms,
        });
    }

    /// What identifies row `i` of `panel`: a queue and type, a job id, an error group.
    fn key_at(&self, panel: Panel, i: usize) -> Option<String> {
        let s = self.snapshot.as_ref()?;
        match panel {
            Panel::Queues => s
                .rows
                .get(i)
                .map(|r| format!("{}\0{}", r.queue, r.job_type.as_deref().unwrap_or_default())),
            Panel::Jobs => s.jobs.get(i).map(|j| j.id.to_string()),
            Panel::Errors => s.overview.top_errors.get(i).map(|g| g.group.clone()),
        }
    }

    /// Where the row with `key` is in `panel` now.
    fn position(&self, panel: Panel, key: &str) -> Option<usize> {
        let len = self.lens()[panel.index()];
        (0..len).find(|&i| self.key_at(panel, i).as_deref() == Some(key))
    }

    /// A requeue's count came back: ask, or say there is nothing to requeue.
    pub fn on_count(&mut self, what: Requeue, count: Result<usize, String>) {
        match count {
            Ok(0) => self.on_done(Ok(format!("no {} to requeue", what.describe()))),
            Ok(n) => {
                let question = format!("Requeue {n} {}?", what.describe());
                self.confirm = Some((Action::Requeue(what), question));
            }
            Err(e) => self.on_done(Err(e)),
        }
    }

    /// Rows in each panel.
    fn lens(&self) -> [usize; 3] {
        self.snapshot.as_ref().map_or([0; 3], |s| {
            [s.rows.len(), s.jobs.len(), s.overview.top_errors.len()]
        })
    }

    fn clamp(&mut self) {
        let lens = self.lens();
        for (sel, len) in self.selected.iter_mut().zip(lens) {
            *sel = (*sel).min(len.saturating_sub(1));
        }
    }

    /// The selected queue row, when the queue panel has the focus.
    pub fn selected_row(&self) -> Option<&QueueRow> {
        let s = self.snapshot.as_ref()?;
        s.rows.get(self.selected[Panel::Queues.index()])
    }

    /// The selected job.
    pub fn selected_job(&self) -> Option<&JobRecord> {
        let s = self.snapshot.as_ref()?;
        s.jobs.get(self.selected[Panel::Jobs.index()])
    }

    /// The selected row of `panel`.
    pub fn selection(&self, panel: Panel) -> usize {
        self.selected[panel.index()]
    }

    /// Handles one key press.
    pub fn on_key(&mut self, key: KeyEvent) -> Step {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('d')) {
            return Step::Quit;
        }
        if let Some((action, _)) = self.confirm.take() {
            return match key.code {
                KeyCode::Char('y') | KeyCode::Char('Y') => Step::Send(Request::Act(action)),
                _ => {
                    self.on_done(Ok("nothing changed".to_string()));
                    Step::Redraw
                }
            };
        }
        if self.too_small {
            return match key.code {
                KeyCode::Char('q') | KeyCode::Esc => Step::Quit,
                _ => Step::Redraw,
            };
        }
        if self.detail.take().is_some() {
            return match key.code {
                KeyCode::Char('q') => Step::Quit,
                _ => Step::Redraw,
            };
        }
        if self.help {
            self.help = false;
            return match key.code {
                KeyCode::Char('q') => Step::Quit,
                _ => Step::Redraw,
            };
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => Step::Quit,
            KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => {
                self.help = true;
                Step::Redraw
            }
            KeyCode::Tab => self.focus_by(1),
            KeyCode::BackTab => self.focus_by(Panel::ALL.len() - 1),
            KeyCode::Char(c @ '1'..='3') => {
                self.focus = Panel::ALL[usize::from(c as u8 - b'1')];
                Step::Redraw
            }
            KeyCode::Up | KeyCode::Char('k') => self.move_by(-1),
            KeyCode::Down | KeyCode::Char('j') => self.move_by(1),
            KeyCode::PageUp => self.move_by(-10),
            KeyCode::PageDown => self.move_by(10),
            KeyCode::Home | KeyCode::Char('g') => self.move_by(isize::MIN),
            KeyCode::End | KeyCode::Char('G') => self.move_by(isize::MAX),
            KeyCode::Char('p') => self.pause_key(),
            KeyCode::Char('r') => self.retry_key(),
            KeyCode::Char('c') => self.cancel_key(),
            KeyCode::Char('R') => self.requeue_key(),
            KeyCode::Enter => self.show_key(),
            _ => Step::Redraw,
        }
    }

    fn focus_by(&mut self, by: usize) -> Step {
        let next = (self.focus.index() + by) % Panel::ALL.len();
        self.focus = Panel::ALL[next];
        Step::Redraw
    }

    fn move_by(&mut self, by: isize) -> Step {
        let i = self.focus.index();
        let last = self.lens()[i].saturating_sub(1);
        let sel = self.selected[i].saturating_add_signed(by);
        self.selected[i] = if by < 0 && sel > self.selected[i] {
            0
        } else {
            sel.min(last)
        };
        Step::Redraw
    }

    /// A key that changes something: refused on a read-only database or with no row.
    fn act(&mut self, action: Option<Result<Request, String>>) -> Step {
        let request = match action {
            None => return Step::Redraw,
            Some(Err(e)) => {
                self.on_done(Err(e));
                return Step::Redraw;
            }
            Some(Ok(request)) => request,
        };
        if self.read_only {
            self.on_done(Err(
                "the database is open read-only: nothing can be changed from here".to_string(),
            ));
            return Step::Redraw;
        }
        Step::Send(request)
    }

    fn pause_key(&mut self) -> Step {
        if self.focus != Panel::Queues {
            return self.wrong_panel("p pauses or resumes the queue selected in Queues");
        }
        let action = self.selected_row().map(|row| {
            Ok(Request::Act(if row.paused {
                Action::Resume(row.queue.clone())
            } else {
                Action::Pause(row.queue.clone())
            }))
        });
        self.act(action)
    }

    fn retry_key(&mut self) -> Step {
        if self.focus != Panel::Jobs {
            return self.wrong_panel("r retries the job selected in Jobs");
        }
        let action = self.selected_job().map(|job| match job.status {
            JobStatus::Failed | JobStatus::Queued | JobStatus::Dead => {
                Ok(Request::Act(Action::Retry(job.id)))
            }
            status => Err(format!(
                "job {} is {}: only a waiting, retrying or dead job can be retried",
                job.id,
                status.as_str()
            )),
        });
        self.act(action)
    }

    fn cancel_key(&mut self) -> Step {
        if self.focus != Panel::Jobs {
            return self.wrong_panel("c cancels the job selected in Jobs");
        }
        let Some(job) = self.selected_job() else {
            return Step::Redraw;
        };
        if job.status.is_final() {
            let e = format!("job {} is {}: it has ended", job.id, job.status.as_str());
            return self.act(Some(Err(e)));
        }
        let question = format!(
            "Cancel job {} ({}, {})?",
            job.id,
            one_line(&job.job_type),
            status_word(job.status)
        );
        let action = Action::Cancel(job.id);
        if self.read_only {
            return self.act(Some(Ok(Request::Act(action))));
        }
        self.confirm = Some((action, question));
        Step::Redraw
    }

    fn requeue_key(&mut self) -> Step {
        let what = match self.focus {
            Panel::Queues => self.selected_row().map(|row| match &row.job_type {
                Some(t) => Requeue::Type {
                    queue: row.queue.clone(),
                    job_type: t.clone(),
                },
                None => Requeue::Queue(row.queue.clone()),
            }),
            Panel::Errors => self.snapshot.as_ref().and_then(|s| {
                let g = s.overview.top_errors.get(self.selection(Panel::Errors))?;
                Some(Requeue::Group {
                    group: g.group.clone(),
                    headline: one_line(&g.headline),
                })
            }),
            Panel::Jobs => {
                return self
                    .wrong_panel("R requeues the dead jobs of the queue, type or error selected")
            }
        };
        self.act(what.map(|w| Ok(Request::CountRequeue(w))))
    }

    /// Enter on a job: its details (reading changes nothing, so read-only is fine).
    fn show_key(&mut self) -> Step {
        if self.focus != Panel::Jobs {
            return self.wrong_panel("Enter shows the details of the job selected in Jobs");
        }
        match self.selected_job() {
            Some(job) => Step::Send(Request::Show(job.id)),
            None => Step::Redraw,
        }
    }

    fn wrong_panel(&mut self, hint: &str) -> Step {
        self.on_done(Err(format!("{hint} (Tab moves between panels)")));
        Step::Redraw
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::crossterm::event::KeyEventKind;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent {
            code,
            modifiers: KeyModifiers::NONE,
            kind: KeyEventKind::Press,
            state: ratatui::crossterm::event::KeyEventState::NONE,
        }
    }

    fn app_with_jobs() -> App {
        let queue = litejobs::Queue::open_in_memory().expect("queue");
        for t in ["a", "b"] {
            queue
                .enqueue(litejobs::NewJob::new(t, serde_json::json!({})))
                .expect("enqueue");
        }
        queue.pause_queue("default").expect("pause");
        let mut app = App::new("test".into(), false);
        app.on_snapshot(Ok(Snapshot::read(&queue).expect("read")));
        app
    }

    #[test]
    fn p_resumes_a_paused_queue_and_a_cancel_waits_for_y() {
        let mut app = app_with_jobs();
        assert_eq!(
            app.on_key(key(KeyCode::Char('p'))),
            Step::Send(Request::Act(Action::Resume("default".into())))
        );
        // No job is running, retrying or dead: the jobs panel is empty, a key does nothing.
        app.on_key(key(KeyCode::Tab));
        assert_eq!(app.focus, Panel::Jobs);
        assert_eq!(app.on_key(key(KeyCode::Char('c'))), Step::Redraw);
        assert!(app.confirm.is_none());
        // Moving past either end stays on the rows there are.
        app.on_key(key(KeyCode::BackTab));
        app.on_key(key(KeyCode::End));
        assert_eq!(app.selection(Panel::Queues), 2);
        app.on_key(key(KeyCode::Down));
        assert_eq!(app.selection(Panel::Queues), 2);
        app.on_key(key(KeyCode::Home));
        assert_eq!(app.selection(Panel::Queues), 0);
        app.on_key(key(KeyCode::Up));
        assert_eq!(app.selection(Panel::Queues), 0);
    }

    #[test]
    fn a_confirmed_action_is_sent_once_and_anything_else_drops_it() {
        let mut app = app_with_jobs();
        app.on_count(Requeue::Queue("default".into()), Ok(3));
        let question = app.confirm.as_ref().map(|(_, q)| q.clone());
        assert_eq!(
            question.as_deref(),
            Some("Requeue 3 dead jobs of queue default?")
        );
        assert_eq!(
            app.on_key(key(KeyCode::Char('y'))),
            Step::Send(Request::Act(Action::Requeue(Requeue::Queue(
                "default".into()
            ))))
        );
        assert!(app.confirm.is_none());
        app.on_count(Requeue::Queue("default".into()), Ok(3));
        assert_eq!(app.on_key(key(KeyCode::Char('n'))), Step::Redraw);
        assert!(app.confirm.is_none());
        assert_eq!(
            app.message.as_ref().map(|m| m.text.as_str()),
            Some("nothing changed")
        );
        // Esc answers "no" rather than quitting while a question is open.
        app.on_count(Requeue::Queue("default".into()), Ok(1));
        assert_eq!(app.on_key(key(KeyCode::Esc)), Step::Redraw);
        assert_eq!(app.on_key(key(KeyCode::Esc)), Step::Quit);
    }

    #[test]
    fn the_selection_follows_its_row_when_others_come_before_it() {
        let queue = litejobs::Queue::open_in_memory().expect("queue");
        queue
            .enqueue(litejobs::NewJob::new("send", serde_json::json!({})).queue("mail"))
            .expect("enqueue");
        let mut app = App::new("test".into(), false);
        app.on_snapshot(Ok(Snapshot::read(&queue).expect("read")));
        app.on_key(key(KeyCode::Down));
        assert_eq!(
            app.selected_row()
                .and_then(|r| r.job_type.clone())
                .as_deref(),
            Some("send")
        );
        // A queue sorted before `mail` appears: the selection stays on mail's `send`.
        queue
            .enqueue(litejobs::NewJob::new("sync", serde_json::json!({})).queue("crm"))
            .expect("enqueue");
        app.on_snapshot(Ok(Snapshot::read(&queue).expect("read")));
        assert_eq!(app.selection(Panel::Queues), 3);
        let row = app.selected_row().expect("a row");
        assert_eq!(
            (row.queue.as_str(), row.job_type.as_deref()),
            ("mail", Some("send"))
        );
    }

    #[test]
    fn a_read_only_database_refuses_the_keys_that_change_something() {
        let mut app = app_with_jobs();
        app.read_only = true;
        assert_eq!(app.on_key(key(KeyCode::Char('p'))), Step::Redraw);
        let message = app.message.as_ref().expect("a message");
        assert!(
            message.is_error && message.text.contains("read-only"),
            "{message:?}"
        );
    }
}
