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

// A failed htmx request (an error status, no answer, or a form the browser refused to send)
// shows its reason in the page's error region (base.html) instead of leaving the page
// unchanged. The text is the server's message (the error page's title and items, or a JSON
// "detail"), always set as text. Dismiss hides it; so does the next success of the same element.
(function () {
  "use strict";
  var failed = null;
  var marked = null;
  function region() { return document.getElementById("request-error"); }
  function show(elt, title, text) {
    var box = region();
    if (!box) { return; }
    box.querySelector(".request-error-title").textContent = title;
    box.querySelector(".request-error-text").textContent = text;
    box.hidden = false;
    unmark();
    failed = elt;
    // The form that asked is outlined and points at the message (screen readers read it).
    marked = elt && elt.closest ? (elt.closest("form") || elt) : null;
    if (marked) {
      marked.classList.add("request-failed");
      marked.setAttribute("aria-describedby", "request-error");
    }
  }
  function unmark() {
    if (marked) {
      marked.classList.remove("request-failed");
      marked.removeAttribute("aria-describedby");
    }
    marked = null;
  }
  function hide() {
    var box = region();
    if (box) { box.hidden = true; }
    unmark();
    failed = null;
  }
  function clip(text) {
    text = text.replace(/\s+/g, " ").trim();
    return text.length > 600 ? text.slice(0, 600) + "…" : text;
  }
  function fromJson(body) {
    try {
      var detail = JSON.parse(body).detail;
      if (typeof detail === "string") { return detail; }
      if (Array.isArray(detail)) {
        return detail.map(function (d) { return d && d.msg ? d.msg : String(d); }).join("; ");
      }
    } catch (e) { /* not JSON after all: fall through to the text */ }
    return "";
  }
  // {title, text} of an error answer.
  function reasonOf(xhr) {
    var status = xhr.status + (xhr.statusText ? " " + xhr.statusText : "");
    var type = xhr.getResponseHeader("Content-Type") || "";
    var body = xhr.responseText || "";
    if (type.indexOf("json") >= 0) {
      return { title: status, text: fromJson(body) };
    }
    if (type.indexOf("html") >= 0) {
      var doc = new DOMParser().parseFromString(body, "text/html");
      var box = doc.querySelector(".error-box");
      if (box) {
        var head = box.querySelector("h1, h2");
        var items = Array.prototype.map.call(box.querySelectorAll("li"), function (li) {
          return li.textContent.trim();
        });
        return {
          title: head ? clip(head.textContent) : status,
          text: clip(items.length ? items.join("; ") : box.textContent)
        };
      }
      return { title: status, text: clip(doc.body ? doc.body.textContent : "") };
    }
    return { title: status, text: clip(body) };
  }
  document.addEventListener("htmx:responseError", function (ev) {
    var reason = reasonOf(ev.detail.xhr);
    show(ev.detail.elt, reason.title + ":", reason.text || "the server gave no reason.");
  });
  document.addEventListener("htmx:sendError", function (ev) {
    show(ev.detail.elt, "Request failed:", "the server could not be reached. Try again.");
  });
  document.addEventListener("htmx:timeout", function (ev) {
    show(ev.detail.elt, "Request failed:", "the server did not answer in time. Try again.");
  });
  document.addEventListener("htmx:validation:halted", function (ev) {
    var errors = (ev.detail && ev.detail.errors) || [];
    show(ev.detail.elt, "Not sent:", errors.map(function (e) {
      return (e.elt && e.elt.name ? e.elt.name + ": " : "") + e.message;
    }).join("; ") || "a field is invalid.");
  });
  document.addEventListener("htmx:afterRequest", function (ev) {
    // requestConfig.elt is the element that asked, even when its answer replaced it.
    var asked = ev.detail.requestConfig ? ev.detail.requestConfig.elt : ev.detail.elt;
    if (ev.detail.successful && failed !== null && asked === failed) { hide(); }
  });
  document.addEventListener("click", function (ev) {
    if (ev.target.closest && ev.target.closest(".request-error-close")) { hide(); }
  });
})();

