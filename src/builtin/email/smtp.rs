//! The SMTP mailer: lettre's blocking transport (no async runtime), STARTTLS or TLS by
//! rustls, authentication, timeouts; and the classification of its failures.

use std::fmt;
use std::time::Duration;

use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::transport::smtp::Error as SmtpError;
use lettre::{SmtpTransport, Transport};
use url::{Host, ParseError, Url};

use super::{message, Email, MailError, Mailer, Sent};
use crate::error::{Error, Result};
use crate::human::parse_duration;
use crate::redact::mask_url_password;

/// How long each SMTP step (connect, each command) may take unless configured otherwise.
pub const DEFAULT_SMTP_TIMEOUT: Duration = Duration::from_secs(10);

/// How the connection to the SMTP server is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SmtpTls {
    /// Plain text: only for a server on the same machine or a test server. Default port 25.
    None,
    /// Plain connection upgraded with STARTTLS, which must succeed. Default port 587.
    StartTls,
    /// TLS from the first byte (SMTPS). Default port 465.
    Tls,
}

impl SmtpTls {
    fn default_port(self) -> u16 {
        match self {
            SmtpTls::None => 25,
            SmtpTls::StartTls => 587,
            SmtpTls::Tls => 465,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            SmtpTls::None => "none",
            SmtpTls::StartTls => "starttls",
            SmtpTls::Tls => "tls",
        }
    }
}

/// Where and how [`SmtpMailer`] connects.
///
/// ```
/// use litejobs::builtin::email::{SmtpConfig, SmtpTls};
/// use std::time::Duration;
/// # fn main() -> litejobs::Result<()> {
/// let config = SmtpConfig::from_url("smtp://mailer:s3cret@smtp.example.com?tls=starttls&timeout=15s")?;
/// assert_eq!(config.host(), "smtp.example.com");
/// assert_eq!(config.port_or_default(), 587);
/// assert_eq!(config.tls_mode(), SmtpTls::StartTls);
/// assert_eq!(config.timeout_value(), Duration::from_secs(15));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct SmtpConfig {
    host: String,
    port: Option<u16>,
    tls: SmtpTls,
    credentials: Option<(String, String)>,
    timeout: Duration,
    hello_name: Option<String>,
}

