"""The built-in `@memory:` namespace: save, search, forget, list. Pure text in, text out.

@memory:save the API uses OAuth, not API keys #auth #api
@memory:save --team staging resets every night   (--global, --team, --project: where to;
                                                  default: the memory.scope setting)
@memory:search oauth
@memory:forget 3f9a12bc            (a memory of this project; a global one needs --global,
                                    a team one --team, and is forgotten on every machine)
@memory:list
"""

from __future__ import annotations

import re

from relay.protocol.events import PatternMatch
from relay.services.memory.model import (
    Memory,
    MemoryService,
    MemoryStoreError,
    SavedMemory,
    content_key,
)
from relay.services.memory.sharing import (
    NOT_SET_UP,
    SharedForget,
    SharedMemory,
    TeamMemoryError,
)

_TAG = re.compile(r"(?<!\S)#([\w-]+)")
SEARCH_LIMIT = 8
LIST_LIMIT = 15


def tags_of(content: str) -> list[str]:
    """The `#tag` words of a text, lowercase, in order, without repeats."""
    return list(dict.fromkeys(tag.lower() for tag in _TAG.findall(content)))


def unwritten_tags(memory: Memory) -> list[str]:
    """The memory's tags that its content does not already show as `#tag` words (tags
    saved with @memory:save or `relay memory save` are in the text: showing them again
    repeats them)."""
    written = set(tags_of(memory.content))
    return [tag for tag in memory.tags if tag.lower() not in written]


def saved_answer(saved: SavedMemory) -> str:
    """What a save says: a new id, or the id of the identical memory already stored."""
    memory = saved.memory
    if isinstance(saved, SharedMemory):
        return _shared_answer(saved)
    if not saved.existing:
        return f"✓ Saved to memory [{memory.id}]"
    where = ", a global memory" if memory.project is None else ""
    return f"✓ Already saved as [{memory.id}]{where}"


def _shared_answer(saved: SharedMemory) -> str:
    memory = saved.memory
    said = "Already saved as" if saved.existing else "Saved to team memory"
    if saved.shared:
        return f"✓ {said} [{memory.id}], shared with team {memory.team}"
    return (
        f"✓ {said} [{memory.id}] for team {memory.team}, not shared yet ({saved.problem}); "
        "relay shares it at the next save or `relay memory sync`"
    )


Scope = str
"""Where a save goes: "project", "global" or "team" (memory.scope)."""
SCOPE_FLAGS = {"--project": "project", "--global": "global", "--team": "team"}


def scope_of(text: str, default: Scope) -> tuple[Scope, str]:
    """The scope a save's leading `--project`/`--global`/`--team` flag asks for (else
    `default`), and the text after the flag."""
    words = text.split(None, 1)
    if words and words[0] in SCOPE_FLAGS:
        return SCOPE_FLAGS[words[0]], words[1].strip() if len(words) > 1 else ""
    return default, text


def save_in(
    service: MemoryService,
    text: str,
    *,
    scope: Scope,
    project: str | None,
    agent: str | None,
    team: str | None,
    tags: list[str],
) -> SavedMemory:
    """Save `text` in `scope` (TeamMemoryError when the team scope is not set up, or from
    TeamMemory.save when the text is too long to share)."""
    if scope == "team":
        if team is None:
            raise TeamMemoryError(NOT_SET_UP)
        # The team memory is the project's where its key travels (TeamMemory.save).
        return service.save(text, tags=tags, agent=agent, project=project, team=team)
    return service.save(
        text, tags=tags, agent=agent, project=None if scope == "global" else project
    )


def handle(
    service: MemoryService,
    command: str,
    text: str,
    *,
    project: str | None,
    agent: str | None,
    scope: Scope = "project",
    team: str | None = None,
) -> str:
    """Run one `@memory:COMMAND TEXT` directive; return what to type back to the agent.
    `scope`: where a save goes unless it says; `team`: the team memories are shared with
    (None: sharing is off)."""
    text = text.strip()
    if command == "save":
        scope, text = scope_of(text, scope)
        if not text:
            return "Nothing to save: write @memory:save <what to remember> #tags"
        try:
            saved = save_in(
                service,
                text,
                scope=scope,
                project=project,
                agent=agent,
                team=team,
                tags=tags_of(text),
            )
        except TeamMemoryError as exc:
            return f"Not saved: {exc.message}."
        return saved_answer(saved)
    if command == "search":
        if not text:
            return "Search for what? Write @memory:search <words>"
        hits = service.search(text, project=project, limit=SEARCH_LIMIT)
        if not hits:
            return f"No memory matches “{text}”."
        return _numbered(f"Memories matching “{text}”:", [hit.memory for hit in hits])
    if command == "forget":
        return _forget(service, text.split(), project=project)
    if command == "list":
        memories = service.list(project=project, limit=LIST_LIMIT)
        if not memories:
            return "No memories yet. Save one with @memory:save <what to remember> #tags"
        return _numbered("Memories, newest first:", memories)
    return f"Unknown @memory command {command!r}: use save, search, forget or list."


