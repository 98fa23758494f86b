"""Dashboard speed figures (issue 31, DESIGN §13). Run: .venv/bin/python tests/perf/bench_dashboard.py

Not a pytest module: it prints figures and exits 1 when a target is missed. A team of 50
agents (each live in the mailbox and with a status on this machine's board) and 10,000
messages (the oldest 9,000 stored as history read from a stream, the newest 1,000 sent
through the mailbox, a fifth of them broadcasts, so that they have deliveries), a real
`relay dashboard` process (in a RELAY_HOME of its own) and the distribution's Chromium
driven by Playwright (tests/browser.py). Measured:

- first meaningful paint: from the navigation's start to the frame that shows the Team
  page's 50 rows, or the Conversation page's 200 messages; the first visit (the token's
  redirect and the cookie) and a reload, the median of RUNS fresh pages each;
- an event shown in the page after it happens: a message sent (from `send` returning to
  the frame that shows it), a status changed on the board, a hook call committed to the
  log; the page's clock and this process's are the machine's;
- the server's memory: the `relay dashboard` process's resident set (VmRSS), sampled
  every 50 ms through the whole run, its peak;
- responsiveness while 100 messages a second arrive for FLOOD_SECONDS: the gaps between
  animation frames, long tasks (over 50 ms), and the delay of a click's handler (every
  250 ms a real click), and how long after the flood its last message is shown.

Targets: paint < 1 s, event p50 < 200 ms, RSS < 100 MB, and responsive: a click's
handler runs within 100 ms (p99) and no frame waits more than 200 ms.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: browser.py

AGENTS = 50
MESSAGES = 10_000
SENT = 1_000
"""Of MESSAGES, the newest sent through the mailbox (with deliveries)."""
RUNS = 5
PROBES = 60
HOOK_PROBES = 20
FLOOD_RATE = 100
FLOOD_SECONDS = 10.0
TEAM = "bench"

TARGET_PAINT_MS = 1000.0
TARGET_EVENT_P50_MS = 200.0
TARGET_RSS_MB = 100.0
TARGET_CLICK_P99_MS = 100.0
TARGET_FRAME_GAP_MS = 200.0

GREEN, RED, BOLD, DIM, RESET = "\x1b[32m", "\x1b[31m", "\x1b[1m", "\x1b[2m", "\x1b[0m"

# Runs in the page before its own scripts (Playwright's init script: not subject to the CSP).
PROBE_SCRIPT = """
(() => {
  const probe = { paint: {}, seen: {}, frames: [], clicks: [], long: [] };
  window.__probe = probe;
  const afterFrame = (record) => requestAnimationFrame(() => record(performance.now(), Date.now()));
  const watch = () => {
    const rows = document.querySelectorAll('#team-rows tr[data-name]').length;
    const entries = document.querySelectorAll('#conversation-list li.entry').length;
    if (rows >= AGENTS && !probe.paint.pending_team) {
      probe.paint.pending_team = true;
      afterFrame((at) => { probe.paint.team = at; });
    }
    if (entries >= 200 && !probe.paint.pending_conversation) {
      probe.paint.pending_conversation = true;
      afterFrame((at) => { probe.paint.conversation = at; });
    }
  };
  const observer = new MutationObserver((records) => {
    watch();
    for (const record of records) {
      for (const node of record.addedNodes) {
        if (node.nodeType !== 1) continue;
        let text = null;
        if (node.matches('li.entry')) text = node.querySelector('.body').textContent;
        else if (node.matches('tr[data-name]')) text = (node.querySelector('td.last') || {}).textContent;
        else if (node.matches('tr.call')) text = 'hook ' + node.dataset.event;
        if (text && text.startsWith('probe ') || text && text.startsWith('hook ')) {
          if (!(text in probe.seen)) {
            probe.seen[text] = -1;
            afterFrame((at, wall) => { probe.seen[text] = wall; });
          }
        }
      }
    }
  });
  observer.observe(document, { subtree: true, childList: true });
  probe.startFrames = () => {
    probe.frames = [];
    const round = probe.round = (probe.round || 0) + 1;
    let last = performance.now();
    const step = (now) => {
      if (probe.round !== round) return;
      probe.frames.push(now - last);
      last = now;
      requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
  };
  probe.stopFrames = () => { probe.round = (probe.round || 0) + 1; };
  document.addEventListener('click', (event) => {
    if (event.target && event.target.id === 'probe-target') probe.clicks.push(performance.now() - event.timeStamp);
  }, true);
  try {
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) probe.long.push(entry.duration);
    }).observe({ type: 'longtask', buffered: true });
  } catch (error) { /* no long task timing here */ }
})();
""".replace("AGENTS", str(AGENTS))


def percentile(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, -(-len(ordered) * percent // 100))
    return ordered[int(rank) - 1]


def report(name: str, value: float, unit: str, target: float | None, *, below: bool = True) -> bool:
    ok = target is None or (value < target if below else value > target)
    mark = "" if target is None else (f"{GREEN}ok{RESET}" if ok else f"{RED}MISSED{RESET}")
    goal = "" if target is None else f"  {DIM}(target < {target:g} {unit}){RESET}"
    print(f"  {name:<52} {value:10.1f} {unit}{goal} {mark}")
    return ok


class RssSampler:
    """The peak resident set of a process, sampled every 50 ms on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kb = 0
        self.last_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with open(f"/proc/{self.pid}/status") as status:
                    for line in status:
                        if line.startswith("VmRSS:"):
                            self.last_kb = int(line.split()[1])
                            self.peak_kb = max(self.peak_kb, self.last_kb)
            except OSError:
                return
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def seed(home: Path) -> None:
    """The team: agents live in the mailbox and on the board, and its messages."""
    from relay.fleet.board import SqliteBoard
    from relay.services.messaging.model import Message
    from relay.services.messaging.ulid import new_ulid
    from relay.timestamps import iso_millis

    names = [f"agent-{n:02d}" for n in range(AGENTS)]
    mailbox = mailbox_for(home)
    board = SqliteBoard()
    now = iso_millis(datetime.now(UTC))
    for number, name in enumerate(names):
        mailbox.register_agent(name, team=TEAM, session_id=f"s{number}", cwd=str(home))
        board.publish_now(status(name, "working", f"step {number}", now))
    board.close()
    started = time.monotonic()
    history = [
        Message(
            id=new_ulid(),
            team=TEAM,
            sender=names[n % AGENTS],
            recipient=names[(n * 7 + 1) % AGENTS],
            body=f"history {n}: "
            + "the parser handles nested generics now; tests pass " * (n % 3 + 1),
            created_at=iso_millis(datetime.now(UTC)),
            thread=f"task-{n % 40}" if n % 4 == 0 else None,
        )
        for n in range(MESSAGES - SENT)
    ]
    for start in range(0, len(history), 1000):
        mailbox.store_history(TEAM, history[start : start + 1000], start + 1000)
    for n in range(SENT):
        sender = names[n % AGENTS]
        recipient = "*" if n % 5 == 0 else names[(n * 7 + 3) % AGENTS]
        if recipient == sender:
            recipient = names[(n + 1) % AGENTS]
        mailbox.send(
            team=TEAM, sender=sender, recipient=recipient, body=f"update {n}: done with step {n}"
        )
    mailbox.close()
    from relay.services.memory.sqlite import SqliteMemory

    with SqliteMemory(home / "state" / "memory.db") as memories:
        for n in range(200):
            memories.add(f"note {n}: deploy with tools/deploy.sh after the tests pass #deploy")
    print(
        f"{DIM}seeded {AGENTS} agents and {MESSAGES:,} messages in {time.monotonic() - started:.1f} s{RESET}"
    )