impl fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpConfig")
            .field("host", &self.host)
            .field("port", &self.port_or_default())
            .field("tls", &self.tls)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl SmtpConfig {
    /// The server `host`, with STARTTLS on port 587, no authentication and
    /// [`DEFAULT_SMTP_TIMEOUT`].
    pub fn new(host: impl Into<String>) -> SmtpConfig {
        SmtpConfig {
            host: host.into(),
            port: None,
            tls: SmtpTls::StartTls,
            credentials: None,
            timeout: DEFAULT_SMTP_TIMEOUT,
            hello_name: None,
        }
    }

    /// Reads `smtp://[user[:password]@]host[:port][?tls=starttls|tls|none][&timeout=10s]`
    /// (`smtps://` means `tls=tls`). Without `tls`, `smtp://` uses STARTTLS; the port
    /// defaults by the TLS mode (587, 465, 25). `timeout` is a duration as litejobs reads
    /// every one ([`parse_duration`]: `10s`, `500ms`, `1m`), above 0; a bare number is
    /// refused, the unit is never guessed.
    ///
    /// User and password are percent-decoded, so any character can be written encoded: a
    /// password with `/`, `?` or `#` **must** be (`/` as `%2F`, `?` as `%3F`, `#` as `%23`,
    /// `%` as `%25`), because those end the host part of a URL. `:` and `@` in the password
    /// are read right unencoded too (the host starts after the last `@`), but encoding them
    /// (`%3A`, `%40`) is never wrong.
    ///
    /// ```
    /// use litejobs::builtin::email::SmtpConfig;
    /// // The password is "p/ss?w#rd@1".
    /// let config = SmtpConfig::from_url("smtp://mailer:p%2Fss%3Fw%23rd%401@smtp.example.com")?;
    /// assert_eq!(config.host(), "smtp.example.com");
    /// let err = SmtpConfig::from_url("smtp://mailer:p/ss@smtp.example.com").unwrap_err();
    /// assert!(err.to_string().contains("percent-encode"), "{err}");
    /// assert!(!err.to_string().contains("p/ss"), "{err}");
    /// # Ok::<(), litejobs::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the part that is
    /// wrong; the URL is shown with its password replaced by `***`
    /// ([`mask_url_password`](crate::redact::mask_url_password)), and
    /// the password is never in the message.
    pub fn from_url(text: &str) -> Result<SmtpConfig> {
        let shown = mask_url_password(text);
        let bad = |why: String| Error::invalid_config(format!("SMTP URL {shown:?}: {why}"));
        let Some((_, rest)) = text.split_once("://") else {
            return Err(bad("expected smtp://host or smtps://host".to_string()));
        };
        // An `@` after the first `/`, `?` or `#` means one of those is in the user or
        // password: a URL parser would end the host there and read the password as the
        // host, a port or a path.
        if let Some(end) = rest.find(['/', '?', '#']) {
            if rest[end..].contains('@') {
                return Err(bad(
                    "an `@` follows a `/`, `?` or `#`, so the user or password holds one of \
                     them not percent-encoded; write `/` as %2F, `?` as %3F, `#` as %23 (and \
                     `%` as %25, `@` as %40)"
                        .to_string(),
                ));
            }
        }
        let url = Url::parse(text).map_err(|e| bad(parse_error(e, rest)))?;
        let tls = match url.scheme() {
            "smtp" => SmtpTls::StartTls,
            "smtps" => SmtpTls::Tls,
            other => return Err(bad(format!("scheme {other:?} is not smtp or smtps"))),
        };
        let host = match url.host() {
            // smtp is not one of the URL standard's special schemes, so its host comes
            // opaque (percent-encoded, not IDNA-mapped): read it as an http host would be.
            Some(Host::Domain(opaque)) if !opaque.is_empty() => {
                let decoded = percent_decode(opaque).map_err(bad)?;
                match Host::parse(&decoded) {
                    Ok(Host::Domain(name)) => name,
                    Ok(Host::Ipv4(ip)) => ip.to_string(),
                    Ok(Host::Ipv6(ip)) => ip.to_string(),
                    Err(e) => return Err(bad(format!("the host is not a domain name ({e})"))),
                }
            }
            Some(Host::Ipv4(ip)) => ip.to_string(),
            Some(Host::Ipv6(ip)) => ip.to_string(),
            _ => return Err(bad("the host is missing".to_string())),
        };
        if !matches!(url.path(), "" | "/") {
            return Err(bad(
                "an SMTP URL has no path: only ?options may follow the host".to_string(),
            ));
        }
        if url.fragment().is_some() {
            return Err(bad(
                "an SMTP URL has no #fragment (a `#` in a password is written %23)".to_string(),
            ));
        }
        let mut config = SmtpConfig::new(host);
        config.tls = tls;
        config.port = match url.port() {
            Some(0) => return Err(bad("port 0 is not usable".to_string())),
            port => port,
        };
        let user = percent_decode(url.username()).map_err(bad)?;
        let password = percent_decode(url.password().unwrap_or("")).map_err(bad)?;
        if !user.is_empty() {
            config.credentials = Some((user, password));
        }
        for (key, value) in url.query_pairs() {
            match key.as_ref() {
                "tls" => {
                    config.tls = match value.to_ascii_lowercase().as_str() {
                        "starttls" | "required" => SmtpTls::StartTls,
                        "tls" | "wrapper" | "smtps" => SmtpTls::Tls,
                        "none" | "off" => SmtpTls::None,
                        other => {
                            return Err(bad(format!(
                                "tls={other:?} is not one of starttls, tls, none"
                            )))
                        }
                    }
                }
                "timeout" => {
                    config.timeout = match parse_duration(&value) {
                        Ok(timeout) if timeout.is_zero() => {
                            return Err(bad(format!("timeout={value:?} must be above 0")))
                        }
                        Ok(timeout) => timeout,
                        Err(why) => return Err(bad(format!("timeout: {why}"))),
                    }
                }
                "hello_name" | "ehlo" => config.hello_name = Some(value.into_owned()),
                "" => {}
                other => {
                    return Err(bad(format!(
                        "unknown option {other:?} (known: tls, timeout, hello_name)"
                    )))
                }
            }
        }
        Ok(config)
    }

    /// The port. Defaults by the TLS mode: 587 (STARTTLS), 465 (TLS), 25 (none).
    pub fn port(mut self, port: u16) -> SmtpConfig {
        self.port = Some(port);
        self
    }

    /// How the connection is secured. Defaults to [`SmtpTls::StartTls`].
    pub fn tls(mut self, tls: SmtpTls) -> SmtpConfig {
        self.tls = tls;
        self
    }

    /// Authenticates with a user name and password (PLAIN or LOGIN, as the server offers).
    pub fn credentials(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> SmtpConfig {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// The time limit of connecting and of each SMTP command. Defaults to
    /// [`DEFAULT_SMTP_TIMEOUT`] (10 s).
    pub fn timeout(mut self, timeout: Duration) -> SmtpConfig {
        self.timeout = timeout;
        self
    }

    /// The name sent with EHLO. Defaults to this machine's host name.
    pub fn hello_name(mut self, name: impl Into<String>) -> SmtpConfig {
        self.hello_name = Some(name.into());
        self
    }

    /// The server's host.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port connected to.
    pub fn port_or_default(&self) -> u16 {
        self.port.unwrap_or_else(|| self.tls.default_port())
    }

    /// How the connection is secured.
    pub fn tls_mode(&self) -> SmtpTls {
        self.tls
    }

    /// The time limit of each step.
    pub fn timeout_value(&self) -> Duration {
        self.timeout
    }
}

/// Sends through an SMTP server with lettre's blocking transport: one connection per email
/// (jobs are spread over time and threads, so a pool would mostly hold idle sockets).
#[derive(Clone)]
pub struct SmtpMailer {
    transport: SmtpTransport,
    server: String,
}

impl fmt::Debug for SmtpMailer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpMailer")
            .field("server", &self.server)
            .finish()
    }
}

