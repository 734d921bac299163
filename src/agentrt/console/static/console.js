// agentrt console: live updates by polling a small JSON endpoint.
//
// The page names its state URL and the version it was rendered at
// (main[data-state-url][data-version]). Every second the script asks for the
// state; when the version moved, it fetches the page again and swaps each
// element marked data-live for its namesake. It never inserts markup built
// from data: the swapped elements come from the console's own escaped page,
// parsed by DOMParser (which runs no script). A waiting request is never
// swapped: its section gets a banner when it is no longer the one waiting.
// A lease lapses with no event to move the version: a page showing one names
// the milliseconds until the soonest lapses (main[data-refresh-in], by the lease
// clock when it was drawn) and is fetched again a second after that.
"use strict";

(function () {
  // A decision is sent once: a second click while the first is on its way would only
  // come back as a conflict.
  for (const form of document.querySelectorAll("form[method=post]")) {
    form.addEventListener("submit", () => {
      window.setTimeout(() => {
        for (const button of form.querySelectorAll("button")) {
          button.disabled = true;
        }
      }, 0);
    });
  }

  const main = document.getElementById("main");
  const stateUrl = main ? main.dataset.stateUrl : undefined;
  if (!stateUrl) {
    return;
  }
  const conn = document.getElementById("conn");
  const LOST = "connection lost: retrying";
  // 401: the console answers but no longer knows this browser (it restarted with
  // another token, or the cookie was cleared): the connection is not what is lost.
  const SIGNED_OUT = "signed out: open the console's login link again";
  let version = main.dataset.version;
  let failures = 0;
  let signedOut = false;
  const LAPSE_MARGIN_MS = 1000;

  // When the page is to be drawn again though its version did not move: a second after
  // the soonest lease it shows lapses (measured from now, not by the browser's clock).
  function lapseAt(drawn) {
    const ms = drawn ? Number(drawn.dataset.refreshIn) : NaN;
    return Number.isFinite(ms) ? performance.now() + ms + LAPSE_MARGIN_MS : Infinity;
  }
  let redrawAt = lapseAt(main);
  let fetchedRedrawAt = Infinity;

  function answered(response, what) {
    if (response.status === 401) {
      signedOut = true;
    }
    if (!response.ok) {
      throw new Error(what + " " + response.status);
    }
  }

  function markRequests(pending) {
    const waiting = new Set(pending.map((p) => p.id + ":" + p.hash));
    const shown = new Set();
    for (const section of document.querySelectorAll("section.request")) {
      const key = section.dataset.approval + ":" + section.dataset.hash;
      shown.add(key);
      const stale = !waiting.has(key);
      section.classList.toggle("is-stale", stale);
      const banner = section.querySelector(".stale");
      if (banner) {
        banner.hidden = !stale;
      }
    }
    const fresh = document.querySelector(".newrequest");
    if (fresh) {
      fresh.hidden = ![...waiting].some((key) => !shown.has(key));
    }
  }

  async function refresh() {
    const response = await fetch(window.location.href, {
      credentials: "same-origin",
      cache: "no-store",
    });
    answered(response, "page");
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    fetchedRedrawAt = lapseAt(doc.getElementById("main"));
    let whole = true;
    for (const element of document.querySelectorAll("[data-live]")) {
      const next = doc.getElementById(element.id);
      if (!next) {
        continue;
      }
      // What a person is typing in is not swapped away; it is tried again next time.
      if (element.contains(document.activeElement) && document.activeElement !== document.body) {
        whole = false;
        continue;
      }
      element.replaceWith(document.adoptNode(next));
    }
    return whole;
  }

  async function tick() {
    signedOut = false;
    try {
      const response = await fetch(stateUrl, {
        credentials: "same-origin",
        cache: "no-store",
        headers: { Accept: "application/json" },
      });
      answered(response, "state");
      const state = await response.json();
      const due = performance.now() >= redrawAt;
      if (String(state.version) !== String(version) || due) {
        const whole = await refresh();
        // The page fetched says when it is next due, even when a part being typed in was
        // left as it was: its lease is drawn, so a lapse is not fetched again every second.
        redrawAt = fetchedRedrawAt;
        if (whole) {
          version = String(state.version);
        }
      }
      if (Array.isArray(state.pending)) {
        markRequests(state.pending);
      }
      failures = 0;
      if (conn) {
        conn.hidden = true;
      }
    } catch (error) {
      failures += 1;
      if (conn && (signedOut || failures > 1)) {
        conn.textContent = signedOut ? SIGNED_OUT : LOST;
        conn.hidden = false;
      }
    }
    const wait = failures ? Math.min(1000 * 2 ** failures, 15000) : 1000;
    window.setTimeout(tick, wait);
  }

  window.setTimeout(tick, 1000);
})();