def mailbox_for(home: Path) -> Any:
    from relay.services.messaging.mailbox import SqliteMailbox

    return SqliteMailbox(home / "state" / "messages.db", max_per_minute=10**9, max_exchanges=10**9)


def status(name: str, state: str, line: str, now: str) -> Any:
    from relay.fleet.model import AgentStatus

    return AgentStatus(
        team=TEAM,
        name=name,
        state=state,  # type: ignore[arg-type]
        since=now,
        heartbeat=now,
        machine="bench",
        host_kind="claude",
        started=now,
        last_line=line,
        ttl=3600.0,
    )


@contextmanager
def browser() -> Iterator[Any]:
    from browser import chromium_path
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        sys.exit("no Chromium: apt-get install chromium (or set $RELAY_CHROMIUM)")
    args = ["--disable-dev-shm-usage", "--disable-gpu"]
    if os.geteuid() == 0:
        args.append("--no-sandbox")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=path, headless=True, args=args)
        try:
            yield chromium
        finally:
            chromium.close()


def fresh_page(chromium: Any) -> tuple[Any, Any]:
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    context.add_init_script(PROBE_SCRIPT)
    return context, context.new_page()


def paint(chromium: Any, url: str, which: str) -> tuple[float, float]:
    """Milliseconds from navigation to the frame that shows `which` (team or
    conversation): on a first visit (the token), then on a reload."""
    context, page = fresh_page(chromium)
    try:
        figures = []
        for load in (lambda: page.goto(f"{url}#{which}"), page.reload):
            load()
            page.wait_for_function(f"() => window.__probe.paint.{which} > 0", timeout=60_000)
            figures.append(float(page.evaluate(f"window.__probe.paint.{which}")))
        return figures[0], figures[1]
    finally:
        context.close()


