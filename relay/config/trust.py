"""Which project hooks the user has trusted, recorded by fingerprint (DESIGN §7)."""

from __future__ import annotations

import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import msgspec

from relay.config.filecache import RACY_SECONDS, FileCache, identity_of
from relay.config.model import HookEntry, LoadedSettings
from relay.config.paths import private_dir, state_dir
from relay.config.reach import Plan, plan_reach
from relay.errors import RelayError

PATTERN_EVENT = "PatternMatch"


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
    refusal: str | None = None
    contents: dict[str, bytes] = msgspec.field(default_factory=dict)
    """Text files read while hashing (with keep_contents): their content, for copies."""


class TrustVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """Whether one project hook may run, as the trust store answers for it."""

    fingerprint: str | None
    trusted: bool
    refusal: str | None = None


COPY_LIMIT = 256 * 1024
"""Text files up to this size are copied into the store, to show a diff on re-trust."""
COPY_BUDGET = 64 * 1024 * 1024
"""At most this much text is copied per hook per `relay trust`; later files get no copy
(their change is still seen, only not shown as a diff)."""


def fingerprint(
    event: str,
    matcher: str | None,
    entry: HookEntry,
    root: Path,
    digests: DigestCache | None = None,
) -> str:
    """A sha256 over what a hook runs, with the content of every project file it can reach.

    Raises UntrustableHookError when the hook reaches more than relay can fingerprint."""
    assessed = assess(event, matcher, entry, root, digests=digests)
    if assessed.digest is None:
        raise UntrustableHookError(assessed.refusal or "unknown")
    return assessed.digest


