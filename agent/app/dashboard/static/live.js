/* Watchkeeper dashboard: keeps a live page current without a reload.
   The page's element with data-live="<url>" is replaced by the "html" its URL answers
   (JSON, same origin, the same session cookie), at most every data-every seconds
   (default 15) while the tab is visible; #updated shows when. No framework, no inline
   script (the CSP allows only this origin's files). */
(function () {
  "use strict";
  var box = document.querySelector("[data-live]");
  if (!box || !window.fetch) { return; }
  var stamp = document.querySelector("#updated .at");
  var url = box.getAttribute("data-live");
  var last = Date.now();
  var busy = false;
  var shown = null;

  function every() {
    var seconds = parseFloat(box.getAttribute("data-every"));
    return (seconds > 0 ? seconds : 15) * 1000;
  }

  function offline(why) {
    var wrap = document.getElementById("updated");
    if (wrap) { wrap.classList.add("stale"); wrap.title = why; }
  }

  function poll() {
    busy = true;
    last = Date.now();
    fetch(url, {
      credentials: "same-origin",
      cache: "no-store",
      redirect: "manual",
      headers: { "Accept": "application/json" }
    }).then(function (response) {
      if (!response.ok) { throw new Error("HTTP " + response.status); }
      return response.json();
    }).then(function (data) {
      var focused = box.contains(document.activeElement) && document.activeElement !== document.body;
      if (data.html !== shown && !focused) {
        box.innerHTML = data.html;
        shown = data.html;
      }
      if (stamp) { stamp.textContent = data.updated; }
      var wrap = document.getElementById("updated");
      if (wrap) { wrap.classList.remove("stale"); wrap.removeAttribute("title"); }
      box.setAttribute("data-polled", String((parseInt(box.getAttribute("data-polled"), 10) || 0) + 1));
    }).catch(function (error) {
      offline("not updated: " + error.message + " (log in again if this stays)");
    }).then(function () { busy = false; });
  }

  function tick() {
    if (!busy && !document.hidden && Date.now() - last >= every()) { poll(); }
  }

  setInterval(tick, 1000);
  document.addEventListener("visibilitychange", tick);
})();
