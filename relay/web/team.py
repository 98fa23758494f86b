"""The Team page: every agent of the team and what it is doing, live (relay.fleet.roster,
as `relay agents` and `relay watch` read it), and its actions: a message to an agent from
the human, stop or restart an agent that `relay up` started on this machine.

Routes: `GET /api/team` (the snapshot), `POST /api/team/send` (`{"to", "body"}`),
`POST /api/team/stop` and `/api/team/restart` (`{"name"}`). Events: `team.member` (a
member's row, whole, when anything shown of it changed), `team.removed` (`{"name"}`),
`team.problem` (`{"problem": text or null}`: the board or the mailbox cannot be read).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from relay.errors import RelayError
from relay.fleet import records
from relay.fleet.model import ENDED_STATES
from relay.fleet.roster import TeamMember, shown_state
from relay.fleet.watch import TeamFeed
from relay.web.app import json_answer, json_error, read_json
from relay.web.dashboard import Dashboard
from relay.web.pages import Page

LOOK_SECONDS = 0.05
"""How often the page's feed looks at the board (as `relay watch` does: this machine's
board is read only when another process wrote it, and at least once a second)."""
BODY_LIMIT = 64 * 1024
"""The longest message the page sends, in characters."""


class TeamRow(msgspec.Struct, kw_only=True):
    """One member of the team as the page shows it."""

    name: str
    kind: str
    """agent or human."""
    state: str
    """Its live state (working, idle, waiting, restarting, exited, stopped, lost,
    starting), else its mailbox presence (live, idle, busy, offline)."""
    shown: str
    """The state as shown: an ended run with its exit code, `exited(3)`."""
    since: str | None
    host_kind: str | None
    machine: str | None
    pid: int | None
    project: str | None
    last_line: str | None
    tool: str | None
    messages_in: int | None
    messages_out: int | None
    started: str | None
    """When its current run started (None when none runs): the page counts its uptime."""
    restarts: int
    supervised: bool
    """Started by `relay up` (on any machine)."""
    here: bool
    """Started by `relay up` on this machine: the page may stop and restart it."""


def team_row(member: TeamMember, supervised_here: set[str]) -> TeamRow:
    """`member` as the page shows it."""
    live = member.live
    running = live is not None and live.state not in ENDED_STATES and live.state != "lost"
    return TeamRow(
        name=member.name,
        kind=member.kind,
        state=member.now,
        shown=shown_state(member),
        since=member.since,
        host_kind=live.host_kind if live is not None else None,
        machine=live.machine if live is not None else member.host,
        pid=member.pid,
        project=(live.project if live is not None else None) or member.cwd,
        last_line=live.last_line if live is not None else None,
        tool=live.tool if live is not None else None,
        messages_in=live.messages_in if live is not None else None,
        messages_out=live.messages_out if live is not None else None,
        started=live.started if live is not None and running else None,
        restarts=live.restarts if live is not None else 0,
        supervised=live.supervised if live is not None else False,
        here=member.name in supervised_here,
    )


class TeamView:
    """The page's state (its rows, as last published) and its routes and task."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.rows: dict[str, TeamRow] = {}
        self.problem: str | None = None

    async def follow(self) -> None:
        """Look at the team again and again; publish each row that changed."""
        feed = TeamFeed(self.dashboard.messenger, self.dashboard.board)
        seen: object = None
        while True:
            happenings = await feed.look()
            problems = [h.text for h in happenings if h.kind == "problem"]
            if problems and problems[-1] != self.problem:
                self.problem = problems[-1]
                self.dashboard.publish("team.problem", {"problem": self.problem})
            if feed.members is not seen:  # read again (the feed makes a new dict each time)
                seen = feed.members
                self._update(list(feed.members.values()))
            await anyio.sleep(LOOK_SECONDS)

    def _update(self, members: list[TeamMember]) -> None:
        here = set(records.supervised_names(self.dashboard.team))
        rows = {member.name: team_row(member, here) for member in members}
        for name, row in rows.items():
            if self.rows.get(name) != row:
                self.rows[name] = row
                self.dashboard.publish("team.member", row)
        for name in [name for name in self.rows if name not in rows]:
            del self.rows[name]
            self.dashboard.publish("team.removed", {"name": name})

    async def snapshot(self, request: Request) -> Response:
        dashboard = self.dashboard
        return json_answer(
            {
                "seq": dashboard.feed.seq,
                "team": dashboard.team,
                "machine": dashboard.machine,
                "user": dashboard.user,
                "now": datetime.now(UTC).isoformat(timespec="milliseconds"),
                "members": sorted(self.rows.values(), key=lambda row: row.name),
                "problem": self.problem,
            }
        )

    async def send(self, request: Request) -> Response:
        """A message to an agent from the human at the page (as `relay send` sends it)."""
        body = await read_json(request)
        if not isinstance(body, dict):
            return body
        to, text = body.get("to"), body.get("body")
        if not isinstance(to, str) or not to.strip():
            return json_error("say who the message is for: `to`, an agent's name")
        if not isinstance(text, str) or not text.strip():
            return json_error("the message is empty")
        if len(text) > BODY_LIMIT:
            return json_error(f"the message is longer than {BODY_LIMIT} characters")
        try:
            sent, recipients = await self.dashboard.messenger.send(
                self.dashboard.user, to.strip(), text, None, human=True
            )
        except RelayError as exc:
            return json_error(str(exc), 409)
        return json_answer({"id": sent.id, "short_id": sent.short_id, "queued_for": recipients})

    async def stop(self, request: Request) -> Response:
        """`relay down NAME` from the page."""
        from relay.fleet.up import down

        return await self._act(request, "stop", down)

    async def restart(self, request: Request) -> Response:
        """`relay restart NAME` from the page."""
        from relay.fleet.up import restart

        return await self._act(request, "restart", restart)

    async def _act(self, request: Request, verb: str, action: Callable[..., Any]) -> Response:
        body = await read_json(request)
        if not isinstance(body, dict):
            return body
        name = body.get("name")
        if not isinstance(name, str) or not name:
            return json_error(f"say which agent to {verb}: `name`")
        team = self.dashboard.team
        if name not in records.supervised_names(team):
            return json_error(self._not_ours(name, verb), 409)
        said: list[str] = []

        def run() -> Any:
            return action(team, [name], progress=lambda who, what: said.append(f"{who}: {what}"))

        try:
            outcomes = await anyio.to_thread.run_sync(run)
        except RelayError as exc:
            return json_error(str(exc), 409)
        return json_answer(
            {
                "name": name,
                "outcomes": [[o.name, o.state, o.detail] for o in outcomes],
                "said": said,
            }
        )

    def _not_ours(self, name: str, verb: str) -> str:
        """Why the page will not stop or restart `name`."""
        team, machine = self.dashboard.team, self.dashboard.machine
        row = self.rows.get(name)
        if row is None:
            return f"no agent named {name} in team {team}"
        if row.supervised and row.machine and row.machine != machine:
            return (
                f"{name} was started by relay up on machine {row.machine}, not on this one "
                f"({machine}): {verb} it there (relay {'down' if verb == 'stop' else verb} {name})"
            )
        return (
            f"{name} was not started by relay up on this machine, so the page cannot {verb} "
            f"it; only agents of relay up are stopped and restarted here"
            + (" (relay stop ends a relay run session)" if verb == "stop" else "")
        )


def page(dashboard: Dashboard) -> Page:
    """The Team page of `dashboard`."""
    view = TeamView(dashboard)
    return Page(
        name="team",
        title="Team",
        script="team.js",
        routes=[
            Route("/api/team", view.snapshot),
            Route("/api/team/send", view.send, methods=["POST"]),
            Route("/api/team/stop", view.stop, methods=["POST"]),
            Route("/api/team/restart", view.restart, methods=["POST"]),
        ],
        tasks=[view.follow],
    )
