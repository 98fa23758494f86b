"""One surface over the three real hosts, so that a real-host case is written once and runs
against each (STYLE §15): `driver(name, root)` gives a project with a throwaway home for
that host, `install()` puts relay in as its hook layer (`relay install <host>`), and
`run_shell(command)` has the scripted model make one shell call and returns what the model
read back as its result.

`guarded=True` runs the host with its own permission check on: only `echo …` may run
without asking, and headless, whatever the host would ask about is refused. That is
Claude Code in `--permission-mode default` with the rule `Bash(echo:*)`, Gemini CLI in
`--approval-mode default` with a policy that allows `echo`, and Codex with a read-only
sandbox (Codex's own check of a command is its sandbox: a command that writes fails).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hostkit import claude_code, codex, gemini_cli
from hostkit.npm import host_binary

HOST_NAMES = ("claude", "gemini", "codex")
GEMINI_ECHO_POLICY = """[[rule]]
toolName = "run_shell_command"
commandPrefix = "echo"
decision = "allow"
priority = 100
"""


@dataclass
class Driver:
    """A project in `root` and a throwaway home for one host, with relay installable."""

    name: str
    """relay's name for the host (`relay install <name>`)."""
    root: Path

    def __post_init__(self) -> None:
        self.project = self.root / "project"
        (self.project / ".git").mkdir(parents=True, exist_ok=True)
        self.home = self.root / "home"
        self.home.mkdir(exist_ok=True)
        binary = host_binary(self.name)
        assert binary is not None, f"{self.name} is not installed"
        self.env = dict(os.environ)
        self.env.update(HOME=str(self.home), PATH=f"{binary.parent}{os.pathsep}{self.env['PATH']}")
        self.env.pop("CLAUDE_CONFIG_DIR", None)
        if self.name == "claude":
            claude_code.prepare_home(self.home, self.project)
        elif self.name == "gemini":
            gemini_cli.prepare_home(self.home)
        else:
            self.env["CODEX_HOME"] = str(self.codex_home)
            codex.write_provider_config(self.codex_home, "http://127.0.0.1:9")  # per run

    @property
    def codex_home(self) -> Path:
        return self.home / ".codex"

    def install(self) -> None:
        """`relay install <host>` (Codex: with its trust recorded)."""
        args = ["--trust"] if self.name == "codex" else []
        done = subprocess.run(
            [sys.executable, "-m", "relay", "install", self.name, *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    def run_shell(self, command: str, *, guarded: bool = False) -> str:
        """One shell call of `command`; the text of its result as the model got it."""
        if self.name == "claude":
            # Pinned: Claude Code 2.1.3xx may default to "auto", a classifier on a server.
            claude = claude_code.run_claude(
                self.project,
                "run it",
                [claude_code.bash(command)],
                home=self.home,
                allowed_tools=["Bash(echo:*)"] if guarded else ["Bash"],
                extra_args=["--permission-mode", "default"],
            )
            assert claude.main_requests, claude.describe()
            return claude.tool_results().get("toolu_1_0", "")
        if self.name == "gemini":
            extra: list[str] = []
            if guarded:
                policy = self.root / "echo-only.toml"
                policy.write_text(GEMINI_ECHO_POLICY)
                extra = ["--policy", str(policy)]
            gemini = gemini_cli.run_gemini(
                self.project,
                "run it",
                [gemini_cli.shell(command)],
                home=self.home,
                approval_mode="default" if guarded else "yolo",
                extra_args=extra,
            )
            responses = gemini.function_responses()
            assert responses, gemini.describe()
            return responses[0]
        run = codex.run_codex(
            self.project,
            "run it",
            [codex.shell(command)],
            codex_home=self.codex_home,
            env={"HOME": str(self.home)},
            sandbox="read-only" if guarded else "workspace-write",
        )
        outputs = list(run.function_outputs().values())
        assert outputs, run.describe()
        return outputs[0]


def driver(name: str, root: Path) -> Driver:
    """The driver of host `name` (one of HOST_NAMES) in the folder `root`."""
    return Driver(name, root)