impl SmtpMailer {
    /// A mailer for `config`. Connects only when sending.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) when the TLS settings
    /// for the host cannot be built.
    pub fn new(config: &SmtpConfig) -> Result<SmtpMailer> {
        let port = config.port_or_default();
        let tls_parameters = || {
            TlsParameters::new(config.host.clone()).map_err(|e| {
                Error::invalid_config(format!("TLS for SMTP host {:?}: {e}", config.host))
            })
        };
        let tls = match config.tls {
            SmtpTls::None => Tls::None,
            SmtpTls::StartTls => Tls::Required(tls_parameters()?),
            SmtpTls::Tls => Tls::Wrapper(tls_parameters()?),
        };
        let mut builder = SmtpTransport::builder_dangerous(config.host.clone())
            .port(port)
            .tls(tls)
            .timeout(Some(config.timeout));
        if let Some((user, password)) = &config.credentials {
            builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
        }
        if let Some(name) = &config.hello_name {
            builder = builder.hello_name(ClientId::Domain(name.clone()));
        }
        Ok(SmtpMailer {
            transport: builder.build(),
            server: format!("{}:{port} ({})", config.host, config.tls.as_str()),
        })
    }
}

impl Mailer for SmtpMailer {
    fn send(&self, email: &Email) -> std::result::Result<Sent, MailError> {
        let message = message::build(email)?;
        match self.transport.send(&message) {
            Ok(response) => {
                let lines: Vec<&str> = response.message().collect();
                let text = format!("{} {}", response.code(), lines.join(" "));
                let mut sent = Sent::new(email.message_id.clone()).response(text);
                if let Some(id) = lines.iter().find_map(|line| queue_id(line)) {
                    sent = sent.provider_id(id);
                }
                Ok(sent)
            }
            Err(err) => Err(classify(&err, &self.server)),
        }
    }
}

/// The queue id in a reply like `2.0.0 Ok: queued as 4F2A1`.
fn queue_id(line: &str) -> Option<String> {
    let at = line.find("queued as ")?;
    let id = line[at + "queued as ".len()..].split_whitespace().next()?;
    Some(id.trim_matches(|c| c == '<' || c == '>').to_string()).filter(|id| !id.is_empty())
}

