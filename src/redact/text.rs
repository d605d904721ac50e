//! Secrets inside text, where no field name tells: the password of a URL
//! (`postgres://app:pw@db/x`), secret-named parameters (`?access_token=…`, `PASSWORD=…`,
//! `--password=…`, `'password': '…'`), header lines (`Authorization: …`) and bearer tokens.
//! Used for the string values of payloads, results and progress, for error texts, and for
//! URLs in messages and logs.
//!
//! The scan is lexical: it errs towards hiding (a `name=value` whose name reads as secret is
//! masked wherever it stands) and never parses more than the text in front of it.

use std::borrow::Cow;

use super::{Redactor, MASK};

/// What a URL's password is replaced with: a URL that still reads as one.
const URL_MASK: &str = "***";

/// Words that announce a credential in the next word (`Authorization: Bearer abc`).
const AUTH_SCHEMES: &[&str] = &["bearer", "basic", "token", "digest"];

/// `text`, a URL, with the password of its userinfo replaced by `***` and the values of its
/// secret-named parameters (`?password=…`, `&access_token=…`) by `[masked]`, for error
/// messages and logs (the SMTP and PostgreSQL URLs' errors use it):
/// `smtp://user:pa@ss@host?tls=none` shows as `smtp://user:***@host?tls=none`.
///
/// The host is taken to start after the **last** `@` of the text, wherever it is, and the
/// user to end at the first `:` before it. That hides the password also in text that is not
/// a valid URL, such as a password with an unencoded `/` or `?` (`smtp://u:pa/ss@host`
/// shows as `smtp://u:***@host`), at the cost of hiding more than needed when an `@` follows
/// the host.
///
/// ```
/// use litejobs::redact::mask_url_password;
/// assert_eq!(mask_url_password("smtp://user:pa@ss@host:587"), "smtp://user:***@host:587");
/// assert_eq!(mask_url_password("smtp://user:pa/s?s@host?tls=tls"), "smtp://user:***@host?tls=tls");
/// assert_eq!(mask_url_password("smtp://host:25"), "smtp://host:25");
/// assert_eq!(
///     mask_url_password("postgres://app@db/jobs?password=s3cret&sslmode=require"),
///     "postgres://app@db/jobs?password=[masked]&sslmode=require"
/// );
/// ```
pub fn mask_url_password(text: &str) -> String {
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), text),
    };
    let userinfo_hidden = match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}{user}:{URL_MASK}@{host}"),
            None => format!("{scheme}{userinfo}@{host}"),
        },
        None => text.to_string(),
    };
    Redactor::new().mask_parameters(&userinfo_hidden)
}

impl Redactor {
    /// `text` with the secrets it holds masked: URL passwords (`***`), the values of
    /// parameters whose name is secret by [`is_secret`](Redactor::is_secret) (`name=value`
    /// anywhere, quoted names with `:` or `=`, and header lines `Name: value`), and the word
    /// after `Bearer` or `Basic`. Borrowed when there is nothing to mask.
    ///
    /// ```
    /// use litejobs::redact::Redactor;
    /// let r = Redactor::new();
    /// assert_eq!(
    ///     r.mask_text("GET https://u:pw@api.example/x?access_token=abc&page=2"),
    ///     "GET https://u:***@api.example/x?access_token=[masked]&page=2"
    /// );
    /// assert_eq!(r.mask_text("PASSWORD=hunter2 USER=ada"), "PASSWORD=[masked] USER=ada");
    /// assert_eq!(r.mask_text("Authorization: Bearer abc.def"), "Authorization: [masked]");
    /// assert_eq!(r.mask_text("connection refused"), "connection refused");
    /// ```
    pub fn mask_text<'t>(&self, text: &'t str) -> Cow<'t, str> {
        // Each pass only looks for ASCII markers, so a text without any is returned at once.
        if !text.bytes().any(|b| matches!(b, b'=' | b':' | b'@' | b' ')) {
            return Cow::Borrowed(text);
        }
        let masked = mask_bearer(&self.mask_parameters(&mask_userinfo(text)));
        if masked == text {
            Cow::Borrowed(text)
        } else {
            Cow::Owned(masked)
        }
    }

    /// The values of secret-named parameters masked: `name=value` wherever it stands,
    /// `"name": value` and `'name': value` (quoted names), and `Name: rest of line` where the
    /// name starts its line.
    fn mask_parameters(&self, text: &str) -> String {
        let bytes = text.as_bytes();
        mask_spans(text, |floor, i| {
            let b = bytes[i];
            if b != b'=' && (b != b':' || bytes.get(i + 1) == Some(&b'/')) {
                return None;
            }
            let (name, header) = name_before(text, floor, i)?;
            if !self.is_secret(name) {
                return None;
            }
            let (start, end) = value_after(bytes, i + 1, header);
            let done = text[start..].starts_with(MASK) || &text[start..end] == URL_MASK;
            (end > start && !done).then_some((start, end))
        })
    }
}

