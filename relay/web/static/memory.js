// The Memory page: search (with the reasons of `relay memory search --explain`), and the
// newest memories of this project, of the team and global ones. Read again when the store
// changes. Text is set as text.
"use strict";

(function () {
  const { el, clear } = window.relay;
  const TITLES = { project: "This project", team: "The team", global: "Global" };
  let view = null;
  let lastSearch = null;

  function tags(item) {
    if (!item.extra_tags.length) return null;
    return el("span", { class: "tags" }, item.extra_tags.map((tag) => el("span", { class: "chip" }, "#" + tag)));
  }

  function memoryNode(item, extra) {
    return el("li", { class: "memory scope-" + item.scope, dataset: { id: item.id, scope: item.scope } },
      el("div", { class: "memory-head" },
        el("span", { class: "mono marker" }, "[" + item.id + "]"),
        el("span", { class: "badge scope" }, item.scope === "team" ? "team " + item.team : item.scope),
        el("time", { datetime: item.created_at, title: item.created_at }, item.created_at.slice(0, 10)),
        item.agent ? el("span", { class: "dim" }, "by " + item.agent) : null,
        extra || null),
      el("div", { class: "body" }, item.content),
      tags(item));
  }

  function listing(scope) {
    const list = el("ul", { class: "memories" });
    for (const item of scope.memories) list.appendChild(memoryNode(item));
    return el("section", { class: "scope", id: "memory-scope-" + scope.scope },
      el("h2", {}, TITLES[scope.scope] || scope.scope,
        scope.scope === "project" ? el("span", { class: "dim small path" }, " " + view.project) : null,
        scope.scope === "team" && view.team ? el("span", { class: "dim small path" }, " " + view.team) : null),
      scope.note ? el("p", { class: "dim" }, scope.note) : null,
      !scope.note && !scope.memories.length ? el("p", { class: "dim" }, "none yet") : null,
      list,
      scope.more ? el("p", { class: "dim small" }, "older ones are not shown") : null);
  }

  function render(section, snapshot) {
    const overview = snapshot.data;
    view.project = overview.project;
    view.team = overview.team;
    clear(view.scopes);
    for (const scope of overview.scopes) view.scopes.appendChild(listing(scope));
  }

  function results(answer) {
    clear(view.results);
    const how = answer.by_meaning
      ? "by words and by meaning (" + answer.model + ")"
      : "by words" + (answer.notice ? ": " + answer.notice : "");
    view.results.appendChild(el("p", { class: "dim", id: "memory-how" },
      answer.hits.length + (answer.hits.length === 1 ? " memory" : " memories") + " for “" + answer.query +
      "”" + (answer.scope ? " in " + answer.scope : "") + ", best first; searched " + how));
    const list = el("ol", { class: "memories hits", id: "memory-hits" });
    for (const hit of answer.hits) {
      const node = memoryNode(hit.memory, el("span", { class: "score" }, "score " + hit.score.toFixed(2)));
      node.appendChild(el("div", { class: "why" }, el("span", { class: "dim" }, "why: "),
        hit.why.map((part) => el("span", { class: "reason" }, part))));
      list.appendChild(node);
    }
    view.results.appendChild(list);
  }

  async function search(event) {
    if (event) event.preventDefault();
    const words = view.query.value;
    if (!words.trim()) {
      lastSearch = null;
      clear(view.results);
      return;
    }
    lastSearch = { q: words, scope: view.scope.value };
    const parameters = new URLSearchParams({ q: words });
    if (view.scope.value) parameters.set("scope", view.scope.value);
    view.go.disabled = true;
    try {
      results(await window.relay.getJSON("/api/memory/search?" + parameters.toString()));
    } catch (error) {
      clear(view.results);
      view.results.appendChild(el("p", { class: "notice error" }, error.message));
    } finally {
      view.go.disabled = false;
    }
  }

  async function changed() {
    try {
      render(null, await window.relay.getJSON("/api/memory"));
    } catch (error) {
      window.relay.showProblem("the memory page cannot be read: " + error.message);
    }
    if (lastSearch) search(null);
  }

  function mount(section) {
    const scope = el("select", { id: "memory-scope", "aria-label": "scope" },
      el("option", { value: "" }, "every scope"),
      el("option", { value: "project" }, "this project"),
      el("option", { value: "team" }, "the team"),
      el("option", { value: "global" }, "global"));
    view = {
      query: el("input", { type: "search", id: "memory-query", autocomplete: "off",
        placeholder: "words or a question", "aria-label": "search memories" }),
      scope: scope,
      go: el("button", { type: "submit", id: "memory-go" }, "search"),
      results: el("div", { class: "results", id: "memory-results" }),
      scopes: el("div", { class: "scopes", id: "memory-scopes" }),
      project: "",
      team: null,
    };
    section.appendChild(el("h1", {}, "Memory"));
    section.appendChild(el("form", { class: "filters", id: "memory-search", on: { submit: search } },
      view.query, view.scope, view.go));
    section.appendChild(view.results);
    section.appendChild(view.scopes);
  }

  window.relay.page("memory", {
    snapshot: "/api/memory",
    mount: mount,
    render: render,
    events: { "memory.changed": changed },
  });
})();
