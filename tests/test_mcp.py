"""`relay mcp` end to end: the real server process on stdio, driven by the MCP SDK's own
client (the conformance check: relay serves MCP itself), and by raw lines for what a
client should never send (DESIGN §12, spec/mcp.md)."""

from __future__ import annotations

import json
import os
import queue
import shlex
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from processes import alive
from scripted_sessions import RELAY, agent, finish, polled, reads, run_session, wait_for

if TYPE_CHECKING:
    from mcp import ClientSession

BUILTIN_TOOLS_IN_ORDER = [
    "send_message",
    "check_inbox",
    "list_agents",
    "memory_save",
    "memory_search",
    "memory_list",
    "memory_forget",
]
BUILTIN_TOOLS = set(BUILTIN_TOOLS_IN_ORDER)


pytestmark = pytest.mark.usefixtures("team_default")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


@pytest.fixture
def user_settings(relay_home: Path, tmp_path: Path) -> Path:
    """A `deploy` handler in the user's settings that records what it got."""
    record = tmp_path / "deploys.jsonl"
    file = relay_home / "settings.json"
    file.write_text(
        json.dumps(
            {
                "patterns": {
                    "deploy": {
                        "command": f"{{ cat; echo; }} >> '{record}'; echo 'deploying to staging'"
                    }
                }
            }
        )
    )
    return record


@asynccontextmanager
async def connect(
    project: Path, relay_home: Path, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    # The SDK (and pydantic) imported here, not with the module: about half a CPU-second
    # that each of the suite's workers paid to collect this file.
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=RELAY,
        args=["mcp", *args],
        cwd=str(project),
        env={
            "RELAY_HOME": str(relay_home),
            "RELAY_SYSTEM_SETTINGS": str(relay_home / "no-system-settings.json"),
            **(env or {}),
        },
    )
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> tuple[bool, str]:
    """(is_error, text) of one tool call."""
    result = await session.call_tool(tool, arguments)
    text = "\n".join(part.text for part in result.content if hasattr(part, "text"))
    return bool(result.is_error), text


def test_the_tools_are_the_builtins_and_one_per_user_namespace(
    project: Path, relay_home: Path, user_settings: Path
) -> None:
    async def main() -> set[str]:
        async with connect(project, relay_home, "--name", "Alice") as session:
            listed = await session.list_tools()
            deploy = next(tool for tool in listed.tools if tool.name == "deploy")
            assert set(deploy.input_schema["properties"]) == {"target", "message"}
            return {tool.name for tool in listed.tools}

    assert anyio.run(main) == BUILTIN_TOOLS | {"deploy"}


def test_a_namespace_tool_runs_its_handler_as_a_directive_from_a_tool(
    project: Path, relay_home: Path, user_settings: Path
) -> None:
    async def main() -> tuple[bool, str]:
        async with connect(project, relay_home, "--name", "Alice") as session:
            return await call(session, "deploy", target="staging", message="release 1.4.2")

    assert anyio.run(main) == (False, "deploying to staging")
    event = json.loads(user_settings.read_text().splitlines()[0])
    assert {key: event[key] for key in ("namespace", "target", "message", "source")} == {
        "namespace": "deploy",
        "target": "staging",
        "message": "release 1.4.2",
        "source": "tool",
    }
    assert event["agent_name"] == "Alice"