def hook_key(event: str, matcher: str | None, entry: HookEntry) -> str:
    """A sha256 over what the hook is (event, matcher, command, args, env, cwd), without
    the files it reaches: a hook never trusted under this key cannot be trusted now."""
    import hashlib

    return hashlib.sha256(msgspec.json.encode(_identity(event, matcher, entry))).hexdigest()


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
) -> HookFingerprint:
    """Find, hash and fingerprint what a hook can reach.

    `known`: files as last trusted, reused while their stat identity is the same (no read);
    `keep_contents`: also return the content of small text files (for `relay trust`)."""
    import hashlib

    found = (plan or plan_reach(entry, root)).collect()
    key = hook_key(event, matcher, entry)
    if found.refusal is not None:
        return HookFingerprint(
            digest=None, key=key, files={}, tree=found.tree, refusal=found.refusal
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
    identity = _identity(event, matcher, entry)
    # A changed file must be trusted again, even when the command line is the same.
    identity["scripts"] = {name: state.value for name, state in files.items()}
    digest = hashlib.sha256(msgspec.json.encode(identity, order="sorted")).hexdigest()
    return HookFingerprint(
        digest=digest,
        key=key,
        files=files,
        tree=found.tree,
        contents=contents.files if contents is not None else {},
    )


def check_trust(
    event: str,
    matcher: str | None,
    entry: HookEntry,
    root: Path,
    *,
    store: TrustStore | None,
    digests: DigestCache | None = None,
) -> TrustVerdict:
    """Whether a project hook is trusted as it is now. Runs on every event that plans it.

    Raises TrustStoreError when the store cannot be read."""
    key = hook_key(event, matcher, entry)
    plan = plan_reach(entry, root)
    candidate = store is not None and store.may_have_trusted(root, key)
    if plan.needs_listing and not candidate:
        # Never trusted as it is: listing and hashing folders cannot make it trusted, and
        # an untrusted clone must not cost every event a walk of its tree.
        return TrustVerdict(fingerprint=None, trusted=False)
    known = store.known_files(root, key) if store is not None and candidate else None
    assessed = assess(event, matcher, entry, root, digests=digests, known=known, plan=plan)
    if assessed.digest is None:
        return TrustVerdict(fingerprint=None, trusted=False, refusal=assessed.refusal)
    trusted = store is not None and candidate and store.is_trusted(root, assessed.digest)
    return TrustVerdict(fingerprint=assessed.digest, trusted=trusted)


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


class _TrustFile(msgspec.Struct, kw_only=True):
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


_DECODER = msgspec.json.Decoder(_TrustFile)
_MANIFEST_DECODER = msgspec.json.Decoder(TrustManifest)
_ENCODER = msgspec.json.Encoder(order="sorted")


class TrustStore:
    """The trusted fingerprints of every project, in one JSON file shared by all processes.

    Beside it, in the folder `trust-files/` (private, like all of relay's state): for the
    latest trust of each hook, a manifest of the files it reached (`manifests/<fp>.json`)
    and a copy of each of those that is text of at most COPY_LIMIT bytes
    (`copies/<sha256>`), from which `relay trust` shows what changed since.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else state_dir() / "trust.json"
        self.files_dir = self.path.with_name(self.path.stem + "-files")
        self._cached: tuple[tuple[int, int, int], _TrustFile] | None = None
        self._manifests: dict[str, tuple[tuple[int, int, int, int, int], TrustManifest]] = {}

    def is_trusted(self, root: Path, fp: str) -> bool:
        """Whether this fingerprint is trusted in this project."""
        return fp in self._read_cached().projects.get(_project_key(root), {})

    def trusted(self, root: Path) -> dict[str, str]:
        """The trusted fingerprints of this project, with their descriptions."""
        project = self._read_cached().projects.get(_project_key(root), {})
        return {fp: record.description for fp, record in project.items()}

    def may_have_trusted(self, root: Path, key: str) -> bool:
        """Whether some trusted fingerprint of this project may be of a hook with this key
        (one was recorded with it, or without any key)."""
        project = self._read_cached().projects.get(_project_key(root), {})
        return any(record.key in (key, "") for record in project.values())

    def known_files(self, root: Path, key: str) -> dict[str, FileState]:
        """The files as the latest trust of a hook with this key found them ({}: none kept)."""
        manifest = self._latest(root, lambda record: record.key == key)
        return manifest.files if manifest is not None else {}

    def last_trust(self, root: Path, slot: str, key: str) -> TrustManifest | None:
        """The manifest of the latest trust of the hook in this slot (else of this key)."""
        return self._latest(root, lambda record: slot in record.slots) or self._latest(
            root, lambda record: record.key == key
        )

    def copy_of(self, sha256: str) -> bytes | None:
        """The kept copy of a trusted text file, by its hash; None when none was kept."""
        if not sha256.isalnum():
            return None  # a hash is hex: never a path
        try:
            return (self.files_dir / "copies" / sha256).read_bytes()
        except OSError:
            return None

    def trust(self, root: Path, entries: Iterable[tuple[str, str]]) -> None:
        """Record (fingerprint, description) pairs as trusted in this project."""
        pairs = list(entries)
        if not pairs:
            return
        now = _now()
        with self._locked():
            data = self._read()
            project = data.projects.setdefault(_project_key(root), {})
            for fp, description in pairs:
                project[fp] = _TrustRecord(description=description, trusted_at=now)
            self._write(data)

    def grant(self, root: Path, grants: Iterable[TrustGrant]) -> None:
        """Record hooks as trusted, with the manifest of what each reached and copies of
        its text files. Trusting a hook again replaces its earlier trust (in the same
        slot): what runs is what was reviewed last. Hooks that cannot be trusted (no
        digest) are not recorded."""
        granted = [grant for grant in grants if grant.assessed.digest is not None]
        if not granted:
            return
        now = _now()
        with self._locked():
            data = self._read()
            project = data.projects.setdefault(_project_key(root), {})
            for grant in granted:
                digest = grant.assessed.digest
                assert digest is not None
                self._write_manifest(_project_key(root), grant, digest, now)
                for fp, record in list(project.items()):
                    if grant.slot in record.slots and fp != digest:
                        record.slots.remove(grant.slot)
                        if not record.slots:
                            del project[fp]
                slots = project[digest].slots if digest in project else []
                project[digest] = _TrustRecord(
                    description=grant.description,
                    trusted_at=now,
                    key=grant.assessed.key,
                    slots=sorted({*slots, grant.slot}),
                )
            self._write(data)
            self._forget_manifests(data)

    def revoke(self, root: Path, fingerprints: Iterable[str] | None = None) -> int:
        """Forget the given fingerprints (None: all) of this project; return how many were."""
        key = _project_key(root)
        with self._locked():
            data = self._read()
            project = data.projects.get(key, {})
            chosen = set(project) if fingerprints is None else set(fingerprints) & set(project)
            for fp in chosen:
                del project[fp]
            if not project:
                data.projects.pop(key, None)
            if chosen:
                self._write(data)
                self._forget_manifests(data)
        return len(chosen)

    def _latest(self, root: Path, wanted: Callable[[_TrustRecord], bool]) -> TrustManifest | None:
        project = self._read_cached().projects.get(_project_key(root), {})
        chosen = sorted(
            ((record.trusted_at, fp) for fp, record in project.items() if wanted(record)),
            reverse=True,
        )
        for _, fp in chosen:
            manifest = self._read_manifest(_manifest_name(_project_key(root), fp))
            if manifest is not None:
                return manifest
        return None

    def _read_manifest(self, name: str) -> TrustManifest | None:
        """A manifest by its name (_manifest_name), kept while its file stays the same; None
        when missing or unreadable (it only saves reads and shows diffs: trust itself is
        in the store)."""
        path = self.files_dir / "manifests" / f"{name}.json"
        try:
            with path.open("rb") as stream:
                identity = identity_of(os.fstat(stream.fileno()))
                cached = self._manifests.get(name)
                if cached is not None and cached[0] == identity:
                    return cached[1]
                manifest = _MANIFEST_DECODER.decode(stream.read())
        except (OSError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return None
        if len(self._manifests) >= 256:
            self._manifests.clear()  # bounded: a server must not grow without end
        self._manifests[name] = (identity, manifest)
        return manifest

    def _write_manifest(self, project: str, grant: TrustGrant, digest: str, now: str) -> None:
        assessed = grant.assessed
        manifest = TrustManifest(
            fingerprint=digest,
            command=grant.command,
            trusted_at=now,
            tree=list(assessed.tree),
            files=assessed.files,
        )
        try:
            copies = private_dir(self.files_dir / "copies")
            manifests = private_dir(self.files_dir / "manifests")
            for name, content in assessed.contents.items():
                target = copies / assessed.files[name].sha256
                if not target.exists():
                    _write_atomically(target, content)
            name = _manifest_name(project, digest)
            _write_atomically(manifests / f"{name}.json", _ENCODER.encode(manifest))
        except OSError as exc:
            raise self._error("cannot write what trust fingerprinted", exc) from None

    def _forget_manifests(self, data: _TrustFile) -> None:
        """Delete the manifests of fingerprints the store no longer holds, then every copy
        that no manifest refers to."""
        held = {
            _manifest_name(project, fp)
            for project, records in data.projects.items()
            for fp in records
        }
        referenced: set[str] = set()
        try:
            listed = list((self.files_dir / "manifests").iterdir())
        except FileNotFoundError:
            return
        except OSError:
            return  # an unreadable folder is no proof that the copies are unused
        for path in listed:
            if path.stem not in held:
                path.unlink(missing_ok=True)
                continue
            manifest = self._read_manifest(path.stem)
            if manifest is None:
                return  # as above
            referenced.update(state.sha256 for state in manifest.files.values() if state.text)
        try:
            for copy in (self.files_dir / "copies").iterdir():
                if copy.name not in referenced:
                    copy.unlink(missing_ok=True)
        except OSError:
            pass  # a copy left behind costs disk space, not trust

    def _read_cached(self) -> _TrustFile:
        # Hooks are checked on every event: reread only when the file was replaced.
        try:
            with self.path.open("rb") as stream:
                status = os.fstat(stream.fileno())
                signature = (status.st_ino, status.st_size, status.st_mtime_ns)
                if self._cached is not None and self._cached[0] == signature:
                    return self._cached[1]
                data = self._decode(stream.read())
        except FileNotFoundError:
            return _TrustFile()
        except OSError as exc:
            raise self._error("cannot read the trust store", exc) from None
        self._cached = (signature, data)
        return data

    def _read(self) -> _TrustFile:
        try:
            return self._decode(self.path.read_bytes())
        except FileNotFoundError:
            return _TrustFile()
        except OSError as exc:
            raise self._error("cannot read the trust store", exc) from None

    def _decode(self, raw: bytes) -> _TrustFile:
        if not raw.strip():
            return _TrustFile()
        try:
            return _DECODER.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
            message = f"corrupt trust store ({exc}); delete it to forget every trust decision"
            raise TrustStoreError(message, file=str(self.path)) from None

    def _write(self, data: _TrustFile) -> None:
        try:
            _write_atomically(self.path, _ENCODER.encode(data) + b"\n")
        except OSError as exc:
            raise self._error("cannot write the trust store", exc) from None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold an exclusive lock for a read-modify-write, so concurrent writers lose nothing."""
        # The lock lives in its own file: the store itself is replaced on every write.
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise self._error("cannot lock the trust store", exc) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def _error(self, what: str, exc: OSError) -> TrustStoreError:
        return TrustStoreError(f"{what}: {exc.strerror or exc}", file=str(self.path))


def _manifest_name(project: str, fp: str) -> str:
    """The file name of a project's manifest for one fingerprint: the same hooks in two
    checkouts have one fingerprint but files of their own."""
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
    return str(Path(root).resolve())


def _identity(event: str, matcher: str | None, entry: HookEntry) -> dict[str, object]:
    """What the hook is, as the fingerprint holds it (key order is fixed by the encoder)."""
    return {
        "event": event,
        "matcher": matcher,
        "command": entry.command,
        "args": entry.args,
        "env": entry.env,
        "cwd": entry.cwd,
    }


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
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling link: a file may appear at its target
            return FileState(note=f"symbolic link to {_link_target(path)} (nothing there)")
        return None
    except (OSError, ValueError) as exc:  # a symlink loop, a parent we may not enter
        return FileState(note=f"unreadable: {_reason(exc)}")
    if stat.S_ISDIR(status.st_mode):
        if os.path.islink(path):  # not followed by the walk: no loops
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


def _is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _link_target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError as exc:
        return f"(unreadable: {_reason(exc)})"


def _reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
