"""The hosts' npm packages, installed once into a cache directory outside the checkout.

`python tests/hostkit/npm.py` installs them all (what .ci/run does before the suite);
tests call `host_binary(name)`, which installs on first use and returns None, with the
reason in `unavailable(name)`, when npm or the registry cannot be reached.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

HOSTS: dict[str, tuple[str, str, str]] = {
    # name: (npm package, version, executable under node_modules/.bin)
    "claude": ("@anthropic-ai/claude-code", "2.1.332", "claude"),
    "gemini": ("@google/gemini-cli", "0.61.0", "gemini"),
    "codex": ("@openai/codex", "0.171.0", "codex"),
    # Not a host: the `trail` CLI that the trajectory example hooks drive.
    "trail": ("agent-trajectories", "0.6.1", "trail"),
    # Not a host: Node.js 22 from npm, for Gemini CLI (node_runtime), whose 70 MB bundle
    # it starts a third faster with its on-disk compile cache (Node 22.1 and later).
    "node": ("node", "22.23.3", "node"),
}
INSTALL_TIMEOUT = 600.0
_reasons: dict[str, str] = {}


def cache_dir() -> Path:
    """Where the hosts are installed: $RELAY_HOSTS_CACHE, else ~/.cache/agent-relay-ci/hosts."""
    configured = os.environ.get("RELAY_HOSTS_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-relay-ci" / "hosts"


def host_binary(name: str) -> Path | None:
    """The host's executable, installed from npm on first use; None when it cannot be."""
    package, version, executable = HOSTS[name]
    folder = cache_dir() / f"{name}-{version}"
    binary = folder / "node_modules" / ".bin" / executable
    if binary.exists():
        return binary
    if name in _reasons:
        return None
    npm = shutil.which("npm")
    if npm is None:
        _reasons[name] = "npm is not installed"
        return None
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes must not install at once
        if binary.exists():
            return binary
        try:
            completed = subprocess.run(
                [
                    npm,
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    "--prefix",
                    str(folder),
                    f"{package}@{version}",
                ],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            _reasons[name] = f"npm install {package}@{version} timed out"
            return None
    if completed.returncode != 0 or not binary.exists():
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-3:]
        _reasons[name] = f"npm install {package}@{version} failed: " + " | ".join(tail)
        return None
    return binary


def node_runtime(env: dict[str, str]) -> dict[str, str]:
    """`env` with npm's Node.js 22 first on PATH and its compile cache kept beside the
    hosts (V8's compiled code of a script, by its contents): a Node CLI such as Gemini CLI
    then compiles its bundle once, not at every start. Unchanged (the system's node, no
    cache) when that Node cannot be installed."""
    node = host_binary("node")
    if node is None:
        return env
    folder = str(node.parent)
    path = env.get("PATH", os.defpath)
    return {
        **env,
        "PATH": f"{folder}{os.pathsep}{path}" if path else folder,
        "NODE_COMPILE_CACHE": str(cache_dir() / "node-compile-cache"),
    }


def unavailable(name: str) -> str:
    """Why `host_binary(name)` returned None."""
    return _reasons.get(name, f"{name} is not installed")


if __name__ == "__main__":
    failed = False
    for host in sys.argv[1:] or list(HOSTS):
        path = host_binary(host)
        print(f"{host}: {path}" if path else f"{host}: unavailable: {unavailable(host)}")
        failed = failed or path is None
    sys.exit(1 if failed else 0)
