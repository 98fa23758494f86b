"""The @memory: namespace, backend selection, session integration and `relay memory`."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from scripted_sessions import RELAY, agent, reads

from relay.cli.main import cli
from relay.config.discovery import load_settings
from relay.services.memory.backends import memory_config
from relay.services.memory.model import ImportCounts, Memory, MemoryHit, SavedMemory
from relay.services.memory.namespace import END_PROMPT, handle, start_summary, tags_of
from relay.session.wrapper import Relay


class ListMemory:
    """A minimal in-test MemoryService: enough to test the namespace's words exactly."""

    def __init__(self) -> None:
        self.items: list[Memory] = []

    def add(
        self,
        content: str,
        *,
        tags: Sequence[str] = (),
        agent: str | None = None,
        project: str | None = None,
    ) -> Memory:
        memory = Memory(
            id=f"{len(self.items) + 1:08x}",
            content=content,
            tags=list(tags),
            agent=agent,
            project=project,
            created_at=f"2026-11-{len(self.items) + 1:02d}T10:00:00.000Z",
        )
        self.items.append(memory)
        return memory

    def save(
        self,
        content: str,
        *,
        tags: Sequence[str] = (),
        agent: str | None = None,
        project: str | None = None,
    ) -> SavedMemory:
        return SavedMemory(memory=self.add(content, tags=tags, agent=agent, project=project))

    def search(self, query: str, *, project: str | None = None, limit: int = 10) -> list[MemoryHit]:
        words = query.lower().split()
        found = [
            m
            for m in self.items
            if m.project in (project, None) and any(w in m.content.lower() for w in words)
        ]
        return [MemoryHit(memory=m, score=1.0) for m in found[:limit]]

    def get(self, memory_id: str) -> Memory | None:
        return next((m for m in self.items if m.id == memory_id), None)

    def delete(self, memory_id: str) -> bool:
        before = len(self.items)
        self.items = [m for m in self.items if m.id != memory_id]
        return len(self.items) < before

    def list(self, *, project: str | None = None, limit: int = 50) -> list[Memory]:
        return [m for m in reversed(self.items) if m.project in (project, None)][:limit]

    def export(self) -> Iterator[Memory]:
        return iter(self.items)

    def import_memories(self, memories: Iterable[Memory]) -> ImportCounts:
        added = list(memories)
        self.items.extend(added)
        return ImportCounts(added=len(added))


def test_the_namespace_answers_in_words_an_agent_can_act_on() -> None:
    store = ListMemory()
    saved = handle(
        store, "save", "the API uses OAuth, not keys #auth #API #auth", project="/p", agent="Alice"
    )
    assert saved == "✓ Saved to memory [00000001]"
    assert store.items[0].tags == ["auth", "api"] and store.items[0].agent == "Alice"
    handle(store, "save", "deploys go through make release", project="/p", agent="Alice")
    assert handle(store, "search", "oauth", project="/p", agent=None) == (
        "Memories matching “oauth”:\n1. [00000001] 2026-11-01 the API uses OAuth, not keys #auth #API #auth"
    )
    assert (
        handle(store, "search", "kubernetes", project="/p", agent=None)
        == "No memory matches “kubernetes”."
    )
    assert (
        handle(store, "list", "", project="/p", agent=None)
        .splitlines()[1]
        .startswith("1. [00000002] 2026-11-02 deploys")
    )
    assert (
        handle(store, "forget", "[00000002]", project="/p", agent=None)
        == "✓ Forgot memory [00000002]"
    )
    assert (
        handle(store, "forget", "00000002", project="/p", agent=None)
        == "No memory with id 00000002."
    )
    assert handle(store, "save", "  ", project="/p", agent=None).startswith("Nothing to save")
    assert handle(store, "remember", "x", project="/p", agent=None).startswith(
        "Unknown @memory command 'remember'"
    )
    assert handle(ListMemory(), "list", "", project="/p", agent=None).startswith("No memories yet.")


