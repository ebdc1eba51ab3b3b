/* Watchkeeper dashboard: calls the owner's attention to critical alerts while any page
   is open. It asks /live/attention (JSON: "critical", the count of critical alerts nobody
   acknowledged, and "alerts", the newest of them by code) every data-every seconds,
   visible tab or not, and:
   - puts the count in the tab title: "(2) Overview · Watchkeeper";
   - raises a browser notification for each alert it had not seen since the page loaded
     (those open at load are not news), once the owner allowed notifications with the
     "Allow notifications" button (permission is never asked for on load); the codes
     told so far are in the box's data-notified;
   - beeps (WebAudio, no file) only when the owner turned "Sound" on; that choice is kept
     in localStorage.
   The decisions are pure functions (titled, fresh) so they can be tested without a
   browser. No inline script (the CSP allows only this origin's files). */
(function (root) {
  "use strict";

  var COUNT = /^\(\d+\) /;
  var SOUND_KEY = "watchkeeper.sound";

  /* The tab title for `count` unacknowledged critical alerts. */
  function titled(title, count) {
    var base = String(title).replace(COUNT, "");
    return count > 0 ? "(" + count + ") " + base : base;
  }

  /* The alerts in `alerts` whose code is not in `seen` (an object used as a set), and
     `seen` with them added. On the first answer (`first` true) nothing is news. */
  function fresh(seen, alerts, first) {
    var news = [];
    var next = {};
    var code;
    for (code in seen) { if (Object.prototype.hasOwnProperty.call(seen, code)) { next[code] = true; } }
    (alerts || []).forEach(function (alert) {
      if (!next[alert.code]) {
        next[alert.code] = true;
        if (!first) { news.push(alert); }
      }
    });
    return { news: news, seen: next };
  }

  var exported = { titled: titled, fresh: fresh };
  if (typeof module !== "undefined" && module.exports) { module.exports = exported; }
  if (typeof document === "undefined") { return; }
  root.WatchkeeperAttention = exported;

  var box = document.getElementById("attention");
  if (!box || !root.fetch) { return; }
  var url = box.getAttribute("data-attention");
  var allow = document.getElementById("allow-notifications");
  var sound = document.getElementById("alert-sound");
  var seen = {};
  var first = true;
  var busy = false;
  var last = 0;
  var audio = null;
  var Notify = root.Notification;
  var Audio = root.AudioContext || root.webkitAudioContext;

  function every() {
    var seconds = parseFloat(box.getAttribute("data-every"));
    return (seconds > 0 ? seconds : 15) * 1000;
  }

  function stored(key) {
    try { return root.localStorage.getItem(key); } catch (e) { return null; }
  }

  function store(key, value) {
    try { root.localStorage.setItem(key, value); } catch (e) { /* private mode: not kept */ }
  }

  function showAllow() {
    if (allow) { allow.hidden = !(Notify && Notify.permission === "default"); }
  }

  if (allow && Notify) {
    showAllow();
    allow.addEventListener("click", function () {
      var asked = Notify.requestPermission(showAllow);
      if (asked && asked.then) { asked.then(showAllow); }
    });
  }

  if (sound && Audio) {
    sound.checked = stored(SOUND_KEY) === "on";
    sound.parentNode.hidden = false;
    sound.addEventListener("change", function () {
      store(SOUND_KEY, sound.checked ? "on" : "off");
      if (sound.checked && !audio) { audio = new Audio(); } // made in the click: allowed to play
    });
  }

  function beep() {
    if (!sound || !sound.checked || !Audio) { return; }
    if (!audio) { audio = new Audio(); }
    if (audio.resume) { audio.resume(); }
    [0, 0.3].forEach(function (offset) {
      var tone = audio.createOscillator();
      var gain = audio.createGain();
      var at = audio.currentTime + offset;
      tone.frequency.value = 880;
      gain.gain.setValueAtTime(0.2, at);
      gain.gain.exponentialRampToValueAtTime(0.001, at + 0.2);
      tone.connect(gain);
      gain.connect(audio.destination);
      tone.start(at);
      tone.stop(at + 0.2);
    });
  }

  function notify(alert) {
    if (!Notify || Notify.permission !== "granted") { return; }
    var told = box.getAttribute("data-notified");
    box.setAttribute("data-notified", (told ? told + " " : "") + alert.code);
    try {
      var shown = new Notify("Critical alert #" + alert.code, {
        body: alert.title, tag: "watchkeeper-alert-" + alert.code
      });
      shown.onclick = function () {
        root.focus();
        root.location.href = "/alerts#alert-" + alert.code;
      };
    } catch (e) { /* a browser that shows notifications only from a service worker */ }
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
      document.title = titled(document.title, data.critical);
      var found = fresh(seen, data.alerts, first);
      seen = found.seen;
      first = false;
      found.news.forEach(notify);
      if (found.news.length) { beep(); }
      box.setAttribute("data-polled", String((parseInt(box.getAttribute("data-polled"), 10) || 0) + 1));
    }).catch(function () {
      /* logged out or offline: live.js says so on live pages; try again next time */
    }).then(function () { busy = false; });
  }

  function tick() {
    if (!busy && Date.now() - last >= every()) { poll(); }
  }

  poll();
  setInterval(tick, 1000);
})(typeof window !== "undefined" ? window : this);
