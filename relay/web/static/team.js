// The Team page: every agent and what it is doing, live; a message from the human; stop
// and restart for the agents relay up started on this machine.
"use strict";

(function () {
  const { el, clear } = window.relay;
  const COLUMNS = ["name", "state", "for", "host", "machine", "project", "pid", "in", "out",
    "up", "tool", "last line", ""];
  const rows = new Map();
  let view = null;

  function basename(path) {
    if (!path) return "-";
    const parts = String(path).replace(/\/+$/, "").split("/");
    return parts[parts.length - 1] || path;
  }

  function stateClass(row) {
    return "state state-" + String(row.state).replace(/[^a-z]/g, "");
  }

  // A first click arms an action, a second within 3 s confirms it. Kept by agent and verb,
  // not on the button: a row drawn again between the two clicks (its status changed)
  // shows a new button, which must still take the second click as the confirmation.
  const armed = new Map();
  const ARMED_MS = 3000;

  function actionButton(row, verb, label) {
    const key = verb + ":" + row.name;
    const isArmed = () => (armed.get(key) || 0) > Date.now();
    const button = el("button", { type: "button", class: verb === "stop" ? "danger" : "",
      dataset: { action: verb, name: row.name } }, isArmed() ? "confirm " + verb : label);
    if (isArmed()) {
      setTimeout(() => { if (!isArmed()) button.textContent = label; }, armed.get(key) - Date.now());
    }
    button.addEventListener("click", async () => {
      if (!isArmed()) {
        armed.set(key, Date.now() + ARMED_MS);
        button.textContent = "confirm " + verb;
        setTimeout(() => { if (!isArmed()) button.textContent = label; }, ARMED_MS);
        return;
      }
      armed.delete(key);
      button.disabled = true;
      button.textContent = verb === "stop" ? "stopping…" : "restarting…";
      const answer = await window.relay.post("/api/team/" + verb, { name: row.name });
      button.disabled = false;
      button.textContent = label;
      if (answer.ok) notice("ok", (verb === "stop" ? "stopped " : "restarted ") + row.name);
      else notice("error", answer.data.error || ("could not " + verb + " " + row.name));
    });
    return button;
  }

  function actions(row) {
    if (row.here) {
      const ended = ["exited", "stopped"].includes(row.state);
      return el("span", { class: "actions" },
        ended ? null : actionButton(row, "stop", "stop"),
        actionButton(row, "restart", ended ? "start" : "restart"),
        messageButton(row));
    }
    const why = row.supervised
      ? "started by relay up on " + (row.machine || "another machine") + ": stop or restart it there"
      : "not started by relay up on this machine";
    return el("span", { class: "actions", title: why }, messageButton(row));
  }

  function messageButton(row) {
    if (row.kind !== "agent") return null;
    return el("button", { type: "button", dataset: { action: "message", name: row.name },
      on: { click: () => { view.to.value = view.picked = row.name; view.text.focus(); } } },
      "message");
  }

  function rowNode(row) {
    const cell = (value, cls, title) =>
      el("td", { class: cls || "", title: title || null }, value === null || value === undefined ? "-" : value);
    const tr = el("tr", { dataset: { name: row.name, state: row.state } },
      cell(row.name, "name"),
      el("td", {}, el("span", { class: stateClass(row), "data-field": "state" }, row.shown)),
      el("td", { class: "num", "data-since": row.since || "" }, window.relay.ago(row.since)),
      cell(row.host_kind || (row.kind === "human" ? "human" : "-")),
      cell(row.machine),
      cell(basename(row.project), "", row.project),
      cell(row.pid, "num mono"),
      cell(row.messages_in, "num"),
      cell(row.messages_out, "num"),
      el("td", { class: "num", "data-started": row.started || "" },
        row.started ? window.relay.ago(row.started) : "-"),
      cell(row.tool, "mono"),
      cell(row.last_line || "", "last mono", row.last_line),
      el("td", {}, actions(row)));
    return tr;
  }

  function put(row) {
    const node = rowNode(row);
    const old = rows.get(row.name);
    rows.set(row.name, { row: row, node: node });
    if (old) {
      old.node.replaceWith(node);
    } else {
      const after = Array.from(rows.keys()).filter((name) => name > row.name).sort()[0];
      const before = after ? rows.get(after).node : null;
      view.body.insertBefore(node, before && before.parentNode === view.body ? before : null);
    }
    recount();
    options();
  }

  function remove(name) {
    const old = rows.get(name);
    if (!old) return;
    old.node.remove();
    rows.delete(name);
    recount();
    options();
  }

  function recount() {
    view.count.textContent = rows.size + (rows.size === 1 ? " name" : " names");
    view.empty.hidden = rows.size > 0;
  }

  // The form's names: the agents, then everyone (`*`), which is never chosen for the
  // human: the first agent is, until they pick one.
  function options() {
    const chosen = view.picked || view.to.value;
    const names = Array.from(rows.values()).filter((entry) => entry.row.kind === "agent")
      .map((entry) => entry.row.name).sort();
    clear(view.to);
    for (const name of names) view.to.appendChild(el("option", { value: name }, name));
    view.to.appendChild(el("option", { value: "*" }, "everyone (*)"));
    view.to.value = names.includes(chosen) || (chosen === "*" && view.picked) ? chosen
      : (names[0] || "*");
  }

  function notice(kind, text) {
    view.notice.className = "notice " + kind;
    view.notice.textContent = text;
  }

  async function send(event) {
    event.preventDefault();
    const to = view.to.value;
    const body = view.text.value;
    if (!body.trim()) return;
    view.send.disabled = true;
    const answer = await window.relay.post("/api/team/send", { to: to, body: body });
    view.send.disabled = false;
    if (answer.ok) {
      view.text.value = "";
      notice("ok", "queued [" + answer.data.short_id + "] for " + answer.data.queued_for.join(", "));
    } else {
      notice("error", answer.data.error || "not sent");
    }
  }

  function mount(section) {
    const body = el("tbody", { id: "team-rows" });
    const to = el("select", { id: "send-to", "aria-label": "to",
      on: { change: () => { view.picked = to.value; } } });
    const text = el("input", { id: "send-text", type: "text", autocomplete: "off",
      placeholder: "a message from you to the agent" });
    const sendButton = el("button", { id: "send-button", type: "submit" }, "send");
    view = {
      body: body, to: to, text: text, send: sendButton, picked: null,
      count: el("span", { class: "dim", id: "team-count" }),
      problem: el("div", { class: "notice error", id: "team-problem", hidden: true }),
      empty: el("div", { class: "empty", id: "team-empty" },
        "No agent in this team yet: start one with relay run --name NAME -- COMMAND, or relay up."),
      notice: el("div", { class: "notice", id: "team-notice", role: "status" }),
    };
    section.appendChild(el("h1", {}, "Team ", el("span", { id: "team-title" }, window.relay.team), " · ", view.count));
    section.appendChild(view.problem);
    section.appendChild(el("table", { class: "grid", id: "team-table" },
      el("thead", {}, el("tr", {}, COLUMNS.map((name) => el("th", {}, name)))), body));
    section.appendChild(view.empty);
    section.appendChild(el("form", { class: "send", id: "send-form", on: { submit: send } },
      el("label", { for: "send-to" }, "to"), to, text, sendButton));
    section.appendChild(view.notice);
    options();
  }

  function render(section, snapshot) {
    clear(view.body);
    rows.clear();
    for (const row of snapshot.members) put(row);
    problem(snapshot.problem);
    recount();
  }

  function problem(text) {
    view.problem.textContent = text || "";
    view.problem.hidden = !text;
  }

  function tick() {
    for (const cell of view.body.querySelectorAll("td[data-since]")) {
      cell.textContent = window.relay.ago(cell.dataset.since);
    }
    for (const cell of view.body.querySelectorAll("td[data-started]")) {
      cell.textContent = cell.dataset.started ? window.relay.ago(cell.dataset.started) : "-";
    }
  }

  window.relay.page("team", {
    snapshot: "/api/team",
    mount: mount,
    render: render,
    tick: tick,
    events: {
      "team.member": (section, row) => put(row),
      "team.removed": (section, data) => remove(data.name),
      "team.problem": (section, data) => problem(data.problem),
    },
  });
})();
