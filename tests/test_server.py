"""`relay serve` and the hook clients: the same answers as in-process, byte for byte; a host
never waits on a dead, hung or foreign server (DESIGN §11, STYLE §16)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from relay.cli.main import cli
from relay.config.filecache import RACY_SECONDS, FileCache, identity_of
from relay.config.paths import state_file
from relay.config.trust import TrustStore
from relay.hosts.call import answer_call
from relay.native import find_compiler
from relay.protocol.dialects import known_event_names
from relay.server import client
from relay.server.build import build_native_client, client_info, write_python_client
from relay.server.client import Call, Reply

DIALECTS = ("relay", "claude", "gemini", "codex")
STARTUP = 20.0  # seconds a server may take to answer its first status on a loaded machine
LOADED = 30.0
"""How long a test gives the server to accept a call it must answer: a hang guard, not the
hook client's 2 s (past which a host's call runs in-process; a loaded machine took longer)."""


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


def hook(output: object, code: int = 0, stderr: str = "", **fields: Any) -> dict[str, Any]:
    """A hook that reads its event, writes `output` and `stderr`, exits `code`: a shell, not
    a Python, so the hundreds of calls the comparisons make cost milliseconds each."""
    text = output if isinstance(output, str) else json.dumps(output)
    program = (
        f"cat >/dev/null; printf %s {shlex.quote(text)}; printf %s {shlex.quote(stderr)} >&2;"
        f" exit {code}"
    )
    return {"command": "/bin/sh", "args": ["-c", program], **fields}


def rich_settings(home: Path, project: Path) -> None:
    """Hooks on every event relay knows (and one it does not), with varied answers."""
    every = {"hooks": [hook({"systemMessage": "seen", "inject": "ctx"}, name="seen")]}
    events: dict[str, Any] = {name: [every] for name in known_event_names()}
    events["BrandNewEvent"] = [{"hooks": [hook({"hookSpecificOutput": {"novel": 1}})]}]
    events["PreToolUse"] = [
        every,
        {
            "matcher": "Bash",
            "hooks": [
                hook({"hookSpecificOutput": {"permissionDecision": "defer"}}, name="defer"),
                hook("", 2, "no rm", name="guard"),
                hook("oops", 1, "broken hook", name="broken"),
            ],
        },
        {"matcher": "Write", "hooks": [hook({"hookSpecificOutput": {"tool_input": {"x": 1}}})]},
    ]
    write(home / "settings.json", {"hooks": events})
    write(
        project / ".relay" / "settings.json",
        {"hooks": {"PreToolUse": [{"hooks": [{"name": "untrusted", "command": "true"}]}]}},
    )


def payloads(project: Path) -> list[bytes]:
    base = {"session_id": "s", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": str(project)}
    return [
        json.dumps({**base, "tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}).encode(),
        json.dumps({**base, "tool_name": "Write", "tool_input": {"path": "a"}}).encode(),
        json.dumps(base).encode(),
        b"{not json",
    ]


def normalized(reply: Reply | None) -> tuple[int, Any, bytes] | None:
    """A reply with durations zeroed (the only thing two runs of one call may differ in)."""
    if reply is None:
        return None
    try:
        value: Any = json.loads(reply.stdout)
    except ValueError:
        return reply.exit_code, reply.stdout, reply.stderr

    def zero(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: 0 if k == "duration_ms" else zero(v) for k, v in node.items()}
        if isinstance(node, list):
            return [zero(item) for item in node]
        return node

    return reply.exit_code, zero(value), reply.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    return root


def wait_for_status(path: str, timeout: float = STARTUP) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = client.control(path, "status")
        if answer is not None:
            status: dict[str, Any] = json.loads(answer)
            return status
        time.sleep(0.05)
    raise AssertionError(f"no server answered at {path} within {timeout}s")


def stop_server(path: str) -> None:
    if client.control(path, "stop") is None:
        return
    deadline = time.monotonic() + 10
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture
def server(relay_home: Path) -> Iterator[str]:
    """A `relay serve` for this test's RELAY_HOME, in the foreground of its own process."""
    path = client.socket_path()
    process = subprocess.Popen(
        [sys.executable, "-I", "-m", "relay", "serve", "--socket", path, "--idle-seconds", "300"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_status(path)
        yield path
    finally:
        stop_server(path)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def call_for(project: Path, dialect: str, event: str, stdin: bytes) -> Call:
    return Call(["--dialect", dialect, event], str(project), dict(os.environ), stdin)


# ---- the same answers --------------------------------------------------------------------


def test_server_and_in_process_give_the_same_answers(
    server: str, project: Path, relay_home: Path
) -> None:
    rich_settings(relay_home, project)
    compared = expected = 0
    for dialect in DIALECTS:
        for event in [*known_event_names(), "BrandNewEvent"]:
            # The tool payloads (Bash, Write) only where a tool matcher can see them: on
            # other events they are the plain event with two more fields.
            chosen = payloads(project) if "Tool" in event else payloads(project)[2:]
            expected += len(chosen)
            for stdin in chosen:
                call = call_for(project, dialect, event, stdin)
                served = client.request(server, call, ack_timeout=LOADED)
                assert served is not None, (dialect, event)
                assert normalized(served) == normalized(answer_call(call)), (dialect, event, stdin)
                compared += 1
    assert compared == expected > len(DIALECTS) * (len(known_event_names()) + 1) * 2
    assert wait_for_status(server)["calls"] == compared


def test_a_call_looks_at_no_script_of_the_project_hooks_it_does_not_plan(
    server: str, project: Path, relay_home: Path, tmp_path: Path
) -> None:
    """A served call checks the trust of the project hooks it would run and of no other:
    a PreToolUse call stats nothing of 40 project hooks on Stop (it once checked every
    project hook registered on each call, to name those that cannot be trusted: 160 ms a
    call with 300 of them)."""
    strace = shutil.which("strace")
    if strace is None or subprocess.run([strace, "-o", os.devnull, "true"], check=False).returncode:
        pytest.skip("strace cannot run here")
    write(
        relay_home / "settings.json", {"hooks": {"PreToolUse": [{"hooks": [{"command": "true"}]}]}}
    )
    stop = []
    for index in range(40):
        script = write(project / "stop-hooks" / f"h{index}.sh", "#!/bin/sh\necho '{}'\n")
        script.chmod(0o755)
        stop.append({"name": f"stop{index}", "command": f"./stop-hooks/h{index}.sh"})
    write(project / ".relay" / "settings.json", {"hooks": {"Stop": [{"hooks": stop}]}})
    event = {"session_id": "s", "cwd": str(project), "tool_name": "Bash", "tool_input": {}}
    call = call_for(project, "claude", "PreToolUse", json.dumps(event).encode())
    assert (
        client.request(server, call, ack_timeout=LOADED) is not None
    )  # the settings read, the registry built
    log = tmp_path / "strace.log"
    pid = str(wait_for_status(server)["pid"])
    tracer = subprocess.Popen(
        [strace, "-f", "-qq", "-e", "trace=%file,recvfrom", "-o", str(log), "-p", pid],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while "recvfrom" not in (log.read_text() if log.exists() else ""):  # it is attached
            assert time.monotonic() < deadline, "strace did not attach"
            client.control(server, "status")
            time.sleep(0.05)
        start = len(log.read_text())
        served = client.request(server, call, ack_timeout=LOADED)
    finally:
        tracer.terminate()
        tracer.wait(timeout=60)
    assert served is not None and served.exit_code == 0
    traced = log.read_text()[start:]
    assert str(relay_home / "settings.json") in traced  # the call was traced
    assert "stop-hooks" not in traced


def test_a_client_of_the_first_protocol_is_answered_as_one_of_the_second(
    server: str, project: Path, relay_home: Path
) -> None:
    """A native client built before the environment went as one block (RELAY-CALL 1, a
    length per variable: until `relay install` builds it again) gets the same answer."""
    rich_settings(relay_home, project)
    call = call_for(project, "claude", "PreToolUse", payloads(project)[0])

    def string(data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + data

    old = b"".join(
        [
            b"RELAY-CALL 1\n",
            string(client.identity().encode()),
            len(call.argv).to_bytes(4, "big"),
            *(string(arg.encode()) for arg in call.argv),
            string(call.cwd.encode()),
            len(call.env).to_bytes(4, "big"),
            *(string(f"{key}={value}".encode()) for key, value in call.env.items()),
            string(call.stdin),
        ]
    )
    assert client.encode_call(call) != old
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(server)
        sock.sendall(old)
        sock.shutdown(socket.SHUT_WR)
        frames = b""
        while chunk := sock.recv(1 << 16):
            frames += chunk
    assert frames[:1] == b"A"
    result = frames[9:]
    assert result[:1] == b"R"
    code = int.from_bytes(result[5:9], "big", signed=True)
    out_len = int.from_bytes(result[9:13], "big")
    stdout = result[13 : 13 + out_len]
    stderr = result[17 + out_len :]
    assert normalized(Reply(code, stdout, stderr)) == normalized(
        client.request(server, call, ack_timeout=LOADED)
    )


def test_the_hook_log_records_each_served_call_once_its_answer_is_out(
    server: str, project: Path, relay_home: Path
) -> None:
    """relay serve makes the hook log's record once the answer has gone out, so that the
    host does not wait for it: the record is the answer the host got (the untrusted-hook
    notice rendered into it included), and a call whose client hung up before its answer
    is recorded all the same."""
    from relay.engine.hooklog import HookLog
    from relay.engine.telemetry import log_path

    rich_settings(relay_home, project)  # also an untrusted project hook on PreToolUse
    call = call_for(project, "claude", "PreToolUse", payloads(project)[0])
    reply = client.request(server, call, ack_timeout=LOADED)
    assert reply is not None
    answer = json.loads(reply.stdout)
    assert "not trusted" in answer["systemMessage"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:  # gone before the answer
        sock.connect(server)
        sock.sendall(client.encode_call(call_for(project, "relay", "SessionStart", b"{}")))
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b"A"
    deadline = time.monotonic() + 30
    events: list[Any] = []
    while len(events) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
        with contextlib.suppress(Exception):  # the log may not exist yet
            events = HookLog(log_path()).events(limit=10)
    assert sorted(event.event for event in events) == ["BeforeTool", "SessionStart"]
    logged = next(event for event in events if event.event == "BeforeTool")
    assert logged.result is not None and "not trusted" in logged.result["systemMessage"]


def test_the_server_notices_settings_and_scripts_that_change(
    server: str, project: Path, relay_home: Path
) -> None:
    write(relay_home / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hook("one")]}]}})
    call = call_for(project, "relay", "SessionStart", b"{}")
    first = client.request(server, call, ack_timeout=LOADED)
    assert first is not None and json.loads(first.stdout)["inject"] == "one"
    write(relay_home / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hook("two")]}]}})
    second = client.request(server, call, ack_timeout=LOADED)
    assert second is not None and json.loads(second.stdout)["inject"] == "two"


