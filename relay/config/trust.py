"""Which project hooks the user has trusted, recorded by fingerprint (DESIGN §7)."""

from __future__ import annotations

import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple, TypeVar

import msgspec

from relay.config import looks
from relay.config.filecache import RACY_SECONDS, FileCache, identity_of
from relay.config.model import DEFAULT_TIMEOUT, HookEntry, LoadedSettings
from relay.config.paths import private_dir, state_dir
from relay.config.reach import ByPath, Plan, Unpinned, plan_reach
from relay.errors import RelayError

PATTERN_EVENT = "PatternMatch"
T = TypeVar("T")


class TrustStoreError(RelayError):
    """The trust store cannot be read or written: names the file."""

    def __init__(self, message: str, *, file: str) -> None:
        self.message = message
        self.file = file
        super().__init__(f"{file}: {message}")


DigestCache = FileCache[str]
"""sha256 of scripts kept between calls (the server's), re-validated by a stat."""


def digest_cache() -> DigestCache:
    """An empty cache of file digests."""
    import hashlib

    return FileCache(lambda path, data: hashlib.sha256(data).hexdigest())


class UntrustableHookError(RelayError):
    """A hook relay cannot fingerprint, so it can never be trusted: says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"cannot be trusted: {reason}")


class FileState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One fingerprinted file: its content hash, or why it has none, and what relay knew
    of it when hashing (to skip reading it again while it stays the same)."""

    sha256: str = ""
    note: str = ""
    """Why there is no hash: "unreadable: …", "symbolic link to …", "not a regular file"."""
    identity: tuple[int, int, int, int, int] | None = None
    """Device, inode, size, mtime and ctime when hashed; None when it changed too recently
    to be sure (filecache.RACY_SECONDS)."""
    size: int = 0
    text: bool = False
    """A text file of at most COPY_LIMIT bytes: a copy is kept to show what changed."""

    @property
    def value(self) -> str:
        """What the fingerprint holds for this file."""
        return self.sha256 or self.note


class HookFingerprint(msgspec.Struct, kw_only=True):
    """What a hook runs, the files it reaches and their state, and the digest over them."""

    digest: str | None
    """None when the hook cannot be trusted (`refusal`)."""
    key: str
    """The hook without the files it reaches (hook_key)."""
    files: dict[str, FileState]
    tree: tuple[str, ...] = ()
    unpinned: tuple[Unpinned, ...] = ()
    """What the hook loads that relay cannot resolve (reach.Unpinned)."""
    by_path: tuple[ByPath, ...] = ()
    """Project files it loads that their interpreter opens by path (reach.ByPath): the
    hook cannot be trusted."""
    refusal: str | None = None
    contents: dict[str, bytes] = msgspec.field(default_factory=dict)
    """Text files read while hashing (with keep_contents): their content, for copies."""


class CheckedScript(msgspec.Struct, frozen=True, kw_only=True):
    """The entry script of a hook as one check read it: the bytes hashed into the
    fingerprint are these, and a trusted hook runs these (DESIGN §7: no gap between
    check and exec)."""

    path: str
    text: bytes
    executable: bool = True
    """Whether the file read has the execute permission (run directly, it needs it)."""


class TrustVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """Whether one project hook may run, as the trust store answers for it."""

    fingerprint: str | None
    trusted: bool
    refusal: str | None = None
    scripts: tuple[CheckedScript, ...] = ()
    """The checked scripts (check_trust's `scripts`) that are project files the
    fingerprint holds, in the order given."""
    reached: tuple[str, ...] = ()
    """The project files the fingerprint holds, relative to the root (none: nothing of
    the project can be swapped in under the hook)."""
    hashes: dict[str, str] = msgspec.field(default_factory=dict)
    """A trusted hook's project files (relative to the root) and their hashes as
    fingerprinted: what its snapshot of modules is copied and checked from."""


COPY_LIMIT = 256 * 1024
"""Text files up to this size are copied into the store, to show a diff on re-trust."""
PIN_LIMIT = 64 * 1024 * 1024
"""An entry script larger than this is not run: relay runs a trusted script from the
bytes it checked, and holds them in memory to do so."""
COPY_BUDGET = 64 * 1024 * 1024
"""At most this much text is copied per hook per `relay trust`; later files get no copy
(their change is still seen, only not shown as a diff)."""


def fingerprint(
    event: str,
    matcher: str | None,
    entry: HookEntry,
    root: Path,
    digests: DigestCache | None = None,
    *,
    sequential: bool = False,
) -> str:
    """A sha256 over what a hook runs, with the content of every project file it can reach.

    Raises UntrustableHookError when the hook reaches more than relay can fingerprint."""
    assessed = assess(event, matcher, entry, root, digests=digests, sequential=sequential)
    if assessed.digest is None:
        raise UntrustableHookError(assessed.refusal or "unknown")
    return assessed.digest


