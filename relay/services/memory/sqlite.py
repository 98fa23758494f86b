"""The default memory backend: one SQLite file with an FTS5 full-text index and the
memories' embeddings, for hybrid search by words and by meaning (semantic.py).

Layout (schema version 4, kept in `PRAGMA user_version`):

- `memories`: one row per memory; `seq` is an INTEGER PRIMARY KEY so the FTS index has a
  rowid that VACUUM never renumbers, `id` (8 hex characters) is UNIQUE; tags are JSON text.
  `digest` (indexed, not unique) is a 64-bit hash of the content without surrounding
  whitespace (model.content_key): a save finds an identical memory with one index probe.
  Not UNIQUE: stores from schema 1 may hold duplicates, and a project's save also finds
  a global memory (model.same_scope), which a unique (project, digest) pair cannot say.
  Race-free all the same: the lookup and the insert share one BEGIN IMMEDIATE transaction.
- `memories_fts`: an external-content FTS5 index over `content` and `tags`, tokenized
  with `porter unicode61` ("deploying" finds "deploy"), kept in step by triggers.
  It also indexes `scope`, a generated column holding one token for the memory's
  project ("global", or "p" and the project's UTF-8 in hex), for a search that must
  narrow by scope inside the MATCH (see SqliteMemory._ranked).
- `team` (schema 3): the team a memory is shared with (team.py), None for most.
- `memory_vectors`, `memory_pending`, `memory_meta` (schema 3): the embeddings, the
  memories waiting for one, and the model that made them (see _VECTORS).
- `memories_recent`, `memory_recent` (schema 4): a second FTS5 index over the newest
  memories only (every memory whose seq is above `memory_recent.floor`), which a search
  reads first: ranking there costs what the newest RECENT_MEMORIES cost, not the whole
  store (see _RECENT and SqliteMemory._ranked).

The database runs in WAL mode so readers never wait for a writer, with a busy timeout
and a few retries for writes that still meet SQLITE_BUSY. `synchronous=NORMAL`: in WAL
mode a power cut can lose the last few commits but never corrupts the file, and a
memory an agent saved a moment before a power cut is an acceptable loss for the speed
of not syncing on every save.

Every sqlite3 or file-system failure leaves this module as MemoryStoreError naming the file.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import hashlib
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import msgspec

from relay.config.paths import private_dir, private_file, state_dir
from relay.services.memory.model import (
    ImportCounts,
    Memory,
    MemoryHit,
    MemoryStoreError,
    Ranking,
    SavedMemory,
    content_key,
)
from relay.services.memory.semantic import (
    DIMENSIONS,
    Embedder,
    SemanticUnavailable,
    VectorIndex,
    embed_query,
    from_int8,
    load_embedder,
    sign_codes,
    to_int8,
)
from relay.services.memory.words import query_words
from relay.timestamps import utc_millis

__all__ = ["DATABASE_NAME", "SCHEMA_VERSION", "SqliteMemory", "build_match", "default_store"]

DATABASE_NAME = "memory.db"
SCHEMA_VERSION = 4
DEFAULT_BUSY_TIMEOUT = 5.0
"""Seconds a statement waits for another connection's lock before failing."""
WRITE_ATTEMPTS = 3
"""Tries for a write that meets SQLITE_BUSY, while its busy timeout has not yet passed."""
ID_ATTEMPTS = 20
SEARCH_CANDIDATES = 1000
"""A search ranks at most this many matches, the most recently stored (see search)."""
RANKED = 50
"""Of those, the best this many by bm25 get the recency lift (at most +20%)."""
RECENCY_WEIGHT = 0.2
RECENCY_DAYS = 30.0
FUSE_DEPTH = 30
"""Of the ranking by meaning, the best this many are fused."""
KEYWORD_DEPTH = 10
"""Of the ranking by words, the best this many (or the search's limit) are fused: more
changed nothing on the relevance set and costs every search (tests/perf/bench_memory.py)."""
NEAREST = 200
"""Memories nearest by sign code whose exact similarity is computed."""
MIN_SIMILARITY = 0.25
"""A memory less similar than this to the query is not found by meaning (the model's own
`min_similarity`, when it has one, takes its place: MiniLM's, from the store's centre,
is 0.15)."""
RRF_K = 10.0
KEYWORD_WEIGHT = 1.0
SEMANTIC_WEIGHT = 1.0
PARTIAL_WEIGHT = 0.3
"""KEYWORD_WEIGHT for a memory with some of the query's words but not all, or with every
word but unrelated in meaning (less similar to the query than the model's threshold)."""
WEAK_WEIGHT = 0.1
"""KEYWORD_WEIGHT for a memory with only some of the query's words and unrelated in
meaning."""
COMMON_BM25 = 0.5
"""A match by words whose BM25 is less than this for each word of the query is by common
words only (FTS5 gives a word in half the memories or more next to no weight): it weighs
nothing in the fused score, and meaning decides. Matches that answer a question of
tests/memory_relevance.py score 2 or more a word. Only in a store of COMMON_FROM memories
or more: in a handful, FTS5 finds every word common."""
COMMON_FROM = 20
EMBED_BATCH = 1000
LOAD_BATCH = 50_000
PROGRESS_FROM = 2000
"""A backlog of this many memories to embed reports its progress."""
EXPORT_BATCH = 1000
CACHE_KIB = 32 * 1024
RECENT_MEMORIES = 65_536
"""How many of the newest memories the recent index holds (and up to 1/16 more: the
oldest are dropped 1/16 of it, plus one, at a time)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    content TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    agent TEXT,
    project TEXT,
    created_at TEXT NOT NULL,
    scope TEXT GENERATED ALWAYS AS (
        CASE WHEN project IS NULL THEN 'global' ELSE 'p' || hex(project) END
    ) VIRTUAL,
    digest INTEGER,
    team TEXT
);
CREATE INDEX IF NOT EXISTS memories_created ON memories(created_at);
CREATE INDEX IF NOT EXISTS memories_digest ON memories(digest);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    content, tags, scope,
    content='memories', content_rowid='seq', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS memories_after_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content, tags, scope)
    VALUES (new.seq, new.content, new.tags, new.scope);
END;
CREATE TRIGGER IF NOT EXISTS memories_after_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, tags, scope)
    VALUES ('delete', old.seq, old.content, old.tags, old.scope);
END;
CREATE TRIGGER IF NOT EXISTS memories_after_update
AFTER UPDATE OF content, tags, project ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, tags, scope)
    VALUES ('delete', old.seq, old.content, old.tags, old.scope);
    INSERT INTO memories_fts(rowid, content, tags, scope)
    VALUES (new.seq, new.content, new.tags, new.scope);
END;
"""
# Schema 1 to 2: the digest column, filled for every memory already stored (duplicates
# among them are kept: they are the user's, and forget removes one), and its index. The
# update trigger now fires only for the columns the FTS index holds, so filling the
# digest (and any later change to another column) does not re-index every memory.
_UPGRADE_TO_2 = """
ALTER TABLE memories ADD COLUMN digest INTEGER;
DROP TRIGGER IF EXISTS memories_after_update;
CREATE TRIGGER memories_after_update
AFTER UPDATE OF content, tags, project ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, tags, scope)
    VALUES ('delete', old.seq, old.content, old.tags, old.scope);
    INSERT INTO memories_fts(rowid, content, tags, scope)
    VALUES (new.seq, new.content, new.tags, new.scope);
END;
UPDATE memories SET digest = relay_digest(content);
CREATE INDEX IF NOT EXISTS memories_digest ON memories(digest);
"""
# Schema 2 to 3 (also the end of a new file's schema): the team column, and embeddings
# for search by meaning. `memory_vectors` holds one row per embedded memory: `code`, the
# signs of its embedding (a bit a dimension: 32 bytes for wordllama, 48 for MiniLM,
# compared by Hamming distance in memory), and `vector`, the embedding in int8 (a byte a
# dimension, for the exact re-rank). `vseq` only grows
# (AUTOINCREMENT), so a process's index loads what is new since it last looked.
# `memory_pending` lists memories to embed: every new memory, and one whose content
# changed; every memory of an older store (the backfill). A search embeds them first.
# `memory_meta` names the embedding model; another model's vectors are all redone. It
# also keeps the sum and count of the embeddings (`vector_sum`, `vector_count`: the
# store's centre, see _centre), added to as memories are embedded.
# (No INSERT OR IGNORE in the triggers: an UPSERT's own conflict clause overrides it.)
_VECTORS = """
CREATE TABLE IF NOT EXISTS memory_vectors (
    vseq INTEGER PRIMARY KEY AUTOINCREMENT,
    seq INTEGER NOT NULL UNIQUE,
    code BLOB NOT NULL,
    vector BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS memory_pending (seq INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS memory_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS memories_pending_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memory_pending(seq) VALUES (new.seq);
END;
CREATE TRIGGER IF NOT EXISTS memories_pending_update AFTER UPDATE OF content ON memories BEGIN
    DELETE FROM memory_vectors WHERE seq = old.seq;
    INSERT INTO memory_pending(seq)
    SELECT new.seq WHERE NOT EXISTS (SELECT 1 FROM memory_pending WHERE seq = new.seq);
END;
CREATE TRIGGER IF NOT EXISTS memories_vectors_delete AFTER DELETE ON memories BEGIN
    DELETE FROM memory_vectors WHERE seq = old.seq;
    DELETE FROM memory_pending WHERE seq = old.seq;
END;
"""
_UPGRADE_TO_3 = f"""
ALTER TABLE memories ADD COLUMN team TEXT;
{_VECTORS}
INSERT OR IGNORE INTO memory_pending(seq) SELECT seq FROM memories;
"""
# Schema 3 to 4 (also the end of a new file's schema): the recent index. FTS5's bm25()
# counts every memory holding each word of the query, once per statement, by walking
# that word's whole list: at a million memories a common word costs 5-10 ms of a search
# that way. `memories_recent` indexes only the memories whose seq is above
# `memory_recent.floor` (one row): a new memory goes in, and once the newest is `size`
# plus 1/16 above the floor, the oldest 1/16 (and one) go out and the floor moves up. It is kept
# in step by triggers like `memories_fts`, for the memories above the floor only. Only
# the seq decides: seq may be reused after the newest memories are deleted, and such a
# memory, below the floor, counts as old.
# Until the newest seq passes twice `size` (131,072), a search would gain little
# from it: the index rests, empty, its floor RESTING (above every seq), and a save costs
# no second FTS5 insert. The insert that takes the newest seq past twice `size` fills
# it with the newest `size` memories (about 0.5 s, once). One trigger does it all, in
# this order: index the new memory when above the floor; start, when resting and past
# twice `size` (the new memory included); drop the oldest when past `size` + 1/16. Its
# WHEN leaves a resting store's saves at one lookup. (CROSS JOIN: the one row first, then
# a range of seq; else SQLite may walk every memory to save sorting them.)
# _FILL_RECENT empties the index and starts it again when the store is large enough:
# on the upgrade and after a bulk load (which leaves the trigger out).
_RECENT = """
CREATE VIRTUAL TABLE IF NOT EXISTS memories_recent USING fts5(
    content, tags, scope,
    content='memories', content_rowid='seq', tokenize='porter unicode61'
);
CREATE TABLE IF NOT EXISTS memory_recent (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    floor INTEGER NOT NULL,
    size INTEGER NOT NULL CHECK (size > 0)
);
INSERT OR IGNORE INTO memory_recent(one, floor, size) VALUES (1, {resting}, {size});
CREATE TRIGGER IF NOT EXISTS memories_recent_insert AFTER INSERT ON memories
WHEN new.seq > (
    SELECT CASE WHEN floor = {resting} THEN 2 * size ELSE floor END FROM memory_recent
) BEGIN
    INSERT INTO memories_recent(rowid, content, tags, scope)
    SELECT new.seq, new.content, new.tags, new.scope FROM memory_recent
    WHERE new.seq > floor;
    INSERT INTO memories_recent(rowid, content, tags, scope)
    SELECT m.seq, m.content, m.tags, m.scope
    FROM memory_recent AS r CROSS JOIN memories AS m ON m.seq > new.seq - r.size
    WHERE r.floor = {resting} AND new.seq > 2 * r.size
    ORDER BY m.seq;
    UPDATE memory_recent SET floor = new.seq - size
    WHERE floor = {resting} AND new.seq > 2 * size;
    INSERT INTO memories_recent(memories_recent, rowid, content, tags, scope)
    SELECT 'delete', m.seq, m.content, m.tags, m.scope
    FROM memory_recent AS r
    CROSS JOIN memories AS m ON m.seq > r.floor AND m.seq <= new.seq - r.size
    WHERE new.seq - r.size - r.size / 16 > r.floor;
    UPDATE memory_recent SET floor = new.seq - size WHERE new.seq - size - size / 16 > floor;
END;
CREATE TRIGGER IF NOT EXISTS memories_recent_delete AFTER DELETE ON memories
WHEN old.seq > (SELECT floor FROM memory_recent) BEGIN
    INSERT INTO memories_recent(memories_recent, rowid, content, tags, scope)
    VALUES ('delete', old.seq, old.content, old.tags, old.scope);
END;
CREATE TRIGGER IF NOT EXISTS memories_recent_update
AFTER UPDATE OF content, tags, project ON memories
WHEN old.seq > (SELECT floor FROM memory_recent) BEGIN
    INSERT INTO memories_recent(memories_recent, rowid, content, tags, scope)
    VALUES ('delete', old.seq, old.content, old.tags, old.scope);
    INSERT INTO memories_recent(rowid, content, tags, scope)
    VALUES (new.seq, new.content, new.tags, new.scope);
END;
"""
RESTING = 2**62
"""The recent index's floor while it rests: above every seq, so it holds nothing."""
# Empties the recent index and, when the newest seq is past twice `size`, sets the floor
# below the newest `size` memories and indexes those; else lets it rest.
_FILL_RECENT = f"""
INSERT INTO memories_recent(memories_recent) VALUES ('delete-all');
UPDATE memory_recent SET floor = CASE
    WHEN coalesce((SELECT max(seq) FROM memories), 0) > 2 * size
    THEN (SELECT max(seq) FROM memories) - size
    ELSE {RESTING} END;
INSERT INTO memories_recent(rowid, content, tags, scope)
SELECT seq, content, tags, scope FROM memories
WHERE seq > (SELECT floor FROM memory_recent) ORDER BY seq;
"""
_NO_RECENT = "UPDATE memory_recent SET floor = 9223372036854775807"
"""For a bulk load: a floor the trigger never starts from, nor indexes above."""