def test_the_server_sees_a_project_settings_file_and_a_nearer_root_made_between_calls(
    server: str, project: Path, relay_home: Path
) -> None:
    # The server keeps the paths it builds per folder; which files and roots exist it
    # must look at on every call.
    folder = project / "sub"
    folder.mkdir()
    call = call_for(folder, "relay", "SessionStart", b"{}")
    replies = [client.request(server, call, ack_timeout=LOADED)]
    write(
        project / ".relay" / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hook("p")]}]}}
    )
    replies.append(client.request(server, call, ack_timeout=LOADED))
    write(
        folder / ".relay" / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hook("q")]}]}}
    )
    replies.append(client.request(server, call, ack_timeout=LOADED))
    first, second, third = replies
    assert first is not None and b"untrusted" not in first.stderr
    assert second is not None and f"in {project} to allow".encode() in second.stderr
    assert third is not None and f"in {folder} to allow".encode() in third.stderr
    assert [normalized(reply) for reply in replies[2:]] == [normalized(answer_call(call))]


def test_a_served_hook_gets_each_calls_own_environment_and_project(
    server: str, project: Path, relay_home: Path, tmp_path: Path
) -> None:
    """What the server keeps between calls (the environments it decoded, each hook's launch)
    never reaches another call: the same environment sent again, one variable changed, and
    the same hook run for another project each get their own."""
    program = 'cat >/dev/null; printf \'{"inject": "%s %s"}\' "$PROBE" "$RELAY_PROJECT_DIR/x"'
    write(
        relay_home / "settings.json",
        {"hooks": {"SessionStart": [{"hooks": [{"command": program}]}]}},
    )
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)

    def served(folder: Path, probe: str) -> str:
        call = call_for(folder, "relay", "SessionStart", b"{}")
        call.env["PROBE"] = probe
        reply = client.request(server, call, ack_timeout=LOADED)
        assert reply is not None and reply.exit_code == 0, reply
        inject: str = json.loads(reply.stdout)["inject"]
        return inject

    assert served(project, "a") == f"a {project}/x"
    assert served(project, "a") == f"a {project}/x"
    assert served(project, "b") == f"b {project}/x"
    assert served(other, "b") == f"b {other}/x"
    assert served(project, "a") == f"a {project}/x"


def test_the_native_client_sends_its_environment_as_one_block_with_its_call_id_last(
    project: Path, relay_home: Path, native: Path
) -> None:
    """The native client's calls come as RELAY-CALL 2 (its environment one block), this
    call's RELAY_CALL_ID last or in the place of one it inherited: the server decodes the
    rest of a host's environment once, and each call gets its own id (its hooks are found
    by it)."""
    path = client.socket_path()
    assert client.make_private_dir(os.path.dirname(path))
    requests: list[bytes] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(8)
        listener.settimeout(60)

        def answer_one() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.settimeout(30)
                data = b""
                while chunk := connection.recv(1 << 16):
                    data += chunk
                requests.append(data)
                connection.sendall(
                    client.accepted_frame(1000) + client.result_frame(Reply(0, b"", b""))
                )

        inherited = {**os.environ, client.CALL_ID_VARIABLE: "inherited", "ZZ_LAST": "z"}
        for env in (dict(os.environ), dict(os.environ), inherited):
            serving = threading.Thread(target=answer_one)
            serving.start()
            done = subprocess.run(
                [str(native), "--dialect", "claude", "Stop"],
                input=b"{}",
                env=env,
                cwd=project,
                capture_output=True,
                timeout=60,
                check=False,
            )
            serving.join(timeout=60)
            assert done.returncode == 0, done.stderr
    calls = []
    for request in requests:
        assert request.startswith(client.MAGIC)
        read = client.read_request(io.BytesIO(request).read)
        assert not isinstance(read, str)
        calls.append(read[1])
    ids = [call.env.pop(client.CALL_ID_VARIABLE) for call in calls]
    assert len(set(ids)) == 3 and "inherited" not in ids
    assert calls[0].env == calls[1].env == dict(os.environ)
    assert list(calls[2].env) == [*os.environ, "ZZ_LAST"]
    assert requests[2].index(b"RELAY_CALL_ID=") < requests[2].index(b"ZZ_LAST=z")
    # The rest of the block is decoded once: the second call's is the first's, kept.
    client._ENVIRONMENTS.clear()
    for request in requests[:2]:
        client.read_request(io.BytesIO(request).read)
    assert len(client._ENVIRONMENTS) == 1


def test_an_environment_read_again_is_a_copy_of_its_own() -> None:
    """A request's environment decoded before is not decoded again, but each call gets a
    dict of its own: what one call's handling changes in it, the next does not see."""
    request = client.encode_call(Call(["Stop"], "/", {"A": "1", "B": "x=y"}, b"{}"))

    def read() -> Call:
        left = [request]

        def take(size: int) -> bytes:
            chunk, left[0] = left[0][:size], left[0][size:]
            return chunk

        found = client.read_request(take)
        assert not isinstance(found, str)
        return found[1]

    first = read()
    assert first.env == {"A": "1", "B": "x=y"}
    first.env["A"] = "changed"
    del first.env["B"]
    second = read()
    assert second.env == {"A": "1", "B": "x=y"} and second.env is not first.env


def test_the_server_answers_each_client_for_its_own_relay_home(
    server: str, project: Path, tmp_path: Path
) -> None:
    # One server, clients whose RELAY_HOME differs (and changes back): each call reads the
    # settings and trust of its own home, never those of the call before it.
    calls: list[Call] = []
    for name in ("a", "b"):
        home = tmp_path / f"home-{name}"
        write(home / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hook(name)]}]}})
        env = {**os.environ, "RELAY_HOME": str(home)}
        calls.append(Call(["--dialect", "relay", "SessionStart"], str(project), env, b"{}"))
    for call, expected in list(zip(calls, "ab", strict=True)) * 2:
        reply = client.request(server, call, ack_timeout=LOADED)
        assert reply is not None and json.loads(reply.stdout)["inject"] == expected
        assert normalized(reply) == normalized(answer_call(call))