def test_forget_reaches_this_projects_memories_and_global_ones_only_when_asked() -> None:
    store = ListMemory()
    mine = store.add("ours", tags=[], agent=None, project="/p")
    theirs = store.add("another project's", tags=[], agent=None, project="/q")
    shared = store.add("everyone's", tags=[], agent=None, project=None)
    assert handle(store, "forget", theirs.id, project="/p", agent=None) == (
        f"No memory with id {theirs.id}."
    )
    refused = handle(store, "forget", shared.id, project="/p", agent=None)
    assert refused.startswith(f"[{shared.id}] is a global memory") and "--global" in refused
    assert [m.id for m in store.items] == [mine.id, theirs.id, shared.id]
    assert handle(store, "forget", f"{shared.id} --global", project="/p", agent=None) == (
        f"✓ Forgot memory [{shared.id}]"
    )
    assert handle(store, "forget", mine.id, project="/p", agent=None) == (
        f"✓ Forgot memory [{mine.id}]"
    )
    assert [m.id for m in store.items] == [theirs.id]


def test_tags_of() -> None:
    assert tags_of("fix #Auth and #api-v2, not x#y #auth") == ["auth", "api-v2"]


def test_start_summary_respects_its_budget() -> None:
    store = ListMemory()
    for index in range(20):
        store.add(f"fact number {index} " + "x" * 80, project="/p")
    store.add("elsewhere", project="/other")
    summary = start_summary(store, project="/p", budget=500)
    assert summary is not None and len(summary) <= 500
    assert summary.splitlines()[1].startswith("- [00000014] fact number 19")
    assert "elsewhere" not in summary
    assert start_summary(ListMemory(), project="/p", budget=500) is None


def test_a_project_file_cannot_choose_the_memory_command(tmp_path: Path, relay_home: Path) -> None:
    project = tmp_path / "p"
    (project / ".relay").mkdir(parents=True)
    (project / ".relay" / "settings.json").write_text(
        json.dumps({"memory": {"backend": "command", "command": "evil", "injectOnStart": False}})
    )
    settings = load_settings(project)
    config = memory_config(settings)
    assert (config.backend, config.command, config.injectOnStart) == ("sqlite", None, False)
    # Ignored, and said so where it is.
    assert [str(warning) for warning in settings.warnings] == [
        f"{project / '.relay' / 'settings.json'}:1: memory.{name}: ignored in a project's"
        f" settings: only your own settings files (user, system or --settings) may set"
        f" memory.{name}"
        for name in ("backend", "command")
    ]
    (relay_home / "settings.json").write_text(
        json.dumps({"memory": {"backend": "command", "command": "mine"}})
    )
    config = memory_config(load_settings(project))
    assert (config.backend, config.command) == ("command", "mine")


# -- with the embedded SQLite store ----------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


def test_memory_in_a_session(project: Path, tmp_path: Path) -> None:
    pytest.importorskip("relay.services.memory.sqlite")
    first = tmp_path / "first.jsonl"
    steps = [
        {"print": "@memory:save the build needs make release #build"},
        {"read": "saved"},
        {"print": "@memory:search release"},
        {"read": "found"},
    ]
    relay = Relay(cwd=project, headless=True, name="Mem")
    assert anyio.run(relay.run, agent(steps, first)) == 0
    answers = reads(first)
    assert answers[0][1].startswith("✓ Saved to memory [")
    memory_id = answers[0][1].split("[")[1].rstrip("]")
    # A multi-line answer is typed as one line (line breaks become spaces).
    assert answers[1][1].startswith(f"Memories matching “release”: 1. [{memory_id}] ")
    assert answers[1][1].endswith("the build needs make release #build")
    # The next session starts with it.
    second = tmp_path / "second.jsonl"
    relay = Relay(cwd=project, headless=True, name="Mem")
    assert anyio.run(relay.run, agent([{"read": "start"}], second)) == 0
    (_, line) = reads(second)[0]
    assert (
        line.startswith("Memories from earlier sessions")
        and memory_id in line
        and "make release" in line
    )


