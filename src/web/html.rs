//! HTML escaping and the page layout. Every piece of job data (payloads, errors, type and
//! queue names, results) is attacker-controlled: it reaches the page only through [`esc`],
//! whether as text or inside an attribute.

use std::fmt::Write as _;

use crate::job::JobStatus;

use super::app::Ctx;
use super::auth::Access;
use super::csrf;
use super::server::http::Response;

/// Escapes text for HTML content and quoted attribute values.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The section of the header navigation a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Jobs,
    Dead,
    Workflows,
    Schedules,
    Workers,
    /// The webhook endpoints page, there only with the `webhook` feature.
    #[cfg(feature = "webhook")]
    Endpoints,
    None,
}

const NAV: &[(Nav, &str, &str)] = &[
    (Nav::Overview, "/", "Overview"),
    (Nav::Jobs, "/jobs", "Jobs"),
    (Nav::Dead, "/dead", "Dead"),
    (Nav::Workflows, "/workflows", "Workflows"),
    (Nav::Schedules, "/schedules", "Schedules &amp; reports"),
    (Nav::Workers, "/workers", "Workers"),
    #[cfg(feature = "webhook")]
    (Nav::Endpoints, "/endpoints", "Endpoints"),
];

/// A whole page: header, navigation, the flash message, `body` (already HTML), footer.
/// `body_attrs` go on `<body>` (already escaped), e.g. the overview's live-update markers.
pub(crate) fn page(ctx: &Ctx, nav: Nav, title: &str, body_attrs: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    let _ = writeln!(
        out,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{} · litejobs</title>\n<link rel=\"icon\" href=\"data:,\">\n\
         <link rel=\"stylesheet\" href=\"/assets/app.css\">\n\
         <script src=\"/assets/app.js\" defer></script>\n</head>\n<body{}>",
        esc(title),
        if body_attrs.is_empty() {
            String::new()
        } else {
            format!(" {body_attrs}")
        }
    );
    out.push_str("<header class=\"top\"><div class=\"wrap\">\n<a class=\"brand\" href=\"/\">lite<b>jobs</b></a>\n<nav>");
    for &(item, href, label) in NAV {
        let class = if item == nav { " class=\"active\"" } else { "" };
        let _ = write!(out, "<a href=\"{href}\"{class}>{label}</a>");
    }
    out.push_str("</nav>\n<div class=\"who\">");
    if ctx.read_only {
        out.push_str("<span class=\"pill\">read-only</span>");
    }
    if matches!(ctx.access, Access::Session(_)) {
        let _ = write!(
            out,
            "<form method=\"post\" action=\"/logout\" class=\"inline\">{}\
             <button class=\"btn btn-quiet\">Sign out</button></form>",
            csrf_field(ctx)
        );
    }
    out.push_str("</div>\n</div></header>\n<main class=\"wrap\">\n");
    if let Some(flash) = &ctx.flash {
        let _ = writeln!(
            out,
            "<p class=\"flash {}\" role=\"status\">{}</p>",
            if flash.ok { "flash-ok" } else { "flash-error" },
            esc(&flash.message)
        );
    }
    out.push_str(body);
    let _ = writeln!(
        out,
        "\n</main>\n<footer class=\"wrap\">litejobs {} · times in UTC · page made {}</footer>\n</body>\n</html>",
        env!("CARGO_PKG_VERSION"),
        super::format::utc(ctx.now)
    );
    out
}

/// The hidden CSRF field every form carries.
pub(crate) fn csrf_field(ctx: &Ctx) -> String {
    format!(
        "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
        csrf::FIELD,
        esc(&ctx.csrf)
    )
}

/// A one-button POST form; nothing in read-only mode. `confirm` asks first (with
/// JavaScript; without it the button just submits).
pub(crate) fn action_button(
    ctx: &Ctx,
    action: &str,
    label: &str,
    class: &str,
    confirm: Option<&str>,
) -> String {
    if ctx.read_only {
        return String::new();
    }
    let confirm = confirm
        .map(|c| format!(" data-confirm=\"{}\"", esc(c)))
        .unwrap_or_default();
    format!(
        "<form method=\"post\" action=\"{}\" class=\"inline\"{confirm}>{}<button class=\"btn {class}\">{}</button></form>",
        esc(action),
        csrf_field(ctx),
        esc(label)
    )
}

/// A coloured status word.
pub(crate) fn badge(status: JobStatus) -> String {
    format!(
        "<span class=\"badge badge-{0}\">{0}</span>",
        status.as_str()
    )
}

/// A link to a job.
pub(crate) fn job_link(id: i64) -> String {
    format!("<a href=\"/jobs/{id}\">#{id}</a>")
}

/// Pretty JSON in a `<pre>`, escaped.
pub(crate) fn json_block(value: &serde_json::Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    format!("<pre class=\"code\">{}</pre>", esc(&text))
}

/// An error page with a way back.
pub(crate) fn error_page(ctx: &Ctx, status: u16, title: &str, message: &str) -> Response {
    let body = format!(
        "<h1>{}</h1>\n<p class=\"error-text\">{}</p>\n<p><a href=\"/\">Back to the overview</a></p>",
        esc(title),
        esc(message)
    );
    Response::html(status, page(ctx, Nav::None, title, "", &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<script>alert(\"x\" & 'y')</script>"),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
        assert_eq!(esc("plain é"), "plain é");
    }
}
