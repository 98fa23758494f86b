// The dashboard's page framework: navigation, the live feed, snapshots, and the helpers
// every page script uses. No data is ever put into HTML: relay.el makes text nodes.
"use strict";

(function () {
  const pages = new Map();
  const meta = (name) => {
    const found = document.querySelector('meta[name="' + name + '"]');
    return found ? found.getAttribute("content") || "" : "";
  };

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "on") {
        for (const [type, listener] of Object.entries(value)) node.addEventListener(type, listener);
      } else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "text") node.textContent = String(value);
      else if (key.startsWith("on")) throw new Error("relay.el: use {on: {event: listener}}");
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(node, child);
      else if (child instanceof Node) node.appendChild(child);
      else node.appendChild(document.createTextNode(String(child)));
    }
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  async function getJSON(url) {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (!response.ok) throw new Error(url + ": " + response.status + " " + (await response.text()));
    return response.json();
  }

  // An action: POST a JSON body with the CSRF token. Resolves to {ok, status, data}.
  async function post(url, body) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      cache: "no-store",
      headers: { "Content-Type": "application/json", "X-Relay-CSRF": relay.csrf },
      body: JSON.stringify(body),
    });
    let data;
    const text = await response.text();
    try {
      data = JSON.parse(text);
    } catch (error) {
      data = { error: text || response.statusText };
    }
    return { ok: response.ok, status: response.status, data: data };
  }

  // How long a number of seconds is, shortly: 12s, 5m, 3h, 2d (as relay agents says).
  function duration(seconds) {
    if (!(seconds >= 0)) seconds = 0;
    for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
      if (seconds >= size) return Math.floor(seconds / size) + unit;
    }
    return Math.floor(seconds) + "s";
  }

  // How long ago an ISO time was, by the server's clock; "-" when unknown.
  function ago(iso) {
    if (!iso) return "-";
    const then = Date.parse(iso);
    if (Number.isNaN(then)) return "-";
    return duration((Date.now() + relay.clockOffset - then) / 1000);
  }

  function showProblem(text) {
    const box = document.getElementById("problem");
    if (!box) return;
    box.textContent = text || "";
    box.hidden = !text;
  }

  function setConnection(state, text) {
    const node = document.getElementById("connection");
    if (!node) return;
    node.dataset.state = state;
    node.textContent = text;
  }

  const relay = {
    csrf: meta("relay-csrf"),
    team: meta("relay-team"),
    user: meta("relay-user"),
    machine: meta("relay-machine"),
    clockOffset: 0,
    el: el,
    clear: clear,
    getJSON: getJSON,
    post: post,
    ago: ago,
    duration: duration,
    showProblem: showProblem,
    // A page script registers itself: relay.page(name, {snapshot, render, events, mount, tick, shown}).
    page(name, spec) {
      pages.set(name, { name: name, spec: spec, section: null, seq: 0, pending: null, round: 0 });
    },
    // The server's clock from a snapshot's "now" (ISO): ago() counts by it.
    setServerNow(iso) {
      const now = Date.parse(iso);
      if (!Number.isNaN(now)) relay.clockOffset = now - Date.now();
    },
  };
  window.relay = relay;

  function route() {
    const wanted = location.hash.replace(/^#/, "");
    const names = Array.from(pages.keys());
    const current = pages.has(wanted) ? wanted : names[0];
    for (const page of pages.values()) {
      if (!page.section) continue;
      const shown = page.name === current;
      if (page.section.hidden === shown && page.spec.shown) page.spec.shown(page.section, shown);
      page.section.hidden = !shown;
    }
    for (const link of document.querySelectorAll("#nav a")) {
      link.classList.toggle("current", link.dataset.page === current);
    }
  }

  // A page's first paint (and again after every reconnection): its snapshot, then the
  // events that came meanwhile with a number above the snapshot's.
  async function refresh(page) {
    if (!page.spec.snapshot) return;
    const round = ++page.round;
    page.pending = [];
    try {
      const snapshot = await getJSON(page.spec.snapshot);
      if (round !== page.round) return;
      if (snapshot.now) relay.setServerNow(snapshot.now);
      page.seq = snapshot.seq || 0;
      page.spec.render(page.section, snapshot);
      const pending = page.pending;
      page.pending = null;
      for (const [id, type, data] of pending) apply(page, id, type, data);
    } catch (error) {
      if (round === page.round) {
        page.pending = null;
        showProblem("the " + page.name + " page cannot be read: " + error.message);
      }
    }
  }

  function apply(page, id, type, data) {
    if (id && id <= page.seq) return;
    if (id) page.seq = id;
    const handler = page.spec.events && page.spec.events[type];
    if (handler) handler(page.section, data);
  }

  function deliver(page, type, event) {
    let data;
    try {
      data = JSON.parse(event.data);
    } catch (error) {
      return;
    }
    const id = Number(event.lastEventId) || 0;
    if (page.pending) page.pending.push([id, type, data]);
    else apply(page, id, type, data);
  }

  function connect() {
    const source = new EventSource("/api/events");
    source.addEventListener("hello", () => {
      setConnection("live", "live");
      showProblem("");
      for (const page of pages.values()) refresh(page);
    });
    source.addEventListener("dashboard.problem", (event) => {
      try {
        showProblem(JSON.parse(event.data).text);
      } catch (error) {
        showProblem("a page's feed failed");
      }
    });
    for (const page of pages.values()) {
      for (const type of Object.keys(page.spec.events || {})) {
        source.addEventListener(type, (event) => deliver(page, type, event));
      }
    }
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        setConnection("down", "disconnected: open the URL relay dashboard printed");
      } else {
        setConnection("down", "reconnecting…");
      }
    };
  }

  function start() {
    for (const page of pages.values()) {
      page.section = document.getElementById("page-" + page.name);
      if (page.spec.mount) page.spec.mount(page.section);
    }
    route();
    window.addEventListener("hashchange", route);
    connect();
    setInterval(() => {
      for (const page of pages.values()) {
        if (page.spec.tick && page.section && !page.section.hidden) page.spec.tick(page.section);
      }
    }, 1000);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
