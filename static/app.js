// Keyboard shortcuts: "/" focuses the search box; "n"/"p" (or "j"/"k") step to the next or
// previous instance of the current view.
(function () {
  "use strict";
  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    if (ev.key === "Escape" && typing(document.activeElement)) {
      document.activeElement.blur();
      return;
    }
    if (typing(ev.target)) { return; }
    if (ev.key === "/") {
      var box = document.getElementById("q");
      if (box) { ev.preventDefault(); box.focus(); box.select(); }
      return;
    }
    var rel = { n: "next", j: "next", p: "prev", k: "prev" }[ev.key];
    if (rel) {
      var link = document.querySelector(".neighbours a[rel=" + rel + "], .pager a[rel=" + rel + "]");
      if (link) { ev.preventDefault(); link.click(); }
    }
  });
})();

// Every htmx request that changes something echoes the session's CSRF token (read from the
// page's meta tag; the session cookie itself is HttpOnly).
document.addEventListener("htmx:configRequest", function (ev) {
  "use strict";
  var meta = document.querySelector('meta[name="csrf-token"]');
  if (meta && meta.content && ev.detail.verb !== "get") {
    ev.detail.headers["X-CSRF-Token"] = meta.content;
  }
});
