"""A real Chromium and a real `relay dashboard` for the dashboard's tests.

Not a test module: conftest.py loads it as a plugin, so its fixtures (`chromium`,
`page`, `shot`, `dashboard_server`) are every test's; a test imports its types (`from
browser import DashboardServer`; tests/ is on sys.path).

- Chromium is the distribution's (`/usr/bin/chromium`, `apt-get install chromium`; or
  $RELAY_CHROMIUM), driven by Playwright's Python API. Playwright's own browser downloads
  are never used (`playwright install` is not run). Without a Chromium the tests that
  need one skip and say so; nothing else makes them skip.
- Screenshots are PNG files in $RELAY_ARTIFACTS, else tests/artifacts/ (ignored by git):
  `shot(page, "what")` saves `<test>-what.png`, and every test's page is saved at its end
  (`<test>-end.png`), failed or not.
- `dashboard_server(cwd, *options)` starts `relay dashboard --no-open --port 0 …` as a
  real process, reads its URL from its stdout, and stops it (SIGINT) at the test's end.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
ARTIFACTS = Path(os.environ.get("RELAY_ARTIFACTS") or Path(__file__).resolve().parent / "artifacts")
RELAY = [sys.executable, "-m", "relay"]
START_SECONDS = 60.0
"""The longest a dashboard may take to print its URL (a loaded 2-core machine)."""


def chromium_path() -> str | None:
    """The distribution's Chromium ($RELAY_CHROMIUM first), or None."""
    wanted = os.environ.get("RELAY_CHROMIUM")
    for path in (wanted, *CHROMIUM_PATHS, shutil.which("chromium")):
        if path and os.access(path, os.X_OK):
            return path
    return None


def artifact(request: pytest.FixtureRequest, what: str) -> Path:
    """Where the test's screenshot `what` goes."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    test = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    return ARTIFACTS / f"{test}-{what}.png"


@pytest.fixture
def chromium() -> Iterator[Any]:
    """A headless Chromium (the distribution's), closed at the end."""
    yield from launch()


def launch() -> Iterator[Any]:
    """A headless Chromium (the distribution's) and Playwright's driver, closed when the
    generator is (a test file may share one: `yield from launch()` in a module-scoped
    `chromium` of its own). While it runs, sync Playwright holds an asyncio loop in this
    thread: a test that runs asyncio itself cannot run beside it."""
    path = chromium_path()
    if path is None:
        pytest.skip(
            "no Chromium: the dashboard's browser tests need the distribution's "
            "(apt-get install chromium, as .ci/run does) or $RELAY_CHROMIUM"
        )
    from playwright.sync_api import sync_playwright

    args = ["--disable-dev-shm-usage", "--disable-gpu"]
    if os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True, args=args)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser page (its own cookies); saved as a screenshot at the test's end."""
    context = chromium.new_context(viewport={"width": 1400, "height": 800})
    tab = context.new_page()
    try:
        yield tab
    finally:
        try:
            tab.screenshot(path=str(artifact(request, "end")), full_page=True)
        finally:
            context.close()


@pytest.fixture
def shot(page: Any, request: pytest.FixtureRequest) -> Callable[[str], Path]:
    """`shot("what")`: a screenshot of the test's page now, as `<test>-what.png`."""

    def take(what: str) -> Path:
        path = artifact(request, what)
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@dataclass
class DashboardServer:
    """A running `relay dashboard` process and its URL."""

    process: subprocess.Popen[bytes]
    url: str
    """The URL it printed, with its token."""
    printed: str = ""
    """What it printed on stdout up to its URL."""

    @property
    def base(self) -> str:
        """`http://127.0.0.1:PORT`."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 80

    @property
    def token(self) -> str:
        return urlsplit(self.url).query.removeprefix("token=")

    @property
    def cookie(self) -> str:
        """The Cookie header a visit with the token earns."""
        return f"relay_dashboard_{self.port}={self.token}"

    def stop(self) -> tuple[int, str]:
        """Ctrl-C (SIGINT) and its end; its exit code and what it printed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            out, err = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
        text = (out or b"") + (err or b"")
        return self.process.returncode, self.printed + text.decode(errors="replace")


def start_dashboard(cwd: Path, *options: str, env: dict[str, str] | None = None) -> DashboardServer:
    """`relay dashboard --no-open --port 0 OPTIONS` in `cwd`, once it printed its URL."""
    process = subprocess.Popen(
        [*RELAY, "dashboard", "--no-open", "--port", "0", *options],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + START_SECONDS
    printed = b""
    fd = process.stdout.fileno()
    with selectors.DefaultSelector() as selector:  # read the pipe itself: no buffer hides a line
        selector.register(fd, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            printed += chunk
            for line in printed.decode(errors="replace").splitlines(keepends=True):
                if line.startswith("http://") and line.endswith("\n"):
                    return DashboardServer(process, line.strip(), printed.decode(errors="replace"))
    process.kill()
    out, err = process.communicate()
    said = (printed + out + err).decode(errors="replace")
    raise AssertionError(f"relay dashboard printed no URL: {said}")


@pytest.fixture
def dashboard_server() -> Iterator[Callable[..., DashboardServer]]:
    """`dashboard_server(cwd, *options)`: a started `relay dashboard`, stopped at the end."""
    started: list[DashboardServer] = []

    def start(cwd: Path, *options: str, env: dict[str, str] | None = None) -> DashboardServer:
        server = start_dashboard(cwd, *options, env=env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
