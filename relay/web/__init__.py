"""`relay dashboard`: the team live in a browser (DESIGN §1 and §13, spec/dashboard.md).

A local ASGI app (Starlette, served by uvicorn: the stack the `mcp` SDK brings) over what
relay already keeps: the status board, the mailbox, the hook log, memories. It reads
them through the same service functions as `relay agents` and `relay watch` (STYLE §19).

The modules:

- `dashboard.py`: `Dashboard`, what every page is given: the team, its messenger and
  status board, the settings, the project, the human's name, and `publish` for the feed.
- `feed.py`: `Feed`, the live feed: server-sent events at `/api/events`.
- `security.py`: `Guard`, the ASGI middleware in front of everything: the token and its
  cookie, Host and Origin checks, CSRF tokens for actions, the Content-Security-Policy.
- `app.py`: `create_app`, the Starlette app: the shell page, static files, the feed and
  every page's routes, behind the guard.
- `server.py`: `serve`, uvicorn on a socket bound here (a random port by default), the
  pages' tasks beside it, a clean end on SIGINT, SIGTERM or SIGHUP.
- `pages.py`: `Page` and `PAGE_MODULES`, the registry of pages.
- `team.py` (and the other pages' modules): one module per page.
- `static/`: the shell (`index.html`), `app.css`, `app.js` (the page framework), and one
  script per page; no third-party code and no build step. Served at `/static/NAME`.

**Adding a page.** Write `relay/web/NAME.py` with a function
`page(dashboard: Dashboard) -> Page`, called once per server, and add its module to
`PAGE_MODULES` in `pages.py` (the order is the navigation's). Its `Page` gives:

- `name` (its navigation id and the prefix of its events and routes: `/api/NAME…`,
  events `NAME.WHAT`) and `title` (its navigation entry);
- `routes`: Starlette routes. A snapshot route (`GET /api/NAME`) returns the page's
  first paint as JSON with `"seq": dashboard.feed.seq` read in the same step as the data
  (no `await` between them), so that the browser applies only the events published after
  it. Actions are `POST` routes (the guard demands the CSRF token and the page's Origin)
  reading a JSON body; an error is `{"error": "…"}` with a 4xx status (`json_error`);
- `tasks`: async functions run for the server's life (`async def follow() -> None`),
  which read their source and call `dashboard.publish("NAME.WHAT", data)` for each
  change; `data` is anything msgspec encodes;
- `script`: its file in `static/` (`NAME.js`), loaded after `app.js`, which registers
  the page: `relay.page("NAME", {snapshot: "/api/NAME", render(section, snapshot),
  events: {"NAME.WHAT": (section, data) => …}})`. `app.js` gives it the page's
  `<section>`, calls `render` on every (re)connection of the feed with a fresh snapshot,
  then the handlers of its events in order; `relay.el(tag, attributes, ...children)`
  builds elements (strings become text nodes: never HTML), `relay.post(url, body)` sends
  an action with the CSRF token, `relay.ago(iso)` says how long ago;
- `style`: an optional stylesheet of its own in `static/` (the shared one is `app.css`).

Every text from agents, messages, hooks and memories is set with `textContent` (through
`relay.el`), never as HTML: the CSP forbids inline scripts and styles in any case.

A page is tested in Chromium through `tests/browser.py`: its fixtures start a real
`relay dashboard` (`dashboard_server`), a page (`page`) and save screenshots (`shot`).
"""
