//! The stylesheet and the script, compiled into the binary: the dashboard works offline and
//! loads nothing from anywhere else (the Content-Security-Policy would refuse it anyway).

use super::server::http::Response;

const CSS: &str = include_str!("assets/app.css");
const JS: &str = include_str!("assets/app.js");

/// `GET /assets/{name}`.
pub(crate) fn serve(name: &str) -> Response {
    let (content_type, body) = match name {
        "app.css" => ("text/css; charset=utf-8", CSS),
        "app.js" => ("text/javascript; charset=utf-8", JS),
        _ => return Response::text(404, "litejobs: no such asset\n"),
    };
    // Revalidated on each load: an upgraded binary never serves yesterday's script.
    Response::bytes(200, content_type, body.as_bytes().to_vec())
        .with_header("Cache-Control", "no-cache")
}
