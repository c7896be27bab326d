// sealtrace console: the little script the pages use. Everything works without it but the
// automatic move from "starting" to the landing point. It never builds markup from data: it
// reads one status word and submits forms the server rendered.
"use strict";

(function () {
  // A session booting: ask for its status, held by the server until it changes (or a few
  // seconds pass), and land as soon as its replay is ready.
  function poll(url) {
    function tick() {
      fetch(url + "?wait=5", { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
        .then(function (reply) {
          if (reply.redirected || !reply.ok) { window.location.reload(); return null; }
          return reply.json();
        })
        .then(function (state) {
          if (state === null) return;
          if (state.status === "ready") { land(); return; }
          if (state.status !== "assigned") { window.location.reload(); return; }
          tick();
        })
        .catch(function () { window.setTimeout(tick, 1000); });
    }
    tick();
  }

  function land() {
    const form = document.getElementById("land");
    if (!form) return;
    const button = document.getElementById("land-button");
    if (button) button.disabled = false;
    busy();
    form.submit();
  }

  // While a question is out, say so, and keep a second click from asking it twice.
  function busy() {
    document.body.classList.add("busy");
    if (!document.querySelector(".busy-note")) {
      const note = document.createElement("div");
      note.className = "busy-note";
      note.setAttribute("role", "status");
      note.textContent = "Asking the sandbox…";
      document.body.appendChild(note);
    }
  }

  document.addEventListener("submit", function (event) {
    if (document.body.classList.contains("busy")) { event.preventDefault(); return; }
    const form = event.target;
    if (form instanceof HTMLFormElement && form.method.toLowerCase() === "post") busy();
  });

  // Coming back through the browser's history: the page is live again.
  window.addEventListener("pageshow", function () { document.body.classList.remove("busy"); });

  document.addEventListener("DOMContentLoaded", function () {
    const url = document.body.dataset.poll;
    if (url) { poll(url); return; }
    const form = document.getElementById("land");
    if (form && form.dataset.auto === "1") land();
  });
})();