/// 4xx, connection failures and timeouts may pass: retry. 5xx and lettre's own refusals of
/// the message (client errors) will not: permanent.
fn classify(err: &SmtpError, server: &str) -> MailError {
    if let Some(code) = err.status() {
        let code = u16::from(code);
        let message = format!("SMTP server {server} answered {err}");
        return if err.is_permanent() {
            MailError::permanent(message).with_code(code)
        } else {
            MailError::transient(message).with_code(code)
        };
    }
    if err.is_timeout() || is_io_timeout(err) {
        return MailError::transient(format!("SMTP server {server} timed out: {err}"));
    }
    if err.is_client() {
        return MailError::permanent(format!("the email cannot be sent over SMTP: {err}"));
    }
    MailError::transient(format!("SMTP server {server}: {err}"))
}

/// A socket read or write that ran past its timeout: Unix reports it as `WouldBlock`, which
/// lettre's `is_timeout` does not look for.
fn is_io_timeout(err: &SmtpError) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            );
        }
        source = e.source();
    }
    false
}

/// What went wrong in `rest` (the URL after `://`), in words; the password is never quoted.
fn parse_error(err: ParseError, rest: &str) -> String {
    match err {
        ParseError::EmptyHost => "the host is missing".to_string(),
        ParseError::InvalidPort => {
            // The port text: after the userinfo, up to the path or query, after the last
            // `:` that is not inside an IPv6 address's brackets. No password is in it: an
            // `@` past the host was refused before parsing.
            let authority = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            let authority =
                &authority[..authority.find(['/', '?', '#']).unwrap_or(authority.len())];
            let after_ipv6 = authority.rfind(']').map_or(0, |end| end + 1);
            match authority[after_ipv6..].rsplit_once(':') {
                Some((_, port)) => format!("port {port:?} is not a number from 1 to 65535"),
                None => "the port is not a number from 1 to 65535".to_string(),
            }
        }
        ParseError::InvalidIpv6Address => "the IPv6 host is malformed (write [::1])".to_string(),
        other => format!("not a URL ({other})"),
    }
}

