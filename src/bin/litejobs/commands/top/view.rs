//! Draws `litejobs top` from the [`App`]: a title line, what waits and what fails, work done
//! and failed per minute, then three panels (queues with their types, the jobs a person may
//! act on, the most common errors) and a line of keys. Text another program wrote (names,
//! errors) goes through [`one_line`], so no control character reaches the terminal.

use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Sparkline, Table, TableState};
use ratatui::Frame;

use litejobs::human::{ago, duration_ms, error_headline, utc_pattern};
use litejobs::{JobRecord, JobStatus};

use super::app::{status_word, App, Panel};
use super::snapshot::{Snapshot, MINUTES};
use crate::commands::stats::{dead_text, failure_rate_text, waiting_text};
use crate::output::{clip, one_line};

/// The smallest terminal the screen fits: every panel and the names in the tables.
pub const MIN_SIZE: (u16, u16) = (80, 20);

/// Below this width the tables leave out their least needed columns.
const WIDE: u16 = 110;

/// Whether a terminal of `width` × `height` is too small for the screen.
pub fn too_small(width: u16, height: u16) -> bool {
    width < MIN_SIZE.0 || height < MIN_SIZE.1
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    if too_small(area.width, area.height) {
        let text = format!(
            "litejobs top needs a terminal of {}×{} at least (this one is {}×{}); q leaves",
            MIN_SIZE.0, MIN_SIZE.1, area.width, area.height
        );
        frame.render_widget(
            Paragraph::new(text).wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let [title, summary, rates, panels, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(2),
        Constraint::Length(4),
        Constraint::Min(6),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(title_line(app)), title);
    frame.render_widget(Paragraph::new(footer_line(app, area.width)), footer);
    let Some(s) = &app.snapshot else {
        frame.render_widget(Paragraph::new("reading the database…"), summary);
        return;
    };
    frame.render_widget(Paragraph::new(summary_lines(s)), summary);
    draw_rates(frame, rates, s);
    // Not `clamp`: on a tiny terminal the upper bound falls below the lower one.
    let fit = |rows: usize, most: u16| (rows as u16).saturating_add(3).min(most).max(4);
    let errors_height = fit(s.overview.top_errors.len(), panels.height / 4 + 1);
    let queues_height = fit(s.rows.len(), panels.height * 2 / 5);
    let [queues, jobs, errors] = Layout::vertical([
        Constraint::Length(queues_height),
        Constraint::Min(4),
        Constraint::Length(errors_height),
    ])
    .areas(panels);
    draw_queues(frame, queues, app, s);
    draw_jobs(frame, jobs, app, s);
    draw_errors(frame, errors, app, s);
    if app.help {
        draw_help(frame);
    }
    if let Some((id, lines)) = &app.detail {
        draw_detail(frame, *id, lines);
    }
}

/// A job's details over the screen; long lines wrap, what does not fit is left out.
fn draw_detail(frame: &mut Frame, id: i64, lines: &[String]) {
    let area = frame.area();
    let popup = Rect {
        x: area.x + 2,
        y: area.y + 1,
        width: area.width.saturating_sub(4),
        height: area.height.saturating_sub(2),
    };
    let text: Vec<Line> = lines.iter().map(|l| Line::from(l.clone())).collect();
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(text)
            .wrap(ratatui::widgets::Wrap { trim: false })
            .block(
                Block::bordered()
                    .title(format!(
                        " Job {id} · any key closes · `litejobs show {id}` has it all "
                    ))
                    .cyan(),
            ),
        popup,
    );
}

fn title_line(app: &App) -> Line<'static> {
    let mut spans = vec![
        Span::from(" litejobs top ").bold().reversed(),
        Span::from(format!(" {}", one_line(&app.source))),
    ];
    if let Some(s) = &app.snapshot {
        if let Some(live) = s.live_workers() {
            let workers = match live {
                0 => "no live worker".to_string(),
                1 => "1 live worker".to_string(),
                n => format!("{n} live workers"),
            };
            spans.push(Span::from(format!(" · {workers}")));
        }
        spans.push(Span::from(format!(
            " · {} UTC",
            utc_pattern(s.at_ms, "%H:%M:%S")
        )));
    }
    if app.read_only {
        spans.push(Span::from(" · read-only").yellow());
    }
    if let Some(e) = &app.read_error {
        spans.push(Span::from(format!(" · reading failed: {}", one_line(e))).red());
    }
    spans.push(Span::from(" · ? help · q quit").dark_gray());
    Line::from(spans)
}

