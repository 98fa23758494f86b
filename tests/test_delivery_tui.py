"""Delivery into real agent TUIs under `relay run` (DESIGN §12: a message is delivered
only once the agent submitted it), each in a 100x30 tmux pane against its scripted model
server (tests/hostkit): Gemini CLI frozen while relay types (SIGSTOP for 1 s, as a busy
Gemini reads a paste and its Enter together), a held message after the human's Enter
(Gemini CLI, Claude Code and Codex), and relay's notices while Gemini owns the screen.
Skipped, with the reason, when npm cannot install the host or tmux is missing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hostkit import claude_code, codex, gemini_cli
from hostkit.model_server import ModelServer, Reply, Request
from hostkit.npm import host_binary, unavailable
from test_run_tty import Pane, wait_until

if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("team_default")]
RELAY = Path(sys.executable).parent / "relay"


def _needs(host: str) -> None:
    if host_binary(host) is None:
        pytest.skip(f"{host} unavailable: {unavailable(host)}")


def _env(base: dict[str, str], relay_home: Path) -> dict[str, str]:
    env = {**base, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "xterm-256color"}
    env["RELAY_HOME"] = str(relay_home)
    for name in ("TMUX", "ENV"):
        env.pop(name, None)
    return env


@contextlib.contextmanager
def _pane(env: dict[str, str], cwd: Path, argv: Sequence[str], ready: str) -> Iterator[Pane]:
    """`argv` in a 100x30 tmux pane in `cwd`, once `ready` is on it; killed at the end."""
    pane = Pane(cols=100, rows=30)
    try:
        pane.start(env)
        pane.run(f"cd {shlex.quote(str(cwd))} && {shlex.join(argv)}")
        pane.wait_for(ready, timeout=90)
        yield pane
    finally:
        pane.kill()


def _relay(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(RELAY), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _inbox(env: dict[str, str], name: str) -> list[dict[str, Any]]:
    """NAME's deliveries, acked ones included."""
    found = json.loads(_relay(env, "inbox", "--all", "--json", name))
    assert isinstance(found, list)
    return found


