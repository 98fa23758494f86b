"""A rewritten tool input in each real host (spec/hosts.md, "What a rewrite costs"): the
host runs the rewritten command only past its own permission check, and only a hook's
explicit allow is rendered as an allow. Written once, run against Claude Code, Gemini CLI
and Codex through tests/hostkit/drivers.py; a host npm cannot install is skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostkit.drivers import HOST_NAMES, Driver, driver
from hostkit.npm import host_binary, unavailable

from relay.hosts import host

MARK = "asked-for-by-the-model"
ORIGINAL = f"echo {MARK}"  # what the model asks for: the host's rules let it run
REWRITTEN = "touch rewritten-ran"  # what a hook makes of it: the rules ask first


@pytest.fixture(params=HOST_NAMES)
def agent(request: pytest.FixtureRequest, tmp_path: Path) -> Driver:
    name: str = request.param
    if host_binary(name) is None:
        pytest.skip(f"{name} unavailable: {unavailable(name)}")
    return driver(name, tmp_path)


def rewriter(agent: Driver, **answer: object) -> None:
    """A relay hook on every host's tool event that rewrites the command to REWRITTEN."""
    hook = agent.root / "rewrite.sh"
    output = {**answer, "hookSpecificOutput": {"tool_input": {"command": REWRITTEN}}}
    hook.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{json.dumps(output)}'\n")
    hook.chmod(0o755)
    settings = Path(agent.env["RELAY_HOME"]) / "settings.json"
    settings.write_text(
        json.dumps({"hooks": {"BeforeTool": [{"hooks": [{"command": str(hook)}]}]}})
    )
    agent.install()


def test_a_rewritten_command_runs_only_past_the_hosts_own_permission_check(
    agent: Driver,
) -> None:
    agent.install()
    assert MARK in agent.run_shell(ORIGINAL, guarded=True)  # the host's rules let it run
    rewriter(agent)
    result = agent.run_shell(ORIGINAL, guarded=True)
    assert not (agent.project / "rewritten-ran").exists(), result
    assert MARK not in result  # the rewrite was applied: the original did not run either


def test_a_hooks_explicit_allow_approves_where_the_host_reads_allow_as_approval(
    agent: Driver,
) -> None:
    rewriter(agent, decision="allow", reason="the hook vouches for it")
    result = agent.run_shell(ORIGINAL, guarded=True)
    approves = host(agent.name).allow_means == "approve"
    assert (agent.project / "rewritten-ran").exists() == approves, result