def hook_key(event: str, matcher: str | None, entry: HookEntry, *, sequential: bool = False) -> str:
    """A sha256 over what the hook is (its whole definition, `_identity`), without the
    files it reaches: a hook never trusted under this key cannot be trusted now."""
    import hashlib

    identity = _identity(event, matcher, entry, sequential)
    return hashlib.sha256(msgspec.json.encode(identity)).hexdigest()


def hook_slot(file: str | None, event: str, matcher: str | None, name: str, rank: int) -> str:
    """Where a hook is registered: its settings file, event, matcher and name, and its
    rank among hooks that share all four. It stays when the command or a script changes,
    so that `relay trust` can show what changed since the hook's previous trust."""
    import hashlib

    place = msgspec.json.encode([file, event, matcher, name, rank])
    return hashlib.sha256(place).hexdigest()


def assess(
    event: str,
    matcher: str | None,
    entry: HookEntry,
    root: Path,
    *,
    digests: DigestCache | None = None,
    known: Mapping[str, FileState] | None = None,
    keep_contents: bool = False,
    plan: Plan | None = None,
    sequential: bool = False,
) -> HookFingerprint:
    """Find, hash and fingerprint what a hook can reach.

    `known`: files as last trusted, reused while their stat identity is the same (no read);
    `keep_contents`: also return the content of small text files (for `relay trust`)."""
    import hashlib

    found = (plan or plan_reach(entry, root)).collect()
    key = hook_key(event, matcher, entry, sequential=sequential)
    if found.refusal is not None:
        return HookFingerprint(
            digest=None,
            key=key,
            files={},
            tree=found.tree,
            unpinned=found.unpinned,
            by_path=found.by_path,
            refusal=found.refusal,
        )
    # Strings, not Paths, from here: a check stats every reached file on every event.
    prefix = os.path.join(os.path.abspath(root), "")
    files: dict[str, FileState] = {}
    contents = _Contents() if keep_contents else None
    for name in found.files:
        state = _file_state(
            prefix + name,
            known=(known or {}).get(name),
            digests=digests,
            contents=contents,
            name=name,
        )
        if state is not None:
            files[name] = state
    identity = _identity(event, matcher, entry, sequential)
    # A changed file must be trusted again, even when the command line is the same.
    identity["scripts"] = {name: state.value for name, state in files.items()}
    digest = hashlib.sha256(msgspec.json.encode(identity, order="sorted")).hexdigest()
    return HookFingerprint(
        digest=digest,
        key=key,
        files=files,
        tree=found.tree,
        unpinned=found.unpinned,
        contents=contents.files if contents is not None else {},
    )


def check_trust(
    event: str,
    matcher: str | None,
    entry: HookEntry,
    root: Path,
    *,
    scripts: Sequence[str] | Callable[[], Sequence[str]] = (),
    store: TrustStore | None,
    digests: DigestCache | None = None,
    sequential: bool = False,
) -> TrustVerdict:
    """Whether a project hook is trusted as it is now. Runs on every event that plans it.
    `scripts`: the files the hook's launch runs (absolute paths: its entry script, or the
    scripts its shell command runs; or a function that finds them, called only for a
    hook the store trusts); a trusted verdict holds the bytes of each that is a
    project file, read once from a descriptor, whose hash is the one fingerprinted
    (DESIGN §7: no gap between check and exec).

    Raises TrustStoreError when the store cannot be read."""
    key = hook_key(event, matcher, entry, sequential=sequential)
    plan = plan_reach(entry, root)
    candidate = store is not None and store.may_have_trusted(root, key)
    if plan.needs_listing and not candidate:
        # Never trusted as it is: listing and hashing folders cannot make it trusted, and
        # an untrusted clone must not cost every event a walk of its tree.
        return TrustVerdict(fingerprint=None, trusted=False)
    known = store.known_files(root, key) if store is not None and candidate else None
    assessed = assess(
        event,
        matcher,
        entry,
        root,
        digests=digests,
        known=known,
        plan=plan,
        sequential=sequential,
    )
    if assessed.digest is None:
        return TrustVerdict(fingerprint=None, trusted=False, refusal=assessed.refusal)
    trusted = store is not None and candidate and store.is_trusted(root, assessed.digest, key)
    paths = (scripts() if callable(scripts) else scripts) if trusted else ()
    if not paths:
        return TrustVerdict(
            fingerprint=assessed.digest,
            trusted=trusted,
            reached=tuple(assessed.files),
            hashes=_hashes(assessed) if trusted else {},
        )
    return _with_scripts(assessed, root, paths)


