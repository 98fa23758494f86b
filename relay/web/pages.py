"""The dashboard's pages: what a page module gives (`Page`) and which pages there are."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.routing import BaseRoute

if TYPE_CHECKING:
    from relay.web.dashboard import Dashboard

PAGE_MODULES: tuple[str, ...] = (
    "relay.web.team",
    "relay.web.conversation",
    "relay.web.hooks",
    "relay.web.memory",
)
"""The page modules, in the navigation's order; each has `page(dashboard) -> Page`."""


@dataclass(frozen=True)
class Page:
    """One page of the dashboard (see relay/web/__init__.py, "Adding a page")."""

    name: str
    """Its id: the navigation's `#NAME`, the prefix of its routes and events."""
    title: str
    """Its entry in the navigation."""
    script: str | None = None
    """Its script in relay/web/static/, loaded after app.js."""
    style: str | None = None
    """A stylesheet of its own in relay/web/static/, after app.css."""
    routes: Sequence[BaseRoute] = ()
    """Its JSON routes (snapshot, actions)."""
    tasks: Sequence[Callable[[], Awaitable[None]]] = field(default_factory=tuple)
    """Run for the server's life; they publish the page's events."""


def load_pages(dashboard: Dashboard, modules: Sequence[str] = PAGE_MODULES) -> list[Page]:
    """Each page of `modules`, made for `dashboard`."""
    pages = []
    for module in modules:
        maker: Callable[[Dashboard], Page] = importlib.import_module(module).page
        pages.append(maker(dashboard))
    return pages
