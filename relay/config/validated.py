"""Settings files already validated, remembered on disk by their content, so that a
one-shot process (a host's `relay hooks run`) decodes a file it has seen before in one
msgspec pass instead of walking every node for error positions (DESIGN §10).

What is remembered is a verdict, not the settings: "these bytes, at this path and scope,
validated with these warnings, and one typed decode gives the same Settings". The file is
read every time, its sha256 names the verdict, and anything unexpected (no verdict, a
verdict that cannot be read, a decode that fails) falls back to the full validation. The
key also covers relay's version and the validating modules themselves, so an upgraded
relay validates afresh. Verdicts live in the private state folder, at most MAX_VERDICTS.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
from pathlib import Path

import msgspec

from relay.config.loader import read_settings_bytes, strip_bom, usable_settings
from relay.config.model import ConfigWarning, LoadedSettings, Scope, Settings
from relay.config.paths import private_dir
from relay.version import VERSION

MAX_VERDICTS = 256
"""Verdicts kept; past it the oldest are deleted when a new one is written."""


class _Verdict(msgspec.Struct, kw_only=True):
    warnings: list[ConfigWarning] = msgspec.field(default_factory=list)


_VERDICT = msgspec.json.Decoder(_Verdict)
_SETTINGS = msgspec.json.Decoder(Settings)


def load_remembered(path: Path, scope: Scope, folder: Path) -> LoadedSettings:
    """Read and validate one settings file, like loader.load_settings_file, with verdicts
    kept in `folder`; raise SettingsError if it cannot be read or used."""
    data = read_settings_bytes(path)
    file = str(path)
    name = _verdict_name(data, file, scope)
    verdict_path = folder / name
    try:
        verdict = _VERDICT.decode(verdict_path.read_bytes())
        settings = _SETTINGS.decode(strip_bom(data))
    except (OSError, ValueError, msgspec.DecodeError, RecursionError):
        pass  # no verdict, or one that does not fit: validate in full
    else:
        return LoadedSettings(file=file, scope=scope, settings=settings, warnings=verdict.warnings)
    loaded = usable_settings(data, file=file, scope=scope)
    if _decodes_alike(data, loaded.settings):
        _remember(folder, name, _Verdict(warnings=loaded.warnings))
    return loaded


def _decodes_alike(data: bytes, settings: Settings) -> bool:
    """Whether one typed decode of the bytes gives what the full validation gave (it does
    not when the reader dropped or reshaped something, e.g. a hook of type "prompt")."""
    try:
        return bool(_SETTINGS.decode(strip_bom(data)) == settings)
    except (ValueError, msgspec.DecodeError, RecursionError):
        return False


def _remember(folder: Path, name: str, verdict: _Verdict) -> None:
    """Write a verdict (atomically, privately); a folder that cannot be written only
    means the next process validates again."""
    try:
        private_dir(folder)
        temporary = folder / f".{name}.{os.getpid()}.tmp"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(msgspec.json.encode(verdict))
        os.replace(temporary, folder / name)
        _prune(folder)
    except OSError:
        pass


def _prune(folder: Path) -> None:
    entries = []
    with os.scandir(folder) as listing:
        for entry in listing:
            try:
                entries.append((entry.stat().st_mtime_ns, entry.path))
            except OSError:
                continue
    for _, old in sorted(entries)[: max(0, len(entries) - MAX_VERDICTS)]:
        with contextlib.suppress(OSError):
            os.unlink(old)


def _verdict_name(data: bytes, file: str, scope: str) -> str:
    digest = hashlib.sha256(_validator_identity().encode())
    digest.update(f"\0{scope}\0{file}\0".encode("utf-8", "surrogateescape"))
    digest.update(data)
    return digest.hexdigest()


@functools.cache
def _validator_identity() -> str:
    """relay's version and the size and mtime of the modules that decide what is valid."""
    parts = [VERSION]
    for module in ("relay.config.loader", "relay.config.model", "relay.protocol.dialects"):
        source = getattr(sys.modules.get(module), "__file__", None)
        try:
            status = os.stat(source) if source else None
        except OSError:
            status = None
        parts.append(f"{status.st_size}:{status.st_mtime_ns}" if status else "?")
    return "\0".join(parts)