// ---- Instance table (templates/_table.html): column chooser ------------------------------
// The shown columns live in the page's URL (`cols`, one value per shown column's data-col key;
// one blank value: none shown; absent: all), so a pasted link shows the same columns. The
// server renders hidden columns hidden and keeps `cols` in its paging, sort and filter links;
// a change here rewrites those links and the address (history.replaceState) without a request.
// This browser also keeps the hidden columns per benchmark in localStorage
// ("appellate.columns.<benchmark>"), used when a URL names no columns. The column the table
// is sorted by (data-sorted-col) always shows. Body cells match their header by position.
(function () {
  "use strict";
  var PREFIX = "appellate.columns.";
  function storedHidden(benchmark) {
    try {
      var stored = JSON.parse(window.localStorage.getItem(PREFIX + benchmark) || "[]");
      return Array.isArray(stored) ? stored : [];
    } catch (e) { return []; }
  }
  function store(benchmark, hidden) {
    try { window.localStorage.setItem(PREFIX + benchmark, JSON.stringify(hidden)); } catch (e) { /* private mode */ }
  }
  function boxes(chooser) { return chooser.querySelectorAll("input[type=checkbox]"); }
  function hiddenOf(chooser) {
    return Array.prototype.filter.call(boxes(chooser), function (box) { return !box.checked; })
      .map(function (box) { return box.value; });
  }
  // The `cols` values for the boxes as checked: null when every column shows.
  function colsOf(chooser) {
    var all = boxes(chooser);
    var shown = Array.prototype.filter.call(all, function (box) { return box.checked; })
      .map(function (box) { return box.value; });
    if (shown.length === all.length) { return null; }
    return shown.length ? shown : [""];
  }
  function applyTo(table, hidden, kept) {
    var heads = table.querySelectorAll("thead tr.head-cols > th");
    var hide = Array.prototype.map.call(heads, function (th) {
      var key = th.getAttribute("data-col");
      return key !== kept && hidden.indexOf(key) >= 0;
    });
    Array.prototype.forEach.call(table.querySelectorAll("tr:not(.head-groups)"), function (tr) {
      Array.prototype.forEach.call(tr.children, function (cell, i) {
        cell.classList.toggle("col-hidden", hide[i] === true);
      });
    });
    // Group headings span what is left of their columns; a group with none left hides.
    var at = 0;
    Array.prototype.forEach.call(table.querySelectorAll("thead tr.head-groups > th"), function (th) {
      var span = Number(th.getAttribute("data-span") || th.colSpan);
      th.setAttribute("data-span", String(span));
      var shown = 0;
      for (var k = at; k < at + span; k++) { if (!hide[k]) { shown++; } }
      at += span;
      th.colSpan = Math.max(shown, 1);
      th.classList.toggle("col-hidden", shown === 0);
    });
  }
  // `url` (absolute or a path) as path + query with `cols` set to `cols` (null: removed).
  function withCols(url, cols) {
    var u = new URL(url, window.location.href);
    u.searchParams.delete("cols");
    (cols || []).forEach(function (c) { u.searchParams.append("cols", c); });
    return u.pathname + u.search + u.hash;
  }
  function pathOf(url) { return new URL(url, window.location.href).pathname; }
  // Every link to this table (paging, sorting, the sort chip, Clear) or to its rows' pages
  // (whose "back to table" keeps them) and the filter form's hidden `cols` fields carry
  // `cols`; so does the address bar.
  function carry(chooser, cols) {
    var path = chooser.getAttribute("data-path");
    Array.prototype.forEach.call(document.querySelectorAll("main a[href]"), function (a) {
      var to = pathOf(a.getAttribute("href"));
      if (to !== path && to.indexOf(path + "/instances/") !== 0) { return; }
      a.setAttribute("href", withCols(a.getAttribute("href"), cols));
      if (a.hasAttribute("hx-get")) {
        a.setAttribute("hx-get", withCols(a.getAttribute("hx-get"), cols));
        // htmx reads hx-get when it processes the element: process it again.
        if (window.htmx) { window.htmx.process(a); }
      }
    });
    var results = chooser.closest(".results");
    if (results) {
      Array.prototype.forEach.call(results.querySelectorAll("input[name=cols]"), function (input) {
        input.remove();
      });
      (cols || []).forEach(function (c) {
        var input = document.createElement("input");
        input.type = "hidden";
        input.name = "cols";
        input.setAttribute("form", "filters");
        input.value = c;
        results.insertBefore(input, results.firstChild);
      });
    }
    syncAddress(chooser);
  }
  function syncAddress(chooser) {
    if (window.location.pathname !== chooser.getAttribute("data-path")) { return; }
    var target = withCols(window.location.href, colsOf(chooser));
    var here = window.location.pathname + window.location.search + window.location.hash;
    if (target !== here) { window.history.replaceState(window.history.state, "", target); }
  }
  function show(chooser) {
    var hidden = hiddenOf(chooser);
    var kept = chooser.getAttribute("data-sorted-col") || "";
    var results = chooser.closest(".results") || document;
    Array.prototype.forEach.call(results.querySelectorAll("table.instances"), function (table) {
      applyTo(table, hidden, kept);
    });
  }
  // On load and after a swap: the server applied the URL's `cols`; without one, this
  // browser's stored choice applies (and goes into the links and the address).
  function init(root) {
    Array.prototype.forEach.call((root || document).querySelectorAll(".column-chooser"), function (chooser) {
      if (chooser.getAttribute("data-chosen") !== "true") {
        var hidden = storedHidden(chooser.getAttribute("data-benchmark"));
        if (hidden.length) {
          Array.prototype.forEach.call(boxes(chooser), function (box) {
            box.checked = hidden.indexOf(box.value) < 0;
          });
          mirror(chooser);
          chooser.setAttribute("data-chosen", "true");
          carry(chooser, colsOf(chooser));
        }
      }
      show(chooser);
    });
  }
  // The boxes' checked attributes follow their state, so that htmx's history snapshot (the
  // page's HTML) restores the same choice on "back".
  function mirror(chooser) {
    Array.prototype.forEach.call(boxes(chooser), function (box) {
      box.toggleAttribute("checked", box.checked);
    });
  }
  function chosen(chooser) {
    mirror(chooser);
    store(chooser.getAttribute("data-benchmark"), hiddenOf(chooser));
    chooser.setAttribute("data-chosen", "true");
    carry(chooser, colsOf(chooser));
    show(chooser);
  }
  document.addEventListener("change", function (ev) {
    var chooser = ev.target.closest && ev.target.closest(".column-chooser");
    if (!chooser || ev.target.type !== "checkbox") { return; }
    chosen(chooser);
  });
  document.addEventListener("click", function (ev) {
    var all = ev.target.closest && ev.target.closest(".column-chooser .columns-all");
    if (!all) { return; }
    var chooser = all.closest(".column-chooser");
    Array.prototype.forEach.call(boxes(chooser), function (box) { box.checked = true; });
    chosen(chooser);
  });
  document.addEventListener("DOMContentLoaded", function () { init(document); });
  document.addEventListener("htmx:afterSwap", function () { init(document); });
  document.addEventListener("htmx:historyRestore", function () { init(document); });
  // htmx writes the server's URL after a swap: keep the shown columns in it.
  document.addEventListener("htmx:pushedIntoHistory", function () {
    Array.prototype.forEach.call(document.querySelectorAll(".column-chooser"), syncAddress);
  });
})();