def test_many_calls_at_once(server: str, project: Path, relay_home: Path) -> None:
    write(relay_home / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hook("hi")]}]}})
    call = call_for(project, "claude", "SessionStart", b"{}")
    expected = answer_call(call)
    replies: list[Reply | None] = []

    def one() -> None:
        replies.append(client.request(server, call, ack_timeout=30))

    threads = [threading.Thread(target=one) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert replies == [expected] * 16


# ---- the clients -------------------------------------------------------------------------


@pytest.fixture
def native(tmp_path: Path) -> Path:
    if find_compiler() is None:
        pytest.skip("no C compiler here: the Python client is the fallback (tested below)")
    return build_native_client(tmp_path / "bin")


def run_client(command: list[str], project: Path, stdin: bytes) -> Reply:
    done = subprocess.run(
        command, input=stdin, capture_output=True, cwd=project, timeout=60, check=False
    )
    return Reply(done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("kind", ["native", "python"])
def test_clients_answer_as_in_process_with_and_without_a_server(
    kind: str, project: Path, relay_home: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    rich_settings(relay_home, project)
    if kind == "native":
        command = [str(request.getfixturevalue("native"))]
    else:
        command = [sys.executable, "-I", "-S", str(write_python_client(tmp_path / "bin"))]
    path = client.socket_path()
    cases = [("claude", "PreToolUse"), ("relay", "SessionStart"), ("gemini", "BeforeTool")]
    try:
        # No server yet: the client runs the call itself, and starts one for next time.
        for dialect, event in cases:
            for stdin in payloads(project)[:3]:
                expected = answer_call(call_for(project, dialect, event, stdin))
                got = run_client([*command, "--dialect", dialect, event], project, stdin)
                assert normalized(got) == normalized(expected), (dialect, event, stdin)
        wait_for_status(path)
        for dialect, event in cases:
            stdin = payloads(project)[0]
            expected = answer_call(call_for(project, dialect, event, stdin))
            got = run_client([*command, "--dialect", dialect, event], project, stdin)
            assert normalized(got) == normalized(expected)
        assert wait_for_status(path)["calls"] >= len(cases)
    finally:
        stop_server(path)


@pytest.mark.parametrize("kind", ["native", "python"])
def test_clients_under_a_file_size_limit_answer_and_leave_python_working(
    kind: str, project: Path, relay_home: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """`ulimit -f 8` and no server: the client neither dies of SIGXFSZ nor fails with EFBIG
    putting a 20 KB event on relay's stdin, so the failClosed guard denies; no server is
    started (it would keep the limit), and the relay it runs writes no bytecode (CPython
    would replace a good .pyc with one cut short at the limit, breaking every later run)."""
    import importlib.util

    import relay.hosts.call

    guard = "import sys; sys.stdin.read(); sys.stderr.write('no'); sys.exit(2)"
    settings = {"command": sys.executable, "args": ["-c", guard], "failClosed": True}
    write(relay_home / "settings.json", {"hooks": {"PreToolUse": [{"hooks": [settings]}]}})
    if kind == "native":
        command = [str(request.getfixturevalue("native"))]
    else:
        command = [sys.executable, "-I", "-S", str(write_python_client(tmp_path / "bin"))]
    event = json.dumps(
        {
            "session_id": "s",
            "cwd": str(project),
            "tool_name": "Bash",
            "tool_input": {"command": "x" * 20_000},
        }
    ).encode()
    bytecode = importlib.util.cache_from_source(relay.hosts.call.__file__)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(bytecode)  # relay will compile it again, and must not write it cut short
    limited = ["sh", "-c", 'ulimit -f 8 && exec "$@"', "sh", *command, "--dialect", "claude"]
    for _ in range(2):
        reply = run_client([*limited, "PreToolUse"], project, event)
        assert reply.exit_code == 0, reply
        answer = json.loads(reply.stdout)["hookSpecificOutput"]
        assert answer["permissionDecision"] == "deny" and "no" in answer["permissionDecisionReason"]
    assert not os.path.exists(client.socket_path())
    unlimited = run_client([*command, "--dialect", "claude", "PreToolUse"], project, event)
    assert json.loads(unlimited.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    wait_for_status(client.socket_path())  # without the limit, it started one


def test_native_client_says_what_it_was_built_for(native: Path, relay_home: Path) -> None:
    info = json.loads(
        subprocess.run(
            [str(native), "--relay-client-info"], capture_output=True, check=False
        ).stdout
    )
    assert info == {
        "install": client.identity(),
        "python": sys.executable,
        "socket": client.socket_path(),
    }


def test_a_client_built_before_is_copied_from_the_cache_not_compiled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`relay install` compiles the client once per source, headers, flags and compiler;
    a cache entry others could have written, or in a folder others can write to, is
    never used."""
    compiler = find_compiler()
    if compiler is None:
        pytest.skip("no C compiler here")
    log = tmp_path / "compiled"
    wrapper = tmp_path / "cc-counting"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {shlex.quote(str(log))}\nexec {compiler} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    monkeypatch.delenv("RELAY_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def compiled() -> int:
        return len(log.read_text().splitlines()) if log.exists() else 0

    def info(native: Path) -> dict[str, str]:
        found = client_info(native)
        assert found is not None
        return found

    first = build_native_client(tmp_path / "one")
    assert compiled() == 1
    second = build_native_client(tmp_path / "two")
    assert compiled() == 1  # copied from the cache
    assert second.read_bytes() == first.read_bytes() and info(second) == info(first)
    assert os.access(second, os.X_OK)
    # Another interpreter baked in is another program.
    other = build_native_client(tmp_path / "three", python=str(tmp_path / "other-python"))
    assert compiled() == 2 and info(other)["python"] == str(tmp_path / "other-python")

    (entry,) = [
        path
        for path in (tmp_path / "cache" / "agent-relay" / "native").iterdir()
        if path.read_bytes() == first.read_bytes()
    ]
    # An entry someone else could have written is compiled again, and replaced.
    entry.write_bytes(b"#!/bin/sh\necho planted\n")
    entry.chmod(0o777)
    fourth = build_native_client(tmp_path / "four")
    assert compiled() == 3 and info(fourth) == info(first)
    assert entry.read_bytes() == first.read_bytes() and not entry.stat().st_mode & 0o022
    # A cache folder others can write to is not used at all.
    entry.parent.chmod(0o777)
    build_native_client(tmp_path / "five")
    build_native_client(tmp_path / "six")
    assert compiled() == 5
    entry.parent.chmod(0o700)
    # RELAY_CACHE names the cache's folder instead.
    monkeypatch.setenv("RELAY_CACHE", str(tmp_path / "relay-cache"))
    build_native_client(tmp_path / "seven")
    build_native_client(tmp_path / "eight")
    assert compiled() == 6 and len(list((tmp_path / "relay-cache" / "native").iterdir())) == 1


def test_native_client_carries_a_big_event_to_the_server_and_to_relay_itself(
    native: Path, project: Path, relay_home: Path
) -> None:
    """A 3 MB event (many times what the client reads at once): the server gets all of it,
    and so does the in-process run the client falls back to when no server answers (the
    event read before the C library started is the one it hands on)."""
    program = "import sys, json; print(json.dumps({'systemMessage': str(len(sys.stdin.read()))}))"
    command = {"command": sys.executable, "args": ["-c", program]}
    write(relay_home / "settings.json", {"hooks": {"PreToolUse": [{"hooks": [command]}]}})
    event = {"session_id": "s", "cwd": str(project), "tool_name": "Bash"}
    stdin = json.dumps({**event, "tool_input": {"command": "x" * 3_000_000}}).encode()
    expected = answer_call(call_for(project, "claude", "PreToolUse", stdin))
    assert expected is not None and int(json.loads(expected.stdout)["systemMessage"]) > 3_000_000
    path = client.socket_path()
    for served in (False, True):
        if served:
            wait_for_status(path)  # the first call started it
        before = wait_for_status(path)["calls"] if served else 0
        got = run_client([str(native), "--dialect", "claude", "PreToolUse"], project, stdin)
        assert normalized(got) == normalized(expected), served
        if served:
            assert wait_for_status(path)["calls"] == before + 1


def _traced_c_library_start(
    command: list[str], project: Path, stdin: bytes, env: dict[str, str]
) -> tuple[Reply, bool | None]:
    """Run a client under strace: its reply, and whether the C library started in it
    (set_tid_address is among its first calls); None where strace cannot run here."""
    strace = shutil.which("strace")
    if strace is None or subprocess.run([strace, "-o", os.devnull, "true"], check=False).returncode:
        done = subprocess.run(
            command, input=stdin, capture_output=True, cwd=project, env=env, timeout=60, check=False
        )
        return Reply(done.returncode, done.stdout, done.stderr), None
    with tempfile.NamedTemporaryFile(prefix="relay-strace-") as log:
        done = subprocess.run(
            [strace, "-f", "-qq", "-e", "trace=set_tid_address", "-o", log.name, *command],
            input=stdin,
            capture_output=True,
            cwd=project,
            env=env,
            timeout=60,
            check=False,
        )
        started = "set_tid_address" in Path(log.name).read_text()
    return Reply(done.returncode, done.stdout, done.stderr), started


@pytest.mark.parametrize(
    "where",
    [
        "relay home",
        "relay home under ~",
        "relative relay home",
        "runtime dir",
        "state home",
        "home",
        "too long for a socket",
        "no home",
    ],
)
def test_native_client_finds_the_server_wherever_the_environment_puts_it(
    where: str, native: Path, project: Path, relay_home: Path, tmp_path: Path
) -> None:
    """The native client answers a call the server takes before the C library starts (on
    Linux x86-64): it finds the socket from the environment as client.py does,
    in every form the environment can name it, and the server's answer is the in-process
    one. Only without a home folder (which the password database gives) does the C
    library start, and the server still answers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    home = tmp_path / "home"
    home.mkdir()
    env["HOME"] = str(home)
    if where == "relay home under ~":
        env["RELAY_HOME"] = "~/rh"
    elif where == "relative relay home":
        env["RELAY_HOME"] = "rh"
    elif where == "too long for a socket":
        env["RELAY_HOME"] = str(tmp_path / ("x" * 120))
    elif where != "relay home":
        del env["RELAY_HOME"]
        if where == "runtime dir":
            env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
        elif where == "state home":
            env["XDG_STATE_HOME"] = str(tmp_path / "state")
        elif where == "no home":
            del env["HOME"]
    # A relative RELAY_HOME names a socket relative to the working directory (the host's,
    # here the project), whose absolute path may be too long for a socket: from there.
    with chdir(project):
        _serve_and_call(where, native, project, env)


def test_native_clients_early_path_calls_nothing_of_the_c_library(native: Path) -> None:
    """What runs before the C library starts (relay_entry, relay_fast and the fast_
    functions it calls) calls only itself and the kernel: a compiler that turned a loop
    into a call to memcpy, say, would call the C library before it is set up."""
    from relay.server.build import entry_flags

    objdump = shutil.which("objdump")
    if objdump is None or not entry_flags():
        pytest.skip("no objdump here, or no early path on this machine")
    listing = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(native)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    early = ("relay_entry", "relay_fast", "fast_")
    called: set[str] = set()
    seen: set[str] = set()
    current = None
    for line in listing.splitlines():
        if line.endswith(">:"):  # "0000000000401000 <name>:"
            name = line.split("<", 1)[1][:-2]
            current = name if name.startswith(early) else None
            if current is not None:
                seen.add(current)
        elif current is not None and "\tcall " in line and "<" in line:
            called.add(line.rsplit("<", 1)[1].rstrip(">").split("+")[0])
    assert {"relay_entry", "relay_fast"} <= seen
    assert called and all(name.startswith(early) for name in called), sorted(called)


def _serve_and_call(where: str, native: Path, project: Path, env: dict[str, str]) -> None:
    from relay.server.build import entry_flags

    path = client.socket_path(env)
    if where == "no home":
        assert path.startswith(os.path.expanduser("~"))  # the password database's home
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-I", "-m", "relay", "serve", "--socket", path, "--idle-seconds", "60"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        before = wait_for_status(path)["calls"]
        stdin = payloads(project)[0]
        reply, c_library = _traced_c_library_start(
            [str(native), "--dialect", "claude", "PreToolUse"], project, stdin, env
        )
        assert wait_for_status(path)["calls"] == before + 1  # the server answered it
        call = Call(["--dialect", "claude", "PreToolUse"], str(project), env, stdin)
        assert normalized(reply) == normalized(answer_call(call))
        if c_library is not None and entry_flags():
            assert c_library == (where == "no home")
    finally:
        stop_server(path)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # the stop went unheard on a loaded machine
            process.terminate()
            process.wait(timeout=60)
        for leftover in (path + ".lock", path + ".spawned"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)


@contextlib.contextmanager
def chdir(folder: Path) -> Iterator[None]:
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def test_native_client_fails_open_visibly_when_relay_is_gone(tmp_path: Path, project: Path) -> None:
    if find_compiler() is None:
        pytest.skip("no C compiler here")
    gone = build_native_client(tmp_path / "bin", python=str(tmp_path / "no-python"))
    reply = run_client([str(gone), "--dialect", "claude", "PreToolUse"], project, b"{}")
    assert reply.exit_code == 0
    assert "relay: cannot run" in json.loads(reply.stdout)["systemMessage"]
    relay_dialect = run_client([str(gone), "PreToolUse"], project, b"{}")
    assert relay_dialect.exit_code == 1 and b"relay: cannot run" in relay_dialect.stderr


# ---- a host never waits on a broken server -----------------------------------------------


def fake_server(path: str, behaviour: str) -> tuple[socket.socket, threading.Thread]:
    """A listener at the server's socket that misbehaves: `hang` (never answers) or
    `vanish` (accepts the call, then closes)."""
    assert client.make_private_dir(os.path.dirname(path))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)

    def serve() -> None:
        with listener:
            while True:
                try:
                    connection, _ = listener.accept()
                except OSError:
                    return
                if behaviour == "vanish":
                    connection.recv(1 << 20)
                    connection.sendall(client.accepted_frame(60_000))
                    connection.close()
                else:
                    threading.Timer(30, connection.close).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


@pytest.mark.parametrize("behaviour", ["hang", "vanish"])
def test_a_hung_or_vanishing_server_costs_a_bounded_wait(
    behaviour: str, project: Path, relay_home: Path, native: Path
) -> None:
    """A server that never accepts: the client runs the call itself. One that accepts the
    call and then closes: the hooks may have run there, so the client does not run them
    again; it answers with relay's failure, visibly."""
    write(relay_home / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hook("hi")]}]}})
    path = client.socket_path()
    listener, _ = fake_server(path, behaviour)
    try:
        started = time.monotonic()
        answer = client.request(path, call_for(project, "claude", "SessionStart", b"{}"))
        if behaviour == "hang":
            assert answer is None
        else:
            assert isinstance(answer, client.Lost) and "gave no result" in answer.reason
        assert time.monotonic() - started < client.ACK_TIMEOUT + 5
        started = time.monotonic()
        reply = run_client([str(native), "--dialect", "claude", "SessionStart"], project, b"{}")
        assert time.monotonic() - started < client.ACK_TIMEOUT + 30  # + the in-process run
        if behaviour == "hang":
            assert json.loads(reply.stdout)["hookSpecificOutput"]["additionalContext"] == "hi"
        else:
            message = json.loads(reply.stdout)["systemMessage"]
            assert "accepted this call and gave no result" in message
            assert "no relay hook answered for this SessionStart" in message
    finally:
        listener.close()
        # The client started a real server in the fake one's place: stop it.
        wait_for_status(path)
        stop_server(path)