def _descendants(pid: int) -> list[int]:
    """`pid` and every process under it."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        children = Path(f"/proc/{current}/task/{current}/children")
        with contextlib.suppress(OSError):
            todo += [int(child) for child in children.read_text().split()]
    return found


def _freeze(agent: int, seconds: float) -> None:
    """Stop the agent and every process under it for `seconds` (SIGSTOP, then SIGCONT),
    as a loaded machine may."""
    frozen = _descendants(agent)
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _agent_pid(relay_home: Path, name: str) -> int:
    record = relay_home / "state" / "sessions" / f"{name}.json"
    wait_until(
        lambda: record.exists() and "agent_pid" in json.loads(record.read_text()),
        30,
        "no agent pid recorded",
    )
    pid = json.loads(record.read_text())["agent_pid"]
    assert isinstance(pid, int)
    return pid


# ---------------------------------------------------------------------------- Gemini CLI


def _ask(pane: Pane, line: str, taken: Callable[[], bool]) -> None:
    """Type `line` and Enter, as the human; once more if Gemini, still starting, lost it."""
    for _ in range(2):
        pane.type(line)
        pane.wait_for(re.escape(line))
        time.sleep(0.3)  # Gemini takes an Enter right after a key for a newline
        pane.enter()
        with contextlib.suppress(AssertionError):
            wait_until(taken, 10, "")
            return
        if line in pane.text():
            break
    wait_until(taken, 10, f"{line!r} never reached the model:\n{pane.text()}")


def _gemini(tmp_path: Path, relay_home: Path, server: ModelServer) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    home = tmp_path / "home"
    gemini_cli.prepare_home(home)
    env = _env(gemini_cli.host_env(home, server.url), relay_home)
    return project, env


def test_a_message_typed_into_a_frozen_gemini_is_submitted_before_it_counts_as_delivered(
    tmp_path: Path, relay_home: Path
) -> None:
    """Gemini stopped for 1 s as relay types reads the paste and an Enter together, and
    takes that Enter for a newline: the message stays in its input box. relay waits for
    Gemini to draw the paste before the Enter, so the model gets the message, and the
    delivery is acknowledged as submitted (never on the echo of its marker in the box)."""
    _needs("gemini")
    app = gemini_cli.GeminiApp(["Got it."], final_text="Done.")
    with ModelServer(app) as server:
        project, env = _gemini(tmp_path, relay_home, server)
        argv = [str(RELAY), "run", "--name", "Bob", "--", str(gemini_cli.gemini_binary())]
        with _pane(env, project, argv, "Type your message") as pane:
            agent = _agent_pid(relay_home, "Bob")
            time.sleep(1.0)
            _relay(env, "send", "--as", "Alice", "Bob", "FROZEN-MAIL please look at PR 7")
            _freeze(agent, 1.0)

            def sent() -> bool:
                return any(b"FROZEN-MAIL" in request.body for request in app.main)

            wait_until(sent, 30, f"Gemini's model never got the message:\n{pane.text()}")
            wait_until(
                lambda: [d["state"] for d in _inbox(env, "Bob")] == ["acked"],
                30,
                f"not acknowledged: {_inbox(env, 'Bob')}",
            )
            [delivery] = _inbox(env, "Bob")
            assert delivery["evidence"] == "submitted", delivery


@dataclass
class _Host:
    """One host TUI under `relay run` against its scripted server: how to start it."""

    name: str
    ready: str  # on the pane once it takes input

    def app(self, answers: list[str], pace: tuple[int, float]) -> Any:
        """The scripted model, its text answers streamed `pace` (chars, seconds apart)."""
        if self.name == "gemini":
            return gemini_cli.GeminiApp(answers, final_text="Done.", pace=pace)
        if self.name == "codex":
            return codex.ResponsesApp(answers, final_text="Done.", pace=pace)
        return claude_code.MessagesApp(answers, final_text="Done.", pace=pace)

    def start(
        self, tmp_path: Path, relay_home: Path, server: ModelServer
    ) -> tuple[Path, dict[str, str], list[str]]:
        """The project, the environment and the `relay run` command line."""
        project = tmp_path / "project"
        if self.name == "gemini":
            project, env = _gemini(tmp_path, relay_home, server)
            return project, env, _run_as_bob(gemini_cli.gemini_binary())
        (project / ".git").mkdir(parents=True)
        home = tmp_path / "home"
        if self.name == "codex":
            home.mkdir()
            codex_home = tmp_path / "codex-home"
            codex.prepare_tui(codex_home, server.url)
            env = _env(codex.host_env(codex_home, server.url, {"HOME": str(home)}), relay_home)
            quiet = [arg for override in codex.OFFLINE_OVERRIDES for arg in ("-c", override)]
            return project, env, _run_as_bob(codex.codex_binary(), *quiet)
        claude_code.prepare_home(home, project)
        env = _env(claude_code.host_env(home, server.url), relay_home)
        return project, env, _run_as_bob(claude_code.claude_binary())


def _run_as_bob(binary: Path, *args: str) -> list[str]:
    return [str(RELAY), "run", "--name", "Bob", "--", str(binary), *args]


HUMAN_ANSWER = "HUMAN-ANSWER fine, thanks; the rest of this answer comes slowly. HUMAN-END"


@pytest.mark.parametrize(
    "host",
    [
        _Host("gemini", "Type your message"),
        _Host("claude", "\u276f"),
        _Host("codex", r"Ask Codex to do anything(?s:.*)default · /"),  # the model loaded
    ],
    ids=lambda h: h.name,
)
def test_a_message_held_by_the_humans_line_waits_until_the_agent_has_answered_it(
    host: _Host, tmp_path: Path, relay_home: Path
) -> None:
    """A message that arrives while the human types waits for the line; after the human's
    Enter it waits again, until the agent has taken the line and answered it: the human's
    line is its own turn, and the message never shows while that turn runs (it used to
    be typed 0.1 s after the Enter). The turn first waits on the model (the agent shows
    its busy hint); then its answer streams, 1 s between pieces, and the agent is stopped
    for 2 s mid-answer, as a loaded machine may stop it: it draws nothing then, and Codex
    shows no busy hint while an answer streams (only its turn state, OSC 7501, says that
    it works; relay used to type the message into the running turn there)."""
    _needs(host.name)
    app = host.app([HUMAN_ANSWER, "MAIL-ANSWER noted."], pace=(12, 1.0))
    held, release = threading.Event(), threading.Event()

    def holding(request: Request) -> Reply:
        if b"HUMAN-LINE" in request.body and not release.is_set():
            held.set()  # the human's turn runs until the test lets it answer
            release.wait(40)
        reply: Reply = app(request)
        return reply

    with ModelServer(holding) as server:
        project, env, argv = host.start(tmp_path, relay_home, server)
        try:
            with _pane(env, project, argv, host.ready) as pane:
                agent = _agent_pid(relay_home, "Bob")
                time.sleep(1.0)
                pane.type("HUMAN-LINE how are you")
                pane.wait_for("HUMAN-LINE how are you")
                _relay(env, "send", "--as", "Alice", "Bob", "HELD-MAIL review PR 9")
                time.sleep(1.5)
                assert "HELD-MAIL" not in pane.text(), "typed over the human's line"
                pane.enter()
                wait_until(
                    held.is_set, 30, f"the human's line never reached the model:\n{pane.text()}"
                )
                deadline = time.monotonic() + 3.0
                while time.monotonic() < deadline:
                    screen = pane.text()
                    assert "HELD-MAIL" not in screen, f"typed while the turn waited:\n{screen}"
                    time.sleep(0.1)
                release.set()
                pane.wait_for("HUMAN-ANSWER", timeout=30)
                _freeze(agent, 2.0)  # the agent draws nothing for a while as its answer streams
                deadline = time.monotonic() + 60
                while "HUMAN-END" not in (screen := pane.text()):
                    assert "HELD-MAIL" not in screen, f"typed while the answer streamed:\n{screen}"
                    assert time.monotonic() < deadline, f"the answer never ended:\n{screen}"
                    time.sleep(0.1)

                def mail_sent() -> bool:
                    return any(b"HELD-MAIL" in request.body for request in app.main)

                wait_until(mail_sent, 30, f"the message never reached the model:\n{pane.text()}")
                [mail] = [request.body for request in app.main if b"HELD-MAIL" in request.body]
                assert b"HUMAN-END" in mail, "the message was not a turn of its own"
                assert not any(
                    b"HELD-MAIL" in request.body and b"HUMAN-END" not in request.body
                    for request in app.main
                )
        finally:
            release.set()


def test_relays_notices_never_draw_into_geminis_screen_and_are_repeated_after_it_exits(
    tmp_path: Path, relay_home: Path
) -> None:
    """Gemini's answer holds `@nosuch:` (a namespace nothing handles): relay's notice goes
    to the terminal's title while Gemini owns the screen, not into it, and is written as
    a line once Gemini has exited."""
    _needs("gemini")
    app = gemini_cli.GeminiApp(["@nosuch:thing do it now"], final_text="Done.")
    with ModelServer(app) as server:
        project, env = _gemini(tmp_path, relay_home, server)
        argv = [str(RELAY), "run", "--name", "Bob", "--", str(gemini_cli.gemini_binary())]
        received = tmp_path / "pane-bytes"
        with _pane(env, project, argv, "Type your message") as pane:
            pane.pipe_to(received)
            time.sleep(1.0)
            _ask(pane, "Say it", lambda: bool(app.main))
            notice = b"\x1b]0;relay: the agent wrote @nosuch: but nothing handles"
            wait_until(
                lambda: notice in received.read_bytes(),
                30,
                f"no notice in the title ({len(app.main)} requests):\n{pane.text()}",
            )
            # Not drawn on the screen: only inside the title's sequence (OSC 0).
            drawn = re.sub(rb"\x1b\][^\x07]*\x07", b"", received.read_bytes())
            assert b"relay: the agent wrote" not in drawn
            assert "relay: the agent wrote" not in pane.text()
            pane.type("/quit")
            time.sleep(0.5)
            pane.enter()
            pane.wait_for(r"relay: the agent wrote @nosuch: but nothing handles", timeout=30)
            transcript = relay_home / "state" / "sessions" / "Bob.transcript.jsonl"
            assert "@nosuch" in transcript.read_text()