// ---- Model text (templates/_rich_text.html): LaTeX through KaTeX, raw-text toggle ---------
// Math spans arrive escaped inside <span class="math"> (app/web/markdown.py); KaTeX builds
// their DOM itself (no HTML strings, so the page's CSP holds) with trust off: no \href,
// \url or \includegraphics targets, no HTML extensions.
(function () {
  "use strict";
  var DELIMITERS = [
    { left: "$$", right: "$$", display: true },
    { left: "\\[", right: "\\]", display: true },
    { left: "\\(", right: "\\)", display: false },
    { left: "$", right: "$", display: false }
  ];
  // KaTeX sets a few style attributes with setAttribute (\fbox borders, MathML text shadows),
  // which the CSP refuses; while it renders they go through the CSSOM, which the CSP allows.
  function withStylesThroughCssom(render) {
    var setAttribute = Element.prototype.setAttribute;
    Element.prototype.setAttribute = function (name, value) {
      if (String(name).toLowerCase() === "style") { this.style.cssText = String(value); return; }
      return setAttribute.call(this, name, value);
    };
    try { render(); } finally { Element.prototype.setAttribute = setAttribute; }
  }
  function renderMath(root) {
    if (typeof window.renderMathInElement !== "function") { return; }
    withStylesThroughCssom(function () {
      Array.prototype.forEach.call(root.querySelectorAll(".md .math:not([data-rendered])"), function (el) {
        el.setAttribute("data-rendered", "");
        try {
          // A span KaTeX cannot parse stays as its escaped source (errorCallback: no console noise).
          window.renderMathInElement(el, {
            delimiters: DELIMITERS, throwOnError: true, errorCallback: function () {},
            trust: false, strict: "ignore", maxSize: 50, maxExpand: 500
          });
        } catch (e) { el.setAttribute("data-rendered", "failed"); }
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { renderMath(document); });
  document.addEventListener("htmx:afterSwap", function () { renderMath(document); });
  document.addEventListener("click", function (ev) {
    var button = ev.target.closest && ev.target.closest(".rich .raw-toggle");
    if (!button) { return; }
    var block = button.closest(".rich");
    var raw = button.getAttribute("aria-pressed") !== "true";
    button.setAttribute("aria-pressed", raw ? "true" : "false");
    button.textContent = raw ? "formatted" : "raw";
    block.querySelector(".md").hidden = raw;
    block.querySelector(".raw-text").hidden = !raw;
  });
})();

// The instance page's relabel form: choosing a label set shows its values and takes its
// version (the one the server checks the label's history against).
(function () {
  "use strict";
  document.addEventListener("change", function (ev) {
    var select = ev.target;
    if (!select || select.id !== "relabel-label") { return; }
    var form = select.form;
    var option = select.options[select.selectedIndex];
    form.querySelector("#relabel-version").value = option.getAttribute("data-version");
    Array.prototype.forEach.call(form.querySelectorAll(".relabel-value"), function (field) {
      var chosen = field.getAttribute("data-label") === select.value;
      field.hidden = !chosen;
      field.querySelector("select").disabled = !chosen;
    });
  });
})();

// A list's "select all" box ticks or clears every row's box of its form (the disagreements
// list's selection, sent to a queue or marked as defects).
document.addEventListener("change", function (ev) {
  var all = ev.target.closest ? ev.target.closest("input.select-all") : null;
  if (!all || !all.form) return;
  Array.prototype.forEach.call(all.form.querySelectorAll("input[name=item]"), function (box) {
    box.checked = all.checked;
  });
});
