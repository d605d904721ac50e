//! Which failures are "the same": an error's headline (the line that matters) and its
//! fingerprint (the headline with what changes from job to job blanked), as error trackers
//! group them. litejobs stores the fingerprint beside each error it writes
//! (`jobs.error_group`, `job_attempts.error_group`); error groups, the dead page and the bulk
//! requeue go by it, so one outage is one group even when every job's text differs.
//!
//! The headline is chosen from the whole text:
//! - after a Python traceback (`Traceback (most recent call last):`), its exception line;
//! - before a stack of `at …` frames (JavaScript, Java), the line above the first frame;
//! - otherwise the last line, where a command's stderr usually says what went wrong, passing
//!   over Rust's `note: …` lines and JSON log lines.
//!
//! A webhook's error is its status line (`HTTP 503 from webhook endpoint …`), not the
//! response body after it; a text litejobs cut to its head loses its last, partial line. A
//! command's `exit N` or `killed by signal S` stays in front of the line chosen. The fingerprint then
//! blanks numbers (`#`, but codes after `HTTP`, `exit`, `status`, `code`, `signal` or
//! `errno` stay), UUIDs and long hexadecimal ids (`<id>`), and quoted values (`'…'`), and
//! keeps at most [`FINGERPRINT_CHARS`] characters.

use std::borrow::Cow;

/// The most characters of a fingerprint: a longer headline is cut there.
const FINGERPRINT_CHARS: usize = 200;

/// Words after which a number is a code that tells failures apart, not a value.
const CODE_WORDS: [&str; 6] = ["http", "exit", "status", "code", "signal", "errno"];

/// The line of `error` that says what went wrong (see the module's rules), trimmed; the
/// whole text when it is one line.
pub(crate) fn headline(error: &str) -> Cow<'_, str> {
    // A webhook's status line, not the body the endpoint answered with.
    let error = error.find(RESPONSE).map_or(error, |at| &error[..at]);
    let (error, cut) = without_cut_note(error);
    let mut lines: Vec<&str> = error
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    if cut && lines.len() > 1 {
        lines.pop();
    }
    let Some(&first) = lines.first() else {
        return Cow::Borrowed(error.trim());
    };
    if lines.len() == 1 {
        return Cow::Borrowed(first.trim());
    }
    let chosen = traceback_exception(&lines)
        .or_else(|| above_frames(&lines))
        .or_else(|| lines.iter().rev().find(|l| !is_noise(l)).copied())
        .unwrap_or(lines[lines.len() - 1])
        .trim();
    match command_head(first) {
        Some(head) if !chosen.starts_with(head) => Cow::Owned(format!("{head}: {chosen}")),
        _ => Cow::Borrowed(chosen),
    }
}

/// What a webhook's error puts between its status line and the response body.
const RESPONSE: &str = "; response: ";

/// `error` without the note a cut to its head ends with (`handler::bounded_error`), and
/// whether there was one.
fn without_cut_note(error: &str) -> (&str, bool) {
    let trimmed = error.trim_end();
    match trimmed.rfind(" [... cut: ") {
        Some(at) if trimmed.ends_with(" bytes in all]") => (&trimmed[..at], true),
        _ => (error, false),
    }
}

/// A line that does not say what went wrong: Rust's `note: run with RUST_BACKTRACE…` and a
/// structured log line (a JSON object).
fn is_noise(line: &str) -> bool {
    let line = line.trim();
    line.starts_with("note: ") || (line.starts_with('{') && line.ends_with('}'))
}

/// The exception line of the last Python traceback in `lines`: the first line after its
/// header that is not indented.
fn traceback_exception<'a>(lines: &[&'a str]) -> Option<&'a str> {
    let header = lines.iter().rposition(|l| {
        l.trim_start()
            .starts_with("Traceback (most recent call last)")
    })?;
    lines[header + 1..]
        .iter()
        .find(|l| !l.starts_with([' ', '\t']))
        .copied()
}

/// The line above the first `at …` stack frame, when there is one.
fn above_frames<'a>(lines: &[&'a str]) -> Option<&'a str> {
    let is_frame = |l: &str| l.starts_with([' ', '\t']) && l.trim_start().starts_with("at ");
    let first = lines.iter().position(|l| is_frame(l))?;
    first.checked_sub(1).map(|i| lines[i])
}

/// `exit N` or `killed by signal S`, when `line` starts with what litejobs writes for a
/// command's end.
fn command_head(line: &str) -> Option<&str> {
    let head = line.split(':').next().unwrap_or(line);
    let head = head.split(" (").next().unwrap_or(head);
    let mut words = head.split(' ');
    let ok = match words.next() {
        Some("exit") => {
            words.next().is_some_and(|n| n.parse::<i32>().is_ok()) && words.next().is_none()
        }
        Some("killed") => {
            words.next() == Some("by")
                && words.next() == Some("signal")
                && words.next().is_some()
                && words.next().is_none()
        }
        _ => false,
    };
    ok.then_some(head)
}

