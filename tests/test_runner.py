"""The process runner, with real processes (DESIGN §6, §9)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from processes import alive
from rendezvous import BOUND, meet

from relay.engine import runner
from relay.engine.command import Launch, prepare_launch
from relay.engine.runner import (
    ProcessResult,
    ProcessSpec,
    install_child_watcher,
    run_process,
    run_processes,
)

pytestmark = pytest.mark.anyio

RESOURCES = Path(__file__).parent / "resources"
# A loaded machine's slack on a documented bound: far under the 30 s the hooks would run.
SLACK = 5.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def env() -> dict[str, str]:
    return dict(os.environ)


@pytest.fixture
def pid_file(tmp_path: Path) -> Path:
    return tmp_path / "pids"


def python_hook(script: str, *args: str) -> Launch:
    return Launch(argv=(sys.executable, str(RESOURCES / script), *args), mode="exec")


def script_hook(script: str, *args: str) -> Launch:
    return Launch(argv=(str(RESOURCES / script), *args), mode="exec")


DRIVERS = ("asyncio", "poll")
_driver = ["asyncio"]


@pytest.fixture(autouse=True, params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test runs with both drivers: inside an asyncio loop, and the synchronous poll loop."""
    _driver[0] = request.param
    yield request.param
    _driver[0] = "asyncio"


async def run(
    launch: Launch,
    env: dict[str, str],
    *,
    stdin: bytes = b"{}",
    cwd: str | None = None,
    timeout: float = 10,
    **options: Any,
) -> ProcessResult:
    if _driver[0] == "asyncio":
        return await run_async(launch, env, stdin=stdin, cwd=cwd, timeout=timeout, **options)
    spec = ProcessSpec(launch=launch, stdin=stdin, env=env, cwd=cwd, timeout=timeout, **options)
    (result,) = await anyio.to_thread.run_sync(run_processes, [spec])
    return result


async def run_async(
    launch: Launch,
    env: dict[str, str],
    *,
    stdin: bytes = b"{}",
    cwd: str | None = None,
    timeout: float = 10,
    **options: Any,
) -> ProcessResult:
    return await run_process(launch, stdin=stdin, env=env, cwd=cwd, timeout=timeout, **options)


def gone(pids: list[int], within: float = 10.0) -> bool:
    """Every pid has died within `within` seconds (SIGKILL is sent, death takes a moment)."""
    deadline = time.monotonic() + within
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def read_pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()]


@pytest.fixture
def reap_strays() -> Iterator[list[int]]:
    """Pids a test deliberately leaves running; killed afterwards."""
    strays: list[int] = []
    yield strays
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# ---- exit codes and streams


@pytest.mark.parametrize("code", [0, 1, 2, 3, 255])
async def test_exit_code_preserved_with_both_streams(env: dict[str, str], code: int) -> None:
    result = await run(python_hook("exit_code.py", str(code)), env)
    assert result.exit_code == code
    assert result.signal is None
    assert not result.timed_out
    assert result.spawn_error is None
    assert result.stdout == b"out\n"
    assert result.stderr == b"err\n"
    assert result.pid is not None
    assert result.duration_ms > 0


async def test_bash_hook_reads_stdin_and_answers(env: dict[str, str]) -> None:
    result = await run(script_hook("both_streams.sh", "2"), env, stdin=b'{"a": 1}')
    assert result.exit_code == 2
    assert result.stdout == b'{"systemMessage": "got 8 bytes"}\n'
    assert result.stderr == b"note on stderr\n"


async def test_sh_reports_127_for_an_unknown_command(env: dict[str, str]) -> None:
    launch = prepare_launch("relay-no-such-command-xyz && true", None, {})
    assert launch.mode == "shell"
    result = await run(launch, env)
    assert result.exit_code == 127
    assert result.spawn_error is None
    assert b"relay-no-such-command-xyz" in result.stderr


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_node_hook(env: dict[str, str]) -> None:
    event = b'{"hook_event_name": "BeforeTool", "tool_name": "Bash"}'
    result = await run(script_hook("echo_stdin.js"), env, stdin=event)
    assert result.exit_code == 0
    assert result.stdout == b'{"systemMessage":"node saw BeforeTool"}\n'