fn summary_lines(s: &Snapshot) -> Vec<Line<'static>> {
    let h = &s.overview.health;
    let oldest = match h.oldest_due_age_ms {
        Some(age) => Span::from(format!("oldest due job waiting {}", duration_ms(age))).yellow(),
        None => Span::from("nothing overdue"),
    };
    let waiting = Line::from(vec![
        Span::from(" waiting ").bold(),
        Span::from(format!("{}; ", waiting_text(h))),
        oldest,
    ]);
    let retrying = s.overview.count(JobStatus::Failed);
    let rate = failure_rate_text(h);
    // Requeued dead jobs stay dead: the DEAD column counts them, `h.dead` does not.
    let requeued = (s.overview.count(JobStatus::Dead) - h.dead).max(0);
    let dead = Span::from(dead_text(h, requeued));
    let failing = Line::from(vec![
        Span::from(" failing ").bold(),
        Span::from(format!("{retrying} retrying, ")),
        if h.dead > 0 { dead.red() } else { dead },
        Span::from(format!("; {rate}")),
    ]);
    vec![waiting, failing]
}

/// Work done and failed per minute over the last [`MINUTES`], as two bar lines stretched
/// to their width.
fn draw_rates(frame: &mut Frame, area: Rect, s: &Snapshot) {
    let [done_area, failed_area] =
        Layout::horizontal([Constraint::Percentage(65), Constraint::Percentage(35)]).areas(area);
    let done: Vec<u64> = s
        .minutes
        .iter()
        .map(|b| b.succeeded.max(0) as u64)
        .collect();
    let failed: Vec<u64> = s
        .minutes
        .iter()
        .map(|b| b.failed_attempts.max(0) as u64)
        .collect();
    let last = |v: &[u64]| v.last().copied().unwrap_or(0);
    let total: u64 = done.iter().sum();
    let done_title = format!(
        " Done per minute, last {MINUTES} min · this minute {} · average {:.1} ",
        last(&done),
        total as f64 / MINUTES as f64
    );
    let failed_title = format!(" Failed attempts/min · this minute {} ", last(&failed));
    for (data, title, color, area) in [
        (done, done_title, Color::Green, done_area),
        (failed, failed_title, Color::Red, failed_area),
    ] {
        // Each minute gets an equal share of the width, the last one ending at the edge.
        let width = usize::from(area.width.saturating_sub(2)).max(data.len());
        let stretched: Vec<u64> = (0..width)
            .map(|col| data.get(col * data.len() / width).copied().unwrap_or(0))
            .collect();
        frame.render_widget(
            Sparkline::default()
                .block(Block::bordered().title(title))
                .data(&stretched)
                .style(Style::new().fg(color)),
            area,
        );
    }
}

fn panel_block(app: &App, panel: Panel, title: String) -> Block<'static> {
    let block = Block::bordered().title(title);
    if app.focus == panel {
        block.border_style(Style::new().cyan().bold())
    } else {
        block.border_style(Style::new().dark_gray())
    }
}