def wait_seen(page: Any, text: str, timeout: float = 30.0) -> float:
    """The wall-clock time (ms) the page showed `text`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = page.evaluate("(text) => window.__probe.seen[text]", text)
        if seen is not None and seen > 0:
            return float(seen)
        page.wait_for_timeout(5)
    raise AssertionError(f"the page never showed {text!r}")


def message_latencies(page: Any, home: Path) -> list[float]:
    mailbox = mailbox_for(home)
    latencies = []
    try:
        for n in range(PROBES):
            body = f"probe {n}"
            mailbox.send(team=TEAM, sender="agent-01", recipient="agent-02", body=body)
            sent = time.time() * 1000
            latencies.append(wait_seen(page, body) - sent)
            time.sleep(0.1)
    finally:
        mailbox.close()
    return latencies


def board_latencies(page: Any) -> list[float]:
    from relay.fleet.board import SqliteBoard
    from relay.timestamps import iso_millis

    board = SqliteBoard()
    latencies = []
    try:
        for n in range(PROBES // 2):
            text = f"probe board {n}"
            name = f"agent-{n % AGENTS:02d}"
            board.publish_now(status(name, "idle", text, iso_millis(datetime.now(UTC))))
            published = time.time() * 1000
            latencies.append(wait_seen(page, text) - published)
            time.sleep(0.1)
    finally:
        board.close()
    return latencies


def hook_latencies(page: Any, home: Path) -> list[float]:
    """A hook call run by the engine; from its log's commit (the engine's close, which
    writes what is queued) to the page."""
    from relay.engine.hooklog import HookLog
    from relay.engine.system import HookSystem
    from relay.engine.telemetry import log_path

    latencies = []
    log = HookLog(log_path())
    for _ in range(HOOK_PROBES):
        system = HookSystem(cwd=home)
        system.run("BeforeTool", {"tool_name": "Bash", "tool_input": {"command": "ls"}})
        system.close()
        committed = time.time() * 1000
        newest = (log.id_range() or (0, 0))[1]
        latencies.append(wait_seen(page, f"hook {newest}") - committed)
        time.sleep(0.1)
    return latencies


def flood(page: Any, home: Path) -> dict[str, float]:
    """FLOOD_RATE messages a second for FLOOD_SECONDS from two senders while the page is
    clicked every 250 ms."""
    page.evaluate(
        """() => {
            const target = document.createElement('button');
            target.id = 'probe-target';
            target.textContent = 'probe';
            document.querySelector('.top').appendChild(target);
            window.__probe.clicks = [];
            window.__probe.long = [];
            window.__probe.startFrames();
        }"""
    )
    total = int(FLOOD_RATE * FLOOD_SECONDS)
    late: list[float] = []

    def sender(offset: int) -> None:
        mailbox = mailbox_for(home)
        start = time.monotonic()
        try:
            for n in range(offset, total, 2):
                due = start + n / FLOOD_RATE
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                else:
                    late.append(-pause)
                recipient = "*" if n % 10 == 0 else f"agent-{(n * 3 + 1) % AGENTS:02d}"
                mailbox.send(
                    team=TEAM, sender=f"agent-{n % AGENTS:02d}", recipient=recipient,
                    body=f"flood {n}: compiled module {n % 97}, 0 warnings",
                )  # fmt: skip
        finally:
            mailbox.close()

    threads = [threading.Thread(target=sender, args=(offset,)) for offset in (0, 1)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        page.click("#probe-target")
        page.wait_for_timeout(250)
    for thread in threads:
        thread.join()
    sent_seconds = time.monotonic() - started
    ended = time.time() * 1000
    page.wait_for_function(
        f"""() => Array.from(document.querySelectorAll('#conversation-list li.entry .body'))
            .some((node) => node.textContent.startsWith('flood {total - 1}:')
                || node.textContent.startsWith('flood {total - 2}:'))""",
        timeout=60_000,
    )
    caught_up = time.time() * 1000 - ended
    page.evaluate("() => window.__probe.stopFrames()")
    probe = page.evaluate(
        "() => ({frames: window.__probe.frames, clicks: window.__probe.clicks, long: window.__probe.long})"
    )
    frames = probe["frames"][1:] or [0.0]
    return {
        "rate": total / sent_seconds,
        "behind": max(late, default=0.0) * 1000,
        "frames": float(len(frames)),
        "frame_p50": percentile(frames, 50),
        "frame_p99": percentile(frames, 99),
        "frame_max": max(frames),
        "clicks": float(len(probe["clicks"])),
        "click_p50": percentile(probe["clicks"], 50),
        "click_p99": percentile(probe["clicks"], 99),
        "long_tasks": float(len(probe["long"])),
        "long_max": max(probe["long"], default=0.0),
        "caught_up": caught_up,
    }


def idle_frames(page: Any) -> float:
    """The longest gap between frames over 3 s with nothing arriving (the machine's floor)."""
    page.evaluate("() => window.__probe.startFrames()")
    page.wait_for_timeout(3000)
    page.evaluate("() => window.__probe.stopFrames()")
    frames = page.evaluate("() => window.__probe.frames")[1:]
    return max(frames, default=0.0)


def memory_search(page: Any) -> float:
    """A search on the Memory page (it loads the embedding model into the server); how
    long until its hits are shown."""
    page.click('#nav a[data-page="memory"]')
    page.fill("#memory-query", "how do we deploy")
    started = time.monotonic()
    page.click("#memory-go")
    page.wait_for_selector("#memory-hits li.memory", timeout=60_000)
    elapsed = (time.monotonic() - started) * 1000
    page.wait_for_timeout(300)  # a sample of the server's memory after it
    return elapsed


def main() -> int:
    from browser import start_dashboard

    with tempfile.TemporaryDirectory(prefix="relay-bench-dashboard-") as folder:
        home = Path(folder) / "home"
        project = Path(folder) / "project"
        (project / ".git").mkdir(parents=True)
        home.mkdir()
        os.environ["RELAY_HOME"] = str(home)
        os.environ["RELAY_SYSTEM_SETTINGS"] = str(Path(folder) / "no-system-settings.json")
        hook = {"name": "quick", "command": sys.executable, "args": ["-c", "print('{}')"]}
        settings = {"messaging": {"team": TEAM}, "hooks": {"BeforeTool": [{"hooks": [hook]}]}}
        (home / "settings.json").write_text(json.dumps(settings))
        seed(home)
        server = start_dashboard(project, env=dict(os.environ))
        rss = RssSampler(server.process.pid)
        ok = True
        try:
            with browser() as chromium:
                print(f"{BOLD}first meaningful paint{RESET} (median of {RUNS})")
                for which, shown in (
                    ("team", f"{AGENTS} agents"),
                    ("conversation", "200 messages"),
                ):
                    runs = [paint(chromium, server.url, which) for _ in range(RUNS)]
                    first = statistics.median(run[0] for run in runs)
                    again = statistics.median(run[1] for run in runs)
                    ok &= report(f"{which} ({shown}), first visit", first, "ms", TARGET_PAINT_MS)
                    ok &= report(f"{which} ({shown}), reload", again, "ms", TARGET_PAINT_MS)
                context, page = fresh_page(chromium)
                page.goto(f"{server.url}#conversation")
                page.wait_for_function(
                    "() => window.__probe.paint.conversation > 0", timeout=60_000
                )
                print(f"{BOLD}an event shown in the page after it happens{RESET}")
                for name, samples in (
                    ("a message sent", message_latencies(page, home)),
                    ("a status on the board", board_latencies(page)),
                    ("a hook call logged", hook_latencies(page, home)),
                ):
                    target = TARGET_EVENT_P50_MS if name == "a message sent" else None
                    ok &= report(
                        f"{name}: p50 ({len(samples)})", percentile(samples, 50), "ms", target
                    )
                    report(f"{name}: p95", percentile(samples, 95), "ms", None)
                print(
                    f"{BOLD}while {FLOOD_RATE} messages a second arrive for {FLOOD_SECONDS:g} s{RESET}"
                )
                quiet = idle_frames(page)
                report("gap between frames with nothing arriving, longest", quiet, "ms", None)
                figures = flood(page, home)
                report("messages sent a second", figures["rate"], "/s", None)
                report("the senders' worst lag behind schedule", figures["behind"], "ms", None)
                ok &= report(
                    f"a click's handler delay p99 ({figures['clicks']:.0f})",
                    figures["click_p99"],
                    "ms",
                    TARGET_CLICK_P99_MS,
                )
                report("a click's handler delay p50", figures["click_p50"], "ms", None)
                report(
                    f"gap between frames p50 ({figures['frames']:.0f} frames)",
                    figures["frame_p50"],
                    "ms",
                    None,
                )
                report("gap between frames p99", figures["frame_p99"], "ms", None)
                ok &= report(
                    "gap between frames, longest", figures["frame_max"], "ms", TARGET_FRAME_GAP_MS
                )
                report(
                    f"long tasks ({figures['long_tasks']:.0f}), longest",
                    figures["long_max"],
                    "ms",
                    None,
                )
                report("the last message shown after the flood", figures["caught_up"], "ms", None)
                peak_before = rss.peak_kb
                searched = memory_search(page)
                context.close()
        finally:
            rss.stop()
            code, printed = server.stop()
        print(f"{BOLD}the server{RESET}")
        ok &= report("resident memory, peak", peak_before / 1024, "MB", TARGET_RSS_MB)
        report(
            f"resident memory after a memory search ({searched:.0f} ms, by meaning)",
            rss.last_kb / 1024,
            "MB",
            None,
        )
        if code != 0:
            print(f"{RED}relay dashboard exited {code}{RESET}\n{printed}")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