/// The group key of `error`: its [`headline`] with numbers, ids and quoted values blanked.
pub(crate) fn fingerprint(error: &str) -> String {
    let line = headline(error);
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len().min(FINGERPRINT_CHARS * 4));
    let mut i = 0;
    let mut count = 0;
    while i < chars.len() && count < FINGERPRINT_CHARS {
        let c = chars[i];
        let at_start = i == 0 || !chars[i - 1].is_alphanumeric();
        let (piece, next): (Cow<'_, str>, usize) = if at_start {
            if let Some(end) = uuid_or_hex_end(&chars, i) {
                ("<id>".into(), end)
            } else if let Some(end) = quoted_end(&chars, i) {
                (format!("{c}…{c}").into(), end)
            } else if c.is_ascii_digit() {
                let end = number_end(&chars, i);
                if after_code_word(&chars, i) {
                    (chars[i..end].iter().collect::<String>().into(), end)
                } else {
                    ("#".into(), end)
                }
            } else {
                (c.to_string().into(), i + 1)
            }
        } else {
            (c.to_string().into(), i + 1)
        };
        // Runs of blanks and spaces read as one.
        if piece == " " && out.ends_with(' ') {
            i = next;
            continue;
        }
        count += piece.chars().count();
        out.push_str(&piece);
        i = next;
    }
    out.trim_end().to_string()
}

/// The end of a number starting at `i`: digits, with `.`, `:`, `-`, `_`, `,` or `T` between
/// digit runs (decimals, times, dates, addresses).
fn number_end(chars: &[char], i: usize) -> usize {
    let mut end = i;
    while end < chars.len() {
        // `T` joins an ISO 8601 date to its time.
        let joins_digits = matches!(chars[end], '.' | ':' | '-' | '_' | ',' | 'T')
            && chars.get(end + 1).is_some_and(char::is_ascii_digit);
        if !chars[end].is_ascii_digit() && !joins_digits {
            break;
        }
        end += 1;
    }
    end
}

/// The end of a UUID or of a hexadecimal id of 8 or more characters with a digit and a
/// letter in it (`0x…` of any length) starting at `i`, when one does and ends at a word's end.
fn uuid_or_hex_end(chars: &[char], i: usize) -> Option<usize> {
    let hex_run = |from: usize| {
        chars[from..]
            .iter()
            .take_while(|c| c.is_ascii_hexdigit())
            .count()
    };
    let ends_word = |end: usize| chars.get(end).is_none_or(|c| !c.is_alphanumeric());
    // 8-4-4-4-12
    let mut at = i;
    let mut is_uuid = true;
    for (k, len) in [8, 4, 4, 4, 12].into_iter().enumerate() {
        if hex_run(at) != len {
            is_uuid = false;
            break;
        }
        at += len;
        if k < 4 {
            if chars.get(at) != Some(&'-') {
                is_uuid = false;
                break;
            }
            at += 1;
        }
    }
    if is_uuid && ends_word(at) {
        return Some(at);
    }
    let from = if chars.get(i) == Some(&'0') && matches!(chars.get(i + 1), Some('x' | 'X')) {
        i + 2
    } else {
        i
    };
    let len = hex_run(from);
    let end = from + len;
    let long = len >= 8 || (from > i && len >= 1);
    let run = &chars[from..end];
    let has_digit = run.iter().any(char::is_ascii_digit);
    // Digits alone are a number (blanked as one), unless written as 0x….
    let has_letter = from > i || run.iter().any(char::is_ascii_alphabetic);
    (long && has_digit && has_letter && ends_word(end)).then_some(end)
}

/// The end of a quoted value (`'…'`, `"…"` or `` `…` ``) opening at `i`: closed on the same
/// line within 200 characters, by a quote not followed by a letter or digit (so that
/// "can't" opens nothing).
fn quoted_end(chars: &[char], i: usize) -> Option<usize> {
    let quote = chars[i];
    if !matches!(quote, '\'' | '"' | '`') {
        return None;
    }
    let close = chars[i + 1..]
        .iter()
        .take(200)
        .take_while(|&&c| c != '\n')
        .position(|&c| c == quote)?;
    let end = i + 1 + close + 1;
    chars
        .get(end)
        .is_none_or(|c| !c.is_alphanumeric())
        .then_some(end)
}

