// The console's own behaviour, beside htmx: reload a page whose live feed fell behind, and
// keep one row per run when a live update and the rendered page both hold it.
(function () {
  "use strict";
  document.addEventListener("htmx:sseOpen", function (evt) {
    var source = evt.detail && evt.detail.source;
    if (source && !source.__nexusReload) {
      source.__nexusReload = true;
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
