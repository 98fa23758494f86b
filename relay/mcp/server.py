"""`relay mcp`: relay's agent channel as an MCP server on stdio (relay/mcp/protocol.py).

Tools: send_message, check_inbox, list_agents, memory_save, memory_search, memory_list,
memory_forget, and one per user namespace of the settings' `patterns` (`deploy(target,
message)`). See spec/mcp.md. Each tool is a typed function: its signature is its input
schema (relay/mcp/tools.py), its docstring its description.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from relay.mcp.channel import Channel, ChannelError, check_arguments
from relay.mcp.protocol import Server
from relay.mcp.tools import ToolError, tool
from relay.services.memory.namespace import GLOBAL_FLAG
from relay.version import VERSION

INSTRUCTIONS = """relay connects you with the other agents of your team and with a memory that
outlives this session. send_message talks to another agent by name (or "*" for everyone);
check_inbox returns the messages waiting for you (each once). memory_save keeps a fact
for later sessions of this project (add #tags); memory_search finds saved facts."""

BUILTIN_TOOLS = frozenset(
    {
        "send_message",
        "check_inbox",
        "list_agents",
        "memory_save",
        "memory_search",
        "memory_list",
        "memory_forget",
    }
)


def build_server(channel: Channel) -> Server:
    """The MCP server over `channel`: the built-in tools and one per user namespace."""
    server = Server("relay", version=VERSION, instructions=INSTRUCTIONS)

    async def send_message(to: str, body: str, thread: str | None = None) -> str:
        """Send a message to another agent of your team by name, or to "*" for everyone.
        An optional thread id groups a conversation."""
        return await _call(channel.send_message, to, body, thread)  # checked there

    async def check_inbox() -> str:
        """The messages waiting for you, oldest first; each is returned once."""
        return await _call(channel.check_inbox)

    async def list_agents() -> str:
        """The agents of your team and whether they are online."""
        return await _call(channel.list_agents)

    async def memory_save(content: str, tags: list[str] | None = None) -> str:
        """Save a fact for later sessions of this project. Tags may also be written as
        #words in the content."""
        check = {"content": content, "tags": tags}
        text = " ".join([content.strip(), *(f"#{str(tag).lstrip('#')}" for tag in tags or ())])
        return await _call(channel.directive, "memory", "save", text, check=check)

    async def memory_search(query: str) -> str:
        """Saved facts of this project (and global ones) that match the query, best first."""
        return await _call(channel.directive, "memory", "search", query, check={"query": query})

    async def memory_list() -> str:
        """The newest saved facts of this project (and global ones)."""
        return await _call(channel.directive, "memory", "list", "")

    async def memory_forget(id: str, everywhere: bool = False) -> str:
        """Forget the saved fact of this project with this id (as memory_list shows it).
        A global fact, shown in every project, is forgotten only with everywhere=true."""
        text = f"{id} {GLOBAL_FLAG}" if everywhere else id
        return await _call(channel.directive, "memory", "forget", text, check={"id": id})

    for function in (
        send_message,
        check_inbox,
        list_agents,
        memory_save,
        memory_search,
        memory_list,
        memory_forget,
    ):
        server.add(tool(function))
    for namespace in channel.user_namespaces():
        if namespace in BUILTIN_TOOLS:
            print(
                f"relay mcp: the namespace {namespace!r} has the name of a built-in tool; "
                "it is not offered as a tool",
                file=sys.stderr,
            )
            continue
        server.add(
            tool(
                _namespace_tool(channel, namespace),
                name=namespace,
                description=f"Run the project's @{namespace}: handler with a target and a "
                f"message, as the directive `@{namespace}:TARGET MESSAGE` would.",
            )
        )
    return server


def _namespace_tool(channel: Channel, namespace: str) -> Callable[..., Awaitable[str]]:
    async def run(target: str, message: str = "") -> str:
        check = {"target": target, "message": message}
        return await _call(channel.directive, namespace, target, message, check=check)

    return run


async def _call(
    function: Callable[..., Awaitable[str]], *args: Any, check: Mapping[str, object] | None = None
) -> str:
    """A channel call, its arguments (`check`) within their limits first; its refusals
    reach the model as the tool's error text."""
    try:
        check_arguments(check or {})
        return await function(*args)
    except ChannelError as exc:
        raise ToolError(str(exc)) from exc
