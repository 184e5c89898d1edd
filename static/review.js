// Review queue shortcuts: 1-9 vote for the n-th value, s skip, u undo the last vote, n write a
// note, t jump to the defect tags, ? show the shortcuts. Keys typed into a text box are text.
// A queue's instructions show until dismissed; the dismissal is remembered per queue in this
// browser (localStorage), and the "Instructions" button brings them back.
(function () {
  "use strict";
  function dismissedKey(queue) { return "appellate.instructions-dismissed." + queue; }
  function remember(key, on) {
    try {
      if (on) { window.localStorage.setItem(key, "1"); } else { window.localStorage.removeItem(key); }
    } catch (e) { /* storage disabled: the choice lasts for this page only */ }
  }
  function remembered(key) {
    try { return window.localStorage.getItem(key) === "1"; } catch (e) { return false; }
  }
  function showInstructions(show) {
    var box = document.getElementById("instructions");
    var again = document.getElementById("instructions-show");
    if (!box) { return; }
    box.hidden = !show;
    if (again) { again.hidden = show; }
    remember(dismissedKey(box.dataset.queue), !show);
  }
  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName)) &&
      !(el.tagName === "INPUT" && el.type === "checkbox");
  }
  function submit(id) {
    var form = document.getElementById(id);
    if (form) { form.requestSubmit(); }
  }
  function toggleHelp() {
    var help = document.getElementById("help");
    if (help) { help.hidden = !help.hidden; }
  }
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("help-toggle");
    if (button) { button.addEventListener("click", toggleHelp); }
    var box = document.getElementById("instructions");
    if (box) {
      if (remembered(dismissedKey(box.dataset.queue))) { showInstructions(false); }
      var dismiss = document.getElementById("instructions-dismiss");
      var again = document.getElementById("instructions-show");
      if (dismiss) { dismiss.addEventListener("click", function () { showInstructions(false); }); }
      if (again) { again.addEventListener("click", function () { showInstructions(true); }); }
    }
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    if (typing(ev.target)) {
      if (ev.key === "Escape") { ev.target.blur(); }
      return;
    }
    if (/^[1-9]$/.test(ev.key)) {
      var choice = document.querySelector('#vote-form button[data-key="' + ev.key + '"]');
      if (choice) { ev.preventDefault(); choice.click(); }
      return;
    }
    if (ev.key === "s") { ev.preventDefault(); submit("skip-form"); return; }
    if (ev.key === "u") { ev.preventDefault(); submit("undo-form"); return; }
    if (ev.key === "n") {
      var note = document.getElementById("note");
      if (note) { ev.preventDefault(); note.focus(); }
      return;
    }
    if (ev.key === "t") {
      var tag = document.querySelector("#tags input");
      if (tag) { ev.preventDefault(); tag.focus(); }
      return;
    }
    if (ev.key === "?") { ev.preventDefault(); toggleHelp(); }
  });
})();
