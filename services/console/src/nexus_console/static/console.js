// The console's own behaviour, beside htmx: reload a page whose live feed fell behind, close
// a left page's feeds, and keep one row per run when a live update and the page both hold it.
(function () {
  "use strict";
  // Every live feed this page opened: closed when the page is left, or the browser keeps a
  // left page (its back/forward cache) with its feed still connected, and after six pages
  // its per-host connection limit stalls the next one.
  var sources = [];
  window.addEventListener("pagehide", function () {
    sources.forEach(function (source) { source.close(); });
  });
  window.addEventListener("pageshow", function (evt) {
    if (evt.persisted) { window.location.reload(); }  // back to a page whose feed was closed
  });
  document.addEventListener("htmx:sseOpen", function (evt) {
    var source = evt.detail && evt.detail.source;
    if (source && !source.__nexusReload) {
      source.__nexusReload = true;
      sources.push(source);
      source.addEventListener("reload", function () { window.location.reload(); });
    }
    document.body.dataset.live = "open";
  });
  document.addEventListener("htmx:sseError", function () {
    document.body.dataset.live = "error";
  });
  document.addEventListener("htmx:sseMessage", function () {
    var seen = {};
    document.querySelectorAll("tr[data-run]").forEach(function (row) {
      var id = row.id;
      if (seen[id]) { row.remove(); } else { seen[id] = true; }
    });
    document.body.dataset.lastLive = String(Date.now());
  });
})();