GLOBAL_FLAG = "--global"
TEAM_FLAG = "--team"


def _forget(service: MemoryService, words: list[str], *, project: str | None) -> str:
    """Forget one memory of this project; a global one only with `--global`, a team one
    only with `--team` (it is forgotten on every machine of the team). Another project's
    memory is not there at all, whatever its id (an agent must not be able to delete
    what it cannot see)."""
    wants_global = GLOBAL_FLAG in words
    wants_team = TEAM_FLAG in words
    ids = [word.strip("[]") for word in words if word not in (GLOBAL_FLAG, TEAM_FLAG)]
    if not ids or not ids[0]:
        return "Forget which? Write @memory:forget <id>"
    memory_id = ids[0]
    memory = service.get(memory_id)
    if memory is None or (memory.project is not None and memory.project != project):
        return f"No memory with id {memory_id}."
    if memory.team is not None and not wants_team:
        return (
            f"[{memory_id}] is a memory of team {memory.team}, shared with every machine of "
            f"the team: to forget it there too, write @memory:forget {memory_id} {TEAM_FLAG}"
        )
    if memory.project is None and memory.team is None and not wants_global:
        return (
            f"[{memory_id}] is a global memory, shown in every project: to forget it "
            f"everywhere, write @memory:forget {memory_id} {GLOBAL_FLAG}"
        )
    forget = getattr(service, "forget", None)  # TeamMemory: says whether the team heard
    if memory.team is not None and forget is not None:
        return forget_answer(forget(memory_id), memory_id)
    if service.delete(memory_id):
        if memory.team is not None:
            return (
                f"✓ Forgot memory [{memory_id}] on this machine (team memory is off here: "
                "the team's other machines keep it)"
            )
        return f"✓ Forgot memory [{memory_id}]"
    return f"No memory with id {memory_id}."


def forget_answer(result: SharedForget, memory_id: str) -> str:
    """What a forget through TeamMemory says."""
    if not result.forgotten:
        return f"No memory with id {memory_id}."
    if result.team is None:
        return f"✓ Forgot memory [{memory_id}]"
    if result.shared:
        return f"✓ Forgot memory [{memory_id}] on every machine of team {result.team}"
    return (
        f"✓ Forgot memory [{memory_id}] here; the team's other machines forget it once it is "
        f"shared ({result.problem}; relay retries at the next save or `relay memory sync`)"
    )


def start_summary(service: MemoryService, *, project: str | None, budget: int) -> str | None:
    """The project's (and global) memories for SessionStart, newest first, within `budget` characters."""
    heading = "Memories from earlier sessions (@memory:search for more):"
    lines: list[str] = []
    used = len(heading)
    seen: set[str] = set()
    for memory in service.list(project=project, limit=50):
        # A store from before saves were deduplicated may hold copies: recap one of each.
        key = content_key(memory.content)
        if key in seen:
            continue
        seen.add(key)
        line = f"- [{memory.id}] {_one_line(memory.content)}"
        if used + len(line) + 1 > budget:
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join([heading, *lines]) if lines else None


END_PROMPT = (
    "Before this session ends: save anything worth remembering next time with "
    "@memory:save <what you learned> #tags (one line each)."
)


def _numbered(title: str, memories: list[Memory]) -> str:
    lines = [title]
    for number, memory in enumerate(memories, 1):
        extra = [f"#{tag}" for tag in unwritten_tags(memory)]
        tags = f" {' '.join(extra)}" if extra else ""
        lines.append(
            f"{number}. [{memory.id}] {memory.created_at[:10]} {_one_line(memory.content)}{tags}"
        )
    return "\n".join(lines)


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


BUILTIN_NAME = "@memory (built-in)"


class MemoryDirectives:
    """The built-in handler for PatternMatch events of namespace `memory` (a Python hook).

    Independent of any one session: the agent comes from the event, so one registration
    serves every session a HookSystem runs. A store that fails is reported to the agent
    and the user, never raised: a session keeps running without memory.
    """

    def __init__(
        self,
        service: MemoryService,
        *,
        project: str | None,
        scope: Scope = "project",
        team: str | None = None,
    ) -> None:
        self.service = service
        self.project = project
        self.scope = scope
        """Where a save goes unless it says (memory.scope)."""
        self.team = team
        """The team memories are shared with; None: team memory is off."""

    def __call__(self, event: PatternMatch) -> dict[str, str]:
        try:
            answer = handle(
                self.service,
                event.target,
                event.message,
                project=self.project,
                agent=event.agent_name,
                scope=self.scope,
                team=self.team,
            )
        except MemoryStoreError as exc:
            return {
                "inject": f"Memory is unavailable right now ({exc.message}); carry on without it.",
                "systemMessage": f"memory unavailable: {exc}",
            }
        return {"inject": answer}