def test_a_message_sent_by_tool_reaches_another_session(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    async def send() -> tuple[bool, str]:
        # Bob, served by `relay mcp --name Bob` outside any session, is known to the team.
        async with connect(project, relay_home, "--name", "Bob") as bob:
            agents = await call(bob, "list_agents")
            assert agents == (False, "Agents in team default:\n- Bob: live (you)"), agents
        async with connect(project, relay_home, "--name", "Alice") as session:
            return await call(session, "send_message", to="Bob", body="the build is green")

    error, text = anyio.run(send)
    assert not error and text.startswith("✓ Queued for Bob"), text
    record = tmp_path / "bob.jsonl"
    code, _ = run_session(agent([{"read": "mail"}], record), project, name="Bob")
    assert code == 0
    ((label, line),) = reads(record)
    assert label == "mail" and line.startswith("Relay message from Alice [")
    assert line.endswith("]: the build is green")


def test_check_inbox_returns_each_message_once_and_acknowledges_it(
    project: Path, relay_home: Path
) -> None:
    env = {**os.environ, "RELAY_HOME": str(relay_home)}

    async def main() -> list[tuple[bool, str]]:
        async with connect(project, relay_home, "--name", "Alice") as session:
            await anyio.run_process(
                [
                    RELAY,
                    "send",
                    "--as",
                    "Bob",
                    "--cwd",
                    str(project),
                    "Alice",
                    "please review PR 12",
                ],
                env=env,
            )
            return [await call(session, "check_inbox"), await call(session, "check_inbox")]

    (first_error, first), second = anyio.run(main)
    assert not first_error and "Relay message from Bob [" in first
    assert first.endswith("]: please review PR 12")
    assert second == (False, "No messages for Alice.")
    inbox = subprocess.run(
        [RELAY, "inbox", "--all", "--json", "--cwd", str(project), "Alice"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    (delivery,) = json.loads(inbox.stdout)
    assert (delivery["state"], delivery["evidence"]) == (
        "acked",
        "returned by relay mcp check_inbox",
    )


def test_memory_save_of_the_same_fact_twice_gives_back_the_same_id(
    project: Path, relay_home: Path
) -> None:
    async def save_twice() -> list[tuple[bool, str]]:
        async with connect(project, relay_home, env={"RELAY_AGENT_NAME": "Alice"}) as session:
            return [
                await call(session, "memory_save", content="deploys need the VPN", tags=["ops"]),
                await call(session, "memory_save", content="deploys need the VPN ", tags=["ops"]),
            ]

    (error, first), (again_error, again) = anyio.run(save_twice)
    assert not error and not again_error, (first, again)
    assert first.startswith("✓ Saved to memory [")
    memory_id = first.removeprefix("✓ Saved to memory [").rstrip("]")
    assert again == f"✓ Already saved as [{memory_id}]"


def test_a_memory_saved_by_tool_is_found_by_a_directive(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    async def save() -> tuple[bool, str]:
        async with connect(project, relay_home, env={"RELAY_AGENT_NAME": "Alice"}) as session:
            return await call(session, "memory_save", content="the API uses OAuth", tags=["auth"])

    error, text = anyio.run(save)
    assert not error and text.startswith("✓ Saved to memory ["), text
    record = tmp_path / "search.jsonl"
    steps = [{"print": "@memory:search oauth"}, {"read": "found"}]
    code, _ = run_session(
        agent(steps, record), project, name="Carol", settings_files=(), inject=True
    )
    assert code == 0
    ((_, line),) = reads(record)
    assert "the API uses OAuth #auth" in line


def test_a_call_that_cannot_be_tied_to_an_agent_is_a_clear_error(
    project: Path, relay_home: Path
) -> None:
    async def main() -> tuple[bool, str]:
        async with connect(project, relay_home, env={"RELAY_AGENT_NAME": ""}) as session:
            return await call(session, "send_message", to="Bob", body="hi")

    error, text = anyio.run(main)
    assert error
    assert "relay does not know which agent is calling" in text
    assert "relay mcp --name NAME" in text


def test_a_namespace_policy_applies_to_tool_calls(
    project: Path, relay_home: Path, user_settings: Path
) -> None:
    settings = json.loads((relay_home / "settings.json").read_text())
    settings["directives"] = {"deploy": {"from": ["terminal"]}, "memory": {"confirm": ["forget"]}}
    (relay_home / "settings.json").write_text(json.dumps(settings))

    async def main() -> list[tuple[bool, str]]:
        async with connect(project, relay_home, "--name", "Alice") as session:
            return [
                await call(session, "deploy", target="prod", message="now"),
                await call(session, "memory_forget", id="3f9a12bc"),
            ]

    (deploy_error, deploy), (forget_error, forget) = anyio.run(main)
    assert deploy_error and "not accepted from a tool call" in deploy
    assert forget_error and "needs the human's confirmation" in forget
    assert not user_settings.exists()


def test_a_huge_text_is_refused_not_stored(project: Path, relay_home: Path) -> None:
    async def main() -> tuple[bool, str]:
        async with connect(project, relay_home, "--name", "Alice") as session:
            return await call(session, "memory_save", content="x" * 300_000)

    error, text = anyio.run(main)
    assert error and "at most 100,000" in text


@pytest.mark.parametrize("argv", [["mcp", "--help"]])
def test_relay_mcp_has_help(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "relay", *argv], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and "MCP" in done.stdout


# -- who may speak as whom (issue 29) ------------------------------------------------------

CLIENT = """
import json, os, sys
import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

async def main():
    relay, result = sys.argv[1], sys.argv[2]
    params = StdioServerParameters(command=relay, args=["mcp"], env=dict(os.environ))
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                sent = await session.call_tool("send_message", {"to": "Bob", "body": "from inside"})
    text = "".join(part.text for part in sent.content if hasattr(part, "text"))
    with open(result, "w") as out:
        json.dump({"error": bool(sent.is_error), "text": text}, out)

anyio.run(main)
"""
"""An agent that starts `relay mcp` as its MCP server (as a host does, passing its own
environment on) and sends one message through it."""


def _agents(project: Path) -> dict[str, dict[str, Any]]:
    listed = subprocess.run(
        [RELAY, "agents", "--json"], cwd=project, capture_output=True, text=True, check=True
    )
    return {agent["name"]: agent for agent in json.loads(listed.stdout)}


def _live(project: Path, name: str) -> bool:
    """Whether `relay agents --json`, run in this process, shows NAME live: what waits poll."""
    listed = json.loads(polled("agents", "--json", "--cwd", str(project)))
    return any(agent["name"] == name and agent["state"] == "live" for agent in listed)


def _register_bob(project: Path, relay_home: Path) -> None:
    async def main() -> None:
        async with connect(project, relay_home, "--name", "Bob") as bob:
            assert (await call(bob, "list_agents"))[0] is False

    anyio.run(main)


def _bobs_mail(project: Path) -> list[tuple[str, str]]:
    inbox = subprocess.run(
        [RELAY, "inbox", "Bob", "--all", "--json"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    )
    return [
        (delivery["message"]["sender"], delivery["message"]["body"])
        for delivery in json.loads(inbox.stdout)
    ]


def test_a_server_cannot_speak_as_a_live_agent_by_claiming_its_session(
    project: Path, relay_home: Path, user_settings: Path
) -> None:
    """Issue 29: `RELAY_AGENT_NAME=Alice relay mcp` with a made-up session id (or with
    Alice's real one, which other processes of the user can read) sent as Alice while she
    was live. Only a server started inside her session may."""
    _register_bob(project, relay_home)
    alice = subprocess.Popen(
        [RELAY, "run", "--headless", "--name", "Alice", "--", "sleep", "600"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=project,
    )
    try:
        wait_for(lambda: _live(project, "Alice"), "Alice live")
        real_session = _agents(project)["Alice"]["session_id"]

        async def claim(session_id: str) -> list[tuple[bool, str]]:
            env = {"RELAY_AGENT_NAME": "Alice", "RELAY_SESSION_ID": session_id}
            async with connect(project, relay_home, env=env) as session:
                return [
                    await call(session, "send_message", to="Bob", body="I am Alice"),
                    await call(session, "check_inbox"),
                    await call(session, "deploy", target="prod", message="as Alice"),
                ]

        for session_id in ("made-up-session", real_session):
            (sent_error, sent), (inbox_error, inbox), _ = anyio.run(claim, session_id)
            assert sent_error and "belongs to a live agent" in sent, sent
            assert inbox_error and "belongs to a live agent" in inbox, inbox
        assert _bobs_mail(project) == []
        # The hooks of its other tools are not told the name it could not take up either.
        events = [json.loads(line) for line in user_settings.read_text().splitlines()]
        assert [event["agent_name"] for event in events] == [None, None]
        assert _agents(project)["Alice"]["session_id"] == real_session  # her presence stays
    finally:
        alice.terminate()
        finish(alice)


def test_a_server_inside_its_agents_session_speaks_as_that_agent(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    """The agent `relay run --name Alice` wraps starts `relay mcp` (a host's MCP server):
    the server descends from Alice's relay process, so it acts for Alice."""
    _register_bob(project, relay_home)
    client, result = tmp_path / "client.py", tmp_path / "result.json"
    client.write_text(CLIENT)
    command = [sys.executable, str(client), RELAY, str(result)]
    alice = subprocess.Popen(
        [RELAY, "run", "--headless", "--name", "Alice", "--", *command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=project,
    )
    code, err = finish(alice, timeout=120)
    assert code == 0, err
    sent = json.loads(result.read_text())
    assert not sent["error"] and sent["text"].startswith("✓ Queued for Bob"), sent
    assert _bobs_mail(project) == [("Alice", "from inside")]


def test_arguments_over_their_limits_are_refused_before_any_hook_runs(
    project: Path, relay_home: Path, user_settings: Path
) -> None:
    """Issue 29: a 20 MB target ran the handler with a 41 MB event, and logged it. Every
    argument is capped as `relay send` and a directive cap it; the refusal names it."""
    huge = "x" * 2_000_000

    async def main() -> list[tuple[bool, str]]:
        async with connect(project, relay_home, "--name", "Alice") as session:
            return [
                await call(session, "deploy", target=huge, message="now"),
                await call(session, "deploy", target="two words", message="now"),
                await call(session, "send_message", to=huge, body="hi"),
                await call(session, "send_message", to="Bob", body="hi", thread=huge),
                await call(session, "send_message", to="Bob", body="é" * 40_000),
                await call(session, "memory_save", content="fact", tags=["t"] * 100),
                await call(session, "memory_search", query=huge),
                await call(session, "memory_forget", id=huge),
            ]

    answers = anyio.run(main)
    assert all(error for error, _ in answers), answers
    # The SDK puts "Error executing tool NAME: " before the refusal.
    texts = [text.partition(": ")[2] for _, text in answers]
    assert texts[0] == "`target` is 2,000,000 characters; at most 200"
    assert "one word" in texts[1]
    assert texts[2] == "`to` is 2,000,000 characters; at most 64"
    assert texts[3] == "`thread` is 2,000,000 characters; at most 200"
    assert "not sent: message body is 80000 bytes; the limit is 65536" in texts[4]
    assert texts[5] == "`tags` has 100 entries; at most 64"
    assert texts[6] == "`query` is 2,000,000 characters; at most 100,000"
    assert texts[7] == "`id` is 2,000,000 characters; at most 200"
    assert not user_settings.exists()  # the handler never ran
    logged = subprocess.run(
        [RELAY, "hooks", "log", "--all", "--json"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(logged.stdout) == []  # and nothing was logged


STOP_WITH_DIRECTIVE = {
    "session_id": "host-session",
    "hook_event_name": "Stop",
    "stop_hook_active": False,
    "last_assistant_message": "@relay:Bob hello from the hook",
}


def test_a_hook_call_cannot_speak_as_a_live_agent_by_claiming_its_session(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    """The host's hook path had the same hole as `relay mcp`: `RELAY_AGENT_NAME=Alice
    RELAY_SESSION_ID=fake relay hooks run Stop` sent as live Alice. A call from inside her
    `relay run` (here, `relay hooks run` as her agent's child) still speaks as her."""
    _register_bob(project, relay_home)
    event = json.dumps(STOP_WITH_DIRECTIVE)
    inside = tmp_path / "inside.json"
    script = tmp_path / "agent.sh"
    script.write_text(
        f"printf '%s' {shlex.quote(event)} | {shlex.quote(RELAY)} hooks run --dialect claude Stop"
        f" > {shlex.quote(str(inside))}\nexec sleep 600\n"
    )
    alice = subprocess.Popen(
        [RELAY, "run", "--headless", "--name", "Alice", "--", "sh", str(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=project,
    )
    try:
        wait_for(lambda: _live(project, "Alice"), "Alice live")
        wait_for(lambda: inside.exists() and inside.stat().st_size > 0, "Alice's own hook call")
        assert _bobs_mail(project) == [("Alice", "hello from the hook")]
        real_session = _agents(project)["Alice"]["session_id"]
        for session_id in ("made-up-session", real_session):
            claimed = subprocess.run(
                [RELAY, "hooks", "run", "--dialect", "claude", "Stop"],
                input=event.replace("hello from the hook", "forged"),
                env={**os.environ, "RELAY_AGENT_NAME": "Alice", "RELAY_SESSION_ID": session_id},
                cwd=project,
                capture_output=True,
                text=True,
                check=False,
            )
            assert "belongs to a live agent" in claimed.stdout + claimed.stderr, claimed
        assert _bobs_mail(project) == [("Alice", "hello from the hook")]
    finally:
        alice.terminate()
        finish(alice)


HOST = """
import os, subprocess, sys, time
import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

async def main():
    relay, event, ready, stop, inside = sys.argv[1:6]
    params = StdioServerParameters(command=relay, args=["mcp"], env=dict(os.environ))
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool("list_agents", {})
                # One of this host's own hook calls: a sibling of its MCP server.
                with open(inside, "w") as out:
                    subprocess.run([relay, "hooks", "run", "--dialect", "claude", "Stop"],
                                   input=event.encode(), stdout=out, check=False)
                open(ready, "w").close()
                while not os.path.exists(stop):
                    await anyio.sleep(0.05)

anyio.run(main)
"""
"""A host with relay installed: it starts `relay mcp` (which holds its agent's name while
it runs) and makes one hook call of its own, then waits to be told to stop."""


def test_a_hosts_own_hook_calls_speak_as_its_agent_and_no_one_else_does(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    """A host-installed agent's name is held by the host's MCP server; its hook calls are
    that server's siblings, so they are inside the agent; a call from outside is not."""
    _register_bob(project, relay_home)
    event = json.dumps(STOP_WITH_DIRECTIVE)
    host_script, ready, stop, inside = (
        tmp_path / "host.py",
        tmp_path / "ready",
        tmp_path / "stop",
        tmp_path / "inside.json",
    )
    host_script.write_text(HOST)
    host = subprocess.Popen(
        [sys.executable, str(host_script), RELAY, event, str(ready), str(stop), str(inside)],
        env={**os.environ, "RELAY_AGENT_NAME": "Carol"},
        cwd=project,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(ready.exists, "the host's own hook call")
        assert _agents(project)["Carol"]["state"] == "live"
        forged = subprocess.run(
            [RELAY, "hooks", "run", "--dialect", "claude", "Stop"],
            input=event.replace("hello from the hook", "forged"),
            env={**os.environ, "RELAY_AGENT_NAME": "Carol"},
            cwd=project,
            capture_output=True,
            text=True,
            check=False,
        )
        assert "belongs to a live agent" in forged.stdout + forged.stderr, forged
        assert _bobs_mail(project) == [("Carol", "hello from the hook")]
    finally:
        stop.touch()
        finish(host)


def test_only_a_call_from_inside_a_session_tells_it_that_the_hosts_hooks_read_it(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    """A hook call marks a `relay run` session as read by its host's hooks, and the session
    then leaves the directives on its screen to them: a call that only claims the session's
    id (anyone of the user can read it) must not silence them."""
    from relay.session.sessions import hooked_marker

    prompt = {"session_id": "host", "hook_event_name": "UserPromptSubmit", "prompt": "hi"}
    script = tmp_path / "agent.sh"
    script.write_text(
        f"sleep 1\nprintf '%s' {shlex.quote(json.dumps(prompt))} | {shlex.quote(RELAY)} hooks"
        f" run --dialect claude UserPromptSubmit >/dev/null\nexec sleep 600\n"
    )
    outsider = subprocess.Popen(
        [RELAY, "run", "--headless", "--name", "Alice", "--", "sleep", "600"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=project,
    )
    insider = subprocess.Popen(
        [RELAY, "run", "--headless", "--name", "Dave", "--", "sh", str(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=project,
    )
    try:
        wait_for(lambda: _live(project, "Alice"), "Alice live")
        wait_for(lambda: _live(project, "Dave"), "Dave live")
        alice, dave = (_agents(project)[name]["session_id"] for name in ("Alice", "Dave"))
        wait_for(hooked_marker(dave).exists, "Dave's own hook call marks his session")
        claimed = subprocess.run(
            [RELAY, "hooks", "run", "--dialect", "claude", "UserPromptSubmit"],
            input=json.dumps(prompt),
            env={**os.environ, "RELAY_SESSION_ID": alice},
            cwd=project,
            capture_output=True,
            text=True,
            check=False,
        )
        assert claimed.returncode == 0, claimed.stderr
        assert not hooked_marker(alice).exists()
    finally:
        for process in (outsider, insider):
            process.terminate()
            finish(process)


# -- relay's own MCP server: the protocol as the SDK served it, and bad input -------------


def test_the_tools_are_listed_as_the_sdk_made_them_of_the_same_functions(
    project: Path, relay_home: Path, user_settings: Path
) -> None:
    """relay serves MCP itself; the names, descriptions and input schemas are still the
    ones the official SDK generated from the tools' signatures (hosts see no change)."""
    from mcp.server.mcpserver.tools.base import Tool as SDKTool

    from relay.engine.system import HookSystem
    from relay.mcp.channel import Channel
    from relay.mcp.server import build_server

    hooks = HookSystem(cwd=project)
    channel = Channel(hooks, name="Alice")
    try:
        tools = build_server(channel).tools.values()
        made = [
            SDKTool.from_function(
                tool.function,
                name=tool.name,
                # The SDK's own default for the built-ins: the function's docstring.
                description=None if tool.name in BUILTIN_TOOLS else tool.description,
                structured_output=False,
            )
            for tool in tools
        ]
    finally:
        channel.close()
        hooks.close()
    expected = [(sdk.name, sdk.description, sdk.parameters) for sdk in made]

    async def main() -> list[tuple[str, str | None, dict[str, Any]]]:
        async with connect(project, relay_home, "--name", "Alice") as session:
            listed = await session.list_tools()
            return [(tool.name, tool.description, tool.input_schema) for tool in listed.tools]

    listed = anyio.run(main)
    assert [name for name, _, _ in listed] == [*BUILTIN_TOOLS_IN_ORDER, "deploy"]
    assert listed == expected


def test_relay_does_not_import_the_sdk() -> None:
    """The SDK cost every host 1.2 s of CPU at each start of `relay mcp`: it is a test
    dependency now (the conformance client), never imported by relay."""
    import ast

    import relay

    importing = []
    for path in Path(relay.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            importing += [str(path) for name in names if name.split(".")[0] in ("mcp", "mcp_types")]
    assert importing == []


INITIALIZE_PARAMS = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"},
}
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE_PARAMS}


class RawClient:
    """`relay mcp` driven line by line, as a host writes to it (bad lines included)."""

    def __init__(self, project: Path, *args: str) -> None:
        self.process = subprocess.Popen(
            [RELAY, "mcp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=project,
        )
        self.answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.answers.put(json.loads(line))
        self.answers.put(None)

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.process.stdin is not None
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def next(self) -> dict[str, Any]:
        answer = self.answers.get(timeout=60)
        assert answer is not None, "relay mcp ended"
        return answer

    def ask(self, request_id: int, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        self.send(message if params is None else {**message, "params": params})

    def initialize(self) -> dict[str, Any]:
        self.send(INITIALIZE)
        answer = self.next()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def end(self) -> tuple[int, str]:
        """Close stdin: the server's exit code and stderr."""
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=60)
        self.reader.join(timeout=60)
        return code, self.process.stderr.read().decode()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def test_initialize_answers_the_clients_protocol_version_or_the_newest(
    project: Path, relay_home: Path
) -> None:
    from relay.version import VERSION

    answers = []
    for version in ("2024-11-05", "2025-11-25", "1999-01-01"):
        with RawClient(project) as client:
            client.send({**INITIALIZE, "params": {**INITIALIZE_PARAMS, "protocolVersion": version}})
            answers.append(client.next())
            assert client.end()[0] == 0
    assert [answer["result"]["protocolVersion"] for answer in answers] == [
        "2024-11-05",
        "2025-11-25",
        "2025-11-25",
    ]
    result = answers[0]["result"]
    assert result["serverInfo"] == {"name": "relay", "version": VERSION}
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["instructions"].startswith("relay connects you with the other agents")


def test_bad_messages_each_get_an_error_and_the_server_keeps_serving(
    project: Path, relay_home: Path
) -> None:
    """The SDK's server dropped a line that was not JSON or not a request without a word,
    leaving the client waiting: each gets its JSON-RPC error now."""
    with RawClient(project, "--name", "Alice") as client:
        client.ask(1, "tools/list")  # before initialize
        assert client.next()["error"]["code"] == -32602
        client.send({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"x": 1}})
        assert client.next()["error"]["code"] == -32602
        assert client.initialize()["result"]["serverInfo"]["name"] == "relay"
        bad: list[tuple[dict[str, Any] | bytes, int, object]] = [
            (b"{not json", -32700, None),
            (b"[" * 100_000, -32700, None),
            (b"[1, 2]", -32600, None),
            (b'"ping"', -32600, None),
            ({"id": 3, "method": "ping"}, -32600, 3),
            ({"jsonrpc": "2.0", "id": 4, "method": 5}, -32600, 4),
            ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, -32600, None),
            ({"jsonrpc": "2.0", "id": None, "method": "ping"}, -32600, None),
            ({"jsonrpc": "2.0", "id": 5}, -32600, 5),
            ({"jsonrpc": "2.0", "id": 6, "method": "sampling/nothing"}, -32601, 6),
            ({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": [1]}, -32602, 7),
            ({"jsonrpc": "2.0", "id": 8, "method": "tools/call"}, -32602, 8),
            ({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": 5}}, -32602, 9),
            (
                {
                    "jsonrpc": "2.0",
                    "id": 10,
                    "method": "tools/call",
                    "params": {"name": "list_agents", "arguments": [1]},
                },
                -32602,
                10,
            ),
        ]
        for message, code, request_id in bad:
            client.send(message)
            answer = client.next()
            assert (answer["id"], answer["error"]["code"]) == (request_id, code), (message, answer)
        # A response to nothing, an unknown notification: ignored, as the spec says.
        client.send({"jsonrpc": "2.0", "id": 99, "result": {}})
        client.send({"jsonrpc": "2.0", "method": "notifications/whatever"})
        # Bytes that are not UTF-8 inside a string are replaced, as the SDK's reader did.
        client.send(b'{"jsonrpc": "2.0", "id": 11, "method": "ping", "params": {"x": "\xff"}}')
        assert client.next() == {"jsonrpc": "2.0", "id": 11, "result": {}}
        client.ask(12, "resources/list")
        assert client.next()["result"] == {"resources": []}
        code, err = client.end()
    assert code == 0, err
    assert "Traceback" not in err


def test_a_line_over_the_limit_is_refused_and_the_next_one_served(
    project: Path, relay_home: Path
) -> None:
    from relay.mcp.protocol import MAX_LINE

    with RawClient(project) as client:
        client.initialize()
        huge = {"name": "memory_search", "arguments": {"query": "x" * MAX_LINE}}
        client.ask(1, "tools/call", huge)
        client.ask(2, "ping")
        refused = client.next()
        assert (refused["id"], refused["error"]["code"]) == (None, -32600)
        assert f"at most {MAX_LINE:,}" in refused["error"]["data"]
        assert client.next() == {"jsonrpc": "2.0", "id": 2, "result": {}}
        assert client.end()[0] == 0


def test_bad_arguments_are_tool_errors_that_name_the_argument(
    project: Path, relay_home: Path, user_settings: Path
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("nope", {}),
        ("deploy", {}),
        ("deploy", {"target": 5}),
        ("deploy", {"target": None}),
        ("memory_save", {"content": "c", "tags": "ops"}),
        ("memory_save", {"content": "c", "tags": [1]}),
        ("memory_forget", {"id": "x", "everywhere": "maybe"}),
        # As the SDK took them: a list as JSON text, a flag as a word, an extra argument.
        ("memory_save", {"content": "the VPN is needed", "tags": '["ops"]'}),
        ("memory_forget", {"id": "nothing", "everywhere": "true"}),
        ("deploy", {"target": "staging", "colour": "blue"}),
    ]
    with RawClient(project, "--name", "Alice") as client:
        client.initialize()
        answers = []
        for request_id, (name, arguments) in enumerate(calls, start=1):
            client.ask(request_id, "tools/call", {"name": name, "arguments": arguments})
            answer = client.next()
            assert answer["id"] == request_id
            (content,) = answer["result"]["content"]
            answers.append((answer["result"]["isError"], content["text"]))
        assert client.end()[0] == 0
    assert answers == [
        (True, "Unknown tool: nope"),
        (True, "Error executing tool deploy: `target` is required"),
        (True, "Error executing tool deploy: `target` must be text, not a number"),
        (True, "Error executing tool deploy: `target` must be text, not null"),
        (True, "Error executing tool memory_save: `tags` must be a list of text, not text"),
        (True, "Error executing tool memory_save: `tags[0]` must be text, not a number"),
        (True, "Error executing tool memory_forget: `everywhere` must be true or false, not text"),
        (False, answers[7][1]),
        (False, "No memory with id nothing."),
        (False, "deploying to staging"),
    ]
    assert answers[7][1].startswith("✓ Saved to memory [")


@pytest.fixture
def slow_settings(relay_home: Path, tmp_path: Path) -> Path:
    """A `slow` handler that writes its pid and then sleeps (until it is cancelled)."""
    pid_file = tmp_path / "slow.pid"
    command = f"cat > /dev/null; echo $$ > '{pid_file}.tmp'; mv '{pid_file}.tmp' '{pid_file}'; exec sleep 600"
    (relay_home / "settings.json").write_text(
        json.dumps({"patterns": {"slow": {"command": command}}})
    )
    return pid_file


def test_a_slow_tool_does_not_hold_up_ping_and_a_cancelled_one_stops_unanswered(
    project: Path, relay_home: Path, slow_settings: Path
) -> None:
    with RawClient(project, "--name", "Alice") as client:
        client.initialize()
        client.ask(5, "tools/call", {"name": "slow", "arguments": {"target": "x"}})
        wait_for(slow_settings.exists, "the slow handler started")
        client.ask(6, "ping")
        assert client.next() == {"jsonrpc": "2.0", "id": 6, "result": {}}
        pid = int(slow_settings.read_text())
        assert alive(pid)
        cancel = {"requestId": 5, "reason": "the user pressed Esc"}
        client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        wait_for(lambda: not alive(pid), "the cancelled call's handler to be stopped")
        client.ask(7, "ping")
        # Never answered: the next answer is the ping's.
        assert client.next() == {"jsonrpc": "2.0", "id": 7, "result": {}}
        assert client.end()[0] == 0
        assert client.answers.get(timeout=60) is None  # nothing came after


def test_eof_ends_the_server_and_what_still_runs_is_answered_connection_closed(
    project: Path, relay_home: Path, slow_settings: Path
) -> None:
    with RawClient(project, "--name", "Alice") as client:
        client.initialize()
        client.ask(5, "tools/call", {"name": "slow", "arguments": {"target": "x"}})
        wait_for(slow_settings.exists, "the slow handler started")
        pid = int(slow_settings.read_text())
        code, err = client.end()
        assert code == 0, err
        assert client.answers.get(timeout=60) == {
            "jsonrpc": "2.0",
            "id": 5,
            "error": {"code": -32000, "message": "Connection closed"},
        }
    wait_for(lambda: not alive(pid), "the handler of the call EOF cancelled to be stopped")


def test_a_server_without_stdin_says_so(project: Path, relay_home: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", f"exec {shlex.quote(RELAY)} mcp <&-"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "relay mcp serves MCP on stdin and stdout, and its stdin is closed" in done.stderr
    assert "Traceback" not in done.stderr
