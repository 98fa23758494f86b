"""One agent's supervisor: `python -m relay.fleet.supervise LAUNCH_FILE`, started by
`relay up` in the agent's tmux window (the agent's terminal is the window's) or detached
(`--headless`: its output goes to the agent's log file).

It runs the launch's `relay run …`, and when that ends starts it again by the agent's
restart policy, with a back-off that doubles on each restart in a row up to its ceiling,
and gives up after `limit` restarts in a row (a run that lasted `healthy` seconds starts
the count again). The agent keeps its name, so its mail waits for it across restarts.

Signals: SIGTERM or SIGINT stop it (`relay down`): the running `relay run` gets SIGTERM
(SessionEnd with reason `stop`), `grace` seconds, then SIGKILL with its agent. SIGHUP
restarts the agent now (`relay restart`). Its record (records.py) says what it is doing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from relay.fleet import records
from relay.fleet.model import AgentState
from relay.fleet.records import Launch, SupervisorRecord, SupervisorState


class Supervisor:
    def __init__(self, launch: Launch, *, out: int = 2) -> None:
        from relay.engine.processes import process_start_ticks

        self.launch = launch
        self.out = out
        self.record = SupervisorRecord(
            pid=os.getpid(),
            started_ticks=process_start_ticks(os.getpid()),
            state="running",
            mode=launch.mode,
        )
        self.stopping = False
        self.restart_now = False
        self.wake = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None

    # -- signals ------------------------------------------------------------------------

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGHUP, self._restart)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        self._signal_child(signal.SIGTERM)
        self.wake.set()

    def _restart(self, signum: int, frame: FrameType | None) -> None:
        self.restart_now = True
        self._signal_child(signal.SIGTERM)
        self.wake.set()

    def _signal_child(self, signum: int) -> None:
        child = self.child
        if child is not None and child.returncode is None:
            try:
                child.send_signal(signum)
            except OSError:
                return  # it ended meanwhile

    # -- the loop -----------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until stopped or given up; the last run's exit code (0 when stopped)."""
        launch, record = self.launch, self.record
        while not self.stopping:
            started = time.monotonic()
            code = self._run_once()
            ran = time.monotonic() - started
            record.runs += 1
            record.exit_code = code
            if self.stopping:
                break
            if self.restart_now:
                self.restart_now = False
                record.restarts_in_a_row = 0
                self._say(f"{launch.name} restarts now (relay restart)")
                continue
            if ran >= launch.restart.healthy:
                record.restarts_in_a_row = 0
            reason = self._no_restart(code)
            if reason is not None:
                self._save("exited")
                self._publish("exited", code)
                self._say(f"{launch.name} {_ended(code)}; {reason}")
                return code
            delay = min(
                launch.restart.backoff * 2**record.restarts_in_a_row, launch.restart.max_backoff
            )
            record.restarts_in_a_row += 1
            record.next_start = time.time() + delay
            self._save("restarting")
            self._publish("restarting", code, ttl=delay + 10)
            self._say(
                f"{launch.name} {_ended(code)}; starting it again in {delay:g} s "
                f"(restart {record.restarts_in_a_row} of {launch.restart.limit} in a row)"
            )
            self.wake.clear()
            if not (self.stopping or self.restart_now):
                self.wake.wait(delay)
            self.restart_now = False
            record.next_start = None
        self._save("stopped")
        self._say(f"{launch.name} stopped")
        return 0

    def _no_restart(self, code: int) -> str | None:
        """Why the agent is not started again after ending with `code`; None: it is."""
        policy = self.launch.restart.policy
        if policy == "never":
            return "its restart policy is never"
        if policy == "on-failure" and code == 0:
            return "it succeeded (restart policy on-failure)"
        if self.record.restarts_in_a_row >= self.launch.restart.limit:
            return (
                f"gave up after {self.record.restarts_in_a_row} restarts in a row, each within "
                f"{self.launch.restart.healthy:g} s (restart.limit)"
            )
        return None

    def _run_once(self) -> int:
        launch = self.launch
        env = dict(launch.env or os.environ)
        env["RELAY_SUPERVISED"] = "1"  # the session's status says so (reporter.py)
        env["RELAY_RESTARTS"] = str(max(self.record.runs, 0))
        headless = launch.mode == "headless"
        try:
            self.child = subprocess.Popen(
                launch.run,
                cwd=launch.cwd,
                env=env,
                stdin=subprocess.DEVNULL if headless else None,
            )
        except OSError as exc:
            self._say(f"{launch.name} cannot start: {exc.strerror or exc}")
            return 127
        self.record.child = self.child.pid
        self._save("running")
        if self.stopping:  # asked to stop while it was being started
            self._signal_child(signal.SIGTERM)
        code = self._wait_child()
        self.record.child = None
        return code

    def _wait_child(self) -> int:
        """Wait for the run to end; once asked to stop, for at most `grace` seconds, then
        kill it and its agent."""
        child = self.child
        assert child is not None
        while True:
            if self.stopping:
                try:
                    return child.wait(timeout=self.launch.grace)
                except subprocess.TimeoutExpired:
                    self._say(f"{self.launch.name} did not end within {self.launch.grace:g} s")
                    self._kill_run(child)
                    code = child.wait()
                    self._publish("stopped", code)  # its session could not say so
                    return code
            try:
                return child.wait(timeout=0.5)  # -N: killed by signal N
            except subprocess.TimeoutExpired:
                continue

    def _kill_run(self, child: subprocess.Popen[bytes]) -> None:
        """SIGKILL the `relay run` and the agent it started (its session's record says
        which, checked by pid and start time)."""
        from relay.engine.processes import process_alive
        from relay.session.sessions import list_sessions

        agents = [
            record.agent_pid
            for record in list_sessions()
            if record.pid == child.pid and record.agent_pid is not None
        ]
        child.kill()
        for pid in agents:
            if process_alive(pid, None):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    continue

    # -- what it says -------------------------------------------------------------------

    def _publish(self, state: AgentState, code: int | None, *, ttl: float | None = None) -> None:
        """Put the agent's state on the team's status board (`relay agents`, `relay
        watch`): while it restarts, or once it has ended for good. A board that cannot be
        reached is said in the window or log, and supervising goes on."""
        try:
            import anyio

            anyio.run(self._publish_async, state, code, ttl)
        except Exception as exc:  # the board is a view: it never stops the supervisor
            self._say(f"cannot put {self.launch.name}'s state on the status board: {exc}")

    async def _publish_async(self, state: AgentState, code: int | None, ttl: float | None) -> None:
        import anyio

        from relay.config.discovery import load_settings
        from relay.engine.processes import process_start_ticks
        from relay.fleet.boards import open_board
        from relay.fleet.model import HEARTBEAT_TTL, AgentStatus
        from relay.fleet.reporter import host_kind
        from relay.services.messaging.messenger import messaging_config
        from relay.timestamps import utc_millis

        launch = self.launch
        command = launch.run[launch.run.index("--") + 1 :] if "--" in launch.run else []
        now = utc_millis()
        status = AgentStatus(
            team=launch.team,
            name=launch.name,
            state=state,
            since=now,
            heartbeat=now,
            machine=launch.machine,
            host_kind=host_kind(command),
            pid=os.getpid(),
            started_ticks=process_start_ticks(os.getpid()),
            project=launch.cwd,
            command=command,
            exit_code=code,
            restarts=max(self.record.runs - 1, 0),
            supervised=True,
            ttl=ttl if ttl is not None else HEARTBEAT_TTL,
        )
        config = messaging_config(load_settings(Path(launch.cwd), ()))
        with anyio.fail_after(15):
            async with open_board(
                config, launch.team, name=launch.name, on_problem=self._say
            ) as board:
                await board.publish(status)

    def _save(self, state: SupervisorState) -> None:
        self.record.state = state
        import msgspec

        try:
            records.write_atomically(
                records.record_path(self.launch.team, self.launch.name),
                msgspec.json.encode(self.record),
            )
        except OSError as exc:
            self._say(f"cannot write the supervisor's record ({exc.strerror or exc})")

    def _say(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        try:
            os.write(self.out, f"relay up {stamp}: {text}\n".encode(errors="replace"))
        except OSError:
            return  # the window or log is gone: nothing to tell


def _ended(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m relay.fleet.supervise LAUNCH_FILE\n")
        return 2
    try:
        launch = records.read_launch(Path(argv[0]))
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"relay up: cannot read the launch file {argv[0]}: {exc}\n")
        return 1
    if launch.env:  # relay up's environment: RELAY_HOME and the rest, as if run from there
        os.environ.clear()
        os.environ.update(launch.env)
    supervisor = Supervisor(launch)
    supervisor.install_signals()
    supervisor._save("running")
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
