// The Conversation page: the team's messages as a timeline (newest last), live; threads,
// search (the same as `relay messages --grep`), each recipient's delivery state, relay's
// notices (a stopped reply loop shown as such). Every text is set as text (relay.el).
"use strict";

(function () {
  const { el, clear } = window.relay;
  const KEEP = 1000;  // entries kept in the page; the oldest go first
  const GROUP_ABOVE = 6;  // more deliveries than this are shown as counts by state
  const FIELDS = ["grep", "sender", "recipient", "thread", "since", "until"];
  const shown = new Map();  // seq -> {entry, node, chips}
  let view = null;
  let filters = {};  // the search the page shows (empty: every message)
  let cursor = 0;  // the newest seq shown (of the search, when there is one)
  let catching = null;  // a search's catch-up under way
  let again = false;
  let held = null;  // the events that came while the page reads a search of its own

  // `work` at the next animation frame, or within 250 ms where frames are not drawn (a
  // hidden tab).
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

  function query(extra) {
    const parameters = new URLSearchParams();
    for (const name of FIELDS) if (filters[name]) parameters.set(name, filters[name]);
    for (const [name, value] of Object.entries(extra || {})) parameters.set(name, value);
    const text = parameters.toString();
    return text ? "?" + text : "";
  }

  function filtered() {
    return FIELDS.some((name) => filters[name]);
  }

  function clock(iso) {
    const moment = new Date(iso);
    if (Number.isNaN(moment.getTime())) return iso || "";
    return moment.toISOString().slice(11, 19);
  }

  function chip(delivery) {
    const title = [delivery.state, delivery.attempts ? delivery.attempts + " attempt(s)" : null,
      delivery.evidence ? "by " + delivery.evidence : null, delivery.reason,
      delivery.acked_at || delivery.handed_at].filter(Boolean).join(" · ");
    return el("span", { class: "chip delivery-" + delivery.state, title: title,
      dataset: { recipient: delivery.recipient, state: delivery.state } },
      delivery.recipient + " " + delivery.state);
  }

  function loopBanner(stop) {
    return el("div", { class: "loop-stop" },
      el("b", {}, "loop stopped: "),
      stop.agents.join(" ↔ ") + " after " + stop.exchanges + " exchanges; messages between them" +
      " resume when a human writes to either, or at " + stop.until + " UTC");
  }

  // A message's deliveries: a chip each, or for many (a broadcast) one chip per state
  // with how many, the names in its tooltip.
  function paintChips(made) {
    clear(made.chips);
    const all = Array.from(made.deliveries.values());
    if (all.length <= GROUP_ABOVE) {
      for (const delivery of all) made.chips.appendChild(chip(delivery));
      return;
    }
    const byState = new Map();
    for (const delivery of all) {
      if (!byState.has(delivery.state)) byState.set(delivery.state, []);
      byState.get(delivery.state).push(delivery.recipient);
    }
    for (const [state, names] of byState) {
      made.chips.appendChild(el("span", { class: "chip delivery-" + state, title: names.join(", "),
        dataset: { state: state, count: names.length } }, names.length + " " + state));
    }
  }

  function entryNode(entry) {
    const chips = el("span", { class: "deliveries" });
    const classes = ["entry"];
    if (entry.notice) classes.push("notice-entry", "notice-" + entry.notice);
    if (entry.sender_kind) classes.push("from-" + entry.sender_kind);
    const head = el("div", { class: "entry-head" },
      el("time", { datetime: entry.created_at, title: entry.created_at }, clock(entry.created_at)),
      el("span", { class: "who" },
        el("b", { class: "sender" }, entry.sender),
        entry.sender_kind === "human" ? el("span", { class: "badge" }, "human") : null,
        " → ",
        el("b", { class: "recipient" }, entry.recipient === "*" ? "everyone (*)" : entry.recipient)),
      el("span", { class: "marker mono", title: entry.id }, "[" + entry.short_id + "]"),
      entry.thread ? el("button", { type: "button", class: "thread-tag",
        title: "show this thread", on: { click: () => search({ thread: entry.thread }) } },
        "#" + entry.thread) : null,
      chips);
    const node = el("li", { class: classes.join(" "), dataset: { seq: entry.seq, id: entry.id } },
      head,
      entry.loop_stop ? loopBanner(entry.loop_stop) : null,
      el("div", { class: "body" }, entry.body));
    const made = { entry: entry, node: node, chips: chips, deliveries: new Map() };
    for (const delivery of entry.deliveries) made.deliveries.set(delivery.recipient, delivery);
    paintChips(made);
    return made;
  }

  function add(entries) {
    const atEnd = following && entries.length > 0;
    for (const entry of entries) {
      if (shown.has(entry.seq)) continue;
      const made = entryNode(entry);
      shown.set(entry.seq, made);
      view.list.appendChild(made.node);
      if (entry.seq > cursor) cursor = entry.seq;
    }
    while (shown.size > KEEP) {
      const oldest = firstSeq();
      shown.get(oldest).node.remove();
      shown.delete(oldest);
    }
    recount();
    threadsLater();
    if (atEnd) toEnd();
  }

  // The threads of the messages shown (as the server's `threads_of` sums them), at most
  // every 200 ms while messages pour in.
  let threadsDue = null;
  function threadsLater() {
    if (threadsDue === null) threadsDue = setTimeout(() => { threadsDue = null; threads(); }, 200);
  }

  function firstSeq() {
    return shown.keys().next().value;
  }

  // Whether the view is at the end of the timeline (so it follows new messages): read on
  // scrolling, not on every message (a read of the layout costs one).
  let following = true;
  function nearEnd() {
    const rest = document.documentElement.scrollHeight - (window.scrollY + window.innerHeight);
    return rest < 120;
  }
  window.addEventListener("scroll", () => {
    if (view && !view.list.closest("[hidden]")) following = nearEnd();
  }, { passive: true });

  function changed(changes) {
    const touched = new Set();
    for (const change of changes) {
      const made = shown.get(change.seq);
      if (!made) continue;
      made.deliveries.set(change.delivery.recipient, change.delivery);
      touched.add(made);
    }
    for (const made of touched) paintChips(made);
  }

  function recount() {
    view.count.textContent = shown.size + (shown.size === 1 ? " message" : " messages");
    view.empty.hidden = shown.size > 0;
  }

  function threads() {
    const grouped = new Map();
    for (const { entry } of shown.values()) {
      if (entry.thread === null || entry.thread === undefined) continue;
      const thread = grouped.get(entry.thread) || { thread: entry.thread, messages: 0, senders: new Set(), last: "" };
      thread.messages += 1;
      thread.senders.add(entry.sender);
      thread.last = entry.created_at;
      grouped.set(entry.thread, thread);
    }
    const list = Array.from(grouped.values()).sort((a, b) => (a.last < b.last ? 1 : a.last > b.last ? -1 : 0));
    clear(view.threads);
    if (!list.length) {
      view.threads.appendChild(el("li", { class: "dim" }, "no threads among these messages"));
      return;
    }
    for (const thread of list) {
      view.threads.appendChild(el("li", {},
        el("button", { type: "button", class: "thread-link", on: { click: () => search({ thread: thread.thread }) } },
          "#" + thread.thread),
        el("span", { class: "dim" }, " " + thread.messages + " · " + Array.from(thread.senders).sort().join(", "))));
    }
  }

  function render(section, snapshot) {
    const page = snapshot.page;
    clear(view.list);
    shown.clear();
    cursor = 0;
    add(page.entries);
    cursor = Math.max(cursor, page.cursor);
    threads();
    view.more.hidden = !page.more;
    view.more.textContent = "older messages are not shown (the newest " + page.limit + ")";
    view.problem.textContent = (snapshot.problems || []).join("; ");
    view.problem.hidden = !(snapshot.problems || []).length;
    view.searching.textContent = filtered() ? "matching the search" : "";
    following = true;
    toEnd();
  }

  function toEnd() {
    if (!view.list.parentNode || view.list.closest("[hidden]")) return;
    window.scrollTo(0, document.documentElement.scrollHeight);
  }

  async function load() {
    held = [];
    try {
      const snapshot = await window.relay.getJSON("/api/conversation" + query());
      view.error.hidden = true;
      render(null, snapshot);
    } catch (error) {
      view.error.textContent = error.message;
      view.error.hidden = false;
    }
    const waiting = held;
    held = null;
    for (const data of waiting) update(null, data);
    if (inbox) flush();
  }

  function search(wanted) {
    filters = {};
    for (const name of FIELDS) {
      const value = wanted[name] === undefined ? "" : String(wanted[name]);
      view.inputs[name].value = value;
      if (value.trim()) filters[name] = value.trim();
    }
    load();
  }

  // A search's page asks for what its search selects among the new messages.
  async function catchUp() {
    if (catching) {
      again = true;
      return;
    }
    catching = true;
    try {
      do {
        again = false;
        const answer = await window.relay.getJSON("/api/conversation/since" + query({ cursor: cursor }));
        add(answer.entries);
        cursor = Math.max(cursor, answer.cursor);
      } while (again);
    } catch (error) {
      view.error.textContent = error.message;
      view.error.hidden = false;
    } finally {
      catching = null;
    }
  }

  // Updates are applied once a frame, together: a flood of messages costs one layout a
  // frame, not one a message.
  let inbox = null;
  function update(section, data) {
    if (held) {
      held.push(data);
      return;
    }
    if (!inbox) {
      inbox = [];
      nextFrame(flush);
    }
    inbox.push(data);
  }

  function flush() {
    const batch = inbox || [];
    inbox = null;
    const entries = [];
    const changes = [];
    for (const data of batch) {
      for (const entry of data.entries) entries.push(entry);
      for (const change of data.deliveries) changes.push(change);
    }
    if (filtered()) {
      if (entries.length) catchUp();
    } else {
      add(entries.filter((entry) => entry.seq > cursor));
    }
    changed(changes);
  }

  function mount(section) {
    const inputs = {};
    const field = (name, label, placeholder) => {
      inputs[name] = el("input", { type: "text", name: name, id: "conversation-" + name,
        autocomplete: "off", placeholder: placeholder, "aria-label": label });
      return el("label", { class: "field" }, el("span", {}, label), inputs[name]);
    };
    const form = el("form", { class: "filters", id: "conversation-search", on: { submit: (event) => {
      event.preventDefault();
      const wanted = {};
      for (const name of FIELDS) wanted[name] = inputs[name].value;
      search(wanted);
    } } },
      field("grep", "words", "words every message must hold"),
      field("sender", "from", "name"),
      field("recipient", "to", "name or *"),
      field("thread", "thread", "name"),
      field("since", "since", "90m, 12h, 7d or a date"),
      field("until", "until", "a date"),
      el("button", { type: "submit", id: "conversation-go" }, "search"),
      el("button", { type: "button", id: "conversation-clear", on: { click: () => search({}) } }, "all"));
    view = {
      inputs: inputs,
      list: el("ol", { class: "timeline", id: "conversation-list" }),
      threads: el("ul", { class: "threads", id: "conversation-threads" }),
      count: el("span", { class: "dim", id: "conversation-count" }),
      searching: el("span", { class: "dim", id: "conversation-searching" }),
      more: el("div", { class: "dim more", id: "conversation-more", hidden: true }),
      empty: el("div", { class: "empty", id: "conversation-empty" }, "No messages to show."),
      problem: el("div", { class: "notice error", hidden: true }),
      error: el("div", { class: "notice error", id: "conversation-error", hidden: true }),
    };
    section.appendChild(el("h1", {}, "Conversation · ", view.count, " ", view.searching));
    section.appendChild(form);
    section.appendChild(view.error);
    section.appendChild(view.problem);
    section.appendChild(el("div", { class: "columns" },
      el("div", { class: "main-column" }, view.more, view.list, view.empty),
      el("aside", { class: "side-column" }, el("h2", {}, "Threads"), view.threads)));
  }

  window.relay.page("conversation", {
    get snapshot() {
      return "/api/conversation" + query();
    },
    mount: mount,
    render: render,
    events: { "conversation.update": update },
  });
})();
