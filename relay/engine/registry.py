"""Every hook relay knows: from settings files and from Python, indexed by event (DESIGN §5, §7)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from relay.config import looks
from relay.config.discovery import SettingsSet
from relay.config.matcher import Matcher
from relay.config.model import (
    DEFAULT_TIMEOUT,
    SCOPE_ORDER,
    TRUST_REQUIRED,
    BrokenHook,
    HookEntry,
    LoadedSettings,
    Scope,
    Settings,
)
from relay.config.snapshot import SnapshotError, modules_among, snapshot_of
from relay.config.trust import (
    CheckedScript,
    DigestCache,
    ScriptRead,
    TrustStore,
    TrustStoreError,
    TrustVerdict,
    check_trust,
    read_scripts,
    script_reads,
)
from relay.engine.interpreters import (
    EntryScript,
    MakePin,
    MakeRun,
    ModulePin,
    ModuleRun,
    Modules,
    Pin,
    ShellPin,
    ShellPlan,
    entry_script,
    make_run,
    module_run,
    refusal_of,
    runs_by_path,
    shell_plan,
)
from relay.protocol.dialects import Dialect, UnknownEventError, canonical_name, registered_dialect

PythonHandler = Callable[..., Any]
_PATTERN_GROUPS = 1_000_000  # pattern handlers come after a file's hook groups in plan order
_BROKEN_GROUPS = 2_000_000  # broken hooks after them: they never run, only report or deny


class RegisteredHook(msgspec.Struct, kw_only=True):
    """One hook as registered: where it came from, what it runs, whether it may run."""

    name: str
    event: str
    canonical: str
    dialect: Dialect
    matcher: Matcher
    sequential: bool
    scope: Scope
    file: str | None
    order: tuple[int, int, int, int]
    timeout: float
    fail_closed: bool = False
    entry: HookEntry | None = None
    handler: PythonHandler | None = None
    fingerprint: str | None = None
    trusted: bool = True
    """Whether the hook may run as far as trust goes (see Registry.is_trusted: project hooks
    are checked when first needed)."""
    refusal: str | None = None
    """Why a project hook cannot be trusted as written (a form whose code relay cannot pin):
    `relay trust` would refuse it too, so the hook is untrusted until it is rewritten."""
    enabled: bool = True
    needs_trust: bool = False
    """A project hook whose fingerprint must be in the trust store."""
    trust_checked: bool = False
    pin: Pin | ShellPin | ModulePin | MakePin | None = None
    """A trusted project hook's entry script (or the scripts its shell command runs) as
    its check read it: what runs (DESIGN §7)."""
    broken: BrokenHook | None = None
    """A hook whose settings entry has an error: never run; planned to report it (and to
    deny, when it is failClosed)."""

    @property
    def source(self) -> str:
        """The settings file the hook came from; "python" or "runtime" for a hook added in code."""
        if self.file is not None:
            return self.file
        return "python" if self.handler is not None else "runtime"

    @property
    def command(self) -> str:
        """The command as written (a Python hook's qualified name)."""
        if self.entry is not None:
            return self.entry.command_line
        if self.broken is not None:
            return self.broken.command
        return str(getattr(self.handler, "__qualname__", repr(self.handler)))

    @property
    def from_project(self) -> bool:
        """Registered by a project file: it cannot end, displace or get past the user's and
        system's hooks (DESIGN §5, scopes and authority)."""
        return self.scope in TRUST_REQUIRED

    @property
    def runnable(self) -> bool:
        """Enabled, trusted, and not broken."""
        return self.enabled and self.trusted and self.broken is None

    @property
    def dedup_key(self) -> object:
        """Equal for the same command registered twice for one event."""
        if self.entry is None:
            return ("python", id(self.handler))
        entry = self.entry
        args = tuple(entry.args) if entry.args is not None else None
        return (self.dialect, entry.command, args, entry.cwd, tuple(sorted(entry.env.items())))


class Registry:
    """All registered hooks, with the enabled ones indexed by canonical event name.

    `hooksConfig` from the system, user and --settings files governs every hook. From the
    project files it governs only the project's own hooks: a cloned repository must not
    be able to switch off the user's guards (it has not even been trusted).

    Project hooks are fingerprinted when first needed (`is_trusted`), not when the
    registry is built: an event pays only for the hooks it plans to run (DESIGN §10).
    """

    def __init__(
        self,
        settings: SettingsSet,
        *,
        runtime: Sequence[RegisteredHook] = (),
        trust: TrustStore | None = None,
        digests: DigestCache | None = None,
        keep_checks: bool = False,
    ) -> None:
        self.root = settings.root
        self.warnings: list[str] = []
        self._trust = trust
        self._digests = digests
        own = [loaded for loaded in settings.files if loaded.scope not in TRUST_REQUIRED]
        project = [loaded for loaded in settings.files if loaded.scope in TRUST_REQUIRED]
        self.enabled = all(loaded.settings.hooksConfig.enabled for loaded in own)
        self.project_enabled = all(loaded.settings.hooksConfig.enabled for loaded in project)
        self.disabled_names = frozenset(_disabled(own))
        self.project_disabled_names = frozenset(_disabled(project))
        self._files = list(settings.files)
        # Copies: marking must not leak into the caller's runtime hooks between rebuilds.
        self._runtime = [msgspec.structs.replace(hook) for hook in runtime]
        self._lock = threading.Lock()
        self._built: dict[str, list[RegisteredHook]] = {}
        """Every hook of an event (enabled or not) by canonical name, built when the event
        is first asked for: an event pays for its own hooks, not for every hook registered."""
        self._index: dict[str, list[RegisteredHook]] = {}
        """The enabled hooks of an event, in plan order."""
        self._everything: list[RegisteredHook] | None = None
        self._all_checked = False
        self._checked: dict[int, RegisteredHook] | None = None
        """A view's own trust answers, by the shared hook's id (None: answers are kept on
        the hooks themselves)."""
        self._kept: dict[tuple[object, ...], tuple[looks.Looks, _Found]] | None = (
            {} if keep_checks else None
        )
        """relay serve's trust checks, shared by the views: what each found, with the
        looks it made (relay.config.looks), used while every look gives the same answer."""
        self.kept_used = [0]
        """How many checks a kept one answered (shared by the views)."""
        self._warn_about_settings()

    def view(self) -> Registry:
        """This registry for one call: the same hooks, shared and never changed, and trust
        answers of its own (fingerprints re-validated, the trust store asked again).

        What a resident server uses (RegistryCache): building a registry costs time in
        proportion to every hook registered, a view costs nothing until a hook is planned.
        """
        view = object.__new__(Registry)
        view.__dict__.update(self.__dict__)
        view.warnings = list(self.warnings)
        view._all_checked = False
        view._checked = {}
        return view

    @property
    def hooks(self) -> list[RegisteredHook]:
        """Every registered hook in plan order, with its trust checked."""
        everything = self._all()
        if not self._all_checked:
            for hook in everything:
                self.is_trusted(hook)
            self._all_checked = True
        if self._checked is None:
            return everything
        return [self._checked.get(id(hook), hook) for hook in everything]

    def candidates(self, canonical: str) -> list[RegisteredHook]:
        """The enabled hooks registered for an event, in plan order, trust not yet checked."""
        enabled = self._index.get(canonical)
        if enabled is None:
            self._event(canonical)
            enabled = self._index[canonical]
        if self._checked is None:
            return enabled
        # A view plans its own copies of project hooks: their trust answer, and the script
        # it read, belong to this call alone.
        return [self._own(hook) if hook.needs_trust else hook for hook in enabled]

    def for_event(self, canonical: str) -> list[RegisteredHook]:
        """The runnable (enabled and trusted) hooks registered for an event, in plan order."""
        return [
            hook
            for hook in self.candidates(canonical)
            if hook.broken is None and self.is_trusted(hook)
        ]

    def is_trusted(self, hook: RegisteredHook) -> bool:
        """Whether the hook may run as far as trust goes; fingerprints a project hook once."""
        if not hook.needs_trust or hook.trust_checked:
            return hook.trusted
        if self._checked is not None:
            # A view: the shared hook stays as built; this call's answer is on a copy.
            copy = self._own(hook)
            if not copy.trust_checked:
                self._check_trust(copy)
            return copy.trusted
        self._check_trust(hook)
        return hook.trusted

    def trust_asked(self, canonical: str) -> list[tuple[RegisteredHook, RegisteredHook]]:
        """A view's project hooks of an event whose trust it checked: (the shared hook,
        this view's copy with its answer), in plan order ([] for a registry that is not a
        view)."""
        if self._checked is None:
            return []
        asked = []
        for hook in self._index.get(canonical, ()):
            copy = self._checked.get(id(hook)) if hook.needs_trust else None
            if copy is not None and copy.trust_checked:
                asked.append((hook, copy))
        return asked

    def checked(self, hook: RegisteredHook) -> RegisteredHook:
        """A view's copy of a shared project hook, its trust checked for this call."""
        self.is_trusted(hook)
        return self._own(hook)

    def _own(self, hook: RegisteredHook) -> RegisteredHook:
        """A view's copy of a shared hook (the copy itself when given one)."""
        assert self._checked is not None
        copy = self._checked.get(id(hook))
        if copy is None:
            copy = msgspec.structs.replace(hook)
            self._checked[id(hook)] = self._checked[id(copy)] = copy
        return copy

    def _check_trust(self, hook: RegisteredHook) -> None:
        """Check a project hook's trust: what the check finds (its verdict without its
        scripts' bytes, how its launch runs them), kept by a server while every look it
        made gives the same answer (`_found`); then, on every call, its scripts read and
        checked against their fingerprinted hashes, and its pin made from those bytes."""
        assert hook.entry is not None and self.root is not None
        hook.trust_checked = True
        try:
            found, verdict = self._found(hook)
        except TrustStoreError as exc:
            # Unverifiable is untrusted: the project's hooks stop, the user's still run.
            hook.trusted = False
            if str(exc) not in self.warnings:
                self.warnings.append(str(exc))
            return
        hook.fingerprint, hook.trusted = verdict.fingerprint, verdict.trusted
        checked = {script.path: script for script in verdict.scripts}
        entry, plan, make = found.entry, found.plan, found.make
        if entry is not None and entry.path in checked:
            script = checked[entry.path]
            # The kept pin with this call's bytes (its modules too, when they are a name).
            hook.pin = msgspec.structs.replace(
                found.pin or Pin(word=entry.word, path="", text=b"", program=entry.program),
                path=script.path,
                text=script.text,
                executable=script.executable,
            )
        elif plan is not None and verdict.trusted:
            hook.pin = _shell_pin(plan, checked)
        elif make is not None and make.path in checked:
            made = checked[make.path]
            hook.pin = MakePin(word=make.word, path=made.path, text=made.text)
        elif verdict.trusted and found.module is not None:
            hook.pin = ModulePin(word=found.module.word, module=found.module.module)
        refusal = verdict.refusal
        if verdict.trusted and verdict.reached and found.by_path:
            # What it would run by path: a file swapped in after the check would run.
            hook.trusted, hook.pin, refusal = False, None, refusal_of(found.by_path)
        if hook.pin is not None and (found.modules is None or hook.pin.modules is None):
            try:
                modules = found.modules or Modules(
                    snapshot=snapshot_of(self.root, verdict.hashes), roots=found.roots
                )
                hook.pin = msgspec.structs.replace(hook.pin, modules=modules)
            except (SnapshotError, OSError) as exc:
                hook.trusted, hook.pin = False, None
                refusal = f"its modules cannot be copied as checked ({exc})"
        hook.refusal = refusal
        if refusal is not None:
            refused = f"project hook {hook.name} cannot be trusted: {refusal}"
            if refused not in self.warnings:
                self.warnings.append(refused)

    def _found(self, hook: RegisteredHook) -> tuple[_Found, TrustVerdict]:
        """What checking the hook finds, from the check kept for it while each look it made
        gives the same answer again, else from a check made now (and kept, when every look
        it makes can be made again: relay.config.looks); with the verdict of this call, its
        scripts read (`_read`)."""
        if self._kept is None:
            return self._find(hook)
        assert hook.entry is not None
        key = (id(hook.entry), hook.event, hook.matcher.text, hook.sequential)
        kept = self._kept.get(key)
        if kept is not None and kept[0].same():
            self.kept_used[0] += 1
            return kept[1], self._read(kept[1])
        with looks.recording() as seen:
            found, verdict = self._find(hook)
        if seen.unkeepable is None:
            if len(self._kept) >= _KEPT_CHECKS:
                self._kept.clear()  # bounded: a server must not grow without end
            self._kept[key] = (seen, found)
        else:
            self._kept.pop(key, None)
        return found, verdict

    def _read(self, found: _Found) -> TrustVerdict:
        """The verdict with the scripts the hook runs read whole and checked against their
        fingerprinted hashes: on every call, never kept (what runs is what this call read,
        DESIGN §7)."""
        if not found.reads:
            return found.verdict
        return read_scripts(found.verdict, found.reads)

    def _find(self, hook: RegisteredHook) -> tuple[_Found, TrustVerdict]:
        """Check the hook against the trust store and find how its launch runs its
        scripts: everything of its check but reading the scripts it runs (`_read`, made as
        soon as they are known, and not part of what a server keeps)."""
        assert hook.entry is not None and self.root is not None
        verdict = check_trust(
            hook.event,
            hook.matcher.text,
            hook.entry,
            self.root,
            store=self._trust,
            digests=self._digests,
            sequential=hook.sequential,
        )
        entry = entry_script(hook.entry, self.root)
        if not verdict.trusted:
            # An untrusted clone's hooks cost each event no more than the check.
            return _Found(verdict, entry, None, None, (), None, [], (), None, None), verdict
        plan: ShellPlan | None = None
        make: MakeRun | None = None
        if entry is not None:
            paths: tuple[str, ...] = (entry.path,)
        else:
            plan = shell_plan(hook.entry, self.root)
            if plan is not None:
                paths = tuple(plan.paths())
            else:
                make = make_run(hook.entry, self.root)  # its makefile is read as checked
                paths = (make.path,) if make is not None else ()
        reads = script_reads(verdict, self.root, paths)
        found = _Found(verdict, entry, plan, make, reads, None, [], (), None, None)
        read = self._read(found)  # as soon as the check has hashed them, as it always did
        module = module_run(hook.entry, self.root)
        by_path = (
            runs_by_path(hook.entry, self.root, plan, verdict.reached) if verdict.reached else []
        )
        project = os.path.abspath(self.root)
        real = looks.look(looks.resolved, project) or looks.look(looks.real_path, project)
        roots = tuple(dict.fromkeys((project, real)))
        # A snapshot of no module is a name, no folder: made once. One that copies modules
        # is a folder, looked for (and made) on each call.
        modules = None
        if not modules_among(verdict.hashes):
            modules = Modules(snapshot=snapshot_of(self.root, verdict.hashes), roots=roots)
        # An entry script's pin but for the bytes each call reads (`_check_trust`).
        pin = (
            Pin(word=entry.word, path="", text=b"", program=entry.program, modules=modules)
            if entry is not None
            else None
        )
        found = found._replace(
            module=module, by_path=by_path, roots=roots, modules=modules, pin=pin
        )
        return found, read

    @property
    def untrusted(self) -> list[RegisteredHook]:
        """Project hooks skipped because they are not trusted (yet, or any more)."""
        return [hook for hook in self.hooks if hook.enabled and not hook.trusted]

    def refused_names(self) -> set[str]:
        """The names of the project hooks checked so far that cannot be trusted as written.
        It checks none itself: a call pays for the hooks it plans, not for every hook
        registered (each check stats the hook's scripts)."""
        if self._checked is not None:  # a view: this call's copies
            checked: Iterable[RegisteredHook] = self._checked.values()
        else:
            checked = (hook for hook in self._all() if hook.trust_checked)
        return {hook.name for hook in checked if hook.refusal is not None}

    def _event(self, canonical: str) -> list[RegisteredHook]:
        """Every hook of one event (enabled or not), in plan order; built once, shared by views."""
        built = self._built.get(canonical)
        if built is not None:
            return built
        with self._lock:
            built = self._built.get(canonical)
            if built is None:
                built = [hook for hook in self._runtime if hook.canonical == canonical]
                for file_index, loaded in enumerate(self._files):
                    built.extend(
                        _hooks_of_file(
                            loaded.settings, loaded.file, loaded.scope, file_index, only=canonical
                        )
                    )
                    built.extend(_broken_of_file(loaded, file_index, only=canonical))
                for hook in built:
                    self._mark(hook)
                built.sort(key=lambda hook: hook.order)
                enabled = [hook for hook in built if hook.enabled] if self.enabled else []
                self._index[canonical] = enabled
                self._built[canonical] = built
        return built

    def _all(self) -> list[RegisteredHook]:
        """Every registered hook, in plan order (each event built as `_event` builds it)."""
        if self._everything is None:
            names = {hook.canonical for hook in self._runtime}
            for loaded in self._files:
                names.update(_canonical_events(loaded.settings))
                for broken in loaded.broken:
                    canonical = _canonical_or_none(broken.event)
                    if canonical is not None:
                        names.add(canonical)
            everything = [hook for name in names for hook in self._event(name)]
            everything.sort(key=lambda hook: hook.order)
            self._everything = everything
        return self._everything

    def _mark(self, hook: RegisteredHook) -> None:
        """Whether the hook is enabled, and whether it needs trust (a project hook)."""
        from_project = hook.scope in TRUST_REQUIRED
        if (
            hook.name in self.disabled_names
            or (hook.entry is not None and not hook.entry.enabled)
            or (
                from_project
                and (not self.project_enabled or hook.name in self.project_disabled_names)
            )
        ):
            hook.enabled = False
        if from_project and hook.entry is not None and self.root is not None:
            hook.needs_trust = True
            hook.trusted = False  # until checked

    def _warn_about_settings(self) -> None:
        """What the project's hooksConfig asks for and cannot have (it governs only the
        project's own hooks)."""
        if self.project_disabled_names:
            kept = {
                hook.name
                for hook in self._all()
                if hook.scope not in TRUST_REQUIRED and hook.name in self.project_disabled_names
            }
            for name in sorted(kept):
                self.warnings.append(
                    f"project settings cannot disable the user, system or runtime hook "
                    f"{name!r}; it still runs (to turn it off: relay hooks disable {name} "
                    f"--scope user)"
                )
        others = bool(self._runtime) or any(
            _has_hooks(loaded.settings)
            for loaded in self._files
            if loaded.scope not in TRUST_REQUIRED
        )
        if not self.project_enabled and others:
            self.warnings.append(
                "project settings set hooksConfig.enabled to false: that turns off the "
                "project's hooks only; user, system and runtime hooks still run"
            )


def _disabled(files: Sequence[LoadedSettings]) -> list[str]:
    return [name for loaded in files for name in loaded.settings.hooksConfig.disabled]


def runtime_hook(
    event: str,
    handler: PythonHandler | None,
    *,
    entry: HookEntry | None = None,
    position: int,
    matcher: str | None = None,
    name: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    sequential: bool = False,
    fail_closed: bool = False,
) -> RegisteredHook:
    """A hook registered from Python: a handler run in-process, or a command `entry`."""
    canonical = canonical_name(event)
    return RegisteredHook(
        name=name or str(getattr(handler, "__qualname__", "python-hook")),
        event=event,
        canonical=canonical,
        dialect=registered_dialect(event),
        matcher=Matcher(matcher),
        sequential=sequential,
        scope="runtime",
        file=None,
        order=(SCOPE_ORDER["runtime"], 0, position, 0),
        timeout=timeout,
        fail_closed=fail_closed,
        handler=handler,
        entry=entry,
    )


def _canonical_events(settings: Settings) -> set[str]:
    """The canonical names of the events a file has hooks for."""
    names = {canonical for _, canonical, _ in _events_of(settings)}
    if any(isinstance(handler, HookEntry) for handler in settings.patterns.values()):
        names.add("PatternMatch")
    return names


def _has_hooks(settings: Settings) -> bool:
    """Whether a file registers any hook or pattern handler."""
    return any(group.hooks for groups in settings.hooks.values() for group in groups) or any(
        isinstance(handler, HookEntry) for handler in settings.patterns.values()
    )


def _events_of(settings: Settings) -> list[tuple[str, str, int]]:
    """(event as written, canonical name, index of its first group in the file) for each
    event key a file hooks; group indexes count across event names, so plan order is
    file order."""
    events: list[tuple[str, str, int]] = []
    first_group = 0
    for event, groups in settings.hooks.items():
        try:
            # A name relay does not know is a host's newer event: its hooks run when a host
            # fires exactly that name (the settings loader warns, in case it is a typo).
            canonical = canonical_name(event, unknown_passes=True)
        except UnknownEventError:
            canonical = ""  # not even shaped like an event name; the settings loader said so
        if canonical:
            events.append((event, canonical, first_group))
        first_group += len(groups)
    return events


def _hooks_of_file(
    settings: Settings, file: str, scope: Scope, file_index: int, *, only: str
) -> list[RegisteredHook]:
    """The hooks one file registers for the event with canonical name `only`."""
    hooks: list[RegisteredHook] = []
    file = str(Path(file))
    for event, canonical, first_group in _events_of(settings):
        if canonical != only:
            continue
        dialect = registered_dialect(event)
        for group_index, group in enumerate(settings.hooks[event], start=first_group):
            matcher = Matcher(group.matcher)
            for hook_index, entry in enumerate(group.hooks):
                hooks.append(
                    _from_entry(
                        entry,
                        event=event,
                        canonical=canonical,
                        dialect=dialect,
                        matcher=matcher,
                        sequential=group.sequential,
                        scope=scope,
                        file=file,
                        order=(SCOPE_ORDER[scope], file_index, group_index, hook_index),
                    )
                )
    if only != "PatternMatch":
        return hooks
    # `patterns.NAME` is a PatternMatch hook with matcher NAME; "builtin" is the session's.
    for pattern_index, (namespace, handler) in enumerate(settings.patterns.items()):
        if isinstance(handler, HookEntry):
            named = (
                handler if handler.name else msgspec.structs.replace(handler, name=f"@{namespace}")
            )
            hooks.append(
                _from_entry(
                    named,
                    event="PatternMatch",
                    canonical="PatternMatch",
                    dialect=registered_dialect("PatternMatch"),
                    matcher=Matcher(namespace),
                    # A namespace's handlers run in order and `stop` ends the chain (§8).
                    sequential=True,
                    scope=scope,
                    file=file,
                    order=(SCOPE_ORDER[scope], file_index, _PATTERN_GROUPS + pattern_index, 0),
                )
            )
    return hooks


def _broken_of_file(loaded: LoadedSettings, file_index: int, *, only: str) -> list[RegisteredHook]:
    """The broken hooks of one file registered for the event with canonical name `only`: in
    the registry so that they are listed, reported when their event fires, and deny then
    when failClosed (a typo must not silently switch a guard off)."""
    hooks: list[RegisteredHook] = []
    for index, broken in enumerate(loaded.broken):
        if _canonical_or_none(broken.event) != only:
            continue
        hooks.append(
            RegisteredHook(
                name=broken.name,
                event=broken.event,
                canonical=only,
                dialect=registered_dialect(broken.event),
                matcher=Matcher(broken.matcher),
                sequential=False,
                scope=loaded.scope,
                file=str(Path(loaded.file)),
                order=(SCOPE_ORDER[loaded.scope], file_index, _BROKEN_GROUPS + index, 0),
                timeout=DEFAULT_TIMEOUT,
                fail_closed=broken.fail_closed,
                enabled=broken.enabled,
                broken=broken,
            )
        )
    return hooks


def _canonical_or_none(event: str) -> str | None:
    try:
        return canonical_name(event, unknown_passes=True)
    except UnknownEventError:
        return None  # not even shaped like an event name; the settings loader said so


def _from_entry(
    entry: HookEntry,
    *,
    event: str,
    canonical: str,
    dialect: Dialect,
    matcher: Matcher,
    sequential: bool,
    scope: Scope,
    file: str,
    order: tuple[int, int, int, int],
) -> RegisteredHook:
    return RegisteredHook(
        name=entry.display_name,
        event=event,
        canonical=canonical,
        dialect=dialect,
        matcher=matcher,
        sequential=sequential,
        scope=scope,
        file=file,
        order=order,
        timeout=entry.timeout,
        fail_closed=entry.failClosed,
        entry=entry,
    )


class RegistryCache:
    """Registries kept by the identity of the settings they were built from, for a resident
    server: each call gets a `view` of the one built for its settings (files, root, trust
    store, digest cache), so a call costs in proportion to the hooks it plans to run, not
    to every hook registered (DESIGN §10). Thread-safe and bounded."""

    MAX_ENTRIES = 64

    def __init__(self) -> None:
        self._entries: dict[tuple[object, ...], tuple[object, Registry]] = {}
        self._lock = threading.Lock()

    def figures(self) -> dict[str, int]:
        """How many trust checks the registries keep, and how many calls used one."""
        with self._lock:
            registries = [registry for _, registry in self._entries.values()]
        return {
            "kept": sum(len(registry._kept or ()) for registry in registries),
            "used": sum(registry.kept_used[0] for registry in registries),
        }

    def view(
        self, settings: SettingsSet, trust: TrustStore | None, digests: DigestCache | None
    ) -> Registry:
        """A view of the registry for these settings, built on first use."""
        # The parsed settings are the filecache's own objects while their files stay the
        # same, so their identities name the contents; the entry keeps them alive.
        key = (
            settings.root,
            tuple((loaded.file, loaded.scope, id(loaded.settings)) for loaded in settings.files),
            id(trust),
            id(digests),
        )
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            kept = (tuple(loaded.settings for loaded in settings.files), trust, digests)
            registry = Registry(settings, trust=trust, digests=digests, keep_checks=True)
            entry = (kept, registry)
            with self._lock:
                if len(self._entries) >= self.MAX_ENTRIES:
                    self._entries.clear()
                self._entries[key] = entry
        return entry[1].view()


_KEPT_CHECKS = 1024
"""The most trust checks one registry keeps (relay serve's)."""


class _Found(NamedTuple):
    """What checking a project hook found, its scripts' bytes aside: its verdict (without
    scripts), the script it runs or the shell command's or make's plan, the scripts to
    read and check on each call, a `python -m` module of the project, and what it would
    run by path (a trusted hook that does cannot be trusted), and the project folder."""

    verdict: TrustVerdict
    entry: EntryScript | None
    plan: ShellPlan | None
    make: MakeRun | None
    reads: tuple[ScriptRead, ...]
    """The scripts to read and check on each call (trust.script_reads)."""
    module: ModuleRun | None
    by_path: list[tuple[str, str]]
    roots: tuple[str, ...]
    """The project folder as written and resolved (Modules.roots)."""
    modules: Modules | None
    """The pin's snapshot when it copies no module (None: one made on each call)."""
    pin: Pin | None
    """An entry script's pin without its bytes, its modules where they are a name."""


def _shell_pin(plan: ShellPlan, checked: Mapping[str, CheckedScript]) -> ShellPin | None:
    """The pin of a trusted shell command: its scripts with the bytes the check read (a
    script outside the hook's fingerprint runs by path, as it did); None when none is."""
    texts = {
        path: (checked[path].text, checked[path].executable)
        for path in plan.paths()
        if path in checked
    }
    return ShellPin(plan=plan, texts=texts) if texts else None
