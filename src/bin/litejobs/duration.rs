//! Durations on the command line (`30s`, `5m`, `2h`, `7d`, `1h30m`, `500ms`) and durations and
//! ages for people (`4m 12s`, `3h ago`).

pub use litejobs::human::parse_duration as parse;
pub use litejobs::human::{ago, duration_ms as human_ms, utc};
