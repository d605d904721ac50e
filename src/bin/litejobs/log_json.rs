//! `--log-format json`: each log record as one JSON object on its own line, for journald,
//! Loki and other collectors: `time` (RFC 3339, UTC, milliseconds), `level`, `target`,
//! `message`, then the record's key-value fields (`job_id`, `job_type`, `queue`, `attempt`
//! in a line about a job), numbers as numbers. Under journald each line starts with its syslog level.

use std::io::Write;

use env_logger::fmt::Formatter;
use log::kv::{Error as KvError, Key, Value, VisitSource};
use log::Record;
use serde_json::{Map, Value as Json};

/// True when stderr goes to journald (systemd sets `JOURNAL_STREAM` for a service's
/// output): each line then starts with its syslog level, which journald takes off and keeps
/// as the entry's priority.
fn to_journald() -> bool {
    static SET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SET.get_or_init(|| std::env::var_os("JOURNAL_STREAM").is_some_and(|v| !v.is_empty()))
}

/// The syslog level journald reads from a `<N>` at the start of a line.
fn syslog_level(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

/// Writes `record` as one line of JSON.
pub fn write_record(buf: &mut Formatter, record: &Record<'_>) -> std::io::Result<()> {
    let mut line = Map::new();
    line.insert("time".into(), buf.timestamp_millis().to_string().into());
    line.insert("level".into(), record.level().as_str().into());
    line.insert("target".into(), record.target().into());
    line.insert("message".into(), record.args().to_string().into());
    let mut fields = Fields(&mut line);
    // A field that cannot be read is left out; the line itself is still written.
    let _ = record.key_values().visit(&mut fields);
    if to_journald() {
        write!(buf, "<{}>", syslog_level(record.level()))?;
    }
    writeln!(buf, "{}", Json::Object(line))
}

/// Adds each key-value field to the line (after the four fixed ones, which it never
/// replaces).
struct Fields<'a>(&'a mut Map<String, Json>);

impl<'kvs> VisitSource<'kvs> for Fields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), KvError> {
        let json = if let Some(n) = value.to_i64() {
            Json::from(n)
        } else if let Some(b) = value.to_bool() {
            Json::from(b)
        } else {
            Json::from(value.to_string())
        };
        self.0.entry(key.as_str().to_string()).or_insert(json);
        Ok(())
    }
}