def guard_settings(relay_home: Path, tmp_path: Path) -> Path:
    """A failClosed guard on PreToolUse that records its start, and its pid and its child's
    (a `sleep` in its process group), then waits 60 s before it would record its end."""
    trace = tmp_path / "guard.trace"
    script = write(
        tmp_path / "guard.sh",
        "#!/bin/sh\n"
        "cat > /dev/null\n"
        "sleep 60 &\n"
        f'echo "start $$ $!" >> {trace}\n'
        "wait\n"
        f"echo end >> {trace}\n",
    )
    script.chmod(0o755)
    guard = {"command": str(script), "failClosed": True, "timeout": 120}
    write(relay_home / "settings.json", {"hooks": {"PreToolUse": [{"hooks": [guard]}]}})
    return trace


def wait_for_start(trace: Path, process: subprocess.Popen[bytes]) -> list[int]:
    deadline = time.monotonic() + 60
    while not trace.exists() or not trace.read_text().strip():
        assert process.poll() is None and time.monotonic() < deadline, "the guard never started"
        time.sleep(0.05)
    _, *pids = trace.read_text().split()
    return [int(pid) for pid in pids]


def wait_until_gone(pids: list[int]) -> bool:
    """Whether every pid is gone (or a zombie) within 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as stat_file:
                    if stat_file.read().rsplit(")", 1)[1].split()[0] != "Z":
                        alive.append(pid)
            except OSError:
                continue
        if not alive:
            return True
        time.sleep(0.05)
    return False


def kill_leftovers(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)


def client_command(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    if kind == "native":
        return [str(request.getfixturevalue("native"))]
    return [sys.executable, "-I", "-S", str(write_python_client(tmp_path / "bin"))]


def bash_event(project: Path) -> bytes:
    return json.dumps(
        {
            "session_id": "s",
            "cwd": str(project),
            "tool_name": "Bash",
            "tool_input": {"command": "ls"},
        }
    ).encode()


@pytest.mark.parametrize("kind", ["native", "python"])
def test_a_server_killed_mid_guard_leaves_no_hook_running_and_the_guard_is_not_run_again(
    kind: str, server: str, project: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """kill -9 of the server while a failClosed guard runs: the client kills what is left
    of the call's hooks (the guard and its child), does not run the guard a second time,
    and denies, saying why."""
    trace = guard_settings(Path(os.environ["RELAY_HOME"]), tmp_path)
    server_pid = wait_for_status(server)["pid"]
    command = client_command(kind, tmp_path, request)
    event = write(tmp_path / "event.json", bash_event(project).decode())
    with event.open("rb") as stdin:
        process = subprocess.Popen(
            [*command, "--dialect", "claude", "PreToolUse"],
            cwd=project,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    pids: list[int] = []
    try:
        pids = wait_for_start(trace, process)
        os.kill(server_pid, 9)
        stdout, _ = process.communicate(timeout=60)
        assert wait_until_gone(pids), "the guard or its child still runs"
        answer = json.loads(stdout)["hookSpecificOutput"]
        assert answer["permissionDecision"] == "deny"
        reason = answer["permissionDecisionReason"]
        assert f"relay's server (pid {server_pid}) stopped in the middle of this call" in reason
        assert "fail closed" in reason
        assert [line.split()[0] for line in trace.read_text().splitlines()] == ["start"]
        wait_for_status(server)  # the client started a server for the next call
    finally:
        kill_leftovers(pids)
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("kind", ["native", "python"])
def test_a_living_server_that_drops_a_call_leaves_none_of_its_hooks_running(
    kind: str, relay_home: Path, project: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A server that accepts a call, starts a hook for it and closes the connection while
    it runs on (it does not die): the client does not wait on it, kills the call's hook
    all the same (nothing will read it) and answers with relay's failure."""
    path = client.socket_path()
    assert client.make_private_dir(os.path.dirname(path))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    hooks: list[subprocess.Popen[bytes]] = []

    def serve() -> None:
        connection, _ = listener.accept()
        with connection, connection.makefile("rb") as reader:
            request_ = client.read_request(reader.read1)
            assert not isinstance(request_, str)
            hooks.append(subprocess.Popen(["sleep", "60"], env=request_[1].env))
            connection.sendall(client.accepted_frame(60_000))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    command = client_command(kind, tmp_path, request)
    try:
        reply = run_client([*command, "--dialect", "claude", "SessionStart"], project, b"{}")
        message = json.loads(reply.stdout)["systemMessage"]
        assert "accepted this call and gave no result in time (killed 1 of its hook" in message
        assert hooks and hooks[0].wait(timeout=30) == -9
    finally:
        listener.close()
        thread.join(timeout=30)
        for hook_process in hooks:
            if hook_process.poll() is None:
                hook_process.kill()
                hook_process.wait()
        wait_for_status(path)  # the client started a real server for the next call
        stop_server(path)