/// Whether the word before `i` (past spaces, `:`, `=` and `/`) is one of [`CODE_WORDS`].
fn after_code_word(chars: &[char], i: usize) -> bool {
    let mut end = i;
    while end > 0 && matches!(chars[end - 1], ' ' | ':' | '=' | '/') {
        end -= 1;
    }
    let start = chars[..end]
        .iter()
        .rposition(|c| !c.is_alphabetic())
        .map_or(0, |p| p + 1);
    let word: String = chars[start..end].iter().collect::<String>().to_lowercase();
    CODE_WORDS.contains(&word.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_traceback_s_headline_is_its_exception_line_whatever_was_logged_before() {
        let error = "exit 1: 2026-12-05 10:00:01 INFO fetching order 1042\n\
            Traceback (most recent call last):\n  File \"/app/job.py\", line 12, in <module>\n    \
            main()\nConnectionError: [Errno 111] Connection refused";
        assert_eq!(
            headline(error),
            "exit 1: ConnectionError: [Errno 111] Connection refused"
        );
        let other = "exit 1: 2026-12-05 10:07:44 INFO fetching order 77\n\
            Traceback (most recent call last):\n  File \"/app/job.py\", line 12, in <module>\n    \
            main()\nConnectionError: [Errno 111] Connection refused";
        assert_eq!(fingerprint(error), fingerprint(other));
        assert_eq!(
            fingerprint(error),
            "exit 1: ConnectionError: [Errno 111] Connection refused"
        );
    }

    #[test]
    fn a_chained_traceback_gives_the_last_exception() {
        let error =
            "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'id'\n\n\
            During handling of the above exception, another exception occurred:\n\n\
            Traceback (most recent call last):\n  File \"a.py\", line 3\nValueError: bad order 12";
        assert_eq!(headline(error), "ValueError: bad order 12");
        assert_eq!(fingerprint(error), "ValueError: bad order #");
    }

    #[test]
    fn a_stack_of_frames_gives_the_line_above_it() {
        let error = "exit 1: TypeError: Cannot read properties of undefined (reading 'id')\n    \
            at handler (/app/job.js:10:5)\n    at main (/app/job.js:20:3)";
        assert_eq!(
            headline(error),
            "exit 1: TypeError: Cannot read properties of undefined (reading 'id')"
        );
        assert_eq!(
            fingerprint(error),
            "exit 1: TypeError: Cannot read properties of undefined (reading '…')"
        );
    }

    #[test]
    fn other_texts_give_their_last_line_and_one_line_stays_whole() {
        assert_eq!(
            headline("exit 2: starting\nconnecting to db:5432\nno route to host"),
            "exit 2: no route to host"
        );
        assert_eq!(
            headline("  HTTP 503 from endpoint 4  "),
            "HTTP 503 from endpoint 4"
        );
        assert_eq!(headline(""), "");
        assert_eq!(
            headline("killed by signal SIGKILL: out of memory\nbye"),
            "killed by signal SIGKILL: bye"
        );
    }

    #[test]
    fn numbers_ids_and_quoted_values_are_blanked_but_codes_stay() {
        assert_eq!(
            fingerprint("HTTP 503 from https://hooks.example.com/a/1234 after 1.5s"),
            "HTTP 503 from https://hooks.example.com/a/# after #s"
        );
        assert_eq!(
            fingerprint("order 550e8400-e29b-41d4-a716-446655440000 not found (sha 9f86d081884c)"),
            "order <id> not found (sha <id>)"
        );
        assert_eq!(
            fingerprint("user \"ann@example.com\" can't log in from 10.0.0.7:443, pid=8812"),
            "user \"…\" can't log in from #, pid=#"
        );
        assert_eq!(
            fingerprint("exit 75: status=429 code 17 signal 9"),
            "exit 75: status=429 code 17 signal 9"
        );
        assert_eq!(
            fingerprint("utf8 and sha256 and v2 stay"),
            "utf8 and sha256 and v2 stay"
        );
        assert_eq!(fingerprint("pointer 0x7ffd1 freed"), "pointer <id> freed");
    }

    #[test]
    fn a_webhook_s_status_line_a_cut_text_rust_notes_and_json_logs_do_not_make_the_headline() {
        let html = "HTTP 404 from webhook endpoint 3 (https://a.example/hook); response: <html>\n\
                    <body>Not here</body>\n</html>";
        assert_eq!(
            headline(html),
            "HTTP 404 from webhook endpoint 3 (https://a.example/hook)"
        );
        let json = "HTTP 500 from webhook endpoint 4 (https://b.example/hook); response: {\n  \
                    \"error\": \"boom\"\n}";
        assert_ne!(fingerprint(html), fingerprint(json));
        let cut = "Traceback (most recent call last):\nValueError: bad\n  File \"x.py\", li \
                   [... cut: 9000 bytes in all]";
        assert_eq!(headline(cut), "ValueError: bad");
        let panic = "exit 101: thread 'main' panicked at src/main.rs:4:5:\ndisk full\n\
                     note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";
        assert_eq!(headline(panic), "exit 101: disk full");
        let logs = "exit 1: {\"level\":\"info\",\"msg\":\"start\"}\ncannot open /data/in.csv\n\
                    {\"level\":\"info\",\"msg\":\"exit\"}";
        assert_eq!(headline(logs), "exit 1: cannot open /data/in.csv");
        assert_eq!(
            fingerprint("timeout at 2026-12-05T10:00:01Z after 1.5s"),
            "timeout at #Z after #s"
        );
    }

    #[test]
    fn a_fingerprint_is_bounded() {
        let long = "x".repeat(10_000);
        assert_eq!(fingerprint(&long).chars().count(), FINGERPRINT_CHARS);
        let wide = "é".repeat(10_000);
        assert_eq!(fingerprint(&wide).chars().count(), FINGERPRINT_CHARS);
    }
}