/// `text` with every span `span_at` finds replaced by [`MASK`]. `span_at(floor, i)` looks
/// at byte `i`, never reaching back before `floor` (the end of the last span), and gives the
/// span to mask: it starts at `floor` or later and is not empty. The scan goes on after it.
fn mask_spans(
    text: &str,
    mut span_at: impl FnMut(usize, usize) -> Option<(usize, usize)>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut i) = (0, 0);
    while i < text.len() {
        match span_at(copied, i) {
            Some((start, end)) => {
                out.push_str(&text[copied..start]);
                out.push_str(MASK);
                copied = end;
                i = end;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// The parameter name that ends at `sep` (an `=` or `:`), not reaching back before `floor`,
/// and whether it is a header line's (`Name: value`, whose value runs to the end of the line).
/// A `:` counts only after a quoted name or a name that starts its line, so that prose such as
/// "invalid token: expired" keeps its words.
fn name_before(text: &str, floor: usize, sep: usize) -> Option<(&str, bool)> {
    let bytes = text.as_bytes();
    let mut end = sep;
    while end > floor && bytes[end - 1] == b' ' {
        end -= 1;
    }
    if end > floor && matches!(bytes[end - 1], b'"' | b'\'') {
        let quote = bytes[end - 1];
        let open = text[floor..end - 1].rfind(quote as char)? + floor;
        let name = &text[open + 1..end - 1];
        return (name.len() <= 64 && !name.contains('\n')).then_some((name, false));
    }
    if end != sep && bytes[sep] == b'=' {
        return None;
    }
    let mut start = end;
    while start > floor && is_name_byte(bytes[start - 1]) {
        start -= 1;
    }
    if start == end {
        return None;
    }
    if bytes[sep] == b'=' {
        return Some((&text[start..end], false));
    }
    let line_start = text[..start].rfind('\n').map_or(0, |n| n + 1);
    text[line_start..start]
        .bytes()
        .all(|b| b == b' ' || b == b'\t')
        .then_some((&text[start..end], true))
}

/// The value after a separator at `from - 1`: quoted (its inside), the rest of the line for a
/// header, or up to the next space or delimiter.
fn value_after(bytes: &[u8], from: usize, header: bool) -> (usize, usize) {
    let mut start = from;
    while start < bytes.len() && bytes[start] == b' ' {
        start += 1;
    }
    match bytes.get(start) {
        Some(&q @ (b'"' | b'\'')) => {
            let end = bytes[start + 1..]
                .iter()
                .position(|&b| b == q || b == b'\n')
                .map_or(bytes.len(), |n| start + 1 + n);
            (start + 1, end)
        }
        _ if header => {
            let mut end = bytes[start..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |n| start + n);
            while end > start && matches!(bytes[end - 1], b'\r' | b' ' | b'\t') {
                end -= 1;
            }
            (start, end)
        }
        _ => {
            // A `:` ends it only before a space or the end ("…?token=abc: 500"), as a
            // credential may hold one (`user:pass`).
            let ends = |n: usize| {
                let b = bytes[n];
                b.is_ascii_whitespace()
                    || b"&;,\"')]}<>|".contains(&b)
                    || (b == b':' && bytes.get(n + 1).is_none_or(|c| c.is_ascii_whitespace()))
            };
            let end = (start..bytes.len())
                .find(|&n| ends(n))
                .unwrap_or(bytes.len());
            (start, end)
        }
    }
}

/// Every URL's userinfo password (`scheme://user:password@host`) replaced by `***`.
///
/// In running text the URL ends at a space or a quote. Its userinfo ends at the last `@`
/// before the path; a password with an unencoded `/` or `?` is still found when what
/// follows the `:` is not a port (`https://u:pa/ss@host`), while
/// `https://host:8080/x?email=a@b.example` is left alone.
fn mask_userinfo(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some(found) = text[search..].find("://") {
        let authority = search + found + 3;
        let end = text[authority..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>'))
            .map_or(text.len(), |n| authority + n);
        let url = &text[authority..end];
        if let Some((colon, at)) = password_span(url) {
            out.push_str(&text[copied..authority + colon + 1]);
            out.push_str(URL_MASK);
            copied = authority + at;
        }
        search = end.max(authority);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Where a URL's password lies after `scheme://`: (the `:` before it, the `@` after it).
fn password_span(url: &str) -> Option<(usize, usize)> {
    let first_at = url.find('@')?;
    let path = url.find(['/', '?', '#']).unwrap_or(url.len());
    let at = if first_at < path {
        url[..path].rfind('@')?
    } else {
        url.rfind('@')?
    };
    let colon = url[..at].find(':')?;
    if colon > path {
        return None;
    }
    if first_at > path {
        let port = &url[colon + 1..path];
        if port.is_empty() || port.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
    }
    (at > colon + 1 && &url[colon + 1..at] != URL_MASK).then_some((colon, at))
}

/// The credential after `Bearer`, `Basic`, `Token` or `Digest` (any case, a word of its own,
/// then spaces): `Bearer [masked]`. A word after `Basic`, `Token` or `Digest` is taken only
/// when it looks like a credential (8 or more characters, no ordinary word), so prose such as
/// "basic auth failed" keeps its words.
fn mask_bearer(text: &str) -> String {
    let lower = text.to_ascii_lowercase().into_bytes();
    let bytes = text.as_bytes();
    mask_spans(text, |floor, i| {
        let scheme = AUTH_SCHEMES.iter().find(|s| {
            lower[i..].starts_with(s.as_bytes())
                && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
                && bytes.get(i + s.len()) == Some(&b' ')
        })?;
        let mut start = i + scheme.len();
        while start < bytes.len() && bytes[start] == b' ' {
            start += 1;
        }
        let end = bytes[start..]
            .iter()
            .position(|&b| b.is_ascii_whitespace() || matches!(b, b'"' | b'\'' | b',' | b';'))
            .map_or(bytes.len(), |n| start + n);
        let word = &text[start..end];
        let credential = *scheme == "bearer"
            || (word.len() >= 8 && word.bytes().any(|b| b.is_ascii_digit() || b == b'='));
        (start >= floor && end > start && !word.starts_with(MASK) && credential)
            .then_some((start, end))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_inside_text_are_masked_and_the_rest_kept() {
        let r = Redactor::new();
        for (text, shown) in [
            (
                "https://u:pw@host/x?access_token=abc",
                "https://u:***@host/x?access_token=[masked]",
            ),
            ("postgres://app:pw@db/x", "postgres://app:***@db/x"),
            (
                "see postgres://app:p/w@db/x now",
                "see postgres://app:***@db/x now",
            ),
            ("PASSWORD=hunter2", "PASSWORD=[masked]"),
            ("DB_PASSWORD=a b=c", "DB_PASSWORD=[masked] b=c"),
            ("--password=x --user=y", "--password=[masked] --user=y"),
            (
                "passWord=x PASS_WORD=y",
                "passWord=[masked] PASS_WORD=[masked]",
            ),
            (
                "{'password': 'hunter 2', 'user': 'ada'}",
                "{'password': '[masked]', 'user': 'ada'}",
            ),
            ("{\"token\":\"abc\"}", "{\"token\":\"[masked]\"}"),
            ("Authorization: Bearer abc.def", "Authorization: [masked]"),
            (
                "Accept: */*\r\nX-Api-Key: k1\r\n",
                "Accept: */*\r\nX-Api-Key: [masked]\r\n",
            ),
            ("Bearer abc", "Bearer [masked]"),
            (
                "sent header bearer   eyJhbGc.x, then",
                "sent header bearer   [masked], then",
            ),
            ("Basic dXNlcjpwdw==", "Basic [masked]"),
            (
                "user=app password=pw host=db",
                "user=app password=[masked] host=db",
            ),
        ] {
            assert_eq!(r.mask_text(text), shown, "{text:?}");
        }
    }

    #[test]
    fn text_without_secrets_is_borrowed_as_written() {
        let r = Redactor::new();
        for text in [
            "connection refused",
            "invalid token: expired",
            "basic auth failed",
            "https://host:8080/x?email=a@b.example",
            "https://host/x?page=2&sort=name",
            "mailto:ada@example.com",
            "password_hint=blue",
            "token_count=3",
            "a == b",
            "ratio: 3:2",
            "",
            "ünïcode: wörds = ja",
        ] {
            assert!(matches!(r.mask_text(text), Cow::Borrowed(_)), "{text:?}");
        }
    }

    #[test]
    fn masking_twice_changes_nothing_more() {
        let r = Redactor::new();
        for text in [
            "https://u:pw@host/x?access_token=abc",
            "Authorization: Bearer abc",
            "PASSWORD=x",
        ] {
            let once = r.mask_text(text).into_owned();
            assert_eq!(r.mask_text(&once), once);
        }
    }

    #[test]
    fn url_passwords_are_hidden_up_to_the_last_at() {
        for (url, shown) in [
            ("smtp://user:pa@ss@host", "smtp://user:***@host"),
            (
                "smtp://user:pa/ss@host?tls=none",
                "smtp://user:***@host?tls=none",
            ),
            ("smtp://user:pa?ss@host:25", "smtp://user:***@host:25"),
            ("smtp://user:pa#ss@host", "smtp://user:***@host"),
            ("smtp://user:a://b@host", "smtp://user:***@host"),
            (
                "smtp://me@example.com:pw@host",
                "smtp://me@example.com:***@host",
            ),
            ("smtps://user:@host", "smtps://user:***@host"),
            ("smtp://user@host", "smtp://user@host"),
            ("smtp://host:25?tls=none", "smtp://host:25?tls=none"),
            (
                "smtp://host:25?tls=none&password=pw",
                "smtp://host:25?tls=none&password=[masked]",
            ),
            (
                "postgres://u@h1:5432,h2:5433/db?password=p%2Fw&target_session_attrs=read-write",
                "postgres://u@h1:5432,h2:5433/db?password=[masked]&target_session_attrs=read-write",
            ),
            ("user:secret@host", "user:***@host"),
            ("", ""),
        ] {
            assert_eq!(mask_url_password(url), shown, "{url}");
        }
    }
}
