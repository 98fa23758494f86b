"""relay's own state under hostile conditions (DESIGN §4; issue 12): private whatever the
umask, and a full disk that never ends a session or damages what is stored."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from relay.session import sessions
from relay.session.transcript import Transcript

RELAY = str(Path(sys.executable).parent / "relay")


def _run(
    project: Path, relay_home: Path, script: str, *, umask: int | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    argv = [RELAY, "run", "--headless", "--name", "Keeper", "--cwd", str(project), "--"]
    return subprocess.run(
        [*argv, "sh", "-c", script],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    return root


def test_state_is_private_whatever_the_umask(project: Path, relay_home: Path) -> None:
    """With umask 0 a session's state (session record, transcript, memory, mailbox, hook
    log) is 0700 folders and 0600 files, and a state folder an older relay left 0755 is
    tightened."""
    state = relay_home / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    (relay_home / "settings.json").write_text(
        json.dumps({"hooks": {"SessionStart": [{"hooks": [{"command": "true"}]}]}})
    )
    done = _run(project, relay_home, 'echo "@memory:save kept private #p"; sleep 1', umask=0)
    assert done.returncode == 0, done.stderr
    assert (state / "memory.db").exists() and (state / "telemetry.db").exists()
    loose = [
        f"{oct(info.st_mode & 0o777)} {path}"
        for path in [state, *state.rglob("*")]
        if not path.is_socket()
        for info in [path.lstat()]
        if info.st_mode & 0o777 != (0o700 if stat.S_ISDIR(info.st_mode) else 0o600)
    ]
    assert loose == []


# -- a full disk ---------------------------------------------------------------------------

NOISE = (
    "i=0; while [ $i -lt 3000 ]; do echo line $i of output that fills the disk; i=$((i+1)); done"
)


def _on_small_disk(argv: list[str], mount: Path, size: str) -> list[str]:
    """`argv` run in a mount namespace of its own where `mount` is a tmpfs of `size`."""
    mounting = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    return ["unshare", "-rm", "sh", "-c", mounting, "sh", size, str(mount), *argv]


def _can_mount(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    argv = _on_small_disk(["true"], probe, "64k")
    return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0


def test_a_full_disk_never_ends_the_session(project: Path, tmp_path: Path) -> None:
    """RELAY_HOME on a 512 KiB tmpfs; the agent prints more than fits. The session runs to
    the agent's end with its exit code, says once that the transcript stopped (and the
    hook log, once, if it fills too), and every line the transcript holds is whole."""
    if not _can_mount(tmp_path):
        pytest.skip("cannot mount a tmpfs here (no unshare -rm); the injected test covers it")
    home = tmp_path / "small"
    home.mkdir()
    script = f'echo "@memory:save before the disk filled #d"; {NOISE}; echo still here'
    argv = [RELAY, "run", "--headless", "--name", "Full", "--cwd", str(project), "--"]
    # The tmpfs goes with its namespace: the agent shows the transcript as it ends.
    transcript = home / "state" / "sessions" / "Full.transcript.jsonl"
    # (after a pause: the transcript is written a few times a second)
    argv += ["sh", "-c", f"{script}; sleep 1; echo TRANSCRIPT; cat {transcript}; exit 5"]
    env = {**os.environ, "RELAY_HOME": str(home)}
    done = subprocess.run(
        _on_small_disk(argv, home, "512k"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 5, err[-3000:]
    assert "still here" in out and "Traceback" not in err
    # Each store says so once (the hook log may fill up too), and then is quiet.
    warnings = [line for line in err.splitlines() if "cannot be written" in line]
    stores = [line.split(" cannot be written")[0] for line in warnings]
    assert len(stores) == len(set(stores)), warnings
    [transcript] = [line for line in warnings if "relay: the transcript" in line]
    assert "No space left on device" in transcript
    shown = out.split("TRANSCRIPT\n", 1)[1].splitlines()
    written = [line for line in shown if line.startswith('{"time"')]
    assert written and all(json.loads(line)["kind"] for line in written)


def test_a_transcript_write_that_fails_stops_once_and_leaves_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, with the failure injected: the third batch finds the disk full after
    writing half of its line; the half is cut off again, and the user is told once."""
    told: list[str] = []
    transcript = Transcript(tmp_path / "t.jsonl", on_problem=told.append)
    real_write = os.write
    calls = 0

    def filling(fd: int, data: bytes) -> int:
        nonlocal calls
        calls += 1
        if calls == 3:
            return real_write(fd, data[: len(data) // 2])
        if calls > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    with monkeypatch.context() as patched:
        patched.setattr(os, "write", filling)
        for index in range(6):
            transcript.record("output", f"line {index}")
            transcript.flush()  # one batch per line
        transcript.close()
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert [json.loads(line)["text"] for line in lines] == ["line 0", "line 1"]
    assert len(told) == 1 and "No space left on device" in told[0]
    assert stat.S_IMODE((tmp_path / "t.jsonl").stat().st_mode) == 0o600


def test_a_session_record_that_cannot_be_written_leaves_nothing_behind(
    relay_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = sessions.SessionRecord(
        name="Full", pid=os.getpid(), started_ticks=0, command=["x"], cwd="/", started="now"
    )
    with monkeypatch.context() as patched, pytest.raises(OSError):
        patched.setattr(os, "replace", _full_disk)
        sessions.register(record)
    assert list(sessions.sessions_dir().iterdir()) == []


def _full_disk(*args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