def test_an_agent_forgets_only_its_projects_memories(
    project: Path, tmp_path: Path, relay_home: Path
) -> None:
    """`@memory:forget` in a session of one project, with the ids of another project's
    memory and a global one: both stay; a global one goes with `--global`."""
    pytest.importorskip("relay.services.memory.sqlite")
    run = CliRunner().invoke
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)

    def save(*args: str) -> str:
        saved = run(cli, ["memory", "save", "--json", *args])
        assert saved.exit_code == 0, saved.output
        return str(json.loads(saved.stdout)["id"])

    theirs = save("--cwd", str(other), "the other project's secret")
    shared = save("--cwd", str(project), "--global", "always sign commits")
    steps = [
        {"read": "recap"},  # the global memory, shown at the start
        {"print": f"@memory:forget {theirs}"},
        {"read": "theirs"},
        {"print": f"@memory:forget {shared}"},
        {"read": "shared"},
        {"print": f"@memory:forget {shared} --global"},
        {"read": "shared-global"},
    ]
    record = tmp_path / "forget.jsonl"
    argv = [RELAY, "run", "--headless", "--name", "Forgetful", "--cwd", str(project), "--"]
    done = subprocess.run(
        [*argv, *agent(steps, record)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers = dict(reads(record))
    assert answers["theirs"] == f"No memory with id {theirs}."
    assert answers["shared"].startswith(f"[{shared}] is a global memory")
    assert answers["shared-global"] == f"✓ Forgot memory [{shared}]"
    left = run(cli, ["memory", "list", "--cwd", str(other), "--json"]).stdout
    assert [memory["id"] for memory in json.loads(left)] == [theirs]


def test_relay_memory_cli_round_trip(project: Path, tmp_path: Path, relay_home: Path) -> None:
    pytest.importorskip("relay.services.memory.sqlite")
    run = CliRunner().invoke
    saved = run(
        cli, ["memory", "save", "--cwd", str(project), "--json", "use", "uv, not pip #tooling"]
    )
    assert saved.exit_code == 0, saved.output
    memory = json.loads(saved.stdout)
    assert memory["tags"] == ["tooling"] and memory["project"] == str(project)
    run(cli, ["memory", "save", "--cwd", str(project), "--global", "always sign commits"])
    found = json.loads(
        run(cli, ["memory", "search", "--cwd", str(project), "--json", "tooling uv"]).stdout
    )
    assert found[0]["memory"]["id"] == memory["id"]
    listed = run(
        cli, ["memory", "list", "--cwd", str(tmp_path)]
    ).stdout  # another directory: only global ones
    assert "always sign commits" in listed and "uv, not pip" not in listed
    exported = tmp_path / "memories.jsonl"
    assert run(cli, ["memory", "export", "--cwd", str(project), "-o", str(exported)]).exit_code == 0
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert {line["id"] for line in lines} >= {memory["id"]}
    other_home = tmp_path / "other-home"
    env = {**os.environ, "RELAY_HOME": str(other_home)}
    done = subprocess.run(
        [RELAY, "memory", "import", str(exported), "--cwd", str(project)],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    again = subprocess.run(
        [RELAY, "memory", "export", "--cwd", str(project)],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert [json.loads(line) for line in again.stdout.splitlines()] == lines
    assert run(cli, ["memory", "forget", "--cwd", str(project), memory["id"]]).exit_code == 0
    missing = run(cli, ["memory", "forget", "--cwd", str(project), memory["id"]])
    assert missing.exit_code == 1 and "No memory with id" in missing.stderr


def test_end_prompt_is_typed_in_on_a_stop(project: Path, tmp_path: Path) -> None:
    pytest.importorskip("relay.services.memory.sqlite")
    record = tmp_path / "r.jsonl"
    relay = Relay(cwd=project, headless=True, name="Ender")

    @relay.pattern("done")
    def done(target: str, message: str, ctx: Any) -> dict[str, Any]:
        return {"continue": False, "stopReason": "finished"}

    steps = [{"print": "@done:x now"}, {"read": "end"}, {"print": "bye"}, {"sleep": 30}]
    anyio.run(relay.run, agent(steps, record))
    assert reads(record)[-1] == ("end", END_PROMPT)


def test_a_corrupt_store_never_stops_the_session(
    project: Path, tmp_path: Path, relay_home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("relay.services.memory.sqlite")
    (relay_home / "state").mkdir(parents=True)
    (relay_home / "state" / "memory.db").write_bytes(b"not a database at all " * 200)
    record = tmp_path / "r.jsonl"
    relay = Relay(cwd=project, headless=True, name="Broken")
    steps = [
        {"print": "@memory:save something #x"},
        {"read": "answer"},
        {"print": "still going"},
        {"exit": 5},
    ]
    assert anyio.run(relay.run, agent(steps, record)) == 5
    (_, answer) = reads(record)[0]
    assert answer.startswith("Memory is unavailable right now (")
    err = capfd.readouterr().err
    assert "memory unavailable:" in err and "memory.db" in err


def test_one_relay_running_two_sessions_saves_once_per_directive(
    project: Path, tmp_path: Path
) -> None:
    pytest.importorskip("relay.services.memory.sqlite")
    relay = Relay(cwd=project, headless=True, name="Twice")
    for run in range(2):
        record = tmp_path / f"r{run}.jsonl"
        steps = [{"print": f"@memory:save fact {run}"}, {"read": "saved"}]
        if run == 1:
            steps = [{"read": "start"}, *steps]
        assert anyio.run(relay.run, agent(steps, record)) == 0
    listed = CliRunner().invoke(cli, ["memory", "list", "--cwd", str(project), "--json"])
    assert sorted(item["content"] for item in json.loads(listed.stdout)) == ["fact 0", "fact 1"]


# -- the same content twice, tags once, export's scope, import's counts ----------------------


def _relay(*args: str) -> Any:
    done = CliRunner().invoke(cli, ["memory", *args])
    assert done.exit_code == 0, done.output
    return done


def test_saving_the_same_content_twice_answers_with_the_existing_id(
    project: Path, tmp_path: Path, relay_home: Path
) -> None:
    from relay.services.memory.sqlite import SqliteMemory

    where = ("--cwd", str(project))
    first = json.loads(_relay("save", *where, "--json", "use uv, not pip #tooling").stdout)
    assert first["existing"] is False
    again = json.loads(_relay("save", *where, "--json", "use uv, not pip #tooling ").stdout)
    assert again == {**first, "existing": True}
    assert _relay("save", *where, "use", "uv,", "not", "pip", "#tooling").stdout == (
        f"✓ Already saved as [{first['id']}]\n"
    )
    shared = json.loads(_relay("save", *where, "--global", "--json", "sign commits").stdout)
    assert _relay("save", *where, "sign commits").stdout == (
        f"✓ Already saved as [{shared['id']}], a global memory\n"
    )
    listed = json.loads(_relay("list", *where, "--json").stdout)
    assert [memory["id"] for memory in listed] == [shared["id"], first["id"]]
    # The @memory:save handler (and the MCP tool, which is that directive) too.
    with SqliteMemory() as store:
        answer = handle(store, "save", "use uv, not pip #tooling", project=str(project), agent="A")
        assert answer == f"✓ Already saved as [{first['id']}]"
        assert handle(store, "save", "a new fact", project=str(project), agent="A").startswith(
            "✓ Saved to memory ["
        )


def test_the_recap_shows_copies_in_an_old_store_once() -> None:
    store = ListMemory()  # saves everything, as a store from before deduplication did
    store.add("use uv, not pip", project="/p")
    store.add("run make check", project="/p")
    store.add("use uv, not pip ", project="/p")
    summary = start_summary(store, project="/p", budget=2000)
    assert summary is not None
    assert summary.splitlines()[1:] == [
        "- [00000003] use uv, not pip",
        "- [00000002] run make check",
    ]


def test_memory_list_and_search_show_each_tag_once(project: Path, relay_home: Path) -> None:
    from relay.services.memory.sqlite import SqliteMemory

    where = ("--cwd", str(project))
    _relay("save", *where, "use uv #tooling #Python")
    with SqliteMemory() as store:
        store.add("deploy with make release #deploy", tags=["deploy", "ci"], project=str(project))
    listed = _relay("list", *where).stdout
    assert listed.count("#tooling") == 1 and listed.count("#Python") == 1
    assert "#python" not in listed and listed.count("#deploy") == 1
    assert "    #ci\n" in listed  # a tag the content does not show is shown under it
    found = _relay("search", *where, "tooling").stdout
    assert found.count("#tooling") == 1


def test_export_follows_lists_scope_unless_all(
    project: Path, tmp_path: Path, relay_home: Path
) -> None:
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    mine = json.loads(_relay("save", "--cwd", str(project), "--json", "ours").stdout)
    theirs = json.loads(_relay("save", "--cwd", str(other), "--json", "theirs").stdout)
    shared = json.loads(_relay("save", "--cwd", str(project), "--global", "--json", "all").stdout)

    def exported(*args: str) -> tuple[list[str], str]:
        done = _relay("export", *args)
        return [json.loads(line)["id"] for line in done.stdout.splitlines()], done.stderr

    ids, said = exported("--cwd", str(project))
    assert ids == [mine["id"], shared["id"]]
    assert ids == [
        m["id"]
        for m in reversed(json.loads(_relay("list", "--cwd", str(project), "--json").stdout))
    ]
    assert said == "exported 2 memories (this project's and global ones; --all for every project)\n"
    assert exported("--cwd", str(tmp_path))[0] == [shared["id"]]  # outside a project: global
    ids, said = exported("--cwd", str(project), "--all")
    assert ids == [mine["id"], theirs["id"], shared["id"]] and said == "exported 3 memories\n"


def test_import_says_what_was_added_and_what_was_already_there(
    project: Path, tmp_path: Path, relay_home: Path
) -> None:
    where = ("--cwd", str(project))
    _relay("save", *where, "first fact")
    _relay("save", *where, "second fact #x")
    exported = tmp_path / "memories.jsonl"
    _relay("export", *where, "-o", str(exported))
    assert _relay("import", *where, str(exported)).stdout == (
        "imported 2 memories: 0 added, 2 already present\n"
    )
    # Into another store: added the first time, already present the second, by subprocess.
    env = {**os.environ, "RELAY_HOME": str(tmp_path / "other-home")}

    def import_there(*args: str) -> str:
        done = subprocess.run(
            [RELAY, "memory", "import", *args, str(exported), *where],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert import_there() == "imported 2 memories: 2 added, 0 already present\n"
    assert json.loads(import_there("--json")) == {"added": 0, "present": 2, "updated": 0}
    # An edited export replaces the memory with its id; a copy under a new id is not added.
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    lines[0]["tags"] = ["edited"]
    lines.append({**lines[1], "id": "0000abcd"})
    exported.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert import_there() == (
        "imported 3 memories: 0 added, 2 already present,"
        " 1 updated (same id, other content, tags or dates)\n"
    )


def test_forget_answers_in_json(tmp_path: Path, relay_home: Path) -> None:
    from click.testing import CliRunner

    from relay.cli.main import cli

    runner = CliRunner()
    saved = json.loads(runner.invoke(cli, ["memory", "save", "--json", "a fact"]).stdout)
    done = runner.invoke(cli, ["memory", "forget", "--json", saved["id"]])
    assert (done.exit_code, json.loads(done.stdout)) == (0, {"id": saved["id"], "forgotten": True})
    again = runner.invoke(cli, ["memory", "forget", "--json", saved["id"]])
    assert (again.exit_code, json.loads(again.stdout)["forgotten"]) == (1, False)