/// A header row; a name ending in `>` is right-aligned, over numbers.
fn header(cells: &[&'static str]) -> Row<'static> {
    Row::new(cells.iter().map(|c| match c.strip_suffix('>') {
        Some(name) => Cell::from(Text::from(name).alignment(Alignment::Right)),
        None => Cell::from(*c),
    }))
    .style(Style::new().bold().dark_gray())
}

/// A count, right-aligned; a dim dot for none, so the eye finds the others.
fn number(n: i64) -> Cell<'static> {
    if n == 0 {
        return Cell::from(Text::from("·").alignment(Alignment::Right)).dark_gray();
    }
    Cell::from(Text::from(n.to_string()).alignment(Alignment::Right))
}

fn draw_queues(frame: &mut Frame, area: Rect, app: &App, s: &Snapshot) {
    let rows: Vec<Vec<Cell>> = s
        .rows
        .iter()
        .map(|r| {
            let (name, state) = match &r.job_type {
                None => (
                    Span::from(one_line(&r.queue)).bold(),
                    if r.paused {
                        Span::from("paused").yellow().bold()
                    } else {
                        Span::from("live").green()
                    },
                ),
                Some(t) => (Span::from(format!("  {}", one_line(t))), Span::from("")),
            };
            let n = |status| number(r.count(status));
            let dead = r.count(JobStatus::Dead);
            vec![
                Cell::from(name),
                Cell::from(state),
                n(JobStatus::Queued),
                n(JobStatus::Running),
                n(JobStatus::Failed),
                if dead > 0 {
                    number(dead).red()
                } else {
                    number(dead)
                },
                n(JobStatus::Succeeded),
                n(JobStatus::Cancelled),
                Cell::from(
                    Text::from(r.oldest_due_ms.map(duration_ms).unwrap_or_default())
                        .alignment(Alignment::Right),
                ),
            ]
        })
        .collect();
    // Narrow: without SUCCEEDED and CANCELLED, which nobody acts on.
    let (table, len) = narrowed(
        rows,
        &[
            Column::new("QUEUE / TYPE", Constraint::Min(14), true),
            Column::new("STATE", Constraint::Length(6), true),
            Column::new("QUEUED>", Constraint::Length(7), true),
            Column::new("RUNNING>", Constraint::Length(8), true),
            Column::new("RETRYING>", Constraint::Length(9), true),
            Column::new("DEAD>", Constraint::Length(6), true),
            Column::new("SUCCEEDED>", Constraint::Length(10), false),
            Column::new("CANCELLED>", Constraint::Length(10), false),
            Column::new("OLDEST DUE>", Constraint::Length(11), true),
        ],
        area.width,
    );
    let table = table.block(panel_block(app, Panel::Queues, " 1 Queues ".to_string()));
    draw_table(frame, area, app, Panel::Queues, table, len);
}

/// A column of a table: its header (a `>` at the end right-aligns it), its width, and
/// whether a narrow terminal keeps it.
struct Column {
    name: &'static str,
    width: Constraint,
    narrow: bool,
}

impl Column {
    fn new(name: &'static str, width: Constraint, narrow: bool) -> Column {
        Column {
            name,
            width,
            narrow,
        }
    }
}

/// The table of `rows` (a cell per column) with its header, leaving out below [`WIDE`] the
/// columns a narrow terminal does not keep; and how many rows it has.
fn narrowed(
    rows: Vec<Vec<Cell<'static>>>,
    columns: &[Column],
    width: u16,
) -> (Table<'static>, usize) {
    let keep: Vec<bool> = columns.iter().map(|c| width >= WIDE || c.narrow).collect();
    fn pick<T>(items: impl IntoIterator<Item = T>, keep: &[bool]) -> Vec<T> {
        items
            .into_iter()
            .zip(keep)
            .filter(|(_, k)| **k)
            .map(|(item, _)| item)
            .collect()
    }
    let rows: Vec<Row> = rows.into_iter().map(|r| Row::new(pick(r, &keep))).collect();
    let len = rows.len();
    let names = pick(columns.iter().map(|c| c.name), &keep);
    let widths = pick(columns.iter().map(|c| c.width), &keep);
    (Table::new(rows, widths).header(header(&names)), len)
}

/// A panel's table, its row selected while the panel has the focus.
fn draw_table(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    panel: Panel,
    table: Table<'static>,
    rows: usize,
) {
    let mut state = TableState::default()
        .with_selected((app.focus == panel && rows > 0).then(|| app.selection(panel)));
    let table = table.row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    frame.render_stateful_widget(table, area, &mut state);
}

/// When a job is at, in the words its status calls for.
fn job_when(job: &JobRecord, now: i64) -> String {
    match job.status {
        JobStatus::Running => match job.started_at {
            Some(at) => format!("for {}", duration_ms((now - at).max(0))),
            None => String::new(),
        },
        JobStatus::Failed | JobStatus::Queued if job.run_at > now => {
            format!("retry {}", ago(job.run_at, now))
        }
        JobStatus::Failed | JobStatus::Queued => format!("due {}", ago(job.run_at, now)),
        _ => {
            let (_, at) = job.status_time();
            format!("died {}", ago(at, now))
        }
    }
}

fn draw_jobs(frame: &mut Frame, area: Rect, app: &App, s: &Snapshot) {
    let now = s.at_ms;
    let rows: Vec<Vec<Cell>> = s
        .jobs
        .iter()
        .map(|job| {
            let word = Span::from(status_word(job.status));
            let status = match job.status {
                JobStatus::Running => word.cyan(),
                JobStatus::Failed => word.yellow(),
                JobStatus::Dead => word.red(),
                _ => word,
            };
            let about = match (job.status, &job.last_error) {
                (JobStatus::Running, _) => job
                    .locked_by
                    .as_deref()
                    .map(|w| format!("on {}", one_line(w)))
                    .unwrap_or_default(),
                (_, Some(e)) => one_line(&error_headline(e)),
                (_, None) => String::new(),
            };
            vec![
                Cell::from(job.id.to_string()),
                Cell::from(status),
                Cell::from(one_line(&job.queue)),
                Cell::from(one_line(&job.job_type)),
                Cell::from(format!("{}/{}", job.attempts, job.max_attempts)),
                Cell::from(job_when(job, now)),
                Cell::from(about),
            ]
        })
        .collect();
    let count = |status| s.jobs.iter().filter(|j| j.status == status).count();
    let title = format!(
        " 2 Jobs · {} running · {} retrying · {} dead ",
        count(JobStatus::Running),
        count(JobStatus::Failed),
        count(JobStatus::Dead)
    );
    // Narrow: without the queue (the Queues panel has it) and the attempt count.
    let (table, len) = narrowed(
        rows,
        &[
            Column::new("ID", Constraint::Length(8), true),
            Column::new("STATUS", Constraint::Length(9), true),
            Column::new("QUEUE", Constraint::Length(12), false),
            Column::new("TYPE", Constraint::Length(18), true),
            Column::new("ATTEMPT", Constraint::Length(8), false),
            Column::new("WHEN", Constraint::Length(17), true),
            Column::new("ERROR / WORKER", Constraint::Min(20), true),
        ],
        area.width,
    );
    let table = table.block(panel_block(app, Panel::Jobs, title));
    draw_table(frame, area, app, Panel::Jobs, table, len);
}

fn draw_errors(frame: &mut Frame, area: Rect, app: &App, s: &Snapshot) {
    let now = s.at_ms;
    let rows: Vec<Row> = s
        .overview
        .top_errors
        .iter()
        .map(|g| {
            Row::new(vec![
                number(g.count),
                number(g.dead),
                Cell::from(one_line(&g.job_types.join(", "))),
                Cell::from(ago(g.last_seen_at, now)),
                Cell::from(one_line(&g.headline)),
            ])
        })
        .collect();
    let len = rows.len();
    let table = Table::new(
        rows,
        [
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(18),
            Constraint::Length(12),
            Constraint::Fill(1),
        ],
    )
    .header(header(&["JOBS>", "DEAD>", "TYPES", "LAST SEEN", "ERROR"]))
    .block(panel_block(
        app,
        Panel::Errors,
        " 3 Most common errors (retrying and dead jobs) ".to_string(),
    ));
    draw_table(frame, area, app, Panel::Errors, table, len);
}

/// The bottom line: a question waiting for y/n, or the last outcome and the focused
/// panel's keys; cut to `width`, the question's `y/n` first so that it is always seen.
fn footer_line(app: &App, width: u16) -> Line<'static> {
    let room = usize::from(width).saturating_sub(8);
    if let Some((_, question)) = &app.confirm {
        return Line::from(vec![
            Span::from(" y/n ").black().on_yellow().bold(),
            Span::from(format!(" {} ", clip(question, room)))
                .yellow()
                .bold(),
        ]);
    }
    let keys = match app.focus {
        Panel::Queues => "p pause/resume queue · R requeue its dead jobs",
        Panel::Jobs => "Enter details · r retry now · c cancel",
        Panel::Errors => "R requeue this error's dead jobs",
    };
    let mut spans = vec![Span::from(format!(" ↑↓ select · {keys} · Tab next panel ")).dark_gray()];
    if let Some(m) = &app.message {
        let at = m
            .at_ms
            .map(|ms| format!("{} ", utc_pattern(ms, "%H:%M:%S")))
            .unwrap_or_default();
        let text = Span::from(format!(" {at}{} ", clip(&m.text, room)));
        spans.insert(0, if m.is_error { text.red() } else { text.green() });
    }
    Line::from(spans)
}