fn percent_decode(s: &str) -> std::result::Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "a %-escape in the user or password is malformed".to_string())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the user or password is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_host_port_tls_and_credentials() {
        let c = SmtpConfig::from_url("smtp://127.0.0.1:2525?tls=none").expect("valid");
        assert_eq!(
            (c.host(), c.port_or_default(), c.tls_mode()),
            ("127.0.0.1", 2525, SmtpTls::None)
        );
        let c = SmtpConfig::from_url("smtps://u%40x:p%3Aw@mail.example.com").expect("valid");
        assert_eq!(c.port_or_default(), 465);
        assert_eq!(c.credentials, Some(("u@x".to_string(), "p:w".to_string())));
        let c = SmtpConfig::from_url("smtp://[::1]:25/?tls=none&timeout=500ms").expect("valid");
        assert_eq!(
            (c.host(), c.timeout_value()),
            ("::1", Duration::from_millis(500))
        );
        // Hosts are read as in an http URL: lower case, IDNA to ASCII.
        let c = SmtpConfig::from_url("smtp://u:p@M%C3%BCnchen.Example").expect("valid");
        assert_eq!(c.host(), "xn--mnchen-3ya.example");
        let c = SmtpConfig::from_url("smtp://u:p@münchen.example").expect("valid");
        assert_eq!(c.host(), "xn--mnchen-3ya.example");
        let c = SmtpConfig::from_url("smtp://10.0.0.1").expect("valid");
        assert_eq!(c.host(), "10.0.0.1");
        let c = SmtpConfig::from_url("smtp://[::1]:25/?tls=none&timeout=500ms").expect("valid");
        assert_eq!(
            (c.host(), c.timeout_value()),
            ("::1", Duration::from_millis(500))
        );
    }

    #[test]
    fn bad_urls_name_the_problem_and_hide_the_password() {
        for (url, expected) in [
            ("http://host", "scheme \"http\""),
            ("smtp://u:hunter2@host?tls=maybe", "tls=\"maybe\""),
            ("smtp://u:hunter2@host:99999", "port \"99999\""),
            ("smtp://host?retries=3", "unknown option \"retries\""),
            ("smtp://:25", "host is missing"),
            ("smtp://u:hunter2@", "host is missing"),
            ("smtp://u:hunter2@host:0", "port 0"),
            ("smtp://u:hunter2@[::1:25", "IPv6"),
            ("smtp://u:hunter2@host/inbox", "no path"),
            ("smtp://u:hunter2@host#top", "no #fragment"),
            ("smtp://u:hunter2%zz@host", "%-escape"),
            ("u:hunter2@host", "expected smtp://host"),
            (
                "smtp://host?password=hunter2",
                "unknown option \"password\"",
            ),
            (
                "smtp://u@host?tls=none&pass=x&password=hunter2",
                "unknown option \"pass\"",
            ),
        ] {
            let msg = SmtpConfig::from_url(url)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(msg.contains(expected), "{url}: {msg}");
            assert!(!msg.contains("hunter2"), "{url}: {msg}");
        }
    }

    #[test]
    fn the_timeout_reads_as_every_duration_and_a_bare_number_is_refused() {
        let timeout = |url: &str| SmtpConfig::from_url(url).map(|c| c.timeout_value());
        assert_eq!(
            timeout("smtp://h?timeout=1m30s").ok(),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            timeout("smtp://h?timeout=2h").ok(),
            Some(Duration::from_secs(7200))
        );
        for (url, expected) in [
            ("smtp://u:hunter2@h?timeout=10", "10 needs a unit"),
            ("smtp://u:hunter2@h?timeout=10", "e.g. 10s"),
            (
                "smtp://u:hunter2@h?timeout=0s",
                "timeout=\"0s\" must be above 0",
            ),
            (
                "smtp://u:hunter2@h?timeout=soon",
                "invalid duration \"soon\"",
            ),
        ] {
            let msg = timeout(url)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(msg.contains(expected), "{url}: {msg}");
            assert!(!msg.contains("hunter2"), "{url}: {msg}");
        }
    }

    /// Every byte but ASCII letters and digits as `%XX`.
    fn encode(text: &str) -> String {
        text.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    }

    #[test]
    fn percent_encoded_passwords_may_hold_any_character() {
        for password in [
            "pa/ss",
            "pa?ss",
            "pa#ss",
            "pa@ss",
            "p:w",
            "100%",
            "a b+c&d=e",
            "ü/€?",
            "",
        ] {
            let url = format!(
                "smtp://mailer%40example.com:{}@mail.example.com:2525?tls=none&timeout=2s",
                encode(password)
            );
            let c = SmtpConfig::from_url(&url).unwrap_or_else(|e| panic!("{password:?}: {e}"));
            assert_eq!(
                c.credentials,
                Some(("mailer@example.com".to_string(), password.to_string())),
                "{url}"
            );
            assert_eq!(
                (
                    c.host(),
                    c.port_or_default(),
                    c.tls_mode(),
                    c.timeout_value()
                ),
                (
                    "mail.example.com",
                    2525,
                    SmtpTls::None,
                    Duration::from_secs(2)
                ),
                "{url}"
            );
        }
    }

    #[test]
    fn unencoded_at_and_colon_in_a_password_are_read_up_to_the_last_at() {
        let c = SmtpConfig::from_url("smtp://me@example.com:pa@ss:w@mail.example.com:2525")
            .expect("valid");
        assert_eq!(
            c.credentials,
            Some(("me@example.com".to_string(), "pa@ss:w".to_string()))
        );
        assert_eq!((c.host(), c.port_or_default()), ("mail.example.com", 2525));
    }

    #[test]
    fn an_unencoded_slash_question_mark_or_hash_in_a_password_is_refused_unshown() {
        for url in [
            "smtp://user:hunter2/x@mail.example.com?tls=none",
            "smtp://user:hunter2?x@mail.example.com",
            "smtp://user:hunter2#x@mail.example.com:2525",
            "smtp://user:20/24@mail.example.com",
            "smtps://user:a/b?c#d@e@mail.example.com",
        ] {
            let msg = SmtpConfig::from_url(url)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                msg.contains("not percent-encoded") && msg.contains("%2F"),
                "{url}: {msg}"
            );
            assert!(msg.contains("://user:***@mail.example.com"), "{url}: {msg}");
            for part in ["hunter2", "20/24", "a/b"] {
                assert!(!msg.contains(part), "{url}: {msg}");
            }
        }
    }

    #[test]
    fn queue_ids_are_read_from_the_reply() {
        assert_eq!(
            queue_id("2.0.0 Ok: queued as 4F2A1").as_deref(),
            Some("4F2A1")
        );
        assert_eq!(queue_id("Ok <abc>").as_deref(), None);
    }
}
