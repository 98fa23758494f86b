"""`Relay`: wrap an agent CLI from Python, with handlers for events and `@namespace:` directives.

relay = Relay(name="Alice")

@relay.pattern("deploy")
def deploy(target, message, ctx):
    return {"inject": f"deploying {message} to {target}"}

@relay.on("SessionStart")
async def hello(event, ctx):
    return {"inject": "Read CONTRIBUTING.md first."}

relay.wrap(["claude"])
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio

from relay.engine.system import HookSystem
from relay.protocol.events import Event, PatternMatch

Handler = TypeVar("Handler", bound=Callable[..., Any])


class Relay:
    """An agent session with Python handlers; settings files apply as for `relay run`."""

    def __init__(
        self,
        *,
        name: str | None = None,
        settings: Sequence[str | Path] = (),
        cwd: str | Path | None = None,
        headless: bool | None = None,
        idle_seconds: float | None = None,
        style: str | None = None,
        inject: bool | None = None,
        task: str | None = None,
        prompt: str | None = None,
        team: str | None = None,
    ) -> None:
        self.name = name
        self.team = team
        """The team to join (default: messaging.team, else the repository's)."""
        self.task = task
        self.prompt = prompt
        self.style = style
        self.inject = inject
        self.cwd = Path(cwd) if cwd is not None else None
        self.headless = headless
        self.idle_seconds = idle_seconds
        self.hooks = HookSystem(cwd=self.cwd, settings=settings)
        self._session: Any = None

    def on(
        self, event: str, *, matcher: str | None = None, timeout: float = 60.0
    ) -> Callable[[Handler], Handler]:
        """Decorate `handler(event, ctx)` to run for EVENT (sync or async; returns a dict, HookOutput or None)."""

        def decorate(handler: Handler) -> Handler:
            self.hooks.register(
                event,
                self._with_context(handler, lambda e: (e,)),
                matcher=matcher,
                name=getattr(handler, "__qualname__", None),
                timeout=timeout,
            )
            return handler

        return decorate

    def pattern(self, namespace: str, *, timeout: float = 60.0) -> Callable[[Handler], Handler]:
        """Decorate `handler(target, message, ctx)` to handle `@NAMESPACE:target message`."""

        def decorate(handler: Handler) -> Handler:
            self.hooks.register(
                "PatternMatch",
                self._with_context(handler, _pattern_arguments),
                matcher=namespace,
                name=getattr(handler, "__qualname__", None),
                timeout=timeout,
                sequential=True,
            )
            return handler

        return decorate

    def wrap(self, command: Sequence[str]) -> int:
        """Run the agent in a session until it ends; return its exit code (blocks)."""
        return anyio.run(self.run, command)

    async def run(self, command: Sequence[str]) -> int:
        """Run the agent in a session until it ends; return its exit code."""
        from relay.session.runtime import Session  # the PTY layer only when a session runs

        session = self._session = Session(
            command,
            hooks=self.hooks,
            name=self.name,
            headless=self.headless,
            idle_seconds=self.idle_seconds,
            cwd=self.cwd,
            style=self.style,
            inject=self.inject,
            task=self.task,
            prompt=self.prompt,
            team=self.team,
        )
        try:
            return await session.run()
        finally:
            self._session = None
            self.hooks.close()

    def stop(self) -> None:
        """Ask the running session to end (SessionEnd with reason `stop`)."""
        if self._session is not None:
            self._session.request_stop("stop")

    def _with_context(
        self, handler: Callable[..., Any], arguments: Callable[[Any], tuple[Any, ...]]
    ) -> Callable[[Event], Any]:
        """Adapt a user handler to the engine's `handler(event)`, adding the session context."""
        if inspect.iscoroutinefunction(handler):

            async def call_async(event: Event) -> Any:
                return await handler(*arguments(event), self._context())

            return call_async

        def call(event: Event) -> Any:
            return handler(*arguments(event), self._context())

        return call

    def _context(self) -> Any:
        return self._session.context if self._session is not None else None


def _pattern_arguments(event: PatternMatch) -> tuple[str, str]:
    return event.target, event.message
