// aiopgq dashboard: refreshes the page's live region, and posts actions with the token.
// No framework and no build step: this file is served as it is.
(function () {
  "use strict";

  var TOKEN_KEY = "aiopgq-dashboard-token";
  var poll = Number(document.body.dataset.poll) || 2000;
  var liveState = document.getElementById("live-state");
  var flash = document.getElementById("flash");
  var tokenInput = document.getElementById("token");
  var probe = document.createElement("template");
  var busy = false;
  var flashTimer = null;

  function storedToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || "";
    } catch (e) {
      return tokenInput ? tokenInput.value : "";
    }
  }

  // A URL of this page without user:password@ (a page opened with them resolves
  // relative URLs with them, and fetch refuses those; the browser sends them anyway).
  function plain(url) {
    var parsed = new URL(url, location.origin);
    parsed.username = "";
    parsed.password = "";
    return parsed.href;
  }

  function setLive(ok, text) {
    if (!liveState) return;
    liveState.textContent = text;
    liveState.className = ok ? "live" : "live down";
  }

  function showFlash(ok, message) {
    flash.textContent = message;
    flash.className = ok ? "ok" : "refused";
    flash.hidden = false;
    clearTimeout(flashTimer);
    flashTimer = setTimeout(function () { flash.hidden = true; }, 8000);
  }

  // Fetch this page's live region again and swap it in if it changed; <details>
  // keep the state the reader gave them.
  async function refresh() {
    var region = document.getElementById("live");
    if (!region || busy) return;
    busy = true;
    try {
      var response = await fetch(plain(location.href), {
        headers: { "X-Aiopgq-Live": "1" },
        cache: "no-store",
        credentials: "same-origin",
      });
      var html = await response.text();
      if (!response.ok && response.status !== 404) {
        throw new Error("HTTP " + response.status);
      }
      probe.innerHTML = html;  // the browser's own serialization, to compare like with like
      if (probe.innerHTML !== region.innerHTML) {
        var open = Array.prototype.map.call(
          region.querySelectorAll("details[open][id]"), function (d) { return d.id; });
        var closed = Array.prototype.map.call(
          region.querySelectorAll("details:not([open])[id]"), function (d) { return d.id; });
        region.innerHTML = html;
        open.forEach(function (id) { var d = document.getElementById(id); if (d) d.open = true; });
        closed.forEach(function (id) { var d = document.getElementById(id); if (d) d.open = false; });
      }
      setLive(true, "live · " + new Date().toLocaleTimeString());
    } catch (error) {
      setLive(false, "disconnected (" + error.message + ")");
    } finally {
      busy = false;
    }
  }

  async function act(form) {
    var confirmText = form.dataset.confirm;
    if (confirmText && !window.confirm(confirmText)) return;
    var headers = { "Accept": "application/json" };
    var token = storedToken();
    if (token) headers["Authorization"] = "Bearer " + token;
    var buttons = form.querySelectorAll("button");
    buttons.forEach(function (b) { b.disabled = true; });
    try {
      var response = await fetch(plain(form.action), {
        method: "POST",
        headers: headers,
        body: new URLSearchParams(new FormData(form)),
        credentials: "omit",
      });
      var answer;
      try {
        answer = await response.json();
      } catch (e) {
        answer = { ok: false, message: "HTTP " + response.status };
      }
      showFlash(response.ok && answer.ok, answer.message);
    } catch (error) {
      showFlash(false, "the dashboard did not answer: " + error.message);
    } finally {
      buttons.forEach(function (b) { b.disabled = false; });
    }
    await refresh();
  }

  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-action]");
    if (!form) return;
    event.preventDefault();
    act(form);
  });

  if (tokenInput) {
    tokenInput.value = storedToken();
    tokenInput.addEventListener("input", function () {
      try {
        sessionStorage.setItem(TOKEN_KEY, tokenInput.value);
      } catch (e) { /* storage off: the field's value is used */ }
    });
  }

  setInterval(function () { if (!document.hidden) refresh(); }, poll);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
})();