DROPPING_SERVER = """
import os, socket, subprocess, sys, threading
from relay.server import client

listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
path = client.socket_path()
assert client.make_private_dir(os.path.dirname(path))
listener.bind(path)
listener.listen(1)
hooks = []

def serve():
    connection, _ = listener.accept()
    with connection, connection.makefile("rb") as reader:
        hooks.append(subprocess.Popen(["sleep", "60"], env=client.read_request(reader.read1)[1].env))
        connection.sendall(client.accepted_frame(60_000))

threading.Thread(target=serve, daemon=True).start()
done = subprocess.run(sys.argv[1:], input=b"{}", capture_output=True, timeout=60)
print(done.stdout.decode(), "sid", os.getsid(0), "exit", hooks[0].wait(timeout=30) if hooks else None)
"""


@pytest.mark.parametrize("kind", ["native", "python"])
def test_a_lost_call_kills_its_hooks_in_a_pid_namespace_whose_session_leader_is_outside(
    kind: str, short_home: Path, project: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """In a container the session's leader may be outside the PID namespace, and getsid()
    says 0 there (CI runs so): a real session all the same, whose hooks the client kills."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("a new PID namespace needs unshare(1) and root")
    script = write(tmp_path / "dropping_server.py", DROPPING_SERVER)
    command = client_command(kind, tmp_path, request)
    done = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            str(script),
            *command,
            "--dialect",
            "claude",
            "SessionStart",
        ],
        capture_output=True,
        text=True,
        cwd=project,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "sid 0" in done.stdout  # the condition this test is about
    assert "(killed 1 of its hook processes)" in done.stdout
    assert done.stdout.rstrip().endswith("exit -9")
    # The server the client started for the next call ended with the namespace.


@pytest.mark.parametrize("kind", ["native", "python"])
def test_killing_a_client_that_runs_the_call_itself_leaves_no_hook_running(
    kind: str,
    short_home: Path,
    project: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """No server: the client becomes relay and runs the guard; the host kills it (SIGKILL)
    mid-guard, and its watcher kills the guard and the guard's child."""
    trace = guard_settings(short_home, tmp_path)
    command = client_command(kind, tmp_path, request)
    event = write(tmp_path / "event.json", bash_event(project).decode())
    with event.open("rb") as stdin:
        process = subprocess.Popen(
            [*command, "--dialect", "claude", "PreToolUse"],
            cwd=project,
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    pids: list[int] = []
    try:
        pids = wait_for_start(trace, process)
        process.kill()
        process.wait()
        assert wait_until_gone(pids), "the guard or its child still runs"
        wait_for_status(client.socket_path())  # the client started a server for the next call
    finally:
        kill_leftovers(pids)
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_server_of_another_install_is_not_asked(server: str, project: Path) -> None:
    request = client.encode_call(call_for(project, "relay", "SessionStart", b"{}"), install="x:y")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(server)
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b"F"


def test_a_socket_folder_others_can_enter_is_refused(
    project: Path, relay_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A short RELAY_HOME of its own, so the socket folder is this test's (a long path would
    # move it to the shared /tmp/agent-relay-<uid>/, which other tests use).
    short = Path(tempfile.mkdtemp(prefix="rs-", dir="/tmp"))
    monkeypatch.setenv("RELAY_HOME", str(short))
    try:
        check_folder_refused(project)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def check_folder_refused(project: Path) -> None:
    path = client.socket_path()
    assert path.startswith("/tmp/rs-")
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    os.chmod(folder, 0o755)
    assert client.request(path, call_for(project, "relay", "SessionStart", b"{}")) is None
    done = subprocess.run(
        [sys.executable, "-I", "-m", "relay", "serve", "--socket", path],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "only you own" in done.stderr
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755  # not "fixed" behind the user's back


def test_a_foreign_peer_gets_no_answer(
    server: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client refuses a server whose uid is not ours (SO_PEERCRED). Only for this
    # request: the fixture's teardown must still reach the server to stop it (else it
    # waits 10 s for an exit that never comes).
    with monkeypatch.context() as patched:
        patched.setattr(client, "peer_uid", lambda sock: os.getuid() + 1)
        assert client.request(server, call_for(project, "relay", "SessionStart", b"{}")) is None


def test_an_idle_server_exits(relay_home: Path) -> None:
    path = client.socket_path()
    process = subprocess.Popen(
        [sys.executable, "-I", "-m", "relay", "serve", "--socket", path, "--idle-seconds", "1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_status(path)
        assert process.wait(timeout=30) == 0
        assert not os.path.exists(path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def server_threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no thread count")


def settled_threads(pid: int) -> int:
    """The server's thread count once it has held for half a second: the thread that
    served the call before (the status check) may take a moment to be gone from /proc,
    and counted in, it raised the count a burst was measured against."""
    deadline = time.monotonic() + 10
    count, since = server_threads(pid), time.monotonic()
    while time.monotonic() - since < 0.5 and time.monotonic() < deadline:
        time.sleep(0.02)
        now = server_threads(pid)
        if now != count:
            count, since = now, time.monotonic()
    return count


def test_threads_of_a_burst_of_calls_end_once_it_is_over(
    server: str, project: Path, relay_home: Path, tmp_path: Path
) -> None:
    """Threads wait in accept() and serve what they accept: 12 calls at once (each held
    by its hook until all have started) are served by 12 threads; once they are answered,
    the threads beyond the two kept waiting end, and calls one after another start none."""
    started = tmp_path / "started"
    started.mkdir()
    program = (
        "import os, sys, time, uuid; sys.stdin.read(); "
        f"open(os.path.join({str(started)!r}, uuid.uuid4().hex), 'w').close(); "
        f"deadline = time.monotonic() + 30\n"
        f"while len(os.listdir({str(started)!r})) < 12 and time.monotonic() < deadline: "
        "time.sleep(0.05)\n"
        "print('{}')"
    )
    hold = {"command": sys.executable, "args": ["-c", program], "timeout": 60}
    write(relay_home / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hold]}]}})
    pid = wait_for_status(server)["pid"]
    idle = settled_threads(pid)
    call = call_for(project, "relay", "SessionStart", b"{}")
    replies: list[Reply | None] = []
    burst = [
        threading.Thread(
            target=lambda: replies.append(client.request(server, call, ack_timeout=60))
        )
        for _ in range(12)
    ]
    for thread in burst:
        thread.start()
    busiest = 0
    while any(thread.is_alive() for thread in burst):
        busiest = max(busiest, server_threads(pid))
        time.sleep(0.01)
    assert len(replies) == 12 and all(reply is not None for reply in replies)
    assert busiest >= idle + 11  # a thread for each call at once
    for name in os.listdir(started):
        os.unlink(started / name)
    write(relay_home / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hook("hi")]}]}})
    for _ in range(5):
        reply = client.request(server, call, ack_timeout=LOADED)
        assert reply is not None and json.loads(reply.stdout)["inject"] == "hi"
    # The hook log's writer is the one more; a thread that has returned may take a moment
    # to be gone from /proc.
    deadline = time.monotonic() + 10
    while server_threads(pid) > idle + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server_threads(pid) <= idle + 1


def test_silent_connections_hold_a_bounded_number_of_threads(
    server: str, project: Path, relay_home: Path
) -> None:
    """Connections past the bound are told "busy" at once (their clients run the call
    themselves), without a thread each; a silent one is closed after READ_TIMEOUT."""
    from relay.server.server import MAX_CONNECTIONS

    pid = wait_for_status(server)["pid"]
    extra = 40
    silent = []
    try:
        for _ in range(MAX_CONNECTIONS + extra):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(60)
            sock.connect(server)
            silent.append(sock)
        # Accepted in order: once the last is answered, every one was accepted.
        for sock in silent[MAX_CONNECTIONS:]:
            assert sock.recv(1) == b"F"  # "busy"
        assert server_threads(pid) <= MAX_CONNECTIONS + 4  # the main thread and a few more
        assert silent[0].recv(1) == b""  # closed, unanswered, after READ_TIMEOUT
    finally:
        for sock in silent:
            sock.close()
    write(relay_home / "settings.json", {"hooks": {"SessionStart": [{"hooks": [hook("hi")]}]}})
    call = call_for(project, "relay", "SessionStart", b"{}")
    deadline = time.monotonic() + 60
    reply = client.request(server, call)
    while reply is None and time.monotonic() < deadline:  # the silent ones' threads free up
        time.sleep(0.1)
        reply = client.request(server, call)
    assert reply is not None and json.loads(reply.stdout)["inject"] == "hi"