fn draw_help(frame: &mut Frame) {
    let lines: Vec<Line> = [
        "Tab / Shift-Tab   next / previous panel (1 2 3 jump to one)",
        "↑ ↓ j k           select a row (PgUp PgDn Home End too)",
        "",
        "Queues            p   pause or resume the selected queue",
        "                  R   requeue the dead jobs of the queue or type",
        "Jobs          Enter   the job: payload (masked), whole error, attempts",
        "                  r   retry now (a dead job gets one more attempt)",
        "                  c   cancel (a running job is stopped)",
        "Most common       R   requeue the dead jobs with this error",
        "",
        "Cancels and requeues ask y/n first; pause, resume and retry do not.",
        "Read again within --interval (1s) of a write, and every 10s anyway.",
        "q, Esc or Ctrl-C leaves; any key closes this help.",
    ]
    .into_iter()
    .map(Line::from)
    .collect();
    let area = frame.area();
    let width = 72.min(area.width);
    let height = (lines.len() as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Keys ").cyan()),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn app() -> App {
        let queue = litejobs::Queue::open_in_memory().expect("queue");
        for queue_name in ["default", "mail\u{1b}[2J"] {
            queue
                .enqueue(litejobs::NewJob::new("send", serde_json::json!({})).queue(queue_name))
                .expect("enqueue");
        }
        let mut app = App::new("app.db".into(), false);
        app.on_snapshot(Ok(Snapshot::read(&queue).expect("read")));
        app
    }

    fn text(terminal: &Terminal<TestBackend>) -> String {
        let buffer = terminal.backend().buffer();
        buffer
            .content()
            .chunks(usize::from(buffer.area.width))
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn draws_at_any_size_and_no_control_character_reaches_the_terminal() {
        let mut app = app();
        for help in [false, true] {
            app.help = help;
            for (w, h) in [(1, 1), (4, 2), (20, 3), (30, 8), (80, 24), (200, 60)] {
                let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("terminal");
                terminal.draw(|f| draw(f, &app)).expect("draw");
            }
        }
        app.help = false;
        let mut terminal = Terminal::new(TestBackend::new(120, 30)).expect("terminal");
        terminal.draw(|f| draw(f, &app)).expect("draw");
        let screen = text(&terminal);
        assert!(screen.contains("default"), "{screen}");
        assert!(screen.contains("mail\\u{1b}[2J"), "escaped: {screen}");
        assert!(!screen.contains('\u{1b}'), "{screen}");
    }
}
