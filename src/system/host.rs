//! This machine's name, as worker ids and PostgreSQL connection names show it.

/// `HOSTNAME`, else `/etc/hostname`, else `localhost`.
pub(crate) fn name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}