def test_a_client_that_sends_a_byte_at_a_time_does_not_keep_the_server_alive(
    relay_home: Path,
) -> None:
    """Its connection is closed READ_TIMEOUT after it began, however the bytes trickle in,
    and only calls count against idling: a server idle for 1 s exits under the drip."""
    path = client.socket_path()
    process = subprocess.Popen(
        [sys.executable, "-I", "-m", "relay", "serve", "--socket", path, "--idle-seconds", "1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_status(path)
        deadline = time.monotonic() + 45
        sock: socket.socket | None = None
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if sock is None:
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    sock.connect(path)
                sock.send(b"R")  # the start of "RELAY-CALL 1\n", never finished
                if sock.recv(1, socket.MSG_DONTWAIT) == b"":
                    raise ConnectionResetError
            except BlockingIOError:
                pass  # nothing to read: still open
            except OSError:  # closed by the server (or it is gone): start again
                if sock is not None:
                    sock.close()
                sock = None
            time.sleep(0.2)
        if sock is not None:
            sock.close()
        assert process.poll() == 0
        assert not os.path.exists(path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_status_and_stop_from_the_command_line(relay_home: Path) -> None:
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None

    def serve(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [relay, "serve", *options], capture_output=True, text=True, timeout=60, check=False
        )

    started = serve("--detach")
    assert started.returncode == 0 and "relay server running" in started.stdout
    status = serve("--status")
    assert status.returncode == 0
    running = json.loads(status.stdout)
    assert running["install"] == client.identity()
    stopped = serve("--stop")
    # --stop returns once the server's process has ended, not when it agreed to stop.
    assert stopped.returncode == 0, stopped.stderr
    assert not client._alive(running["pid"], None)
    assert not os.path.exists(client.socket_path())
    assert f"(pid {running['pid']})" in stopped.stdout
    # Not running is a state, not an error: exit 3, as `systemctl status` says it.
    missing = serve("--status")
    assert missing.returncode == 3, missing.stderr
    assert missing.stdout.startswith("not running") and missing.stderr == ""
    again = serve("--stop")
    assert again.returncode == 0 and "nothing to stop" in again.stdout
    assert "exit 3" in serve("--help").stdout


# ---- the cache behind the server ---------------------------------------------------------


def test_file_cache_sees_an_edit_that_restores_size_and_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[bytes] = []

    def derive(path: Path, data: bytes) -> bytes:
        reads.append(data)
        return data

    cache: FileCache[bytes] = FileCache(derive)
    file = tmp_path / "guard.sh"
    file.write_bytes(b"exit 2")
    status = file.stat()
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 60)  # old enough to be cached
    assert cache.get(file) == b"exit 2"
    assert cache.get(file) == b"exit 2" and len(reads) == 1  # cached: a stat, no read
    file.write_bytes(b"exit 0")  # same size
    os.utime(file, ns=(status.st_atime_ns, status.st_mtime_ns))  # and the old mtime
    assert cache.get(file) == b"exit 0"  # ctime moved: read again


def test_file_cache_does_not_keep_a_file_changed_just_now(tmp_path: Path) -> None:
    reads: list[bytes] = []
    cache: FileCache[bytes] = FileCache(lambda path, data: reads.append(data) or data)  # type: ignore[func-returns-value]
    file = tmp_path / "settings.json"
    file.write_bytes(b"{}")
    cache.get(file)
    cache.get(file)
    assert len(reads) == 2  # within the racy window: read every time


# ---- relay doctor on the socket folder ---------------------------------------------------


@pytest.fixture
def short_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short RELAY_HOME of its own, so the socket folder is this test's (a long path would
    move it to the shared /tmp/agent-relay-<uid>/, which other tests use)."""
    short = Path(tempfile.mkdtemp(prefix="rs-", dir="/tmp"))
    monkeypatch.setenv("RELAY_HOME", str(short))
    try:
        yield short
    finally:
        stop_server(client.socket_path())
        shutil.rmtree(short, ignore_errors=True)


def doctor_server_findings(tmp_path: Path) -> list[dict[str, str]]:
    done = subprocess.run(
        [sys.executable, "-m", "relay", "doctor", "--json", "--no-measure"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    findings = [f for f in json.loads(done.stdout) if f["topic"] == "server"]
    if any(f["level"] == "fail" for f in findings):
        assert done.returncode == 1
    return findings


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give the folder to another user")
def test_doctor_fails_when_another_user_holds_the_socket_folder(
    short_home: Path, tmp_path: Path
) -> None:
    folder = os.path.dirname(client.socket_path())
    assert doctor_server_findings(tmp_path)[0]["level"] == "ok"  # no server's folder yet
    # (doctor's check of the memory model may have made it: the model's child listens there)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chown(folder, 65534, 65534)  # another user made it first (nobody)
    (finding,) = doctor_server_findings(tmp_path)
    assert finding["level"] == "fail"
    assert f"the socket folder {folder} belongs to" in finding["text"]
    assert "(uid 65534), not you: another user took it" in finding["text"]
    assert "every event runs in-process" in finding["text"]
    os.chown(folder, 0, 0)
    os.chmod(folder, 0o755)
    (finding,) = doctor_server_findings(tmp_path)
    assert finding["level"] == "fail" and "is mode 0755, open to other users" in finding["text"]
    assert f"chmod 700 {folder}" in finding["text"]
    os.chmod(folder, 0o700)
    assert [f["level"] for f in doctor_server_findings(tmp_path)] == ["ok"]


# ---- the server's socket on the host's path ------------------------------------------------


def test_a_request_that_has_arrived_is_read_and_answered_without_waiting_for_the_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request already there is read at once, and a frame the socket's buffer takes is
    sent at once: the socket gets no timeout, which would make each receive and send wait
    for it first (a poll more each, on every host event). A reply bigger than the buffer
    still arrives whole; a client that does not read, or sends nothing, frees the thread
    within the bounds."""
    from relay.server import server as server_module

    ours, theirs = socket.socketpair()
    with ours, theirs:
        request = client.encode_call(Call(["--dialect", "claude", "Stop"], "/", {"A": "1"}, b"{}"))
        theirs.sendall(request)
        read = server_module._reader(ours, time.monotonic() + 5)
        request_read = client.read_request(read)
        assert not isinstance(request_read, str)
        call = request_read[1]
        assert call.env == {"A": "1"} and call.stdin == b"{}"
        server_module._send(ours, client.accepted_frame(1000))
        assert ours.gettimeout() is None  # neither waited for the socket
        assert theirs.recv(100) == client.accepted_frame(1000)

        big = client.result_frame(Reply(0, b"x" * (4 << 20), b""))
        got = bytearray()
        reader = threading.Thread(target=lambda: _read_exactly(theirs, len(big), got))
        reader.start()
        server_module._send(ours, big)
        reader.join(timeout=60)
        assert bytes(got) == big

    monkeypatch.setattr(server_module, "WRITE_TIMEOUT", 0.5)
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(TimeoutError):
        server_module._send(ours, big)  # nobody reads
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(TimeoutError):
        client.read_request(server_module._reader(ours, time.monotonic() + 0.5))  # nothing sent


def _read_exactly(sock: socket.socket, size: int, into: bytearray) -> None:
    while len(into) < size:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return
        into += chunk


# ---- kept plans ----------------------------------------------------------------------------
# relay serve's kept plans (relay.hosts.call.PlanCache): a host's call whose plan was made
# before, for the same settings files, project and event, starts its hooks without planning
# again, and its answer is made while they run for the endings they had the time before; it
# answers byte for byte as `relay hooks run` does, and any change to what the plan stands on
# (a settings file, the project's root, its trust and scripts, the folders the environment
# chooses, the tool) is seen on the very next call. A settings file changed within
# filecache's racy window stands for nothing (no plan is kept for it), so these tests wait
# that window out (`aged`) where a kept plan is what they test.

HOSTS = ("claude", "gemini", "codex")
TOOL_EVENT = {"claude": "PreToolUse", "gemini": "BeforeTool", "codex": "PreToolUse"}


def aged() -> None:
    """Wait until the files written so far are past filecache's racy window."""
    time.sleep(RACY_SECONDS + 0.3)


def used(server: str) -> int:
    """How many calls the server answered from a kept plan."""
    plans: dict[str, int] = wait_for_status(server)["plans"]
    return plans["used"]


def tool_call(folder: Path, dialect: str, command: str, tool: str = "Bash") -> Call:
    event = {
        "session_id": "s",
        "cwd": str(folder),
        "tool_name": tool,
        "tool_input": {"command": command},
    }
    return call_for(folder, dialect, TOOL_EVENT[dialect], json.dumps(event).encode())


def served(server: str, call: Call) -> Reply:
    reply = client.request(server, call, ack_timeout=LOADED)
    assert reply is not None
    return reply


def guard(runs: Path) -> dict[str, Any]:
    """A guard that denies `rm -rf` (exit 2, the reason on stderr) and allows the rest
    (`{}`), and counts its runs in `runs`."""
    program = (
        f'input=$(cat); echo run >> {runs}; case "$input" in'
        " *'rm -rf'*) echo 'no rm -rf' >&2; exit 2 ;; *) echo '{}' ;; esac"
    )
    return {"name": "guard", "command": "/bin/sh", "args": ["-c", program]}


def test_a_repeated_call_runs_its_kept_plan_and_answers_as_in_process(
    server: str, project: Path, relay_home: Path, tmp_path: Path
) -> None:
    """Each host's guard call, allowed and denied in turn (the answer made meanwhile for the
    last call's ending is right, then wrong, then right): served from a kept plan after the
    first, every answer the in-process one, the guard run once per call."""
    runs = tmp_path / "runs"
    # One registration: every host's tool event is the same canonical event.
    settings = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [guard(runs)]}]}}
    write(relay_home / "settings.json", settings)
    aged()
    commands = ["ls", "ls", "rm -rf /", "rm -rf /", "ls", "rm -rf /"]
    for dialect in HOSTS:
        before = used(server)
        for command in commands:
            call = tool_call(project, dialect, command)
            assert normalized(served(server, call)) == normalized(answer_call(call)), (
                dialect,
                command,
            )
        assert used(server) - before == len(commands) - 1, dialect
    assert runs.read_text().count("run") == 2 * len(commands) * len(HOSTS)
    # Each call is in the hook log, the kept plans' too (the server writes them last).
    from relay.engine.hooklog import HookLog
    from relay.engine.telemetry import log_path

    deadline = time.monotonic() + 30
    logged: list[Any] = []
    while len(logged) < 2 * len(commands) * len(HOSTS) and time.monotonic() < deadline:
        time.sleep(0.1)
        with contextlib.suppress(Exception):  # being written
            logged = HookLog(log_path()).events(limit=100)
    assert len(logged) == 2 * len(commands) * len(HOSTS)