def _with_scripts(assessed: HookFingerprint, root: Path, paths: Sequence[str]) -> TrustVerdict:
    assert assessed.digest is not None
    verdict = TrustVerdict(
        fingerprint=assessed.digest,
        trusted=True,
        reached=tuple(assessed.files),
        hashes=_hashes(assessed),
    )
    return with_scripts(verdict, root, paths)


def with_scripts(verdict: TrustVerdict, root: Path, paths: Sequence[str]) -> TrustVerdict:
    """A trusted verdict (check_trust's without `scripts`) with the hook's scripts read:
    trusted with those bytes when each hashes to the hash its fingerprint holds, else not
    trusted (a file changed since it was hashed, or cannot be read): running it by path
    would run whatever is there by then. Reads each script on every call: what runs is
    what this call read (DESIGN §7)."""
    return read_scripts(verdict, script_reads(verdict, root, paths))


class ScriptRead(NamedTuple):
    """One script `read_scripts` reads: the path as given, its name under the project
    root, the path it is read at, and the hash its fingerprint holds (None: not in it)."""

    path: str
    name: str
    read: str
    hashed: str | None


def script_reads(verdict: TrustVerdict, root: Path, paths: Sequence[str]) -> tuple[ScriptRead, ...]:
    """What `read_scripts` reads for `paths` (those that are project files), worked out
    from the verdict alone: a server keeps it with the check it keeps."""
    prefix = os.path.join(os.path.abspath(root), "")
    reached = set(verdict.reached)
    reads: list[ScriptRead] = []
    for path in paths:
        name = _name_under(path, prefix)
        if name is None:
            continue  # not a project file
        hashed = verdict.hashes.get(name, "") if name in reached else None
        reads.append(ScriptRead(path, name, prefix + name, hashed))
    return tuple(reads)


def read_scripts(verdict: TrustVerdict, reads: Sequence[ScriptRead]) -> TrustVerdict:
    """`with_scripts` for the scripts `script_reads` gave: each read whole and hashed now."""
    checked: list[CheckedScript] = []
    for path, name, read, hashed in reads:
        if hashed is None and os.path.lexists(path):
            continue  # not in its reach
        digest, script = _read_whole(read)
        if script is None or hashed is None or digest != hashed:
            reason = "it changed while it was checked" if script is not None else digest
            refusal = f"its script {name} cannot be run as checked ({reason})"
            return TrustVerdict(fingerprint=verdict.fingerprint, trusted=False, refusal=refusal)
        checked.append(script)
    return msgspec.structs.replace(verdict, scripts=tuple(checked))


def _hashes(assessed: HookFingerprint) -> dict[str, str]:
    return {name: state.sha256 for name, state in assessed.files.items() if state.sha256}


def project_scripts(
    entry: HookEntry, root: Path, digests: DigestCache | None = None
) -> dict[str, str]:
    """The files inside `root` that the hook can reach: path relative to root -> sha256."""
    assessed = assess("", None, entry, root, digests=digests)
    if assessed.refusal is not None:
        raise UntrustableHookError(assessed.refusal)
    return {name: state.value for name, state in assessed.files.items()}


def describe_hook(event: str, matcher: str | None, entry: HookEntry) -> str:
    """One line that tells a person which hook this is."""
    where = f"{event}[{matcher}]" if matcher not in (None, "", "*") else event
    command = entry.command_line
    if entry.name and entry.name != command:
        return f"{where}: {entry.name}: {command}"
    return f"{where}: {command}"


def project_hooks(loaded: LoadedSettings) -> Iterator[tuple[str, str | None, HookEntry]]:
    """(event, matcher, entry) for every hook and pattern of one file, in file order."""
    for event, groups in loaded.settings.hooks.items():
        for group in groups:
            for entry in group.hooks:
                yield event, group.matcher, entry
    for name, pattern in loaded.settings.patterns.items():
        if isinstance(pattern, HookEntry):
            yield PATTERN_EVENT, name, pattern


class _TrustRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    description: str
    trusted_at: str = ""
    key: str = ""
    """hook_key of the trusted hook; "" for a fingerprint recorded without one (`trust`)."""
    slots: list[str] = msgspec.field(default_factory=list)
    """Where hooks with this fingerprint are registered (TrustGrant.slot): to find a
    hook's previous trust, and to drop it when the hook is trusted again."""


class _LegacyStore(msgspec.Struct, kw_only=True):
    """trust.json, the single file an older relay kept every project's trust in."""

    version: int = 1
    projects: dict[str, dict[str, _TrustRecord]] = msgspec.field(default_factory=dict)
    """Project root -> fingerprint -> record."""