_COLUMNS = "m.id, m.content, m.tags, m.agent, m.project, m.created_at, m.team"
_WIDTH = 7
"""How many columns _COLUMNS has: what a row holds before any extra column."""
# Visible in a project: its own memories and global ones; with no project: global only.
# The exact test, also behind a search that narrows by `scope` in the MATCH (two projects'
# scope tokens might fold together under the porter stemmer).
_VISIBLE = "(m.project = :project OR m.project IS NULL)"
# FTS5's bm25() is lower for better matches, hence the minus. julianday() reads the
# ISO 8601 `...Z` form of created_at.
_RECENCY = "(1.0 + :weight / (1.0 + max(julianday('now') - julianday(m.created_at), 0.0) / :days))"


_MATERIALIZE = sqlite3.sqlite_version_info >= (3, 35)
"""Whether this SQLite takes the MATERIALIZED hint (3.35 and later). Older ones read the
statement the same way, only a little slower: they may run a query named twice twice."""


@functools.cache
def _in_recent_sql(matches: int) -> str:
    """For each of `matches` FTS5 queries (:match0, ...): NULL while the recent index
    rests (the newest seq is not yet past twice its size: the whole store's index costs
    little more, and ranks exactly); else how many matches it has in the recent index,
    counted without bm25 up to :candidates (the query runs there when it has that
    many)."""
    counts = ", ".join(
        f"CASE WHEN floor < {RESTING} THEN (SELECT count(*) FROM (SELECT 1 FROM memories_recent"
        f" WHERE memories_recent MATCH :match{number} LIMIT :candidates)) END"
        for number in range(matches)
    )
    return f"SELECT {counts} FROM memory_recent"


@functools.cache
def _ranked_sql(indexes: tuple[str, ...], materialize: bool) -> str:
    """One statement for SqliteMemory._ranked over FTS5 queries (:match0, ...), the
    first in the index indexes[0] (memories_fts or memories_recent), and so on.

    `found`: each query's newest :candidates matches (FTS5 walks rowids newest first, no
    sort), with their bm25 when the search may show them (in scope) and NULL when not:
    bm25 costs more per match than looking the memory up (it reads the match's
    positions and its column sizes), and in a store of many projects most matches are
    other projects'. `best`: the :ranked best in scope by the sum of their bm25 (a
    single query's needs no sum), of equals the newest. Then those with their rows and
    the recency lift, best first, :limit of them, after a 0; and last a row starting
    with 1: how many `best` has, and whether some query had more matches than it
    brought (in scope or not).
    """
    matches = len(indexes)
    # CROSS JOIN: FTS5 drives, in its rowid order; the CASE calls bm25 in scope only.
    arms = " UNION ALL ".join(
        f"SELECT * FROM (SELECT {arm} AS arm, f.rowid AS seq,"
        f" CASE WHEN {_VISIBLE} THEN bm25({index}, 1.0, 2.0, 0.0) END AS bm25"
        f" FROM {index} AS f CROSS JOIN memories AS m ON m.seq = f.rowid"
        f" WHERE {index} MATCH :match{arm} ORDER BY f.rowid DESC LIMIT :candidates)"
        for arm, index in enumerate(indexes)
    )
    hint = "MATERIALIZED " if materialize else ""
    return f"""
WITH found AS {hint}({arms}),
best(seq, bm25) AS {hint}(
    SELECT s.seq, s.bm25
    FROM (SELECT seq, {"sum(bm25)" if matches > 1 else "bm25"} AS bm25
        FROM found WHERE bm25 IS NOT NULL{" GROUP BY seq" if matches > 1 else ""}) AS s
    ORDER BY s.bm25, s.seq DESC
    LIMIT :ranked
)
SELECT * FROM (
    SELECT 0, {_COLUMNS}, -best.bm25 * {_RECENCY} AS score, m.seq, -best.bm25, {_RECENCY}
    FROM best JOIN memories AS m ON m.seq = best.seq
    ORDER BY score DESC, m.created_at DESC
    LIMIT :limit
)
UNION ALL
SELECT 1, (SELECT count(*) FROM best),
    coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM found GROUP BY arm)), 0)
    >= :candidates, {", ".join(["NULL"] * (_WIDTH + 2))}
"""