def test_every_event_of_every_host_answers_from_a_kept_plan_as_in_process(
    server: str, project: Path, relay_home: Path
) -> None:
    """The byte-for-byte comparison of the server with the in-process path, with each call
    made twice: the second from its kept plan, where one was kept (not at a session's
    start, nor for a matcher's field the plan does not match on)."""
    events: dict[str, Any] = {
        name: [{"hooks": [hook({"systemMessage": "seen", "inject": "ctx"}, name="seen")]}]
        for name in known_event_names()
    }
    events["PreToolUse"] = [
        {
            "matcher": "Bash",
            "hooks": [
                hook({"hookSpecificOutput": {"permissionDecision": "defer"}}, name="defer"),
                hook("", 2, "no rm", name="guard"),
                hook("oops", 1, "broken hook", name="broken"),
            ],
        },
        {"matcher": "Write", "hooks": [hook({"hookSpecificOutput": {"tool_input": {"x": 1}}})]},
    ]
    write(relay_home / "settings.json", {"hooks": events})
    aged()
    before = used(server)
    compared = 0
    for dialect in HOSTS:
        for event in known_event_names():
            chosen = payloads(project)[:3] if "Tool" in event else payloads(project)[2:3]
            for stdin in chosen:
                call = call_for(project, dialect, event, stdin)
                expected = normalized(answer_call(call))
                for _ in range(2):
                    assert normalized(served(server, call)) == expected, (dialect, event, stdin)
                    compared += 1
    assert used(server) - before > compared / 4


def test_a_kept_plan_is_not_used_once_its_settings_file_changes(
    server: str, project: Path, relay_home: Path
) -> None:
    def settings(text: str) -> None:
        hooks = [{"matcher": "Bash", "hooks": [hook({"systemMessage": text})]}]
        write(relay_home / "settings.json", {"hooks": {"PreToolUse": hooks}})

    def message() -> str:
        reply = served(server, tool_call(project, "claude", "ls"))
        said: str = json.loads(reply.stdout)["systemMessage"]
        return said

    settings("one")
    aged()
    assert [message(), message()] == ["one", "one"]
    first = used(server)
    assert first >= 1
    settings("two")  # within the racy window: planned anew
    assert message() == "two"
    settings("three")
    aged()  # past it: the file's new identity is another key
    assert [message(), message()] == ["three", "three"]
    assert used(server) == first + 1


def test_a_kept_plan_is_not_used_in_a_nearer_project_made_between_calls(
    server: str, project: Path, relay_home: Path
) -> None:
    program = 'cat >/dev/null; printf \'{"systemMessage": "%s"}\' "$RELAY_PROJECT_DIR"'
    hooks = [{"hooks": [{"command": "/bin/sh", "args": ["-c", program]}]}]
    write(relay_home / "settings.json", {"hooks": {"PreToolUse": hooks}})
    folder = project / "sub"
    folder.mkdir()
    aged()

    def project_dir() -> str:
        said: str = json.loads(served(server, tool_call(folder, "claude", "ls")).stdout)[
            "systemMessage"
        ]
        return said

    assert [project_dir(), project_dir()] == [str(project)] * 2
    assert used(server) >= 1
    (folder / ".relay").mkdir()  # an empty .relay/ makes a project root
    assert project_dir() == str(folder)
    (folder / ".relay").rmdir()
    assert project_dir() == str(project)


def test_a_project_hooks_trust_and_script_count_on_every_call(
    server: str, project: Path, relay_home: Path
) -> None:
    """A plan that runs a project hook is kept, and its trust checked on every call (its
    trust and its scripts are not in the key): a script edited, trust revoked or given
    between two calls counts on the second, while the user's own guard beside it runs all
    along."""
    script = write(
        project / "check.sh", '#!/bin/sh\ncat >/dev/null\necho \'{"systemMessage": "v1"}\'\n'
    )
    script.chmod(0o755)
    write(
        project / ".relay" / "settings.json",
        {"hooks": {"PreToolUse": [{"hooks": [{"name": "check", "command": "./check.sh"}]}]}},
    )
    write(relay_home / "settings.json", {"hooks": {"PreToolUse": [{"hooks": [hook({})]}]}})
    trusted = CliRunner().invoke(cli, ["trust", "--yes", "--cwd", str(project)])
    assert trusted.exit_code == 0, trusted.output
    aged()

    def message() -> str:
        said: str = json.loads(served(server, tool_call(project, "claude", "ls")).stdout)[
            "systemMessage"
        ]
        return said

    assert [message(), message()] == ["v1", "v1"]
    script.write_text(script.read_text().replace("v1", "v2"))
    assert "not trusted" in message()
    aged()
    assert "not trusted" in message()
    assert CliRunner().invoke(cli, ["trust", "--yes", "--cwd", str(project)]).exit_code == 0
    assert [message(), message()] == ["v2", "v2"]
    revoked = CliRunner().invoke(cli, ["trust", "--revoke", "--cwd", str(project)])
    assert revoked.exit_code == 0, revoked.output
    assert "not trusted" in message()
    assert used(server) >= 3  # the second call of each pair, from the plan kept


def test_a_project_hook_whose_reach_grows_with_its_files_unchanged_is_untrusted_next_call(
    server: str, project: Path, relay_home: Path
) -> None:
    """What a project hook's trust depends on is more than the files its fingerprint holds:
    where relay looked for what it loads and found nothing counts too. A module made beside
    a trusted Python guard, which imports it if there is one, changes its fingerprint while
    the guard's own file (its device, inode, size, mtime and ctime) and the trust store stay
    as they were: the next call skips the guard as not trusted. (A trust check kept and
    re-validated by the stats of its fingerprint's files and of the trust store alone
    would run it: a kept check records every look, relay.config.looks.)"""
    script = write(
        project / "check.py",
        "import json\ntry:\n    import helper\nexcept ImportError:\n    helper = None\n"
        'print(json.dumps({"systemMessage": getattr(helper, "SAID", "v1")}))\n',
    )
    write(
        project / ".relay" / "settings.json",
        {"hooks": {"PreToolUse": [{"hooks": [{"name": "check", "command": "python3 check.py"}]}]}},
    )
    trusted = CliRunner().invoke(cli, ["trust", "--yes", "--cwd", str(project)])
    assert trusted.exit_code == 0, trusted.output
    aged()

    def message() -> str:
        said: str = json.loads(served(server, tool_call(project, "claude", "ls")).stdout)[
            "systemMessage"
        ]
        return said

    assert [message(), message()] == ["v1", "v1"]
    store = TrustStore(state_file("trust.json")).folder
    before = (
        identity_of(os.stat(script)),
        sorted((str(path), identity_of(path.stat())) for path in store.rglob("*")),
    )
    assert before[1], f"no trust store in {store}"
    write(project / "helper.py", 'SAID = "unchecked"\n')
    said = message()
    assert "not trusted" in said and "check" in said, said
    after = (
        identity_of(os.stat(script)),
        sorted((str(path), identity_of(path.stat())) for path in store.rglob("*")),
    )
    assert after == before  # nothing the fingerprint's files' stats stand for changed
    aged()
    assert "not trusted" in message()


def test_a_kept_plan_follows_each_calls_relay_home_and_tool(
    server: str, project: Path, tmp_path: Path
) -> None:
    """Calls whose RELAY_HOME differs (and changes back) and whose tool differs get the plans
    of their own: each home's hook for Bash, none for Write."""
    runs = tmp_path / "runs"
    homes = {}
    for name in ("a", "b"):
        home = tmp_path / f"home-{name}"
        program = f'cat >/dev/null; echo {name} >> {runs}; echo \'{{"systemMessage": "{name}"}}\''
        hooks = [{"matcher": "Bash", "hooks": [{"command": "/bin/sh", "args": ["-c", program]}]}]
        write(home / "settings.json", {"hooks": {"PreToolUse": hooks}})
        homes[name] = home
    aged()
    for name in ["a", "b", "a", "b"]:
        for tool in ("Bash", "Write"):
            call = tool_call(project, "claude", "ls", tool)
            call.env["RELAY_HOME"] = str(homes[name])
            reply = served(server, call)
            said = json.loads(reply.stdout).get("systemMessage") if reply.stdout else None
            assert said == (name if tool == "Bash" else None), (name, tool)
    assert runs.read_text().split() == ["a", "b", "a", "b"]
    assert used(server) == 4


def test_an_event_with_no_hook_is_kept_too(server: str, project: Path, relay_home: Path) -> None:
    """A plan that runs nothing is kept as well, and answers each call as in-process."""
    write(relay_home / "settings.json", {"hooks": {"Stop": [{"hooks": [hook({})]}]}})
    aged()
    for command in ("ls", "pwd", "ls"):
        call = tool_call(project, "gemini", command)
        reply = served(server, call)
        assert normalized(reply) == normalized(answer_call(call))
    assert used(server) == 2