class TrustManifest(msgspec.Struct, kw_only=True):
    """What one `relay trust` fingerprinted for one hook: kept to show what changed since."""

    fingerprint: str
    command: str
    trusted_at: str
    tree: list[str] = msgspec.field(default_factory=list)
    files: dict[str, FileState] = msgspec.field(default_factory=dict)


class TrustGrant(msgspec.Struct, kw_only=True):
    """One hook to record as trusted, with what `relay trust` found it reaches."""

    assessed: HookFingerprint
    description: str
    command: str
    slot: str
    """Where the hook is registered (settings file, event, matcher, name, rank among
    namesakes): the same slot after an edit, so the previous trust can be shown."""


Records = dict[str, _TrustRecord]
"""Fingerprint -> record: the content of one key file."""

_LEGACY_DECODER = msgspec.json.Decoder(_LegacyStore)
_RECORDS_DECODER = msgspec.json.Decoder(Records)
_MANIFEST_DECODER = msgspec.json.Decoder(TrustManifest)
_ENCODER = msgspec.json.Encoder(order="sorted")
KEYLESS = "_"
"""The key file of fingerprints trusted without a hook key (TrustStore.trust)."""
_CACHED_FILES = 1024


class TrustStore:
    """The trusted fingerprints of every project: a folder per project and a small file
    per hook key, so that checking a hook reads what that hook needs and nothing else,
    however many projects and hooks are trusted (DESIGN §10). Shared by all processes;
    private, like all of relay's state.

        trust/<project id>/            project id: sha256 of the project's resolved root
            root                       the project's root, for people reading the folder
            keys/<hook key>.json       fingerprint -> record, for hooks with that key
            keys/_.json                fingerprints trusted without a key (`trust`)
            manifests/<fp>.json        what the latest trust of a fingerprint reached
            copies/<sha256>            copies of the text files those manifests name,
                                       from which `relay trust` shows what changed

    `path` names the single trust.json of older relays (its folder is `trust/` beside
    it): one found there is moved into this layout on first use.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else state_dir() / "trust.json"
        name = self.path.stem if self.path.suffix else self.path.name + ".d"
        self.folder = self.path.with_name(name)
        self._files: dict[str, tuple[tuple[int, int, int], Records]] = {}
        self._manifests: dict[str, tuple[tuple[int, int, int, int, int], TrustManifest]] = {}

    # -- reading: what a check needs --------------------------------------------------

    def is_trusted(self, root: Path, fp: str, key: str | None = None) -> bool:
        """Whether this fingerprint is trusted in this project; with the hook's `key`
        (hook_key), only that key's records are read."""
        if key is None:
            return fp in self._all_records(root)
        project = self._project(root)
        return fp in self._records(project, key) or fp in self._records(project, KEYLESS)

    def trusted(self, root: Path) -> dict[str, str]:
        """The trusted fingerprints of this project, with their descriptions."""
        return {fp: record.description for fp, record in self._all_records(root).items()}

    def may_have_trusted(self, root: Path, key: str) -> bool:
        """Whether some trusted fingerprint of this project may be of a hook with this key
        (one was recorded with it, or without any key)."""
        project = self._project(root)
        return bool(self._records(project, key) or self._records(project, KEYLESS))

    def known_files(self, root: Path, key: str) -> dict[str, FileState]:
        """The files as the latest trust of a hook with this key found them ({}: none kept)."""
        project = self._project(root)
        manifest = self._latest(project, self._records(project, key))
        return manifest.files if manifest is not None else {}

    def last_trust(self, root: Path, slot: str, key: str) -> TrustManifest | None:
        """The manifest of the latest trust of the hook in this slot (else of this key)."""
        project = self._project(root)
        everything = self._all_records(root)
        in_slot = {fp: record for fp, record in everything.items() if slot in record.slots}
        return self._latest(project, in_slot) or self._latest(project, self._records(project, key))

    def copy_of(self, root: Path, sha256: str) -> bytes | None:
        """The kept copy of a trusted text file of this project, by its hash; None when
        none was kept."""
        if not sha256.isalnum():
            return None  # a hash is hex: never a path
        try:
            return (self._project(root) / "copies" / sha256).read_bytes()
        except OSError:
            return None

    # -- writing: `relay trust` -------------------------------------------------------

    def trust(self, root: Path, entries: Iterable[tuple[str, str]]) -> None:
        """Record (fingerprint, description) pairs as trusted in this project."""
        pairs = list(entries)
        if not pairs:
            return
        now = _now()
        self._migrate()
        with self._locked():
            project = self._project(root, migrate=False)
            records = dict(self._records(project, KEYLESS, fresh=True))
            for fp, description in pairs:
                records[fp] = _TrustRecord(description=description, trusted_at=now)
            self._write_records(root, project, {KEYLESS: records})

    def grant(self, root: Path, grants: Iterable[TrustGrant]) -> None:
        """Record hooks as trusted, with the manifest of what each reached and copies of
        its text files. Trusting a hook again replaces its earlier trust (in the same
        slot): what runs is what was reviewed last. Hooks that cannot be trusted (no
        digest) are not recorded."""
        granted = [grant for grant in grants if grant.assessed.digest is not None]
        if not granted:
            return
        now = _now()
        self._migrate()
        with self._locked():
            project = self._project(root, migrate=False)
            by_key = self._by_key(project, fresh=True)
            for grant in granted:
                digest = grant.assessed.digest
                assert digest is not None
                self._write_manifest(project, grant, digest, now)
                slots: set[str] = {grant.slot}
                for records in by_key.values():
                    for fp, record in list(records.items()):
                        if fp == digest:
                            slots.update(record.slots)
                            del records[fp]
                        elif grant.slot in record.slots:
                            record.slots.remove(grant.slot)
                            if not record.slots:
                                del records[fp]
                by_key.setdefault(_key_name(grant.assessed.key), {})[digest] = _TrustRecord(
                    description=grant.description,
                    trusted_at=now,
                    key=grant.assessed.key,
                    slots=sorted(slots),
                )
            self._write_records(root, project, by_key)
            self._forget_manifests(project, by_key)

    def revoke(self, root: Path, fingerprints: Iterable[str] | None = None) -> int:
        """Forget the given fingerprints (None: all) of this project; return how many were."""
        self._migrate()
        with self._locked():
            project = self._project(root, migrate=False)
            by_key = self._by_key(project, fresh=True)
            wanted = None if fingerprints is None else set(fingerprints)
            removed = 0
            for records in by_key.values():
                for fp in list(records):
                    if wanted is None or fp in wanted:
                        del records[fp]
                        removed += 1
            if removed:
                self._write_records(root, project, by_key)
                self._forget_manifests(project, by_key)
        return removed

    # -- the files ------------------------------------------------------------------------

    def _project(self, root: Path, *, migrate: bool = True) -> Path:
        """The folder of a project's trust (moving an older relay's trust.json first,
        unless the caller did before taking the lock)."""
        if migrate:
            self._migrate()
        return self.folder / _project_id(_project_key(root))

    def _records(self, project: Path, key: str, *, fresh: bool = False) -> Records:
        """The records of one key file ({} when there is none); kept while the file stays
        the same (`fresh`: read again, for a change made under the lock)."""
        if key != KEYLESS and not key.isalnum():
            return {}  # a key is hex: never a path
        path = project / "keys" / f"{key}.json"
        name = str(path)
        try:
            with open(name, "rb") as stream:
                status = os.fstat(stream.fileno())
                looks.noted(looks.identity, (name,), looks.of_status(status))
                signature = (status.st_ino, status.st_size, status.st_mtime_ns)
                cached = self._files.get(name)
                if cached is not None and cached[0] == signature and not fresh:
                    return cached[1]
                raw = stream.read()
        except FileNotFoundError as exc:
            looks.noted(looks.identity, (name,), looks.failure(exc))
            return {}
        except OSError as exc:
            raise self._error("cannot read the trust store", exc, path) from None
        records = self._decode(raw, path, _RECORDS_DECODER)
        if fresh:
            return records  # to be changed: not kept
        if len(self._files) >= _CACHED_FILES:
            self._files.clear()  # bounded: a server must not grow without end
        self._files[name] = (signature, records)
        return records

    def _by_key(self, project: Path, *, fresh: bool = False) -> dict[str, Records]:
        """Every key file of a project: key -> records (copies when `fresh`)."""
        listed = looks.look(looks.names, str(project / "keys"))
        if isinstance(listed, str):
            try:
                names = sorted(os.listdir(project / "keys"))  # why it cannot be listed
            except FileNotFoundError:
                return {}
            except OSError as exc:
                raise self._error("cannot read the trust store", exc, project / "keys") from None
        else:
            names = list(listed)
        by_key: dict[str, Records] = {}
        for name in names:
            key, suffix = os.path.splitext(name)
            if suffix == ".json" and (key == KEYLESS or key.isalnum()):
                records = self._records(project, key, fresh=fresh)
                by_key[key] = dict(records) if fresh else records
        return by_key

    def _all_records(self, root: Path) -> Records:
        return {
            fp: record
            for records in self._by_key(self._project(root)).values()
            for fp, record in records.items()
        }

    def _write_records(self, root: Path, project: Path, by_key: Mapping[str, Records]) -> None:
        """Write a project's key files (an empty one is deleted; an empty project's
        folder goes)."""
        try:
            keys = private_dir(project / "keys", top=self.path.parent)
            root_file = project / "root"
            if not root_file.exists():
                _write_atomically(root_file, _project_key(root).encode() + b"\n")
            for key, records in by_key.items():
                path = keys / f"{key}.json"
                if records:
                    _write_atomically(path, _ENCODER.encode(records) + b"\n")
                else:
                    path.unlink(missing_ok=True)
            if not os.listdir(keys):
                import shutil

                shutil.rmtree(project)
        except OSError as exc:
            raise self._error("cannot write the trust store", exc, project) from None

    def _latest(self, project: Path, records: Records) -> TrustManifest | None:
        chosen = sorted(((record.trusted_at, fp) for fp, record in records.items()), reverse=True)
        for _, fp in chosen:
            manifest = self._read_manifest(project / "manifests" / f"{fp}.json")
            if manifest is not None:
                return manifest
        return None

    def _read_manifest(self, path: Path) -> TrustManifest | None:
        """A manifest, kept while its file stays the same; None when missing or unreadable
        (it only saves reads and shows diffs: trust itself is in the key files)."""
        if not path.stem.isalnum():
            return None
        try:
            with path.open("rb") as stream:
                status = os.fstat(stream.fileno())
                looks.noted(looks.identity, (str(path),), looks.of_status(status))
                identity = identity_of(status)
                cached = self._manifests.get(str(path))
                if cached is not None and cached[0] == identity:
                    return cached[1]
                manifest = _MANIFEST_DECODER.decode(stream.read())
        except (OSError, msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
            if isinstance(exc, OSError):
                looks.noted(looks.identity, (str(path),), looks.failure(exc))
            else:
                looks.unkeepable("a manifest of the trust store cannot be read")
            return None
        if len(self._manifests) >= 256:
            self._manifests.clear()  # bounded: a server must not grow without end
        self._manifests[str(path)] = (identity, manifest)
        return manifest

    def _write_manifest(self, project: Path, grant: TrustGrant, digest: str, now: str) -> None:
        assessed = grant.assessed
        manifest = TrustManifest(
            fingerprint=digest,
            command=grant.command,
            trusted_at=now,
            tree=list(assessed.tree),
            files=assessed.files,
        )
        try:
            copies = private_dir(project / "copies", top=self.path.parent)
            manifests = private_dir(project / "manifests", top=self.path.parent)
            for name, content in assessed.contents.items():
                target = copies / assessed.files[name].sha256
                if not target.exists():
                    _write_atomically(target, content)
            _write_atomically(manifests / f"{digest}.json", _ENCODER.encode(manifest))
        except OSError as exc:
            raise self._error("cannot write what trust fingerprinted", exc, project) from None

    def _forget_manifests(self, project: Path, by_key: Mapping[str, Records]) -> None:
        """Delete the project's manifests of fingerprints it no longer trusts, then every
        copy that no manifest refers to."""
        held = {fp for records in by_key.values() for fp in records}
        referenced: set[str] = set()
        try:
            listed = list((project / "manifests").iterdir())
        except FileNotFoundError:
            listed = []
        except OSError:
            return  # an unreadable folder is no proof that the copies are unused
        for path in listed:
            if path.stem not in held:
                path.unlink(missing_ok=True)
                continue
            manifest = self._read_manifest(path)
            if manifest is None:
                return  # as above
            referenced.update(state.sha256 for state in manifest.files.values() if state.text)
        try:
            for copy in (project / "copies").iterdir():
                if copy.name not in referenced:
                    copy.unlink(missing_ok=True)
        except OSError:
            pass  # a copy left behind costs disk space, not trust

    def _migrate(self) -> None:
        """Move an older relay's trust.json (and its trust-files/) into the folder layout,
        once; a corrupt one is an error naming it, and is never overwritten."""
        if not looks.look(looks.exists, str(self.path)):
            return
        with self._locked():
            try:
                raw = self.path.read_bytes()
            except FileNotFoundError:
                return  # another process moved it first
            except OSError as exc:
                raise self._error("cannot read the trust store", exc, self.path) from None
            legacy = (
                self._decode(raw, self.path, _LEGACY_DECODER) if raw.strip() else _LegacyStore()
            )
            old_files = self.path.with_name(self.path.stem + "-files")
            for root, records in legacy.projects.items():
                project = self.folder / _project_id(root)
                by_key = self._by_key(project, fresh=True)
                for fp, record in records.items():
                    by_key.setdefault(_key_name(record.key), {})[fp] = record
                    self._move_manifest(old_files, project, root, fp)
                if by_key:
                    self._write_records(Path(root), project, by_key)
            try:
                os.replace(self.path, self.path.with_name(self.path.name + ".migrated"))
            except OSError as exc:
                raise self._error("cannot move the old trust store", exc, self.path) from None
            import shutil

            shutil.rmtree(old_files, ignore_errors=True)

    def _move_manifest(self, old_files: Path, project: Path, root: str, fp: str) -> None:
        """Carry an older relay's manifest of `fp` (and the copies it names) over; what
        cannot be carried only costs a diff on the next `relay trust`."""
        manifest = self._read_manifest(old_files / "manifests" / f"{_manifest_name(root, fp)}.json")
        if manifest is None:
            return
        try:
            copies = private_dir(project / "copies", top=self.path.parent)
            manifests = private_dir(project / "manifests", top=self.path.parent)
            for state in manifest.files.values():
                old = old_files / "copies" / state.sha256
                if state.text and state.sha256.isalnum() and old.is_file():
                    _write_atomically(copies / state.sha256, old.read_bytes())
            _write_atomically(manifests / f"{fp}.json", _ENCODER.encode(manifest))
        except OSError:
            pass

    def _decode(self, raw: bytes, path: Path, decoder: msgspec.json.Decoder[T]) -> T:
        try:
            return decoder.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
            message = f"corrupt trust store ({exc}); delete it to forget the trust it holds"
            raise TrustStoreError(message, file=str(path)) from None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold an exclusive lock for a read-modify-write, so concurrent writers lose nothing."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            private_dir(self.path.parent, top=self.path.parent)
            descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise self._error("cannot lock the trust store", exc, lock_path) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def _error(self, what: str, exc: OSError, path: Path) -> TrustStoreError:
        return TrustStoreError(f"{what}: {exc.strerror or exc}", file=str(path))


def _key_name(key: str) -> str:
    """The key file a record with this hook key goes in."""
    return key if key and key.isalnum() else KEYLESS


def _project_id(project: str) -> str:
    """The folder name of a project's trust: the same hooks in two checkouts are trusted
    apart."""
    import hashlib

    return hashlib.sha256(project.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _manifest_name(project: str, fp: str) -> str:
    """The file name an older relay gave a project's manifest of one fingerprint."""
    import hashlib

    return hashlib.sha256(f"{project}\0{fp}".encode()).hexdigest()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _write_atomically(path: Path, content: bytes) -> None:
    """Write a private (0600) temporary file and rename it over `path`: a reader sees the
    old or the new content, never half of it. Raises OSError."""
    import tempfile  # only when trusting: it pulls in shutil and friends

    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(content)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _project_key(root: Path) -> str:
    return looks.look(looks.resolved, str(root)) or str(Path(root).resolve())


_BEHAVIOUR_DEFAULTS: dict[str, object] = {
    "timeout": DEFAULT_TIMEOUT,
    "failClosed": False,
    "signal": "SIGTERM",
    "sequential": False,
}
"""The fields of a hook's definition that change how it runs but not what it runs, with
their defaults: in the fingerprint only where they differ, so that a hook trusted before
they counted keeps its trust while they are the default."""


def _identity(
    event: str, matcher: str | None, entry: HookEntry, sequential: bool = False
) -> dict[str, object]:
    """What the hook is, as the fingerprint holds it: every field of its definition but
    its name, description and `enabled` (key order is fixed by the encoder). A trusted
    project hook whose timeout shrank could time out and fail open; one that lost
    failClosed or turned its event sequential changes what the user's guards get."""
    identity: dict[str, object] = {
        "event": event,
        "matcher": matcher,
        "command": entry.command,
        "args": entry.args,
        "env": entry.env,
        "cwd": entry.cwd,
    }
    behaviour = {
        "timeout": entry.timeout,
        "failClosed": entry.failClosed,
        "signal": entry.signal,
        "sequential": sequential,
    }
    for name, value in behaviour.items():
        if value != _BEHAVIOUR_DEFAULTS[name]:
            identity[name] = value
    if entry.reach:
        identity["reach"] = entry.reach
    return identity


def _file_state(
    path: str,
    *,
    known: FileState | None,
    digests: DigestCache | None,
    contents: _Contents | None,
    name: str,
) -> FileState | None:
    """The state of one reached file, reusing `known` while its identity is the same;
    None when nothing is there."""
    try:
        status = os.stat(path)
    except FileNotFoundError as exc:
        looks.noted(looks.identity, (path,), looks.failure(exc))
        if looks.look(looks.is_link, path):  # a dangling link: a file may appear at its target
            return FileState(note=f"symbolic link to {_link_target(path)} (nothing there)")
        return None
    except (OSError, ValueError) as exc:  # a symlink loop, a parent we may not enter
        looks.noted(looks.identity, (path,), looks.failure(exc))
        return FileState(note=f"unreadable: {_reason(exc)}")
    # What a kept check stands on (relay.config.looks): the identity its hash is of.
    looks.noted(looks.identity, (path,), looks.of_status(status))
    if stat.S_ISDIR(status.st_mode):
        if looks.look(looks.is_link, path):  # not followed by the walk: no loops
            return FileState(note=f"symbolic link to {_link_target(path)}")
        return FileState(note="folder relay cannot list")
    if not stat.S_ISREG(status.st_mode):
        return FileState(note="not a regular file")
    if known is not None and known.sha256 and known.identity == identity_of(status):
        return known  # unchanged since it was trusted: a stat, no read
    if digests is not None and contents is None:
        try:
            return FileState(sha256=digests.get(Path(path)), size=status.st_size)
        except OSError as exc:
            return FileState(note=f"unreadable: {_reason(exc)}")
    return _read_state(path, name, contents)


class _Contents:
    """Text files read while hashing, up to COPY_BUDGET bytes in all."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.size = 0

    def keep(self, name: str, data: bytes) -> None:
        if self.size + len(data) <= COPY_BUDGET:
            self.files[name] = data
            self.size += len(data)


def _read_state(path: str, name: str, contents: _Contents | None) -> FileState:
    """Hash a file by reading it; keep a small text file's content in `contents`."""
    import hashlib

    try:
        # O_NONBLOCK: a FIFO put there since the stat must not hang relay.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        # Still a stable fingerprint; once the file becomes readable it changes.
        return FileState(note=f"unreadable: {_reason(exc)}")
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            return FileState(note="not a regular file")
        digest = hashlib.sha256()
        head = bytearray()
        while chunk := os.read(descriptor, 1 << 20):
            digest.update(chunk)
            if len(head) <= COPY_LIMIT:
                head += chunk
    except OSError as exc:
        return FileState(note=f"unreadable: {_reason(exc)}")
    finally:
        os.close(descriptor)
    data = bytes(head)
    text = len(data) <= COPY_LIMIT and _is_text(data)
    if text and contents is not None:
        contents.keep(name, data)
    newest = max(status.st_mtime_ns, status.st_ctime_ns) / 1e9
    settled = time.time() - newest >= RACY_SECONDS  # else an edit in the same tick hides
    return FileState(
        sha256=digest.hexdigest(),
        identity=identity_of(status) if settled else None,
        size=status.st_size,
        text=text,
    )


def _read_whole(path: str) -> tuple[str, CheckedScript | None]:
    """Hash a file from one read of all of it: its sha256 and what was read; or why it
    cannot be run as read, and None (it cannot be read, is not a regular file, or is over
    PIN_LIMIT)."""
    import hashlib

    try:
        # O_NONBLOCK: a FIFO put there must not hang relay.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return "unreadable: it went away while being checked", None
    except OSError as exc:
        return f"unreadable: {_reason(exc)}", None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            return "not a regular file", None
        chunks: list[bytes] = []
        size = 0
        # The size its stat gave and one byte more, first: a file of that size is read in
        # one read of its own size (a regular file reads short only at its end).
        want = min(status.st_size + 1, 1 << 20)
        while chunk := os.read(descriptor, want):
            chunks.append(chunk)
            size += len(chunk)
            if size > PIN_LIMIT:
                return f"over {PIN_LIMIT // (1 << 20)} MiB: too large to run as checked", None
            if size == status.st_size and len(chunk) < want:
                break  # all it held when opened
            want = 1 << 20
        # Through the descriptor: the permission (and the mount's noexec) of the file read,
        # not of whatever the path names by now; its mode bits where /proc is missing.
        executable = (
            os.access(f"/proc/self/fd/{descriptor}", os.X_OK)
            if _PROC
            else bool(status.st_mode & 0o111)
        )
    except OSError as exc:
        return f"unreadable: {_reason(exc)}", None
    finally:
        os.close(descriptor)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return hashlib.sha256(data).hexdigest(), CheckedScript(
        path=path, text=data, executable=executable
    )


_PROC = os.path.isdir("/proc/self/fd")
"""Whether a descriptor's path is in /proc (its permission is then asked through it)."""


def _name_under(path: str, prefix: str) -> str | None:
    """`path` relative to the project root (`prefix` ends with a separator), or None."""
    normal = os.path.normpath(path)
    return normal[len(prefix) :] if normal.startswith(prefix) else None


def _is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _link_target(path: str) -> str:
    return looks.look(_readlink, path)


def _readlink(path: str) -> str:
    """What a symbolic link says, or why it cannot be read: a look (relay.config.looks)."""
    try:
        return os.readlink(path)
    except (OSError, ValueError) as exc:
        return f"(unreadable: {_reason(exc)})"


def _reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