async def test_script_without_shebang_runs_under_sh_like_sh_would(env: dict[str, str]) -> None:
    launch = prepare_launch(str(RESOURCES / "no_shebang"), None, {})
    assert launch.mode == "direct"
    result = await run(launch, env)
    assert result.exit_code == 0
    assert result.stdout == b"no shebang, run by sh\n"
    assert result.launch.mode == "shell"


# ---- environment and working directory


async def test_env_is_exactly_the_given_mapping_and_cwd_is_used(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "RELAY_EVENT": "BeforeTool", "LEVEL": "strict"}
    launch = python_hook("env_cwd.py", "RELAY_EVENT", "LEVEL", "HOME")
    result = await run(launch, env, cwd=str(tmp_path))
    assert result.exit_code == 0
    assert result.stdout.decode() == (
        f'{{"cwd": "{tmp_path}", "env": '
        '{"RELAY_EVENT": "BeforeTool", "LEVEL": "strict", "HOME": null}}\n'
    )


async def test_command_is_looked_up_on_the_path_of_the_given_env(tmp_path: Path) -> None:
    tool = tmp_path / "relay-test-tool"
    tool.write_text("#!/bin/sh\necho found on the PATH of the hook\n")
    tool.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    result = await run(prepare_launch("relay-test-tool", None, {}), env)
    assert result.exit_code == 0
    assert result.stdout == b"found on the PATH of the hook\n"


# ---- spawn failures are results


async def test_missing_executable(env: dict[str, str], tmp_path: Path) -> None:
    launch = prepare_launch("./nope --flag", None, {})
    result = await run(launch, env, cwd=str(tmp_path))
    assert result.spawn_error == "command not found: ./nope"
    assert result.exit_code is None
    assert result.signal is None
    assert result.pid is None
    assert result.launch == launch