# ---- kept trust checks ---------------------------------------------------------------------
# A plan with a project hook is kept too, and planned again on each call: the hook's trust is
# checked on every call, from what the check found the time before (relay.engine.registry
# keeps it) while every look that check made at the filesystem gives the same answer again
# (relay.config.looks), and its script is read and checked anew for each run. Each test
# below changes one kind of thing a check looks at, after calls answered from a kept check,
# and the very next call answers exactly as the in-process path (which keeps nothing) does.

GUARD_V1 = '#!/bin/sh\ncat >/dev/null\necho \'{"systemMessage": "v1"}\'\n'
GUARD_V2 = '#!/bin/sh\ncat >/dev/null\necho \'{"systemMessage": "v2"}\'\n'


def project_guard(project: Path, command: str = "./check.sh", text: str = GUARD_V1) -> Path:
    """A trusted project hook `check` on PreToolUse running `command`; its script check.sh."""
    script = write(project / "check.sh", text)
    script.chmod(0o755)
    hooks = [{"hooks": [{"name": "check", "command": command}]}]
    write(project / ".relay" / "settings.json", {"hooks": {"PreToolUse": hooks}})
    trust(project)
    return script


def trust(project: Path, *options: str) -> None:
    done = CliRunner().invoke(cli, ["trust", *(options or ["--yes"]), "--cwd", str(project)])
    assert done.exit_code == 0, done.output


def checks_used(server: str) -> int:
    """How many trust checks the server answered from a kept check."""
    figures: dict[str, int] = wait_for_status(server)["trust_checks"]
    return figures["used"]


def said_by_guard(server: str, project: Path) -> str:
    """The guard call's systemMessage, served; asserted the same as the in-process answer."""
    call = tool_call(project, "claude", "ls")
    reply = served(server, call)
    assert normalized(reply) == normalized(answer_call(call))
    said: str = json.loads(reply.stdout)["systemMessage"]
    return said


def settled(server: str, project: Path, expected: str) -> None:
    """Once the files written so far are past the racy window: calls answered `expected`
    from a kept plan and a kept trust check."""
    aged()
    plans, checks = used(server), checks_used(server)
    for _ in range(3):
        assert expected in said_by_guard(server, project)
    assert used(server) >= plans + 2
    assert checks_used(server) >= checks + 2


def test_a_kept_trust_check_sees_a_file_appear_where_the_command_named_one(
    server: str, project: Path, relay_home: Path
) -> None:
    """`./check.sh extra.conf`, no extra.conf when trusted: one made later is in the
    hook's reach (its fingerprint changes), so the next call skips the hook."""
    project_guard(project, "./check.sh extra.conf")
    settled(server, project, "v1")
    write(project / "extra.conf", "x\n")
    assert "not trusted" in said_by_guard(server, project)


def test_a_kept_trust_check_sees_a_module_appear_beside_a_python_guard(
    server: str, project: Path, relay_home: Path
) -> None:
    """A Python guard that imports `helper` if there is one: a helper.py made beside it
    (the folder's listing changes) untrusts it on the next call."""
    write(
        project / "check.py",
        "import json\ntry:\n    import helper\nexcept ImportError:\n    helper = None\n"
        'print(json.dumps({"systemMessage": getattr(helper, "SAID", "v1")}))\n',
    )
    hooks = [{"hooks": [{"name": "check", "command": "python3 check.py"}]}]
    write(project / ".relay" / "settings.json", {"hooks": {"PreToolUse": hooks}})
    trust(project)
    settled(server, project, "v1")
    write(project / "helper.py", 'SAID = "unchecked"\n')
    said = said_by_guard(server, project)
    assert "not trusted" in said and "unchecked" not in said


PYTHON_V1 = 'import json\nprint(json.dumps({"systemMessage": "v1"}))\n'
PYTHON_V2 = PYTHON_V1.replace("v1", "v2")


@pytest.mark.parametrize("form", ["sh inline", "python sealed"])
def test_a_kept_pinned_launch_runs_the_bytes_each_call_read(
    server: str, project: Path, relay_home: Path, form: str
) -> None:
    """A server keeps the launch it pinned a script's bytes into (sh's inline text, a
    Python script's sealed copy) by those bytes: a script edited and trusted again runs
    its new bytes, and edited back and trusted again its old ones, each from the next call."""
    if form == "python sealed":
        name, v1, v2 = "check.py", PYTHON_V1, PYTHON_V2
        write(project / name, v1)
        hooks = [{"hooks": [{"name": "check", "command": "python3 check.py"}]}]
        write(project / ".relay" / "settings.json", {"hooks": {"PreToolUse": hooks}})
        trust(project)
    else:
        name, v1, v2 = "check.sh", GUARD_V1, GUARD_V2
        project_guard(project)
    settled(server, project, "v1")
    for text, said in ((v2, "v2"), (v1, "v1")):
        write(project / name, text)
        trust(project)
        assert said_by_guard(server, project) == said
        settled(server, project, said)


def test_a_kept_trust_check_sees_a_folders_listing_change(
    server: str, project: Path, relay_home: Path
) -> None:
    """`./check.sh conf`: every file under conf/ is in the fingerprint; a file added
    there (nothing else changed) untrusts the hook on the next call, and one taken away
    again trusts it once more."""
    write(project / "conf" / "a.txt", "a\n")
    project_guard(project, "./check.sh conf")
    settled(server, project, "v1")
    write(project / "conf" / "b.txt", "b\n")
    assert "not trusted" in said_by_guard(server, project)
    (project / "conf" / "b.txt").unlink()
    assert said_by_guard(server, project) == "v1"


def test_a_kept_trust_check_sees_a_symbolic_link_retargeted(
    server: str, project: Path, relay_home: Path
) -> None:
    """check.sh is a link to one script; pointed at another (both written long before),
    the next call skips the hook as not trusted."""
    for name, text in (("v1.sh", GUARD_V1), ("v2.sh", GUARD_V2)):
        write(project / name, text).chmod(0o755)
    (project / "check.sh").symlink_to("v1.sh")
    hooks = [{"hooks": [{"name": "check", "command": "./check.sh"}]}]
    write(project / ".relay" / "settings.json", {"hooks": {"PreToolUse": hooks}})
    trust(project)
    settled(server, project, "v1")
    (project / "check.sh").unlink()
    (project / "check.sh").symlink_to("v2.sh")
    said = said_by_guard(server, project)
    assert "not trusted" in said and "v2" not in said


def test_a_kept_trust_check_sees_its_script_edited(
    server: str, project: Path, relay_home: Path
) -> None:
    """The script edited in place, to the same size: skipped as not trusted next call."""
    script = project_guard(project)
    settled(server, project, "v1")
    with open(script, "r+") as stream:
        stream.write(GUARD_V2)
    said = said_by_guard(server, project)
    assert "not trusted" in said and "v2" not in said


def test_a_kept_trust_check_sees_its_script_renamed_over(
    server: str, project: Path, relay_home: Path
) -> None:
    """Another script, written long before, renamed over the trusted one: skipped."""
    script = project_guard(project)
    write(project / "other.sh", GUARD_V2).chmod(0o755)
    settled(server, project, "v1")
    os.replace(project / "other.sh", script)
    said = said_by_guard(server, project)
    assert "not trusted" in said and "v2" not in said


def test_a_kept_trust_check_sees_trust_revoked_and_given(
    server: str, project: Path, relay_home: Path
) -> None:
    """Trust revoked: the next call skips the hook; an untrusted verdict kept in turn, the
    hook trusted again: the next call runs it."""
    project_guard(project)
    settled(server, project, "v1")
    trust(project, "--revoke")
    assert "not trusted" in said_by_guard(server, project)
    aged()
    checks = checks_used(server)
    assert "not trusted" in said_by_guard(server, project)
    assert "not trusted" in said_by_guard(server, project)
    assert checks_used(server) >= checks + 2  # the untrusted verdict is kept too
    trust(project)
    assert said_by_guard(server, project) == "v1"


def test_a_kept_trust_check_sees_an_edited_hook_trusted_again(
    server: str, project: Path, relay_home: Path
) -> None:
    """The script edited (not trusted, and that verdict kept), then `relay trust`: the next
    call runs the new script."""
    script = project_guard(project)
    settled(server, project, "v1")
    script.write_text(GUARD_V2)
    aged()
    checks = checks_used(server)
    assert "not trusted" in said_by_guard(server, project)
    assert "not trusted" in said_by_guard(server, project)
    assert checks_used(server) >= checks + 1
    trust(project)
    assert said_by_guard(server, project) == "v2"


def test_a_kept_trust_check_sees_the_trust_stores_key_files_change(
    server: str, project: Path, relay_home: Path
) -> None:
    """The hook's key file rewritten without its fingerprint: skipped next call. Its
    fingerprint then recorded in the store's keyless file (`keys/_.json`, which did not
    exist): trusted next call."""
    project_guard(project)
    settled(server, project, "v1")
    store = TrustStore(state_file("trust.json"))
    keys = [path for path in store.folder.rglob("keys/*.json") if path.name != "_.json"]
    assert len(keys) == 1, keys
    records = json.loads(keys[0].read_text())
    (fingerprint,) = records
    keys[0].write_text(json.dumps({"0" * 64: records[fingerprint]}))
    assert "not trusted" in said_by_guard(server, project)
    aged()
    checks = checks_used(server)
    assert "not trusted" in said_by_guard(server, project)
    assert checks_used(server) > checks
    store.trust(project, [(fingerprint, "check")])
    assert said_by_guard(server, project) == "v1"
