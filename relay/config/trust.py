"""Which project hooks the user has trusted, recorded by fingerprint (DESIGN §7)."""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from relay.config.filecache import FileCache
from relay.config.model import HookEntry, LoadedSettings
from relay.config.paths import state_dir
from relay.errors import RelayError

PATTERN_EVENT = "PatternMatch"
_PROJECT_DIR_VARIABLE = re.compile(
    r"\$(?:\{(?:RELAY|CLAUDE|GEMINI)_PROJECT_DIR\}|(?:RELAY|CLAUDE|GEMINI)_PROJECT_DIR(?![A-Za-z0-9_]))"
)


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


def fingerprint(
    event: str,
    matcher: str | None,
    entry: HookEntry,
    root: Path,
    digests: DigestCache | None = None,
) -> str:
    """A sha256 over what a hook runs, including the content of its scripts inside `root`."""
    identity = {
        "event": event,
        "matcher": matcher,
        "command": entry.command,
        "args": entry.args,
        "env": entry.env,
        "cwd": entry.cwd,
        # A changed script must be trusted again, even when the command line is the same.
        "scripts": project_scripts(entry, root, digests),
    }
    import hashlib  # imported where used: most runs have no project hook to fingerprint

    return hashlib.sha256(msgspec.json.encode(identity, order="sorted")).hexdigest()


def project_scripts(
    entry: HookEntry, root: Path, digests: DigestCache | None = None
) -> dict[str, str]:
    """The files inside `root` that the hook's command names: path relative to root -> sha256."""
    root = Path(os.path.abspath(root))
    real_root = root.resolve()
    bases = [_hook_cwd(entry, root), root]
    scripts: dict[str, str] = {}
    for word in _command_words(entry, root):
        path = Path(word)
        for candidate in [path] if path.is_absolute() else [base / path for base in bases]:
            name = _name_inside(candidate, root, real_root)
            if name is not None and _is_file(candidate):
                scripts[name] = _content_hash(candidate, digests)
                break
    return scripts


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


class _TrustRecord(msgspec.Struct, kw_only=True):
    description: str
    trusted_at: str = ""


class _TrustFile(msgspec.Struct, kw_only=True):
    version: int = 1
    projects: dict[str, dict[str, _TrustRecord]] = msgspec.field(default_factory=dict)
    """Project root -> fingerprint -> record."""


_DECODER = msgspec.json.Decoder(_TrustFile)
_ENCODER = msgspec.json.Encoder(order="sorted")


class TrustStore:
    """The trusted fingerprints of every project, in one JSON file shared by all processes."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else state_dir() / "trust.json"
        self._cached: tuple[tuple[int, int, int], _TrustFile] | None = None

    def is_trusted(self, root: Path, fp: str) -> bool:
        """Whether this fingerprint is trusted in this project."""
        return fp in self._read_cached().projects.get(_project_key(root), {})

    def trusted(self, root: Path) -> dict[str, str]:
        """The trusted fingerprints of this project, with their descriptions."""
        project = self._read_cached().projects.get(_project_key(root), {})
        return {fp: record.description for fp, record in project.items()}

    def trust(self, root: Path, entries: Iterable[tuple[str, str]]) -> None:
        """Record (fingerprint, description) pairs as trusted in this project."""
        pairs = list(entries)
        if not pairs:
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._locked():
            data = self._read()
            project = data.projects.setdefault(_project_key(root), {})
            for fp, description in pairs:
                project[fp] = _TrustRecord(description=description, trusted_at=now)
            self._write(data)

    def revoke(self, root: Path, fingerprints: Iterable[str] | None = None) -> int:
        """Forget the given fingerprints (None: all) of this project; return how many were."""
        key = _project_key(root)
        with self._locked():
            data = self._read()
            project = data.projects.get(key, {})
            if fingerprints is None:
                removed = len(project)
                project.clear()
            else:
                removed = sum(project.pop(fp, None) is not None for fp in set(fingerprints))
            if not project:
                data.projects.pop(key, None)
            if removed:
                self._write(data)
        return removed

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
        # Write a temporary file and rename it over the store: a reader sees the old or the
        # new content, never half of it.
        try:
            import tempfile  # only when trusting: it pulls in shutil and friends

            descriptor, temporary = tempfile.mkstemp(
                dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
            )
        except OSError as exc:
            raise self._error("cannot write the trust store", exc) from None
        try:
            with os.fdopen(descriptor, "wb") as stream:
                stream.write(_ENCODER.encode(data) + b"\n")
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, self.path)
        except OSError as exc:
            Path(temporary).unlink(missing_ok=True)
            raise self._error("cannot write the trust store", exc) from None
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

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


def _project_key(root: Path) -> str:
    return str(Path(root).resolve())


def _expand(word: str, root: Path) -> str:
    return _PROJECT_DIR_VARIABLE.sub(lambda _: str(root), word)


def _command_words(entry: HookEntry, root: Path) -> list[str]:
    """The words of the hook's command line that may name a script."""
    if entry.args is not None:
        words = [entry.command, *entry.args]  # exec form: never split by a shell
    else:
        lexer = shlex.shlex(entry.command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            words = list(lexer)
        except ValueError:  # unbalanced quotes: the shell will fail too; hash what we can
            words = entry.command.split()
    expanded: list[str] = []
    for raw in words:
        word = _expand(raw, root)
        expanded.append(word)
        _, equals, value = word.partition("=")
        if equals and value:
            expanded.append(value)  # --config=hooks/x.json, VAR=path
    return [word for word in expanded if word]


def _hook_cwd(entry: HookEntry, root: Path) -> Path:
    if not entry.cwd:
        return root
    return root / _expand(entry.cwd, root)  # an absolute cwd replaces root


def _name_inside(candidate: Path, root: Path, real_root: Path) -> str | None:
    """The candidate's path relative to root, if it lies inside root (as written or resolved)."""
    lexical = Path(os.path.normpath(candidate))
    if lexical.is_relative_to(root):
        return lexical.relative_to(root).as_posix()
    try:
        real = candidate.resolve()
    except (OSError, RuntimeError):
        return None
    return real.relative_to(real_root).as_posix() if real.is_relative_to(real_root) else None


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long, or with a NUL byte
        return False


def _content_hash(path: Path, digests: DigestCache | None = None) -> str:
    try:
        if digests is not None:
            return digests.get(path)
        with path.open("rb") as stream:
            import hashlib

            return hashlib.file_digest(stream, "sha256").hexdigest()
    except OSError as exc:
        # Still a stable fingerprint; once the file becomes readable it changes.
        return f"unreadable: {exc.strerror or exc}"
