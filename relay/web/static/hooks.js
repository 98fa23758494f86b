// The Hooks page: hook calls as they happen (newest first), denies and failures
// highlighted, each hook's latency (p50, p99) and errors over the last hour, and a call's
// input and answer on click (what `relay hooks log --json` shows). Text is set as text.
"use strict";

(function () {
  const { el, clear } = window.relay;
  const KEEP = 1000;  // calls kept in the table; the oldest go first
  const COLUMNS = ["time", "event", "hook", "agent", "decision", "duration", "exit", ""];
  const rows = new Map();  // call id -> {call, node}
  let view = null;
  let cursor = 0;
  let chosen = null;  // the call shown in full

  function ms(value) {
    if (value === null || value === undefined) return "-";
    return value >= 100 ? value.toFixed(0) + " ms" : value.toFixed(1) + " ms";
  }

  function clock(iso) {
    const moment = new Date(iso);
    if (Number.isNaN(moment.getTime())) return String(iso || "");
    return moment.toISOString().slice(11, 23);
  }

  function exit(call) {
    if (call.timed_out) return "timed out";
    if (call.signal) return call.signal;
    return call.exit_code === null || call.exit_code === undefined ? "-" : "exit " + call.exit_code;
  }

  function verdict(call) {
    if (call.error) return "error: " + String(call.error).trim().split("\n")[0];
    return call.decision || "-";
  }

  function rowNode(call) {
    const classes = ["call"];
    if (call.denied) classes.push("denied");
    if (call.failed) classes.push("failed");
    if (chosen === call.id) classes.push("chosen");
    const node = el("tr", { class: classes.join(" "), tabindex: "0",
      dataset: { call: call.id, event: call.event_id, hook: call.hook },
      title: "event #" + call.event_id + ": click for its input and answer",
      on: { click: () => open(call), keydown: (event) => { if (event.key === "Enter") open(call); } } },
      el("td", { class: "mono", title: call.time }, clock(call.time)),
      el("td", {}, call.event),
      el("td", { class: "hook" }, call.hook),
      el("td", {}, call.agent || "-"),
      el("td", { class: "verdict" }, el("span", { class: "verdict-text" }, verdict(call))),
      el("td", { class: "num" }, ms(call.duration_ms)),
      el("td", { class: "mono nowrap" }, exit(call)),
      el("td", { class: "flags" },
        call.denied ? el("span", { class: "flag flag-deny" }, "deny") : null,
        call.failed ? el("span", { class: "flag flag-error" }, "error") : null));
    return node;
  }

  // Events newest first, each event's calls in the order they ran: `calls` come oldest
  // first, an event's calls together; each event goes on top.
  function add(calls) {
    let last = null;
    for (const call of calls) {
      if (rows.has(call.id)) continue;
      const node = rowNode(call);
      rows.set(call.id, { call: call, node: node });
      if (last && last.call.event_id === call.event_id) last.node.after(node);
      else view.body.insertBefore(node, view.body.firstChild);
      last = { call: call, node: node };
      if (call.event_id > cursor) cursor = call.event_id;
    }
    while (rows.size > KEEP) {
      const oldest = rows.keys().next().value;
      rows.get(oldest).node.remove();
      rows.delete(oldest);
    }
    filter();
    recount();
  }

  function filter() {
    const only = view.only.checked;
    for (const { call, node } of rows.values()) node.hidden = only && !(call.denied || call.failed);
  }

  function recount() {
    let flagged = 0;
    for (const { call } of rows.values()) if (call.denied || call.failed) flagged += 1;
    view.count.textContent = rows.size + (rows.size === 1 ? " call" : " calls") +
      (flagged ? ", " + flagged + " denied or failed" : "");
    view.empty.hidden = rows.size > 0;
  }

  function stats(window_) {
    clear(view.stats);
    view.window.textContent = "the last " + Math.round(window_.seconds / 60) + " minutes (" +
      window_.events + (window_.events === 1 ? " event" : " events") + ")";
    for (const hook of window_.hooks) {
      view.stats.appendChild(el("tr", { class: hook.errors ? "failed" : "", dataset: { hook: hook.hook } },
        el("td", { class: "hook" }, hook.hook),
        el("td", { class: "num" }, hook.calls),
        el("td", { class: "num p50" }, ms(hook.p50_ms)),
        el("td", { class: "num p99" }, ms(hook.p99_ms)),
        el("td", { class: "num" }, ms(hook.max_ms)),
        el("td", { class: "num errors" }, hook.errors),
        el("td", { class: "num denies" }, hook.denies)));
    }
    if (!window_.hooks.length) {
      view.stats.appendChild(el("tr", {}, el("td", { class: "dim", colspan: "7" }, "no calls in the window")));
    }
  }

  function json(value) {
    return el("pre", { class: "json" }, JSON.stringify(value, null, 2));
  }

  async function open(call) {
    chosen = call.id;
    for (const { call: other, node } of rows.values()) node.classList.toggle("chosen", other.id === call.id);
    clear(view.detail);
    view.detail.hidden = false;
    view.detail.appendChild(el("p", { class: "dim" }, "reading event #" + call.event_id + "…"));
    let detail;
    try {
      detail = await window.relay.getJSON("/api/hooks/call?event=" + call.event_id + "&call=" + call.id);
    } catch (error) {
      clear(view.detail);
      view.detail.appendChild(el("p", { class: "notice error" }, error.message));
      return;
    }
    if (chosen !== call.id) return;
    clear(view.detail);
    const shownCall = detail.call;
    view.detail.appendChild(el("div", { class: "detail-head" },
      el("h2", {}, shownCall.hook, " · ", shownCall.event, " #" + shownCall.event_id),
      el("button", { type: "button", id: "hooks-detail-close", on: { click: close } }, "close")));
    view.detail.appendChild(el("p", {},
      el("span", { class: shownCall.denied ? "flag flag-deny" : (shownCall.failed ? "flag flag-error" : "flag") },
        verdict(shownCall)),
      " · " + exit(shownCall) + " · " + ms(shownCall.duration_ms) + " · agent " + (shownCall.agent || "-") +
      " · session " + (shownCall.session_id || "-")),
      el("p", { class: "dim small" }, "registered in ", el("code", {}, shownCall.source)));
    view.detail.appendChild(el("h3", {}, "input (as the hooks got it)"));
    view.detail.appendChild(json(detail.input));
    view.detail.appendChild(el("h3", {}, "answer (the hook's report)"));
    view.detail.appendChild(detail.answer ? json(detail.answer)
      : el("p", { class: "dim" }, "not kept: this event was logged by an older relay"));
    view.detail.appendChild(el("h3", {}, "result (as logged; what a replay compares with)"));
    view.detail.appendChild(json(detail.result));
    view.detail.appendChild(el("p", { class: "dim" },
      "Run it again with the current hooks: ", el("code", {}, detail.replay)));
  }

  function close() {
    chosen = null;
    view.detail.hidden = true;
    for (const { node } of rows.values()) node.classList.remove("chosen");
  }

  function render(section, snapshot) {
    const page = snapshot.page;
    clear(view.body);
    rows.clear();
    cursor = 0;
    add(page.calls.slice().reverse());
    cursor = Math.max(cursor, page.cursor);
    stats(page.stats);
    view.log.textContent = page.log;
  }

  function mount(section) {
    const only = el("input", { type: "checkbox", id: "hooks-only", on: { change: filter } });
    view = {
      body: el("tbody", { id: "hooks-rows" }),
      stats: el("tbody", { id: "hooks-stats" }),
      count: el("span", { class: "dim", id: "hooks-count" }),
      window: el("span", { class: "dim" }),
      log: el("code", {}),
      only: only,
      detail: el("div", { class: "detail", id: "hooks-detail", hidden: true }),
      empty: el("div", { class: "empty", id: "hooks-empty" },
        "No hook calls logged yet. They appear here as they happen."),
    };
    section.appendChild(el("h1", {}, "Hooks · ", view.count));
    section.appendChild(el("div", { class: "columns" },
      el("div", { class: "main-column" },
        el("div", { class: "toolbar" },
          el("label", {}, only, " only denies and errors")),
        el("table", { class: "grid calls", id: "hooks-table" },
          el("thead", {}, el("tr", {}, COLUMNS.map((name) => el("th", {}, name)))), view.body),
        view.empty,
        el("p", { class: "dim small" }, "The hook log: ", view.log)),
      el("aside", { class: "side-column" },
        el("h2", {}, "Latency and errors, ", view.window),
        el("table", { class: "grid stats", id: "hooks-stats-table" },
          el("thead", {}, el("tr", {}, ["hook", "calls", "p50", "p99", "max", "errors", "denies"]
            .map((name) => el("th", {}, name)))), view.stats),
        view.detail)));
  }

  // `work` at the next animation frame, or within 250 ms where frames are not drawn.
  function nextFrame(work) {
    let done = false;
    const run = () => {
      if (!done) {
        done = true;
        work();
      }
    };
    requestAnimationFrame(run);
    setTimeout(run, 250);
  }

  // Calls are added once a frame, together.
  let inbox = null;
  function calls(section, data) {
    if (!inbox) {
      inbox = [];
      nextFrame(() => {
        const batch = inbox;
        inbox = null;
        add(batch);
      });
    }
    for (const call of data.calls) inbox.push(call);
  }

  window.relay.page("hooks", {
    snapshot: "/api/hooks",
    mount: mount,
    render: render,
    events: {
      "hooks.calls": calls,
      "hooks.stats": (section, data) => stats(data),
    },
  });
})();