async def test_non_executable_file(env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho never\n")
    script.chmod(0o644)
    result = await run(prepare_launch("./script.sh", None, {}), env, cwd=str(tmp_path))
    assert result.spawn_error == (
        "permission denied: ./script.sh is not executable (to fix: chmod +x ./script.sh)"
    )
    assert result.exit_code is None


async def test_bad_working_directory(env: dict[str, str], tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    result = await run(python_hook("exit_code.py", "0"), env, cwd=missing)
    assert result.spawn_error == f"working directory not found: {missing}"
    assert result.exit_code is None


async def test_nul_byte_in_env_is_a_spawn_error(env: dict[str, str]) -> None:
    result = await run(python_hook("exit_code.py", "0"), {**env, "BAD": "a\0b"})
    assert result.spawn_error is not None
    assert result.spawn_error.startswith(f"cannot run {sys.executable}: ")


async def test_empty_argv_is_a_spawn_error(env: dict[str, str]) -> None:
    result = await run(Launch(argv=(), mode="exec"), env)
    assert result.spawn_error == "empty command"


async def test_running_out_of_file_descriptors_is_a_spawn_error(env: dict[str, str]) -> None:
    lowest_free = os.dup(0)
    os.close(lowest_free)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        result = await run(python_hook("exit_code.py", "0"), env)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert result.spawn_error == "cannot create pipes: Too many open files"
    assert os.dup(0) == lowest_free  # nothing leaked
    os.close(lowest_free)


# ---- signals and timeouts


async def test_killed_by_a_signal(env: dict[str, str]) -> None:
    result = await run(script_hook("kill_self.sh"), env)
    assert result.signal == "SIGKILL"
    assert result.exit_code is None
    assert not result.timed_out
    assert result.stdout == b"about to die\n"


async def test_timeout_sends_sigterm_to_the_whole_group(
    env: dict[str, str], pid_file: Path
) -> None:
    started = time.monotonic()
    result = await run(script_hook("fork_and_wait.sh", str(pid_file)), env, timeout=0.5, grace=25)
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.signal == "SIGTERM"
    assert result.exit_code is None
    assert 0.5 <= elapsed < 0.5 + SLACK  # SIGTERM was enough: no wait for the grace
    assert gone(read_pids(pid_file))


@pytest.mark.slow
async def test_hook_ignoring_sigterm_is_killed_after_grace(
    env: dict[str, str], pid_file: Path
) -> None:
    timeout, grace, exit_drain = 0.5, 0.5, 0.5
    started = time.monotonic()
    result = await run(
        script_hook("ignore_term.sh", str(pid_file)),
        env,
        timeout=timeout,
        grace=grace,
        exit_drain=exit_drain,
    )
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.signal == "SIGKILL"
    assert result.exit_code is None
    assert timeout + grace <= elapsed < timeout + grace + exit_drain + SLACK
    hook_pid, child_pid = read_pids(pid_file)
    assert hook_pid == result.pid
    assert gone([hook_pid, child_pid])


@pytest.mark.slow
async def test_result_bound_holds_whatever_descendants_do_with_the_pipes(
    env: dict[str, str], pid_file: Path, reap_strays: list[int]
) -> None:
    # The worst case: the hook ignores SIGTERM, and a descendant in its own session keeps
    # the pipes open past the SIGKILL. The result is still back by timeout + grace + drain.
    command = f"trap '' TERM; setsid sleep 30 & echo $! > {pid_file}; sleep 30"
    timeout, grace, exit_drain = 0.3, 0.3, 0.3
    started = time.monotonic()
    result = await run(
        prepare_launch(command, None, {}), env, timeout=timeout, grace=grace, exit_drain=exit_drain
    )
    elapsed = time.monotonic() - started
    reap_strays.extend(read_pids(pid_file))
    assert result.timed_out
    assert result.signal == "SIGKILL"
    assert timeout + grace <= elapsed < timeout + grace + exit_drain + SLACK


async def test_custom_kill_signal(env: dict[str, str], pid_file: Path) -> None:
    launch = script_hook("fork_and_wait.sh", str(pid_file))
    result = await run(launch, env, timeout=0.3, kill_signal=signal.SIGINT, grace=5, exit_drain=0.2)
    assert result.timed_out
    # bash's background `sleep` ignores SIGINT, the script itself dies of it.
    assert result.signal == "SIGINT"
    assert gone(read_pids(pid_file))


# ---- descendants and the pipes


async def test_background_child_holding_stdout_does_not_hold_the_result(
    env: dict[str, str], pid_file: Path
) -> None:
    exit_drain = 0.5
    started = time.monotonic()
    result = await run(
        script_hook("background_child.sh", str(pid_file)), env, exit_drain=exit_drain
    )
    elapsed = time.monotonic() - started
    assert result.exit_code == 0
    assert result.stdout == b'{"systemMessage": "done"}\n'
    assert elapsed < exit_drain + SLACK
    assert gone(read_pids(pid_file))  # no process left behind


async def test_background_work_in_its_own_session_survives(
    env: dict[str, str], pid_file: Path, reap_strays: list[int]
) -> None:
    # DESIGN §6: a hook that wants background work starts it with setsid.
    command = f"setsid sleep 30 & echo $! > {pid_file}; echo started"
    started = time.monotonic()
    result = await run(prepare_launch(command, None, {}), env, exit_drain=0.3)
    elapsed = time.monotonic() - started
    (background,) = read_pids(pid_file)
    reap_strays.append(background)
    assert result.exit_code == 0
    assert result.stdout == b"started\n"
    assert elapsed < 0.3 + SLACK  # it still holds the pipes: bounded by exit_drain
    time.sleep(0.05)
    assert alive(background)


async def test_hook_that_never_reads_five_megabytes_of_stdin(env: dict[str, str]) -> None:
    started = time.monotonic()
    result = await run(script_hook("ignore_stdin.sh"), env, stdin=b"x" * (5 << 20))
    assert result.exit_code == 0
    assert result.stdout == b"{}\n"
    assert time.monotonic() - started < 20  # a hang would last the timeout


async def test_five_megabytes_of_stdin_arrive_whole(env: dict[str, str]) -> None:
    result = await run(prepare_launch("wc -c", None, {}), env, stdin=b"x" * (5 << 20))
    assert result.exit_code == 0
    assert result.stdout.strip() == str(5 << 20).encode()


@pytest.mark.slow
async def test_fifty_megabytes_of_stdout_are_capped_in_bounded_memory(
    env: dict[str, str],
) -> None:
    cap = 1 << 20
    tracemalloc.start()
    try:
        started = time.monotonic()
        result = await run(python_hook("flood.py", "50"), env, output_cap=cap)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0
    assert len(result.stdout) == cap
    assert result.stdout_truncated
    assert result.stderr == b"flooded\n"
    assert not result.stderr_truncated
    assert peak < 4 * cap  # the cap, a read buffer, the result copy: never the 50 MB
    assert elapsed < 30  # kept reading: never stalled on the full pipe


async def test_each_stream_is_capped_on_its_own(env: dict[str, str]) -> None:
    launch = prepare_launch("echo 0123456789abcdef; echo err >&2", None, {})
    result = await run(launch, env, output_cap=10)
    assert result.stdout == b"0123456789"
    assert result.stdout_truncated
    assert result.stderr == b"err\n"
    assert not result.stderr_truncated


# ---- concurrency and cancellation


async def test_many_hooks_run_concurrently(env: dict[str, str], tmp_path: Path) -> None:
    # Each hook waits until all sixteen have started: run one after another, none would end.
    results: list[ProcessResult] = []

    async def one(index: int) -> None:
        launch = prepare_launch(meet(tmp_path / "arrived", 16, str(index)), None, {})
        results.append(await run(launch, env, timeout=BOUND + 10))

    async with anyio.create_task_group() as group:
        for index in range(16):
            group.start_soon(one, index)
    assert [(result.exit_code, result.timed_out) for result in results] == [(0, False)] * 16


async def test_cancellation_kills_the_process_group(env: dict[str, str], pid_file: Path) -> None:
    launch = script_hook("fork_and_wait.sh", str(pid_file))
    with anyio.move_on_after(5) as timeout_scope:
        async with anyio.create_task_group() as group:
            group.start_soon(run_async, launch, env)
            while not pid_file.exists() or len(pid_file.read_text().split()) < 2:
                await anyio.sleep(0.01)
            group.cancel_scope.cancel()
    assert not timeout_scope.cancelled_caught
    hook_pid, child_pid = read_pids(pid_file)
    assert gone([hook_pid, child_pid])
    with pytest.raises(ChildProcessError):
        os.waitpid(hook_pid, os.WNOHANG)  # reaped, not left a zombie


def test_poll_driver_runs_hooks_in_parallel_in_order_within_the_limit(
    env: dict[str, str], driver: str, tmp_path: Path
) -> None:
    if driver != "poll":
        pytest.skip("the poll driver's own fan-out")
    # A hook of the first four waits until four have started, one of the next four until
    # all eight have: one round of four, then the next, passes; fewer at once never ends.
    # Each notes how many were running when it started: never more than the limit.
    running, started, counts = tmp_path / "running", tmp_path / "started", tmp_path / "counts"
    running.mkdir()

    def hook(index: int) -> str:
        mark = f"{running}/{index}"
        return (
            f": > {mark}; set -- {running}/*; echo $# >> {counts}; "
            f"{meet(started, 4 * (index // 4 + 1), str(index))}; rm {mark}; echo {index}"
        )

    specs = [
        ProcessSpec(
            launch=prepare_launch(hook(index), None, {}),
            stdin=b"",
            env=env,
            cwd=None,
            timeout=BOUND + 10,
        )
        for index in range(8)
    ]
    results = run_processes(specs, max_parallel=4)
    assert [result.stdout for result in results] == [f"{i}\n".encode() for i in range(8)]
    assert max(int(count) for count in counts.read_text().split()) == 4


def waiting_spec(env: dict[str, str], pid_file: Path) -> ProcessSpec:
    """A hook that starts a child and waits 30 s for it (their pids in `pid_file`)."""
    return ProcessSpec(
        launch=script_hook("fork_and_wait.sh", str(pid_file)),
        stdin=b"",
        env=env,
        cwd=None,
        timeout=30,
    )


def test_poll_driver_kills_the_group_when_interrupted(
    env: dict[str, str], pid_file: Path, driver: str
) -> None:
    if driver != "poll":
        pytest.skip("the poll driver's own clean-up")
    spec = waiting_spec(env, pid_file)

    def interrupt_once_started(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    def interrupt_when_both_run() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if pid_file.exists() and len(pid_file.read_text().split()) >= 2:
                break
            time.sleep(0.01)
        signal.pthread_kill(main, signal.SIGALRM)

    main = threading.main_thread().ident
    assert main is not None
    previous = signal.signal(signal.SIGALRM, interrupt_once_started)
    watcher = threading.Thread(target=interrupt_when_both_run)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_processes([spec])
    finally:
        watcher.join()
        signal.signal(signal.SIGALRM, previous)
    assert gone(read_pids(pid_file))


def test_an_interrupt_between_a_hooks_start_and_its_record_leaves_nothing_running(
    env: dict[str, str], pid_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt can land after a hook's process has started and before the poll
    driver holds it (a loaded machine put the one of the test above there once, and its
    hook ran on): that hook's group is ended too."""
    original = runner._HookProcess.__init__

    def started_then_interrupted(self: Any, spec: ProcessSpec, loop: Any) -> None:
        original(self, spec, loop)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if pid_file.exists() and len(pid_file.read_text().split()) >= 2:
                break
            time.sleep(0.01)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner._HookProcess, "__init__", started_then_interrupted)
    spec = waiting_spec(env, pid_file)
    with pytest.raises(KeyboardInterrupt):
        run_processes([spec])
    assert gone(read_pids(pid_file))


async def test_without_pidfd_a_thread_watches_the_exit(
    env: dict[str, str], pid_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "open_pidfd", lambda pid: None)
    result = await run(python_hook("exit_code.py", "2"), env)
    assert (result.exit_code, result.stdout) == (2, b"out\n")
    result = await run(script_hook("background_child.sh", str(pid_file)), env, exit_drain=0.3)
    assert result.exit_code == 0
    assert gone(read_pids(pid_file))


async def test_no_file_descriptor_is_leaked(env: dict[str, str], pid_file: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    await run(python_hook("exit_code.py", "1"), env)  # warm up whatever the loop opens once
    before = open_fds()
    await run(python_hook("exit_code.py", "1"), env)
    await run(prepare_launch("./nope", None, {}), env)
    await run(script_hook("background_child.sh", str(pid_file)), env, exit_drain=0.1)
    await run(script_hook("fork_and_wait.sh", str(pid_file)), env, timeout=0.1)
    with anyio.move_on_after(0.1):
        await run_async(script_hook("fork_and_wait.sh", str(pid_file)), env)
    assert open_fds() == before


def test_install_child_watcher_is_idempotent() -> None:
    policy = asyncio.get_event_loop_policy()
    previous = policy.get_child_watcher()
    try:
        install_child_watcher()
        watcher = policy.get_child_watcher()
        install_child_watcher()
        assert policy.get_child_watcher() is watcher
        assert isinstance(watcher, asyncio.PidfdChildWatcher)
    finally:
        policy.set_child_watcher(previous)


# ---- the two ways of starting a hook


def test_cpython_spawn_primitive_gives_what_popen_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the runner starts hooks with CPython's own primitive (3.11 to 3.13), every
    kind of run and of spawn failure is the result Popen gave: output, exit codes and
    signals, a script without #!, a pinned (sealed) script run by descriptor, a command
    found on the hook's PATH, and each failure's words."""
    assert runner._FORK_EXEC is not None or sys.version_info[:2] > (3, 13)
    bare = tmp_path / "bare.sh"
    bare.write_text("echo no shebang; echo to stderr >&2; exit 3\n")
    bare.chmod(0o755)
    unexecutable = tmp_path / "plain.sh"
    unexecutable.write_text("#!/bin/sh\necho never\n")
    tool = tmp_path / "bin" / "relay-test-tool"
    tool.parent.mkdir()
    tool.write_text('#!/bin/sh\ncat; echo "$PWD $LEVEL"\n')
    tool.chmod(0o755)
    env = {"PATH": f"{tool.parent}:/usr/bin:/bin", "LEVEL": "strict"}
    cwd = str(tmp_path)
    sealed = Launch(
        argv=("pinned.sh", "x"),
        mode="exec",
        sealed=b"#!/bin/sh\necho sealed $1\n",
        sealed_word=0,
    )
    cases = [
        (prepare_launch("relay-test-tool", None, {}), env, cwd),
        (prepare_launch("./bare.sh", None, {}), env, cwd),
        (prepare_launch("kill -9 $$", None, {}), env, cwd),
        (sealed, env, cwd),
        (prepare_launch("./nope", None, {}), env, cwd),
        (prepare_launch("./plain.sh", None, {}), env, cwd),
        (prepare_launch("relay-test-tool", None, {}), env, str(tmp_path / "missing")),
        (prepare_launch("relay-test-tool", None, {}), {**env, "A=B": "c"}, cwd),
        (prepare_launch("relay-test-tool", None, {}), {**env, "BAD": "a\0b"}, cwd),
    ]

    def results() -> list[tuple[Any, ...]]:
        specs = [
            ProcessSpec(launch=launch, stdin=b"the event\n", env=environ, cwd=folder, timeout=30)
            for launch, environ, folder in cases
        ]
        return [
            (r.launch, r.exit_code, r.signal, r.spawn_error, r.stdout, r.stderr, r.pid is None)
            for r in run_processes(specs)
        ]

    primitive = results()
    monkeypatch.setattr(runner, "_FORK_EXEC", None)
    assert primitive == results()
    assert primitive[0][4] == f"the event\n{tmp_path} strict\n".encode()
    assert primitive[1][1:3] == (3, None) and primitive[2][2] == "SIGKILL"
    assert primitive[3][4] == b"sealed x\n"
    assert [spawned[3] is not None for spawned in primitive] == [False] * 4 + [True] * 5


def test_the_callers_work_is_done_while_the_hooks_run(tmp_path: Path) -> None:
    """`meanwhile` runs once the hooks have started and before they are waited for: each
    hook here waits for the file it makes (it would time out were it called after), and
    it is called once however many hooks start, and with none at all."""
    made = tmp_path / "made"
    calls: list[str] = []

    def meanwhile() -> None:
        calls.append("called")
        made.touch()

    wait = f"while [ ! -e {made} ]; do sleep 0.01; done; echo seen"
    specs = [
        ProcessSpec(
            launch=prepare_launch(wait, None, {}),
            stdin=b"",
            env=dict(os.environ),
            cwd=None,
            timeout=30,
        )
        for _ in range(3)
    ]
    results = run_processes(specs, max_parallel=2, meanwhile=meanwhile)
    assert [(result.stdout, result.timed_out) for result in results] == [(b"seen\n", False)] * 3
    assert calls == ["called"]
    assert run_processes([], meanwhile=meanwhile) == [] and calls == ["called"] * 2
