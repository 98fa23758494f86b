"""Which project a memory belongs to (spec/memory.md, "Which project"): the identity a
repository's clones and worktrees share, not a path. Real git repositories, real `relay`
processes, real SQLite files (and a real nats-server for team memory)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nats_server import NatsServer, find_nats_server, password, server_config
from scripted_sessions import RELAY, finish, reads, start_relay_run

from relay.services.memory.sqlite import SqliteMemory

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="git is not installed")


def git(*args: str, cwd: Path) -> str:
    """Run git (as a user whose name and email git knows) and return its output."""
    done = subprocess.run(
        [GIT or "git", "-c", "user.name=Tester", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def repository(path: Path, *commits: str) -> Path:
    """A new repository at `path` with one commit per message (a file changed in each).
    Its first commit names the folder: two repositories made in the same second with the
    same first commit would be one history, one project."""
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=path)
    for number, message in enumerate(commits or (f"first of {path.name}",)):
        (path / "file.txt").write_text(f"{number}\n")
        git("add", "file.txt", cwd=path)
        git("commit", "-q", "-m", message, cwd=path)
    return path


def home(path: Path) -> dict[str, str]:
    """The environment of a machine whose relay keeps its state in `path`."""
    path.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "RELAY_HOME": str(path)}


def relay(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `relay ARGS` in `cwd`; it must succeed."""
    done = subprocess.run(
        [RELAY, *args], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done


def listed(env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    """What `relay memory list --json` shows in `cwd`."""
    return list(json.loads(relay(env, "memory", "list", "--json", cwd=cwd).stdout))


def contents(env: dict[str, str], cwd: Path) -> set[str]:
    return {memory["content"] for memory in listed(env, cwd)}


def save(env: dict[str, str], cwd: Path, text: str, *flags: str) -> dict[str, Any]:
    done = relay(env, "memory", "save", *flags, "--json", text, cwd=cwd)
    return dict(json.loads(done.stdout))


def root_commit(path: Path) -> str:
    return git("rev-list", "--max-parents=0", "HEAD", cwd=path)


def test_export_and_import_between_clones_at_other_paths_land_in_the_project(
    tmp_path: Path,
) -> None:
    """Exported from a repository on one machine, imported in a clone at another path on
    another: `list` there shows them as the project's; an unrelated repository does not.
    Once the clone's identity is read, a later command reads it from a file, not git."""
    machine_a, machine_b = home(tmp_path / "home-a"), home(tmp_path / "home-b")
    shop = repository(tmp_path / "a" / "src" / "shop", "start", "more")
    save(machine_a, shop, "deploys go through make release #deploy")
    save(machine_a, shop, "the staging database resets nightly")
    save(machine_a, shop, "use uv, never pip", "--global")
    exported = tmp_path / "shop.jsonl"
    relay(machine_a, "memory", "export", "-o", str(exported), cwd=shop)
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert {line["project"] for line in lines} == {f"git:{root_commit(shop)}", None}

    clone = tmp_path / "b" / "work" / "shop-copy"
    clone.parent.mkdir(parents=True)
    git("clone", "-q", str(shop), str(clone), cwd=tmp_path)
    relay(machine_b, "memory", "import", str(exported), cwd=clone)
    assert contents(machine_b, clone) == {
        "deploys go through make release #deploy",
        "the staging database resets nightly",
        "use uv, never pip",
    }
    other = repository(tmp_path / "b" / "other", "unrelated history")
    assert contents(machine_b, other) == {"use uv, never pip"}
    # Saved in the clone, found in the original's export on the other machine too.
    save(machine_b, clone, "the clone learned this")
    back = tmp_path / "back.jsonl"
    relay(machine_b, "memory", "export", "-o", str(back), cwd=clone)
    relay(machine_a, "memory", "import", str(back), cwd=shop)
    assert "the clone learned this" in contents(machine_a, shop)
    # Without git on PATH: the identity comes from the signed marker in the git folder.
    no_git = {**machine_b, "PATH": str(tmp_path / "empty-bin")}
    (tmp_path / "empty-bin").mkdir()
    assert "the clone learned this" in contents(no_git, clone)


def test_a_worktree_is_the_same_project_as_its_main_checkout(tmp_path: Path) -> None:
    """Memories saved in the main checkout are a linked worktree's, and back; a project
    folder with its own `.relay/` below the top is a project of its own."""
    env = home(tmp_path / "home")
    shop = repository(tmp_path / "shop")
    worktree = tmp_path / "elsewhere" / "shop-feature"
    git("worktree", "add", "-q", "-b", "feature", str(worktree), cwd=shop)
    main_saved = save(env, shop, "saved in the main checkout")
    assert contents(env, worktree) == {"saved in the main checkout"}
    tree_saved = save(env, worktree, "saved in the worktree")
    assert contents(env, shop) == {"saved in the main checkout", "saved in the worktree"}
    assert main_saved["project"] == tree_saved["project"] == f"git:{root_commit(shop)}"
    # From a subfolder without .relay/: still the repository's project.
    (worktree / "src").mkdir()
    assert len(contents(env, worktree / "src")) == 2
    # A folder with its own .relay/ is a project of its own, in every worktree alike.
    for checkout in (shop, worktree):
        (checkout / "docs" / ".relay").mkdir(parents=True)
    docs = save(env, shop / "docs", "the docs project's own")
    assert docs["project"] == f"git:{root_commit(shop)}/docs"
    assert contents(env, worktree / "docs") == {"the docs project's own"}
    assert "the docs project's own" not in contents(env, worktree)


def legacy_store(env: dict[str, str], memories: list[tuple[str, str | None]]) -> None:
    """A store as an older relay left it: each memory under its project's path."""
    store = SqliteMemory(Path(env["RELAY_HOME"]) / "state" / "memory.db")
    with store:
        for content, project in memories:
            store.save(content, project=project)


def test_a_moved_repository_keeps_its_memories_moved_over_once(tmp_path: Path) -> None:
    """Memories an older relay saved under the repository's paths (the main checkout's and
    a worktree's) move to its identity the first time, with a count on stderr; never
    again; and a move of the repository afterwards keeps them. A path of no repository
    here keeps its memories (export --all shows them)."""
    env = home(tmp_path / "home")
    shop = repository(tmp_path / "src" / "shop")
    worktree = tmp_path / "src" / "shop-wt"
    git("worktree", "add", "-q", "-b", "wt", str(worktree), cwd=shop)
    gone = str(tmp_path / "src" / "gone")
    legacy_store(
        env,
        [
            ("one in the main checkout", str(shop)),
            ("two in the main checkout", str(shop)),
            ("one in the worktree", str(worktree)),
            ("of a folder that is gone", gone),
            ("global", None),
        ],
    )
    first = relay(env, "memory", "list", cwd=shop)
    moved = [line for line in first.stderr.splitlines() if "moved" in line]
    key = f"git:{root_commit(shop)[:12]}"
    assert moved == [
        f"relay: memory: moved 2 memories saved in {shop} to this project "
        f"({key}, shared by every clone of its repository)",
        f"relay: memory: moved 1 memory saved in {worktree} to this project "
        f"({key}, shared by every clone of its repository)",
    ]
    expected = {"one in the main checkout", "two in the main checkout", "one in the worktree"}
    assert contents(env, shop) == expected | {"global"}
    again = relay(env, "memory", "list", cwd=worktree)
    assert "moved" not in again.stderr
    moved_to = tmp_path / "moved" / "shop"
    moved_to.parent.mkdir()
    shop.rename(moved_to)
    later = relay(env, "memory", "list", "--json", cwd=moved_to)
    assert "moved" not in later.stderr
    assert {memory["content"] for memory in json.loads(later.stdout)} == expected | {"global"}
    everything = relay(env, "memory", "export", "--all", cwd=moved_to).stdout.splitlines()
    projects = {json.loads(line)["content"]: json.loads(line)["project"] for line in everything}
    assert projects["of a folder that is gone"] == gone
    assert {projects[content] for content in expected} == {f"git:{root_commit(moved_to)}"}


def test_a_shallow_clone_is_its_path_until_unshallowed(tmp_path: Path) -> None:
    """A shallow clone has no first commit to share: its memories are its path's; once
    unshallowed they move to the repository's project (with a count), once."""
    env = home(tmp_path / "home")
    shop = repository(tmp_path / "shop", "one", "two", "three")
    save(env, shop, "a memory of the full repository")
    shallow = tmp_path / "shallow"
    git("clone", "-q", "--depth", "1", f"file://{shop}", str(shallow), cwd=tmp_path)
    saved = save(env, shallow, "saved in the shallow clone")
    assert saved["project"] == str(shallow.resolve())
    assert contents(env, shallow) == {"saved in the shallow clone"}
    git("fetch", "-q", "--unshallow", cwd=shallow)
    first = relay(env, "memory", "list", cwd=shallow)
    assert f"moved 1 memory saved in {shallow.resolve()} to this project" in first.stderr
    assert contents(env, shallow) == {
        "a memory of the full repository",
        "saved in the shallow clone",
    }
    assert "moved" not in relay(env, "memory", "list", cwd=shallow).stderr


def write_object(repo: Path, name: str, body: bytes) -> None:
    """A loose object stored under `name` whatever its content hashes to (as an unpacked
    archive's `.git` may hold)."""
    folder = repo / ".git" / "objects" / name[:2]
    folder.mkdir(exist_ok=True)
    (folder / name[2:]).write_bytes(zlib.compress(b"commit %d\0" % len(body) + body))


def test_a_hostile_repository_cannot_claim_another_project(tmp_path: Path) -> None:
    """A repository that names another project's first commit without holding it (a
    forged object under its name), a copied marker, or a `.relay/project-name`, never
    sees that project's memories; a project name only splits a history's project."""
    env = home(tmp_path / "home")
    private = repository(tmp_path / "private")
    save(env, private, "the private project's secret")
    target = root_commit(private)
    tree = git("rev-parse", "HEAD^{tree}", cwd=private)

    forged = repository(tmp_path / "forged")
    # A commit whose parent is the private project's root, which "exists" here as a
    # forged object with other content: git believes it, relay checks the hash.
    write_object(
        forged,
        target,
        f"tree {tree}\nauthor x <x> 0 +0000\ncommitter x <x> 0 +0000\n\nfake\n".encode(),
    )
    body = (
        f"tree {tree}\nparent {target}\nauthor x <x> 1 +0000\ncommitter x <x> 1 +0000\n\nhead\n"
    ).encode()
    head = hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()
    write_object(forged, head, body)
    git("update-ref", "refs/heads/main", head, cwd=forged)
    assert git("rev-list", "--max-parents=0", "HEAD", cwd=forged) == target  # git is fooled
    assert contents(env, forged) == set()
    assert save(env, forged, "x")["project"] == str(forged.resolve())

    # The same, with the real first commit borrowed from the private repository's objects.
    borrower = repository(tmp_path / "borrower")
    alternates = borrower / ".git" / "objects" / "info" / "alternates"
    alternates.write_text(f"{private / '.git' / 'objects'}\n")
    write_object(borrower, head, body)
    git("update-ref", "refs/heads/main", head, cwd=borrower)
    assert git("rev-list", "--max-parents=0", "HEAD", cwd=borrower) == target
    assert git("cat-file", "-t", target, cwd=borrower) == "commit"
    assert contents(env, borrower) == set()

    copied = repository(tmp_path / "copied")
    shutil.copy(private / ".git" / "relay-project", copied / ".git" / "relay-project")
    assert contents(env, copied) == set()

    named = repository(tmp_path / "named")
    (named / ".relay").mkdir()
    (named / ".relay" / "project-name").write_text(target + "\n")
    assert contents(env, named) == set()

    # A fork that names itself is a project of its own; the name it had before is kept.
    fork = tmp_path / "fork"
    git("clone", "-q", str(private), str(fork), cwd=tmp_path)
    assert contents(env, fork) == {"the private project's secret"}
    (fork / ".relay").mkdir()
    (fork / ".relay" / "project-name").write_text("fork\n")
    assert contents(env, fork) == set()
    assert save(env, fork, "the fork's own")["project"] == f"git:{target}#fork"
    (fork / ".relay" / "project-name").write_text("not a name!\n")
    done = relay(env, "memory", "list", cwd=fork)
    assert "project-name: ignored" in done.stderr
    assert "the private project's secret" in done.stdout


# -- team memory between two machines ------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    binary = find_nats_server()
    if binary is None:
        pytest.skip("nats-server binary not available: install Debian's nats-server (.ci/run does)")
    workdir = tmp_path / "nats"
    workdir.mkdir()
    running = NatsServer(
        binary, workdir, server_config(workdir / "js", {}, unrestricted={"a": ["eve"]})
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def team_home(server: NatsServer, path: Path) -> dict[str, str]:
    env = home(path)
    settings = {
        "memory": {"transport": "nats", "team": "a"},
        "messaging": {"nats": {"url": server.url, "user": "eve", "password": password("eve")}},
    }
    (path / "settings.json").write_text(json.dumps(settings))
    return env


def test_team_memory_lands_in_the_same_project_on_another_machine(
    server: NatsServer, tmp_path: Path
) -> None:
    """A team memory saved in a repository is that project's on every machine of the team:
    found in a clone at another path there, not in its other projects."""
    machine_a = team_home(server, tmp_path / "home-a")
    machine_b = team_home(server, tmp_path / "home-b")
    shop = repository(tmp_path / "a" / "shop")
    clone = tmp_path / "b" / "checkouts" / "shop-2"
    clone.parent.mkdir(parents=True)
    git("clone", "-q", str(shop), str(clone), cwd=tmp_path)
    other = repository(tmp_path / "b" / "other", "another history")
    saved = save(machine_a, shop, "staging resets every night #ops", "--team")
    assert saved["shared"] is True and saved["project"] == f"git:{root_commit(shop)}"
    outside = tmp_path / "b" / "loose"
    outside.mkdir()
    global_saved = save(machine_a, outside, "everyone uses the VPN", "--team")
    assert global_saved["project"] is None and global_saved["shared"] is True
    relay(machine_b, "memory", "sync", cwd=tmp_path)
    assert contents(machine_b, clone) == {
        "staging resets every night #ops",
        "everyone uses the VPN",
    }
    assert contents(machine_b, other) == {"everyone uses the VPN"}
    # Forgotten on B, gone on A.
    relay(machine_b, "memory", "forget", saved["id"], cwd=clone)
    relay(machine_a, "memory", "sync", cwd=tmp_path)
    assert contents(machine_a, shop) == {"everyone uses the VPN"}


def test_a_relay_run_session_in_a_worktree_has_the_repository_s_memories(
    tmp_path: Path,
) -> None:
    """`relay run` in a linked worktree: the memories an older relay saved under the main
    checkout's path move over (the user is told how many), the recap has them, and what
    the agent saves there the main checkout sees."""
    env = home(tmp_path / "home")
    shop = repository(tmp_path / "shop")
    worktree = tmp_path / "shop-feature"
    git("worktree", "add", "-q", "-b", "feature", str(worktree), cwd=shop)
    legacy_store(env, [("the build needs make release", str(shop))])
    record = worktree / "agent.jsonl"
    steps = [
        {"read": "start"},
        {"print": "@memory:save saved by the worktree's agent"},
        {"read": "saved"},
    ]
    # Without the recap the agent waits for it: the session is then cut short.
    code, err = finish(start_relay_run("Wt", steps, record, env=env), timeout=40)
    assert code == 0, err
    assert f"moved 1 memory saved in {shop} to this project" in err
    (_, recap), (_, answer) = reads(record)
    assert recap.startswith("Memories from earlier sessions") and "make release" in recap
    assert answer.startswith("✓ Saved to memory [")
    assert contents(env, shop) == {"the build needs make release", "saved by the worktree's agent"}


def test_a_history_that_merged_another_keeps_its_project(tmp_path: Path) -> None:
    """A repository with two root commits (another history merged in) is the project of
    its main line's: a fresh clone of it elsewhere, with no marker yet, agrees."""
    env = home(tmp_path / "home")
    shop = repository(tmp_path / "shop", "shop starts")
    before = save(env, shop, "saved before the merge")["project"]
    library = repository(tmp_path / "library", "library starts", "library grows")
    git(
        "pull",
        "-q",
        "--no-rebase",
        "-s",
        "ours",
        "--allow-unrelated-histories",
        str(library),
        "main",
        cwd=shop,
    )
    assert len(git("rev-list", "--max-parents=0", "HEAD", cwd=shop).split()) == 2
    clone = tmp_path / "elsewhere" / "shop"
    clone.parent.mkdir()
    git("clone", "-q", str(shop), str(clone), cwd=tmp_path)
    assert save(env, clone, "saved in the clone")["project"] == before
    assert contents(env, clone) == {"saved before the merge", "saved in the clone"}


def test_a_process_that_searched_before_a_move_finds_the_memories_in_their_project(
    tmp_path: Path,
) -> None:
    """A move by another connection (another process's store) is seen by one that loaded
    its index of embeddings before: by words and by meaning, in the new project only."""
    pytest.importorskip("tokenizers", reason="the semantic extra is not installed")
    path = tmp_path / "memory.db"
    key = "git:" + "a" * 40
    with SqliteMemory(path) as running, SqliteMemory(path) as mover:
        running.save("Auth tokens live in httpOnly cookies", project="/src/shop")
        question = "how do we keep users logged in"
        assert len(running.search(question, project="/src/shop")) == 1
        assert mover.move_project(["/src/shop", "/src/other"], key) == {"/src/shop": 1}
        hits = running.search(question, project=key, explain=True)
        assert [hit.memory.project for hit in hits] == [key]
        assert hits[0].explain is not None and hits[0].explain.semantic_rank == 1
        assert [hit.memory.project for hit in running.search("cookies", project=key)] == [key]
        assert running.search("cookies", project="/src/shop") == []
        assert mover.move_project(["/src/shop"], key) == {}


def test_reading_a_hostile_repository_runs_none_of_its_commands(tmp_path: Path) -> None:
    """A `.git` whose config names a command (a partial clone's remote over ssh, with its
    own ssh command) and whose history lacks a commit, so that git would fetch it: relay
    reads its identity without running that command, and the folder is its path's project."""
    env = home(tmp_path / "home")
    evil = tmp_path / "evil"
    evil.mkdir()
    git("init", "-q", "-b", "main", cwd=evil)
    tree = git("write-tree", cwd=evil)
    body = (
        f"tree {tree}\nparent {'1' * 40}\nauthor x <x> 1 +0000\ncommitter x <x> 1 +0000\n\nhead\n"
    ).encode()
    head = hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()
    write_object(evil, head, body)
    git("update-ref", "refs/heads/main", head, cwd=evil)
    ran = tmp_path / "ran"
    for name, value in [
        ("core.repositoryformatversion", "1"),
        ("core.sshCommand", f"touch {ran}"),
        ("extensions.partialClone", "origin"),
        ("remote.origin.url", "ssh://example.invalid/x"),
        ("remote.origin.promisor", "true"),
    ]:
        git("config", name, value, cwd=evil)
    # git itself would run it: the attack is real.
    subprocess.run([GIT or "git", "rev-list", "HEAD"], cwd=evil, capture_output=True, check=False)
    assert ran.exists()
    ran.unlink()
    assert save(env, evil, "a note")["project"] == str(evil.resolve())
    assert not ran.exists()
