// litejobs dashboard. Every page works without this script; it only adds two things:
// the overview refreshes its figures from /api/overview every few seconds, and buttons
// with data-confirm ask before they submit.
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });

  var body = document.body;
  if (!body || body.getAttribute("data-live") !== "overview") return;
  var shape = body.getAttribute("data-shape");
  var status = document.getElementById("live-status");
  // The server says when to ask again: later when its reading was slow (a big database).
  var next = parseInt(body.getAttribute("data-poll"), 10) || 5000;

  function apply(data) {
    // New queues or a paused switch change rows and buttons: reload the whole page.
    if (data.shape !== shape) { window.location.reload(); return; }
    var items = document.querySelectorAll("[data-key]");
    for (var i = 0; i < items.length; i++) {
      var value = data.values[items[i].getAttribute("data-key")];
      // textContent, never innerHTML: the figures are shown as text, whatever they hold.
      if (value !== undefined && items[i].textContent !== value) items[i].textContent = value;
    }
    if (status) status.textContent = "live · updated " + new Date().toLocaleTimeString();
    if (data.next_poll_ms > 0) next = data.next_poll_ms;
  }

  function poll() {
    fetch("/api/overview", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(apply)
      .catch(function () { if (status) status.textContent = "live updates paused (dashboard unreachable)"; })
      .then(function () { window.setTimeout(poll, next); });
  }

  if (status) status.textContent = "live";
  window.setTimeout(poll, next);
})();
