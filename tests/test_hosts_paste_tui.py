# ruff: noqa: RUF001 (Claude Code draws its prompt as U+276F)
"""What the real host TUIs (npm Claude Code, Gemini CLI, Codex) write when a tool's output
holds bracketed paste switches (spec/session.md, "Submitted, not only typed"): relay takes
a paste mode sequence that the agent's own process group writes for the agent's, and the
hosts run their tools with pipes and draw the output themselves, so that holds only while
no host passes a tool's escape sequences on. Each host runs one shell command printing
`ESC[?2004l`, `ESC[?2004h`, `ESC c` and an OSC title in a 100x40 tmux pane, its bytes
taken as written (`pipe-pane`): it draws the command's text, and none of the sequences.
Skipped, with the reason, when npm cannot install the host or tmux is missing."""

from __future__ import annotations

import re
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hostkit import claude_code, codex, gemini_cli
from hostkit.model_server import App, ModelServer
from hostkit.npm import host_binary, unavailable
from test_run_tty import Pane, wait_until

if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# The output comes a moment after the command starts: on a loaded machine Gemini CLI once
# drew the finished box of a command that printed at once with nothing in it.
PROBE = (
    "sleep 1; "
    r"printf 'probe-start\033[?2004loff\033[?2004hon\033cafter-reset\033]0;title\007probe-end\n'"
)
SHOWN = "after-resetprobe-end"  # the output's last words as drawn (not the command's)
ANSWER = "All shown."
PASTE_MODE = re.compile(rb"\x1b\[\?[0-9;]*2004[0-9;]*[hl]|\x1bc")


@dataclass(frozen=True)
class Host:
    """How to run one host's TUI against the scripted model in `root`."""

    name: str
    ready: str
    start: Callable[[Path, Path, str], tuple[dict[str, str], list[str]]]
    """(root, project, model url) -> the environment and argv of the host's TUI."""
    app: Callable[[], App]
    show_output: tuple[str, ...] = ()
    """Keys that make the host draw a tool's output (Claude Code folds it away)."""


def _claude(root: Path, project: Path, url: str) -> tuple[dict[str, str], list[str]]:
    home = root / "home"
    claude_code.prepare_home(home, project)
    env = claude_code.host_env(home, url, {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})
    return env, [str(claude_code.claude_binary()), "--allowedTools", "Bash"]


def _gemini(root: Path, project: Path, url: str) -> tuple[dict[str, str], list[str]]:
    home = root / "home"
    gemini_cli.prepare_home(home)
    env = gemini_cli.host_env(home, url, {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})
    return env, [str(gemini_cli.gemini_binary()), "--yolo"]


def _codex(root: Path, project: Path, url: str) -> tuple[dict[str, str], list[str]]:
    home, codex_home = root / "home", root / "codex-home"
    home.mkdir(parents=True, exist_ok=True)
    codex.prepare_tui(codex_home, url)
    extra = {"HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env = codex.host_env(codex_home, url, extra)
    quiet = [arg for override in codex.OFFLINE_OVERRIDES for arg in ("-c", override)]
    return env, [str(codex.codex_binary()), *quiet]


HOSTS = {
    "claude": Host(
        "claude",
        "❯",
        _claude,
        lambda: claude_code.MessagesApp([claude_code.bash(PROBE), ANSWER], final_text="Noted."),
        show_output=("C-o",),
    ),
    "gemini": Host(
        "gemini",
        gemini_cli.TUI_READY,
        _gemini,
        lambda: gemini_cli.GeminiApp([gemini_cli.shell(PROBE), ANSWER], final_text="Done."),
    ),
    "codex": Host(
        "codex",
        r"Ask Codex to do anything(?s:.*)default · /",
        _codex,
        lambda: codex.ResponsesApp([codex.shell(PROBE), ANSWER]),
    ),
}


@pytest.mark.parametrize("name", list(HOSTS))
def test_a_tools_paste_mode_switches_never_reach_the_terminal(tmp_path: Path, name: str) -> None:
    if host_binary(name) is None:
        pytest.skip(f"{name} unavailable: {unavailable(name)}")
    host = HOSTS[name]
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    written = tmp_path / "written.bin"
    app = host.app()
    with ModelServer(app) as server:
        env, argv = host.start(tmp_path, project, server.url)
        env.update(TERM="xterm-256color")
        for variable in ("TMUX", "ENV"):
            env.pop(variable, None)
        pane = Pane(cols=100, rows=40)
        try:
            pane.start(env)
            pane.tmux("pipe-pane", "-o", "-t", pane.target, f"cat >> {shlex.quote(str(written))}")
            pane.run(f"cd {shlex.quote(str(project))} && {shlex.join(argv)}")
            pane.wait_for(host.ready, timeout=90)
            for _ in range(5):  # Codex drops keys while it starts up
                pane.type("Run it")
                try:
                    pane.wait_for("Run it", timeout=5)
                    break
                except AssertionError:
                    continue
            wait_until(written.exists, 10, "tmux pipes nothing")
            before = written.stat().st_size  # the host's start-up, its own modes in it
            pane.enter()
            pane.wait_for(re.escape(ANSWER), timeout=120)
            for key in host.show_output:
                pane.tmux("send-keys", "-t", pane.target, key)
            pane.wait_for(SHOWN, timeout=30)
            time.sleep(1.0)  # what the host draws next reaches the pipe
        finally:
            pane.kill()
    after_start = written.read_bytes()[before:]
    assert PASTE_MODE.findall(after_start) == [], after_start[-2000:]