# Rows of a search, after _COLUMNS: the score, seq, BM25 (higher is better; NULL when
# no word matched) and the recency lift.
_SCORE, _SEQ, _BM25, _LIFT = _WIDTH, _WIDTH + 1, _WIDTH + 2, _WIDTH + 3
# The memories found by meaning alone (:seqs, a JSON array), in scope, as _RANK's rows.
_BY_SEQS = f"""
SELECT {_COLUMNS}, 0.0, m.seq, NULL, {_RECENCY}
FROM json_each(:seqs) AS j JOIN memories AS m ON m.seq = j.value
WHERE {_VISIBLE}
"""
_VECTORS_OF = """
SELECT v.seq, v.vector FROM json_each(?) AS j JOIN memory_vectors AS v ON v.seq = j.value
"""
_NEW_VECTORS = """
SELECT v.vseq, v.seq, m.project, v.code
FROM memory_vectors AS v JOIN memories AS m ON m.seq = v.seq
WHERE v.vseq > ? ORDER BY v.vseq LIMIT ?
"""
_VECTOR_SUM = """
SELECT key, value FROM memory_meta WHERE key IN ('vector_sum', 'vector_count')
"""
_PENDING = """
SELECT p.seq, m.content FROM memory_pending AS p JOIN memories AS m ON m.seq = p.seq
WHERE p.seq > ? ORDER BY p.seq LIMIT ?
"""

_UPSERT = """
INSERT INTO memories (id, content, tags, agent, project, created_at, digest, team)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(id) DO UPDATE SET
    content = excluded.content, tags = excluded.tags, agent = excluded.agent,
    project = excluded.project, created_at = excluded.created_at, digest = excluded.digest,
    team = excluded.team
"""
# Memories a save into :project finds as already there when their content matches: the
# project's own first, then global ones (model.same_scope); oldest first. :before limits
# it to memories stored before an import began (the largest seq then; -1: none).
_SAME_DIGEST = f"""
SELECT {_COLUMNS} FROM memories AS m
WHERE m.digest = :digest AND {_VISIBLE} AND m.seq <= :before
ORDER BY m.project IS NULL, m.seq
"""
_BY_ID = f"SELECT {_COLUMNS} FROM memories AS m WHERE m.id = ?"
_INSERT = """
INSERT INTO memories (id, content, tags, agent, project, created_at, digest, team)
VALUES (:id, :content, :tags, :agent, :project, :created_at, :digest, :team)
ON CONFLICT(id) DO NOTHING
"""
_NO_LIMIT = 2**63 - 1
# Project identity (spec/memory.md "Which project"): moving memories from their old path
# keys to the project's travelling key, by an index on `project` kept beside the schema.
_PROJECT_INDEX = "CREATE INDEX IF NOT EXISTS memories_project ON memories(project)"
_PROJECT_COUNTS = """
SELECT m.project, count(*) FROM json_each(?) AS j JOIN memories AS m ON m.project = j.value
GROUP BY m.project
"""
_PROJECT_SEQS = "SELECT m.seq FROM json_each(?) AS j JOIN memories AS m ON m.project = j.value"
_MOVE_PROJECT = "UPDATE memories SET project = ? WHERE project IN (SELECT value FROM json_each(?))"
_MOVED_VECTORS = """
SELECT v.seq, v.code, v.vector FROM json_each(?) AS j JOIN memory_vectors AS v ON v.seq = j.value
"""
_DROP_VECTORS = "DELETE FROM memory_vectors WHERE seq IN (SELECT value FROM json_each(?))"
_REVECTOR = "INSERT INTO memory_vectors (seq, code, vector) VALUES (?, ?, ?)"
# UPSERT rather than INSERT OR REPLACE: REPLACE deletes without firing the delete trigger
# (unless recursive_triggers is on), which would leave stale rows in the FTS index.

_tags_encoder = msgspec.json.Encoder()
_tags_decoder = msgspec.json.Decoder(list[str])
_sum_decoder = msgspec.json.Decoder(list[float])
_Result = TypeVar("_Result")


def default_store() -> SqliteMemory:
    """The user's memory store: `memory.db` in relay's state folder."""
    return SqliteMemory()


def build_match(query: str, *, operator: str = "AND") -> str | None:
    """An FTS5 MATCH expression for the words of `query` (each quoted, so any FTS syntax in
    it is taken literally), joined with `operator`; None when the query has no words."""
    words = query_words(query)
    return _joined(words, operator) if words else None


def _joined(words: list[str], operator: str) -> str:
    """`words` as FTS5 strings joined with `operator`."""
    return f" {operator} ".join(_quoted(word) for word in words)


def _quoted(word: str) -> str:
    # An FTS5 string: `AND`, `NEAR`, `*`, `:` and parentheses inside quotes are plain
    # text. \w+ holds no quote, but doubling keeps this safe if the pattern changes.
    return '"' + word.replace('"', '""') + '"'


now_iso = utc_millis
"""The current UTC time as ISO 8601 with milliseconds and Z (a memory's `created_at`)."""


