"""A real nats-server for tests and benchmarks: a generated config with one account per
team, started on a free loopback port, stopped and restarted on the same port and store.

Not a test module. Tests import it as `from nats_server import ...` (pytest puts tests/
on sys.path, next to conftest.py); a benchmark can load it by path.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from relay.services.messaging.nats import agent_permissions

SEARCHED = ("/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server")
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0


def find_nats_server() -> str | None:
    """The nats-server binary: on PATH, or where Debian's package puts it; None if absent."""
    found = shutil.which("nats-server")
    if found:
        return found
    for candidate in SEARCHED:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def password(user: str) -> str:
    """The test password of `user`."""
    return f"{user}-secret"


def server_config(
    store_dir: Path,
    teams: dict[str, list[str]],
    *,
    unrestricted: dict[str, list[str]] | None = None,
) -> str:
    """A nats-server config (JSON, which the config format accepts): JetStream storing in
    `store_dir`; per team an account `TEAM_<team>` with JetStream, whose users (agents)
    each get `agent_permissions`; `unrestricted` users per team have no permission limits."""
    accounts: dict[str, object] = {}
    for team in sorted(set(teams) | set(unrestricted or {})):
        users: list[dict[str, object]] = []
        for name in teams.get(team, []):
            permissions = agent_permissions(team, name)
            users.append(
                {
                    "user": name,
                    "password": password(name),
                    "permissions": {
                        "publish": {"allow": permissions.publish},
                        "subscribe": {"allow": permissions.subscribe},
                    },
                }
            )
        for name in (unrestricted or {}).get(team, []):
            users.append({"user": name, "password": password(name)})
        accounts[f"TEAM_{team}"] = {"jetstream": "enabled", "users": users}
    config = {
        "server_name": "relay-test",
        "jetstream": {
            "store_dir": str(store_dir),
            "max_memory_store": 64 * 1024 * 1024,
            "max_file_store": 256 * 1024 * 1024,
        },
        "accounts": accounts,
    }
    return json.dumps(config, indent=2)


class NatsServer:
    """One nats-server process on 127.0.0.1, restartable on the same port and store."""

    def __init__(self, binary: str, workdir: Path, config_text: str) -> None:
        self.binary = binary
        self.workdir = workdir
        self.config_file = workdir / "nats-server.conf"
        self.ports_dir = workdir / "ports"
        self.log_file = workdir / "nats-server.log"
        self.config_file.write_text(config_text)
        self.ports_dir.mkdir(exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        """The client URL (no credentials)."""
        if self.port is None:
            raise RuntimeError("nats-server is not started")
        return f"nats://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log (for failure messages)."""
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self) -> None:
        """Start the server: on the port it had before (a restart), else a free one."""
        if self.process is not None:
            raise RuntimeError("nats-server is already running")
        port = str(self.port) if self.port is not None else "-1"
        for stale in self.ports_dir.iterdir():
            stale.unlink()
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "-c",
                    str(self.config_file),
                    "-a",
                    "127.0.0.1",
                    "-p",
                    port,
                    "--ports_file_dir",
                    str(self.ports_dir),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                raise RuntimeError(f"nats-server exited with {code}:\n{self.log_tail()}")
            for ports_file in self.ports_dir.glob("*.ports"):
                try:
                    ports = json.loads(ports_file.read_text())
                except (OSError, ValueError):
                    continue  # being written
                url = ports["nats"][0]
                self.port = int(url.rsplit(":", 1)[1])
                return
            time.sleep(0.02)
        self.stop(signal.SIGKILL)
        raise RuntimeError(
            f"nats-server wrote no ports file in {START_TIMEOUT} s:\n{self.log_tail()}"
        )

    def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        """Stop the server (SIGTERM: a clean shutdown), SIGKILL after a bounded wait."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(how)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT)

    def restart(self) -> None:
        """Stop cleanly and start again on the same port with the same store."""
        self.stop()
        self.start()