class SqliteMemory:
    """Memories in one SQLite file (default: `$RELAY_HOME/state/memory.db`).

    One connection per store, opened on first use and shared by threads under a lock.
    `busy_timeout` is how many seconds an operation waits for another process's lock.
    """

    def __init__(
        self,
        path: Path | None = None,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        semantic: bool = True,
        model: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ):
        self.path = path if path is not None else state_dir() / DATABASE_NAME
        self.busy_timeout = busy_timeout
        self.semantic = semantic
        """Search by meaning as well as by words, when the model can be loaded."""
        self.model = model
        """The embedding model (a key of semantic.MODELS); None: the best installed."""
        self.progress = progress
        """Called with (done, total) while a large backlog of memories is embedded: with
        (0, total) when it starts, then after each batch."""
        self.semantic_notice: str | None = None
        """Why search is by words only although `semantic` asked for more (one line), once
        a search has found out; None otherwise."""
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._embedder: Embedder | None = None
        self._index: VectorIndex | None = None
        self._index_lock = threading.Lock()  # the index is read by the worker thread
        self._model_checked = False
        self._project_indexed = False
        self._centre: Any = None

    def __repr__(self) -> str:
        return f"SqliteMemory({str(self.path)!r})"

    def __enter__(self) -> SqliteMemory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (a later call opens it again)."""
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    # -- the MemoryService protocol -------------------------------------------------

    def add(
        self,
        content: str,
        *,
        tags: Sequence[str] = (),
        agent: str | None = None,
        project: str | None = None,
    ) -> Memory:
        """Save a memory (project None: global) and return it: the new one, or the one
        already stored with the same content (see `save`)."""
        return self.save(content, tags=tags, agent=agent, project=project).memory

    def save(
        self,
        content: str,
        *,
        tags: Sequence[str] = (),
        agent: str | None = None,
        project: str | None = None,
        team: str | None = None,
    ) -> SavedMemory:
        """Save a memory unless one with the same content (model.content_key) is stored in
        `project` or globally (model.same_scope); then return that one, `existing` true,
        with the new tags added after its own. Its agent and date stay as they were.

        `team`: a team memory (of `project`, or global); an identical memory found
        that was this machine's alone becomes the team's."""
        tag_list = list(dict.fromkeys(tags))
        key = content_key(content)
        digest = _digest(key)
        row: dict[str, object] = {
            "created_at": now_iso(),
            "id": "",
            "content": content,
            "tags": _tags_encoder.encode(tag_list).decode(),
            "agent": agent,
            "project": project,
            "digest": digest,
            "team": team,
        }

        def insert(connection: sqlite3.Connection) -> SavedMemory:
            # In the write transaction (BEGIN IMMEDIATE): no other save can come between
            # this lookup and the insert, in this process or another. The lookup is one
            # probe of the digest index; keeping that index costs saves more than it does.
            found = connection.execute(
                _SAME_DIGEST, {"digest": digest, "project": project, "before": _NO_LIMIT}
            )
            for stored in found:
                existing = _memory(stored)
                if content_key(existing.content) != key:
                    continue  # a 64-bit hash collision: another text
                merged = list(dict.fromkeys([*existing.tags, *tag_list]))
                shared = existing.team if existing.team is not None else team
                if merged != existing.tags or shared != existing.team:
                    connection.execute(
                        "UPDATE memories SET tags = ?, team = ? WHERE id = ?",
                        (_tags_encoder.encode(merged).decode(), shared, existing.id),
                    )
                    existing = msgspec.structs.replace(existing, tags=merged, team=shared)
                return SavedMemory(memory=existing, existing=True)
            for _ in range(ID_ATTEMPTS):
                row["id"] = secrets.token_hex(4)
                if connection.execute(_INSERT, row).rowcount == 1:
                    return SavedMemory(memory=self._saved(row, tag_list))
            # 20 collisions in a 2**32 space: the store holds billions, or secrets is broken.
            raise MemoryStoreError("no free id after 20 tries", store=str(self.path))

        return self._write(insert)

    @staticmethod
    def _saved(row: Mapping[str, Any], tags: builtins.list[str]) -> Memory:
        """The memory a save inserted, from its parameters."""
        return Memory(
            id=row["id"],
            content=row["content"],
            tags=tags,
            agent=row["agent"],
            project=row["project"],
            created_at=row["created_at"],
            team=row["team"],
        )

    def search(
        self, query: str, *, project: str | None = None, limit: int = 10, explain: bool = False
    ) -> list[MemoryHit]:
        """Memories of `project` and global ones matching `query`, best first; [] when none.

        Project None searches global memories only. Hybrid: the memories that share the
        query's words (full text: those with every word, and those with some only when
        fewer than `limit` are found otherwise, `_with_any_word`) and those nearest to it
        in meaning (`_start_nearest`, `_finish_nearest`) are fused by reciprocal rank,

            score = (w / (10 + keyword rank) + 1 / (10 + semantic rank)) / norm

        a rank missing from one list adding nothing; w says how much the memory's words
        know (_keyword_weight): 1 for a memory with every word of the query, related in
        meaning, and not by common words only; less when the words are weak, and 0 when
        they are all common (then meaning decides); `norm` makes a memory first in both
        score 1.0. Only memories with a similarity of at least the model's threshold to
        the query count as found by meaning (MIN_SIMILARITY, 0.25, for wordllama; for
        MiniLM 0.15, measured from the store's centre, _centre). Each list is ranked with the
        recency lift of a recent memory (at most +20% for one saved today, +10% at 30
        days, fading towards none): by words BM25 times the lift, by meaning similarity
        times the lift; so recency decides between memories that match alike but seldom
        overturns a clearly better match. The constants were chosen on
        tests/memory_relevance.py, its keyword and its paraphrase questions.

        By words only when the store's `semantic` is off or the model cannot be loaded
        (`semantic_notice` says why); then the score is the full-text one,
        -bm25 * recency (see _keyword_rows). `explain`: each hit carries its Ranking.
        Speed and relevance are measured by tests/perf/bench_memory.py.
        """
        if limit <= 0:
            return []
        words = query_words(query)
        if not words:
            return []
        parameters: dict[str, object] = {
            "project": project,
            "limit": limit,
            "weight": RECENCY_WEIGHT,
            "days": RECENCY_DAYS,
        }
        started = self._start_nearest(query, project)
        if started is not None:
            # Memories with every word looked for while the worker embeds the query and
            # scans the sign codes; those with some of the words only if still needed.
            depth = {**parameters, "limit": max(limit, KEYWORD_DEPTH)}
            every = self._ranked([_joined(words, "AND")], project, depth)
            meaning = self._finish_nearest(started)
            if meaning is not None:
                nearest, candidates = meaning
                found = [seq for seq, _ in nearest]
                keyword, with_every = self._with_any_word(
                    words, project, depth, every, found_by_meaning=found
                )
                related = self._similarities(
                    candidates, [row[_SEQ] for row in keyword if row[_SEQ] not in found]
                )
                return self._fused(
                    keyword,
                    with_every,
                    related={**related, **dict(nearest)},
                    threshold=candidates.threshold,
                    model=candidates.model,
                    store_size=candidates.scanned.size,
                    nearest=nearest,
                    parameters=parameters,
                    words=words,
                    explain=explain,
                )
        rows, _ = self._keyword_rows(words, project, parameters)
        return [
            MemoryHit(
                memory=_memory(row),
                score=row[_SCORE],
                explain=_ranking(row, words, keyword_rank=rank) if explain else None,
            )
            for rank, row in enumerate(rows, 1)
        ]

    def _keyword_rows(
        self, words: builtins.list[str], project: str | None, parameters: dict[str, object]
    ) -> tuple[builtins.list[Any], int]:
        """The best `limit` memories by words, as _RANK's rows, best first, and how many
        of them (the first ones) have every word.

        The words are the query's, less stop words ("how", "the", …) when it has others.
        Memories with every word come first; when there are fewer than `limit`, memories
        with any of the words follow. The score (higher is better) is

            -bm25 * (1 + 0.2 / (1 + age_days / 30))

        BM25 relevance (a word in the tags counts twice one in the content) with the
        recency lift.

        FTS5 ranks the candidates: the newest SEARCH_CANDIDATES (1,000) matches of the
        query, and for "any word" the newest 1,000 / len(words) of each word (see
        _ranked, _with_any_word); a memory older than that is ranked only when fewer
        memories match. The figures are in tests/perf/bench_memory.py.
        """
        every = self._ranked([_joined(words, "AND")], project, parameters)
        return self._with_any_word(words, project, parameters, every)

    def _with_any_word(
        self,
        words: builtins.list[str],
        project: str | None,
        parameters: dict[str, object],
        every: builtins.list[Any],
        *,
        found_by_meaning: Iterable[int] = (),
    ) -> tuple[builtins.list[Any], int]:
        """`every` (the memories with every word), followed by memories with any of the
        words when there are fewer than `limit`; and how many have every word.

        In hybrid search, `found_by_meaning` are the memories found by meaning: memories
        with only some of the words are looked for only when those and the ones with every
        word are fewer than `limit` (they weigh little in the fusion, and finding them is
        most of the cost of a search by words of several words)."""
        limit = int(str(parameters["limit"]))
        found = {row[_SEQ] for row in every}
        if len(found | set(found_by_meaning)) >= limit or len(words) < 2:
            return every, len(every)
        # Fewer than asked have every word: those first, then those with any. Each word
        # brings its own candidates, so the few (and best) memories with a rare word are
        # not crowded out by the many with a common one.
        # The candidates are shared out: each word brings its newest 1,000 / len(words)
        # matches. A rare word's matches are fewer than its share and all come; only the
        # oldest matches of a common word, which weigh least, are left out.
        share = max(SEARCH_CANDIDATES // len(words), 1)
        more = self._ranked(
            [_quoted(word) for word in words], project, parameters, candidates=share
        )
        rows = every + [row for row in more if row[_SEQ] not in found][: limit - len(every)]
        return rows, len(every)

    def _fused(
        self,
        keyword: builtins.list[Any],
        every: int,
        *,
        related: dict[int, float],
        threshold: float,
        model: str,
        store_size: int,
        nearest: builtins.list[tuple[int, float]],
        parameters: dict[str, object],
        words: builtins.list[str],
        explain: bool,
    ) -> builtins.list[MemoryHit]:
        """The keyword ranking and the semantic one, fused by reciprocal rank (see search);
        `related`: the similarity in meaning of the memories found by words (and of the
        nearest), which says how much their words weigh (_keyword_weight)."""
        keyword_rank = {row[_SEQ]: rank for rank, row in enumerate(keyword, 1)}
        weight_of = {
            row[_SEQ]: _keyword_weight(
                rank <= every,
                related.get(row[_SEQ]),
                threshold,
                row[_BM25] / len(words) if store_size >= COMMON_FROM else COMMON_BM25,
            )
            for rank, row in enumerate(keyword, 1)
        }
        similarity_of = dict(nearest)
        rows = list(keyword)
        unseen = [seq for seq in similarity_of if seq not in keyword_rank]
        if unseen:
            seqs = _tags_encoder.encode(unseen).decode()
            rows += self._fetch(_BY_SEQS, {**parameters, "seqs": seqs})
        # By meaning, the memories in scope ranked as by words: similarity with the
        # recency lift (keyword rows come ranked by bm25 with it).
        by_meaning = sorted(
            (row for row in rows if row[_SEQ] in similarity_of),
            key=lambda row: similarity_of[row[_SEQ]] * row[_LIFT],
            reverse=True,
        )
        semantic_rank = {row[_SEQ]: rank for rank, row in enumerate(by_meaning, 1)}
        norm = (KEYWORD_WEIGHT + SEMANTIC_WEIGHT) / (RRF_K + 1)
        scored: builtins.list[tuple[float, str, Any]] = []
        for row in rows:
            seq = row[_SEQ]
            fused = 0.0
            if seq in keyword_rank:
                fused += weight_of[seq] / (RRF_K + keyword_rank[seq])
            if seq in semantic_rank:
                fused += SEMANTIC_WEIGHT / (RRF_K + semantic_rank[seq])
            scored.append((fused / norm, row[5], row))
        scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
        hits = []
        for score, _, row in scored[: int(str(parameters["limit"]))]:
            seq = row[_SEQ]
            ranking = None
            if explain:
                ranking = _ranking(
                    row,
                    words,
                    by_meaning=True,
                    keyword_rank=keyword_rank.get(seq),
                    semantic_rank=semantic_rank.get(seq),
                    similarity=similarity_of.get(seq, related.get(seq)),
                    keyword_weight=weight_of.get(seq),
                    model=model,
                )
            hits.append(MemoryHit(memory=_memory(row), score=score, explain=ranking))
        return hits

    # -- search by meaning ----------------------------------------------------------

    def _start_nearest(self, query: str, project: str | None) -> Future[_Candidates] | None:
        """Begin finding the memories nearest to `query` in meaning: the store's pending
        memories embedded and the index brought up to date here, then the query embedded
        and the sign codes scanned on a worker thread (numpy and tokenizers let go of the
        GIL, so this overlaps the search by words). None when search by meaning is off
        or cannot be used (then `semantic_notice` says why)."""
        embedder = self._semantic_model()
        if embedder is None:
            return None
        try:
            self._prepare(embedder)
            with self._lock:
                index = self._vector_index()
                centre = self._centre if embedder.centred else None
        except MemoryStoreError as exc:
            self._semantic_failed(exc)
            return None
        except SemanticUnavailable as exc:
            self._model_failed(exc)
            return None
        return _worker().submit(self._candidates, embedder, index, centre, query, project)

    def _candidates(
        self,
        embedder: Embedder,
        index: VectorIndex,
        centre: Any,
        query: str,
        project: str | None,
    ) -> _Candidates:
        """The query's embedding and the NEAREST memories in scope by sign code."""
        vector = embed_query(embedder, query)
        threshold = getattr(embedder, "min_similarity", MIN_SIMILARITY)
        if centre is not None:
            # A small store's centre is near zero (CENTRE_PRIOR): its similarities are
            # nearly plain cosines, which run higher; the bar rises to match.
            threshold += SMALL_STORE_MARGIN * CENTRE_PRIOR / (index.size + CENTRE_PRIOR)
        if not vector.any():
            return _Candidates(vector, index, [], centre, threshold, embedder.name)
        with self._index_lock:
            seqs = index.nearest(sign_codes(vector[None])[0], [None, project], NEAREST)
        return _Candidates(vector, index, seqs, centre, threshold, embedder.name)

    def _finish_nearest(
        self, started: Future[_Candidates]
    ) -> tuple[builtins.list[tuple[int, float]], _Candidates] | None:
        """The memories nearest in meaning, (seq, cosine similarity) best first, at most
        FUSE_DEPTH and none below MIN_SIMILARITY: the candidates by sign code re-ranked by
        the exact cosine of their int8 vectors. None when the store failed meanwhile."""
        import numpy as np

        try:
            found = started.result()
        except SemanticUnavailable as exc:
            self._model_failed(exc)
            return None
        if not found.seqs:
            return [], found
        try:
            rows = self._fetch(_VECTORS_OF, (_tags_encoder.encode(found.seqs).decode(),))
        except MemoryStoreError as exc:
            self._semantic_failed(exc)
            return None
        width = len(found.vector)
        rows = [row for row in rows if len(row[1]) == width]
        present = {seq for seq, _ in rows}
        with self._index_lock:
            found.scanned.forget([seq for seq in found.seqs if seq not in present])
        if not rows:
            return [], found
        similarities = _centred_cosine(
            from_int8([vector_bytes for _, vector_bytes in rows], width), found.vector, found.centre
        )
        order = np.argsort(-similarities, kind="stable")[:FUSE_DEPTH]
        nearest = [
            (int(rows[place][0]), float(similarities[place]))
            for place in order
            if similarities[place] >= found.threshold
        ]
        return nearest, found

    def _similarities(self, found: _Candidates, seqs: builtins.list[int]) -> dict[int, float]:
        """The similarity in meaning to the query of the memories `seqs` (those found by
        words), as _finish_nearest measures it; {} for those without a vector."""
        if not seqs or not found.vector.any():
            return {}
        try:
            rows = self._fetch(_VECTORS_OF, (_tags_encoder.encode(seqs).decode(),))
        except MemoryStoreError:
            return {}  # by words they still rank, as if unrelated in meaning
        width = len(found.vector)
        rows = [row for row in rows if len(row[1]) == width]
        if not rows:
            return {}
        vectors = from_int8([vector_bytes for _, vector_bytes in rows], width)
        similarities = _centred_cosine(vectors, found.vector, found.centre)
        return {int(seq): float(value) for (seq, _), value in zip(rows, similarities, strict=True)}

    def _model_failed(self, exc: SemanticUnavailable) -> None:
        # The model stopped working (its process died twice in a row): by words, this
        # search and the next ones of this store.
        self.semantic_notice = f"search by meaning failed ({exc}); by words only"
        self._embedder = None

    def _semantic_failed(self, exc: MemoryStoreError) -> None:
        # A read-only or damaged store: search by words still works.
        self.semantic_notice = f"search by meaning is off here ({exc.message}); by words only"

    def _semantic_model(self) -> Embedder | None:
        """The embedding model, loaded on first use; None when `semantic` is off or it
        cannot be loaded (`semantic_notice` then says why, once)."""
        if not self.semantic:
            return None
        if self._embedder is None and self.semantic_notice is None:
            try:
                self._embedder = load_embedder(self.model)
            except SemanticUnavailable as exc:
                self.semantic_notice = f"memory search by meaning is off: {exc}; by words only"
        return self._embedder

    def catch_up(self) -> int:
        """Embed the memories that have no embedding yet (new ones, or a whole store from
        before embeddings: the backfill) and load the new ones into this process's index;
        return how many were embedded. Search does it first; a caller may do it ahead.
        0 when search by meaning is off or unavailable."""
        embedder = self._semantic_model()
        if embedder is None:
            return 0
        try:
            embedded = self._prepare(embedder)
        except SemanticUnavailable as exc:
            self._model_failed(exc)
            return 0
        with self._lock:
            self._vector_index()
        return embedded

    def _prepare(self, embedder: Embedder) -> int:
        """Check the store's model (once per process), then embed what is pending; return
        how many. Not under the lock as a whole: a save waits for a batch at most."""
        if not self._model_checked:
            self._check_model(embedder)
            self._model_checked = True
        return self._embed_pending(embedder)

    def _vector_index(self) -> VectorIndex:
        """This process's index of sign codes, brought up to date (under the lock)."""
        dimensions = self._embedder.dimensions if self._embedder is not None else DIMENSIONS
        if self._index is None or self._index.stale or self._index.words != dimensions // 64:
            self._index = VectorIndex(dimensions)
        index = self._index
        (latest,) = self._fetch("SELECT max(vseq) FROM memory_vectors", ())[0]
        if self._centre is None or (latest is not None and latest > index.loaded_through):
            self._centre = _centre(self._fetch(_VECTOR_SUM, ()), dimensions)
        while latest is not None and latest > index.loaded_through:
            rows = self._fetch(_NEW_VECTORS, (index.loaded_through, LOAD_BATCH))
            if not rows:
                break
            # Codes of another model's width (another process's model, not yet redone)
            # are left out: they would compare as noise.
            fitting = [row for row in rows if len(row[3]) == index.words * 8]
            if fitting:
                vseqs, seqs, projects, codes = zip(*fitting, strict=True)
                with self._index_lock:
                    index.add(vseqs, seqs, projects, b"".join(codes))
            index.loaded_through = max(index.loaded_through, int(rows[-1][0]))
            if len(rows) < LOAD_BATCH:
                break
        return index

    def _check_model(self, embedder: Embedder) -> None:
        """Vectors made by another model are dropped and every memory embedded again."""

        def check(connection: sqlite3.Connection) -> None:
            row = connection.execute(
                "SELECT value FROM memory_meta WHERE key = 'embedding_model'"
            ).fetchone()
            if row is not None and row[0] == embedder.name:
                return
            if row is not None:
                connection.execute("DELETE FROM memory_vectors")
                connection.execute(
                    "DELETE FROM memory_meta WHERE key IN ('vector_sum', 'vector_count')"
                )
                connection.execute(
                    "INSERT INTO memory_pending(seq) SELECT seq FROM memories"
                    " WHERE seq NOT IN (SELECT seq FROM memory_pending)"
                )
            connection.execute(
                "INSERT OR REPLACE INTO memory_meta(key, value) VALUES ('embedding_model', ?)",
                (embedder.name,),
            )

        row = self._fetch("SELECT value FROM memory_meta WHERE key = 'embedding_model'", ())
        if not row or row[0][0] != embedder.name:
            self._write(check)

    def _embed_pending(self, embedder: Embedder) -> int:
        """Embed the memories listed in memory_pending, a batch per transaction; return
        how many. Progress is reported for a backlog of PROGRESS_FROM or more.

        The next batch is read while the model embeds this one, and sent to the model
        before this one's vectors are stored: the model embeds it while this thread
        writes (in the backfill, the model's process used to wait for each read and
        write). A memory listed again meanwhile (changed while it
        was embedded) is found by a last look from the start."""
        (waiting,) = self._fetch("SELECT count(*) FROM memory_pending", ())[0]
        if not waiting:
            return 0
        report = self.progress if waiting >= PROGRESS_FROM else None
        if report is not None:
            report(0, waiting)  # it starts now: the rate counts from here
        batch = self._fetch(_PENDING, (0, EMBED_BATCH))
        if not batch:
            # Listed memories that are gone (a trigger removes them; belt and braces).
            self._write(lambda c: c.execute("DELETE FROM memory_pending"))
            return 0

        def embed(batch: builtins.list[Any]) -> Future[Any]:
            return _worker().submit(embedder.embed, [content for _, content in batch])

        done, embedding = 0, embed(batch)
        while True:
            more = done + len(batch) < waiting + EMBED_BATCH
            following = self._fetch(_PENDING, (batch[-1][0], EMBED_BATCH)) if more else []
            vectors = embedding.result()
            if following:
                embedding = embed(following)
            codes, ints = sign_codes(vectors), to_int8(vectors)
            rows = [
                (seq, content, codes[place].tobytes(), ints[place].tobytes())
                for place, (seq, content) in enumerate(batch)
            ]
            total = [float(value) for value in vectors.sum(axis=0)]
            self._write(functools.partial(_store_vectors, rows=rows, total=total))
            done += len(batch)
            if report is not None:
                report(min(done, waiting), waiting)
            if not following and more:
                following = self._fetch(_PENDING, (0, EMBED_BATCH))
                if following:
                    embedding = embed(following)
            if not following:
                return done
            batch = following

    def _ranked(
        self,
        matches: builtins.list[str],
        project: str | None,
        parameters: dict[str, object],
        *,
        candidates: int | None = None,
        scoped: bool = False,
    ) -> builtins.list[Any]:
        """The best memories in scope for the sum of several FTS5 queries' bm25, in one
        statement (`_ranked_sql`), after one that counts their matches in the recent
        index.

        Each query brings its newest `candidates` (SEARCH_CANDIDATES) matches (FTS5
        walks rowids newest first, no sort) with their bm25. bm25 is a sum over the
        query's words, so for one word per query the sum is the bm25 of "any of them" (a
        word's part is left out only for memories older than that word's candidates: a
        common word, worth little). The best RANKED by bm25 that are in scope get the
        recency lift.

        A query runs in the recent index (`memories_recent`, the newest
        RECENT_MEMORIES memories) when it has its `candidates` matches there: its
        candidates are then the same as in the whole store (its newest matches), and
        bm25() counts each word's memories among the newest 65,536 instead of the whole
        store (a walk through the word's whole list: 5-10 ms for a common word at a
        million memories). A query with fewer matches there runs in the whole store
        (`memories_fts`); so does every query while the recent index rests (until the
        newest seq passes twice RECENT_MEMORIES, where it would save little). BM25 is
        thus reckoned over the newest memories or over all of them: a word's weight
        (its IDF) and the average length of a memory, which BM25 weighs a memory's
        length against, may differ between the two as the store's memories changed over
        time (`_in_recent_sql`). The count and the ranking share one read transaction.

        The scope is not in the MATCH: FTS5 would read the whole list of the scope's
        memories for every query (bm25 counts each phrase's matches), the larger part
        of the cost at 1,000,000 memories. Each candidate is looked up instead, and
        only those in scope are scored (bm25 costs several times the lookup). When
        fewer than RANKED are in scope and some query had more matches than it brought
        (the scope's memories may be older than other projects'), the queries run again
        `scoped`, the scope in the MATCH, in the whole store: every match in scope is
        then within reach."""
        within = f" AND scope : ({_scopes(project)})" if scoped else ""
        candidates = SEARCH_CANDIDATES if candidates is None else candidates
        query: dict[str, object] = {
            **parameters,
            "candidates": candidates,
            "ranked": max(RANKED, int(str(parameters["limit"]))),
        }
        for arm, match in enumerate(matches):
            query[f"match{arm}"] = f"{{content tags}} : ({match}){within}"

        def rank(connection: sqlite3.Connection) -> builtins.list[Any]:
            indexes = ("memories_fts",) * len(matches)
            if not scoped:
                # No row when the file was edited by hand: ranked in the whole store.
                for counts in connection.execute(_in_recent_sql(len(matches)), query).fetchall():
                    indexes = tuple(
                        "memories_fts" if count is None or count < candidates else "memories_recent"
                        for count in counts
                    )
            return connection.execute(_ranked_sql(indexes, _MATERIALIZE), query).fetchall()

        # One read transaction: the count and the ranking see the same memories, or a
        # save, forget or eviction in between could leave a query ranked in the recent
        # index with fewer candidates than it counted there.
        rows = self._read(lambda connection: _in_one_read(connection, rank))
        (_, in_best, truncated, *_) = next(row for row in rows if row[0] == 1)
        if in_best < query["ranked"] and truncated and not scoped:
            return self._ranked(matches, project, parameters, candidates=candidates, scoped=True)
        return [row[1:] for row in rows if row[0] == 0]

    def get(self, memory_id: str) -> Memory | None:
        """The memory with this id, or None."""
        row = self._read(lambda c: c.execute(_BY_ID, (memory_id,)).fetchone())
        return _memory(row) if row is not None else None

    def delete(self, memory_id: str) -> bool:
        """Forget a memory; False when there was none with this id."""
        return self._write(
            lambda c: c.execute("DELETE FROM memories WHERE id = ?", (memory_id,)).rowcount > 0
        )

    def list(self, *, project: str | None = None, limit: int = 50) -> list[Memory]:
        """Memories of `project` and global ones (project None: global only), newest first."""
        if limit <= 0:
            return []
        rows = self._read(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM memories AS m WHERE {_VISIBLE}"
                " ORDER BY m.created_at DESC, m.seq DESC LIMIT :limit",
                {"project": project, "limit": limit},
            ).fetchall()
        )
        return [_memory(row) for row in rows]

    def export(self) -> Iterator[Memory]:
        """Every memory, oldest first (model.visible_in narrows it to what `list` shows)."""
        # Pages by (created_at, seq) so the lock is not held while the caller works.
        after: tuple[str, int] = ("", -1)
        while True:
            rows = self._fetch(
                f"SELECT {_COLUMNS}, m.seq FROM memories AS m"
                " WHERE (m.created_at, m.seq) > (?, ?)"
                " ORDER BY m.created_at, m.seq LIMIT ?",
                (*after, EXPORT_BATCH),
            )
            for row in rows:
                yield _memory(row)
            if len(rows) < EXPORT_BATCH:
                return
            after = (rows[-1][5], rows[-1][_WIDTH])

    def import_memories(self, memories: Iterable[Memory]) -> ImportCounts:
        """Store memories as given (ids, tags, dates kept) and say what happened to each.

        An id already stored is left alone when every field is the same (`present`) and
        replaced by the imported memory when not (`updated`). A new id whose content is
        the same as a memory stored before this import began, in its project or globally
        (as `save` would find it), is not added (`present`): merging another machine's
        export adds no copies. Memories within the imported ones are not compared with
        each other, so an export imported into an empty store comes back exactly, even
        from a store that held copies (schema 1 allowed them)."""
        given = list(memories)
        if not given:
            return ImportCounts()

        def store(connection: sqlite3.Connection) -> ImportCounts:
            (before,) = connection.execute("SELECT max(seq) FROM memories").fetchone()
            if before is None:
                # An empty store (a restore, or the benchmark's bulk load): nothing to
                # compare with, so one executemany. An id repeated in the input replaces
                # its first occurrence: that is an update.
                # The recent index is filled once at the end, not kept in step row by row.
                connection.execute(_NO_RECENT)
                connection.executemany(_UPSERT, [_row(memory) for memory in given])
                for statement in _statements(_FILL_RECENT):
                    connection.execute(statement)
                (stored,) = connection.execute("SELECT count(*) FROM memories").fetchone()
                return ImportCounts(added=stored, updated=len(given) - stored)
            added = present = updated = 0
            for memory in given:
                row = connection.execute(_BY_ID, (memory.id,)).fetchone()
                if row is not None:
                    if _memory(row) == memory:
                        present += 1
                    else:
                        connection.execute(_UPSERT, _row(memory))
                        updated += 1
                    continue
                key = content_key(memory.content)
                found = connection.execute(
                    _SAME_DIGEST,
                    {"digest": _digest(key), "project": memory.project, "before": before},
                )
                if any(content_key(_memory(row).content) == key for row in found):
                    present += 1
                    continue
                connection.execute(_UPSERT, _row(memory))
                added += 1
            return ImportCounts(added=added, present=present, updated=updated)

        return self._write(store)

    # -- project identity (spec/memory.md "Which project") ------------------------------

    def move_project(self, old: Sequence[str], new: str) -> dict[str, int]:
        """Move every memory stored under one of the `old` project keys (paths, from before
        identities travelled) to `new`; return how many moved from each key. Copies are
        kept (as an upgrade keeps them). One indexed read when there is nothing to move."""
        keys = builtins.list(dict.fromkeys(key for key in old if key != new))
        if not keys:
            return {}
        self._project_index()
        listed = _tags_encoder.encode(keys).decode()
        counts = dict(self._fetch(_PROJECT_COUNTS, (listed,)))
        if not counts:
            return {}

        def move(connection: sqlite3.Connection) -> dict[str, int]:
            moved = dict(connection.execute(_PROJECT_COUNTS, (listed,)).fetchall())
            seqs = [seq for (seq,) in connection.execute(_PROJECT_SEQS, (listed,))]
            connection.execute(_MOVE_PROJECT, (new, listed))
            # The embeddings are written again under new vseqs: every process's index
            # loads what is new since it last looked, so it sees them in their new scope.
            listed_seqs = _tags_encoder.encode(seqs).decode()
            rows = connection.execute(_MOVED_VECTORS, (listed_seqs,)).fetchall()
            if rows:
                connection.execute(_DROP_VECTORS, (listed_seqs,))
                connection.executemany(_REVECTOR, rows)
            return moved

        return self._write(move)

    def _project_index(self) -> None:
        """The index on `project` that a move reads by (added beside the schema, no version
        change: an older relay keeps using the file and SQLite keeps the index for it)."""
        if self._project_indexed:
            return
        present = self._fetch(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'memories_project'", ()
        )
        if not present:
            self._write(lambda connection: connection.execute(_PROJECT_INDEX))
        self._project_indexed = True

    # -- connection and error handling ----------------------------------------------

    def _fetch(
        self, sql: str, parameters: Sequence[object] | Mapping[str, object]
    ) -> builtins.list[Any]:
        # builtins.list: in this class `list` is the MemoryService method.
        return self._read(lambda connection: connection.execute(sql, parameters).fetchall())

    def _read(self, operation: Callable[[sqlite3.Connection], _Result]) -> _Result:
        with self._lock:
            connection = self._connect()
            try:
                return operation(connection)
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def _write(self, operation: Callable[[sqlite3.Connection], _Result]) -> _Result:
        """Run `operation` in one write transaction, retrying when the database is busy.

        The busy timeout already waits for a lock; a few more tries cover the SQLITE_BUSY
        that SQLite returns without waiting (a WAL checkpoint or recovery in progress), and
        stop once the busy timeout has passed, so a held lock fails in about that time.
        """
        with self._lock:
            connection = self._connect()
            deadline = time.monotonic() + self.busy_timeout
            for attempt in range(1, WRITE_ATTEMPTS + 1):
                try:
                    # IMMEDIATE: take the write lock up front, where the busy timeout
                    # applies, rather than fail on upgrading a read lock mid-transaction.
                    connection.execute("BEGIN IMMEDIATE")
                    result = operation(connection)
                    connection.execute("COMMIT")
                except BaseException as exc:
                    _rollback(connection)
                    if not isinstance(exc, sqlite3.Error):
                        raise
                    retry = attempt < WRITE_ATTEMPTS and time.monotonic() < deadline
                    if _busy(exc) and retry:
                        time.sleep(0.01 * attempt)
                        continue
                    raise self._error(exc) from exc
                return result
            raise AssertionError("unreachable: the last attempt returns or raises")

    def _connect(self) -> sqlite3.Connection:
        """The open connection; opened, configured and migrated on first use."""
        if self._connection is not None:
            return self._connection
        try:
            private_dir(self.path.parent)
            private_file(self.path)  # memories are the user's alone: 0600 (-wal, -shm too)
        except OSError as exc:
            raise MemoryStoreError(
                f"cannot create the folder {self.path.parent}: {exc.strerror or exc}",
                store=str(self.path),
            ) from exc
        connection: sqlite3.Connection | None = None
        try:
            connection = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,  # transactions are explicit (BEGIN IMMEDIATE)
                check_same_thread=False,  # shared by threads; self._lock serialises use
            )
            self._configure(connection)
        except sqlite3.Error as exc:
            if connection is not None:
                connection.close()
            raise self._error(exc) from exc
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        self._connection = connection
        return connection

    def _configure(self, connection: sqlite3.Connection) -> None:
        connection.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        (version,) = connection.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise MemoryStoreError(
                f"written by a newer relay (schema {version}; this relay knows {SCHEMA_VERSION})",
                store=str(self.path),
            )
        (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
        if mode != "wal":
            # Needs a moment alone with the file: retried, as several processes may
            # open a new store at once.
            for attempt in range(1, WRITE_ATTEMPTS + 1):
                try:
                    connection.execute("PRAGMA journal_mode = WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if not _busy(exc) or attempt == WRITE_ATTEMPTS:
                        raise
                    time.sleep(0.01 * attempt)
        connection.execute("PRAGMA synchronous = NORMAL")
        # The 2 MB default cache misses on every row a search joins once the store passes
        # tens of thousands of memories; pages are allocated only as they are read.
        connection.execute(f"PRAGMA cache_size = {-CACHE_KIB}")
        if version < SCHEMA_VERSION:
            self._migrate(connection)

    def _migrate(self, connection: sqlite3.Connection) -> None:
        """Create the schema (version 0: a new file) or upgrade it, under the write lock."""
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                connection.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or attempt == WRITE_ATTEMPTS:
                    raise
                time.sleep(0.01 * attempt)
                continue
            break
        try:
            # Read again under the lock: another process may have migrated meanwhile.
            (version,) = connection.execute("PRAGMA user_version").fetchone()
            script = ""
            if version < 1:
                script = _SCHEMA + _VECTORS
            else:
                if version < 2:
                    connection.create_function(
                        "relay_digest",
                        1,
                        lambda text: _digest(content_key(text)),
                        deterministic=True,
                    )
                    script += _UPGRADE_TO_2
                if version < 3:
                    script += _UPGRADE_TO_3
            if version < 4:
                script += _RECENT.format(size=RECENT_MEMORIES, resting=RESTING) + _FILL_RECENT
            for statement in _statements(script):
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            connection.execute("COMMIT")
        except BaseException:
            _rollback(connection)
            raise

    def _error(self, exc: sqlite3.Error) -> MemoryStoreError:
        """A MemoryStoreError naming the file, saying in words what went wrong."""
        name = getattr(exc, "sqlite_errorname", "") or ""
        if _busy(exc):
            message = (
                f"the database is locked by another process (waited {self.busy_timeout:g}s): {exc}"
            )
        elif name.startswith("SQLITE_READONLY"):
            message = f"the database is read-only: {exc}"
        elif name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
            message = f"the database is corrupt or not a memory database: {exc}"
        elif name.startswith("SQLITE_CANTOPEN"):
            message = f"the database cannot be opened: {exc}"
        else:
            message = f"database error: {exc}"
        return MemoryStoreError(message, store=str(self.path))


def _scopes(project: str | None) -> str:
    """The FTS5 expression for the scopes a search in `project` sees (see `scope`)."""
    if project is None:
        return '"global"'
    # Matches the generated column: 'p' || hex(project), hex of the UTF-8 bytes.
    return f'"global" OR "p{project.encode().hex()}"'


def _rollback(connection: sqlite3.Connection) -> None:
    """End a failed transaction; a failure here must not hide the one that caused it."""
    if connection.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            connection.execute("ROLLBACK")


def _busy(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in str(exc)


def _in_one_read(
    connection: sqlite3.Connection, operation: Callable[[sqlite3.Connection], _Result]
) -> _Result:
    """`operation` in one read transaction (its statements see one snapshot of the file)."""
    connection.execute("BEGIN")
    try:
        return operation(connection)
    finally:
        with contextlib.suppress(sqlite3.Error):
            connection.execute("COMMIT")


def _statements(script: str) -> Iterator[str]:
    """The statements of a script, one by one (executescript would COMMIT our transaction)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            yield statement.strip()
            statement = ""


def _digest(key: str) -> int:
    """The `digest` column for a content_key: 64 bits of BLAKE2b, as SQLite's signed integer."""
    # surrogatepass: a lone surrogate (which JSON can carry) must hash, not raise.
    hashed = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(hashed, "big", signed=True)


def _row(memory: Memory) -> tuple[object, ...]:
    """The parameters of _UPSERT for a memory."""
    return (
        memory.id,
        memory.content,
        _tags_encoder.encode(memory.tags).decode(),
        memory.agent,
        memory.project,
        memory.created_at,
        _digest(content_key(memory.content)),
        memory.team,
    )


def _memory(row: Sequence[object]) -> Memory:
    memory_id, content, tags, agent, project, created_at, team = row[:_WIDTH]
    assert isinstance(memory_id, str) and isinstance(content, str)
    assert isinstance(tags, str) and isinstance(created_at, str)
    assert agent is None or isinstance(agent, str)
    assert project is None or isinstance(project, str)
    assert team is None or isinstance(team, str)
    return Memory(
        id=memory_id,
        content=content,
        tags=_tags_decoder.decode(tags),
        agent=agent,
        project=project,
        created_at=created_at,
        team=team,
    )


def _store_vectors(
    connection: sqlite3.Connection,
    *,
    rows: builtins.list[tuple[int, str, bytes, bytes]],
    total: builtins.list[float],
) -> None:
    """Store embeddings made from the contents given, for memories whose content is still
    that (one that changed meanwhile stays pending, for the next batch); `total` is their
    sum, added to the store's (memory_meta `vector_sum`, `vector_count`: see _centre)."""
    _add_to_sum(connection, total, len(rows))
    seqs = _tags_encoder.encode([seq for seq, *_ in rows]).decode()
    current = dict(
        connection.execute(
            "SELECT m.seq, m.content FROM json_each(?) AS j JOIN memories AS m ON m.seq = j.value",
            (seqs,),
        ).fetchall()
    )
    fresh = [
        (seq, code, vector) for seq, content, code, vector in rows if current.get(seq) == content
    ]
    connection.executemany(
        "INSERT OR REPLACE INTO memory_vectors(seq, code, vector) VALUES (?, ?, ?)", fresh
    )
    done = [(seq,) for seq, content, *_ in rows if current.get(seq) in (None, content)]
    connection.executemany("DELETE FROM memory_pending WHERE seq = ?", done)


def _ranking(
    row: Sequence[Any],
    words: builtins.list[str],
    *,
    by_meaning: bool = False,
    keyword_rank: int | None = None,
    semantic_rank: int | None = None,
    similarity: float | None = None,
    keyword_weight: float | None = None,
    model: str | None = None,
) -> Ranking:
    """Why a search row ranked (MemoryHit.explain)."""
    tags = {tag.lower() for tag in _tags_decoder.decode(row[2])}
    return Ranking(
        by_meaning=by_meaning,
        keyword_rank=keyword_rank,
        keyword_score=row[_BM25] if keyword_rank is not None else None,
        semantic_rank=semantic_rank,
        similarity=similarity,
        keyword_weight=keyword_weight,
        model=model,
        recency=row[_LIFT],
        tags=[word for word in words if word in tags],
    )


def explain_parts(ranking: Ranking | None) -> builtins.list[str]:
    """Why a hit ranked, in the parts `relay memory search --explain` prints."""
    if ranking is None:
        return ["this memory backend does not say"]
    parts: builtins.list[str] = []
    if ranking.keyword_rank is not None:
        parts.append(f"words #{ranking.keyword_rank} (bm25 {ranking.keyword_score or 0:.2f})")
    else:
        parts.append("words: none of the query's")
    if not ranking.by_meaning:
        parts.append("meaning: not searched")
    elif ranking.semantic_rank is not None:
        parts.append(f"meaning #{ranking.semantic_rank} (similarity {ranking.similarity or 0:.2f})")
    elif ranking.similarity is not None:
        parts.append(f"meaning: not among the nearest (similarity {ranking.similarity:.2f})")
    else:
        parts.append("meaning: not among the nearest")
    if ranking.by_meaning and ranking.model:
        parts.append(f"model {ranking.model}")
    parts.append(f"recency x{ranking.recency:.2f}")
    if ranking.tags:
        parts.append("tags: " + " ".join("#" + tag for tag in ranking.tags))
    return parts


def score_formula(hit: MemoryHit) -> builtins.list[str]:
    """How a hit's score is made from the parts `--explain` shows, with its numbers (see
    SqliteMemory.search): one line for the score, one for what each place was ranked on.
    [] for a hit that carries no Ranking."""
    ranking = hit.explain
    if ranking is None:
        return []
    lift = f"recency {ranking.recency:.2f}"
    if ranking.keyword_score is not None:
        words = f"bm25 {_figure(ranking.keyword_score)} * {lift}"
        by_words = f"{words} = {_figure(ranking.keyword_score * ranking.recency)}"
    if not ranking.by_meaning:
        return [] if ranking.keyword_score is None else [f"score {_figure(hit.score)} = {words}"]
    terms, ranks = [], []
    if ranking.keyword_rank is not None and ranking.keyword_weight is not None:
        some = {
            0.0: ", common words only: meaning decides",
            KEYWORD_WEIGHT: "",
            PARTIAL_WEIGHT: ", words weak (only some, or unrelated in meaning)",
            WEAK_WEIGHT: ", words weak (only some, and unrelated in meaning)",
        }.get(ranking.keyword_weight, "")
        terms.append(f"{ranking.keyword_weight:g}/({RRF_K:g}+{ranking.keyword_rank}) by words")
        ranks.append(f"#{ranking.keyword_rank} by words on {by_words}{some}")
    if ranking.semantic_rank is not None and ranking.similarity is not None:
        nearness = ranking.similarity * ranking.recency
        terms.append(f"{SEMANTIC_WEIGHT:g}/({RRF_K:g}+{ranking.semantic_rank}) by meaning")
        ranks.append(
            f"#{ranking.semantic_rank} by meaning on similarity {ranking.similarity:.2f}"
            f" * {lift} = {nearness:.2f}"
        )
    best = f"{KEYWORD_WEIGHT + SEMANTIC_WEIGHT:g}/({RRF_K:g}+1)"
    return [
        f"score {hit.score:.2f} = ({' + '.join(terms) or '0'}) / ({best}),"
        " the sum for a memory first both ways",
        "; ".join(ranks) or "ranked neither by words nor by meaning",
    ]


def _figure(value: float) -> str:
    """Two decimals, or two significant digits for a tiny value (BM25 in a small store)."""
    return f"{value:.2f}" if value == 0 or abs(value) >= 0.01 else f"{value:.2g}"


class _Candidates(NamedTuple):
    """What the worker found: the query's embedding, the index it scanned and the seqs
    of the nearest codes."""

    vector: Any
    scanned: VectorIndex
    seqs: builtins.list[int]
    centre: Any
    """What all the store's embeddings share (see _centre); None: not centred."""
    threshold: float
    """The least similarity that counts as found by meaning (MIN_SIMILARITY)."""
    model: str


_workers: builtins.list[ThreadPoolExecutor] = []
_workers_lock = threading.Lock()


def _worker() -> ThreadPoolExecutor:
    """The process's threads for search by meaning (started on first use)."""
    with _workers_lock:
        if not _workers:
            _workers.append(ThreadPoolExecutor(max_workers=2, thread_name_prefix="relay-memory"))
        return _workers[0]


SMALL_STORE_MARGIN = 0.12
"""How much higher the least similarity found by meaning is in a store too small to
have a centre (plain cosines, which run higher for unrelated short texts with MiniLM),
fading as the store grows: 0.12 * 50 / (n + 50) more."""
CENTRE_PRIOR = 50
"""How many memories the store's mean embedding must be made of before it counts in
full: the centre of a store of n memories is their mean times n / (n + 50), so a memory
alone in its store is not centred away to nothing."""


def _add_to_sum(connection: sqlite3.Connection, total: builtins.list[float], count: int) -> None:
    """Add `count` embeddings summing to `total` to the store's sum (see _centre)."""
    known = dict(connection.execute(_VECTOR_SUM).fetchall())
    before = _sum_decoder.decode(known["vector_sum"]) if "vector_sum" in known else []
    if len(before) == len(total):
        total = [mine + theirs for mine, theirs in zip(total, before, strict=True)]
        count += int(known.get("vector_count", 0))
    connection.executemany(
        "INSERT OR REPLACE INTO memory_meta(key, value) VALUES (?, ?)",
        [("vector_sum", msgspec.json.encode(total).decode()), ("vector_count", str(count))],
    )


def _centre(rows: builtins.list[Any], dimensions: int) -> Any:
    """What the store's embeddings have in common: their mean, shrunk towards zero for a
    small store (CENTRE_PRIOR); zeros when unknown.

    A sentence model puts every text in one narrow cone: two unrelated memories still
    have a cosine of 0.3 or more, and a memory of many common words (a list of tools, a
    jumble of notes) comes near to every query. Similarity is measured from this centre
    instead (_centred_cosine): what a memory shares with every other no longer counts,
    what it shares with the query does. On tests/memory_relevance.py's paraphrases this
    lifts recall@3 by MiniLM from 0.55 to 0.75 (tests/perf/bench_memory.py). The sum
    only grows (a forgotten or changed memory stays in it): a centre needs to be near,
    not exact, and a store's subjects drift slowly; a change of model starts it anew."""
    import numpy as np

    known = dict(rows)
    try:
        total = np.asarray(_sum_decoder.decode(known["vector_sum"]), dtype=np.float32)
        count = int(known["vector_count"])
    except (KeyError, ValueError, msgspec.DecodeError):
        return np.zeros(dimensions, dtype=np.float32)
    if total.shape != (dimensions,) or count <= 0:
        return np.zeros(dimensions, dtype=np.float32)
    return total / (count + CENTRE_PRIOR)


def _centred_cosine(vectors: Any, query: Any, centre: Any) -> Any:
    """The cosine of each row of `vectors` and `query`, both seen from `centre`."""
    import numpy as np

    if centre is None or centre.shape != query.shape:
        return vectors @ query
    rows = vectors - centre
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    toward = query - centre
    return rows @ (toward / max(float(np.linalg.norm(toward)), 1e-12))


def _keyword_weight(
    every_word: bool, similarity: float | None, threshold: float, bm25_per_word: float
) -> float:
    """How much a memory's place by words weighs in the fused score (see search).

    Words decide when they match closely: a memory with every word of the query, not
    all of them common ones, and related in meaning (at least `threshold` similar)
    keeps the full weight. Words are weak when they match only common or unrelated
    memories: by common words only (less than COMMON_BM25 a word), the match weighs
    nothing and meaning alone ranks; with every word but unrelated in meaning, or
    related and with only some words, PARTIAL_WEIGHT; with only some words and
    unrelated, WEAK_WEIGHT."""
    if bm25_per_word < COMMON_BM25:
        return 0.0
    related = similarity is not None and similarity >= threshold
    if every_word:
        return KEYWORD_WEIGHT if related else PARTIAL_WEIGHT
    return PARTIAL_WEIGHT if related else WEAK_WEIGHT
