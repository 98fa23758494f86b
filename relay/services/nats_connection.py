"""Connecting to NATS as the settings say (`messaging.nats`): shared by messaging
(relay.services.messaging.nats) and team memory (relay.services.memory.team).

This module imports the NATS client; only code that uses NATS imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from relay.config.model import NatsConfig
from relay.services.messaging.model import MessagingError

CONNECT_TIMEOUT = 2
"""Seconds one connection attempt to one server may take."""
UNREADABLE_HEADERS = "Relay-Unreadable-Headers"
"""Set on a received message whose headers the NATS client could not parse."""


class SturdyClient(Client):
    """The NATS client, except that no message can stop it reading. nats-py decodes each
    message's subject and headers as UTF-8 in its read loop, and an exception there ends
    the loop for good (the connection stays up, deaf): one publish of a header or subject
    that is not UTF-8 would stall every reader of a stream at that message, sync after
    sync. Here such a message arrives: its subject with the bad bytes replaced, its
    headers as `UNREADABLE_HEADERS` alone, for the reader to skip."""

    async def _process_headers(self, headers: Any) -> dict[str, str] | None:
        try:
            parsed: dict[str, str] | None = await super()._process_headers(headers)
        except Exception:  # whatever nats-py's parser trips on: the message still arrives
            return {UNREADABLE_HEADERS: "1"}
        return parsed

    def _build_message(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any
    ) -> Any:
        return super()._build_message(sid, _utf8(subject), _utf8(reply), data, headers)


def _utf8(raw: bytes) -> bytes:
    """`raw` if it is UTF-8, else with each bad byte replaced by U+FFFD."""
    try:
        raw.decode()
    except UnicodeDecodeError:
        return raw.decode(errors="replace").encode()
    return raw


def without_secrets(url: str) -> str:
    """`url` without a user or password in it (for error messages)."""
    parts = []
    for one in url.split(","):
        split = urlsplit(one.strip())
        if split.username is not None or split.password is not None:
            host = split.hostname or ""
            netloc = f"{host}:{split.port}" if split.port else host
            split = split._replace(netloc=netloc)
        parts.append(urlunsplit(split))
    return ",".join(parts)


def describe(exc: BaseException) -> str:
    """An exception from the NATS client as one readable phrase."""
    if isinstance(exc, nats.js.errors.APIError):
        code = f" (error {exc.err_code})" if exc.err_code else ""
        return f"{exc.description or type(exc).__name__}{code}"
    if isinstance(exc, nats.errors.NoRespondersError | nats.js.errors.NoStreamResponseError):
        return "no responders (JetStream not enabled for this user's account, or the stream is missing)"
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def connect_options(config: NatsConfig, *, inbox: str | None = None) -> dict[str, Any]:
    """The NATS client's login and TLS options, from the settings (MessagingError naming
    the setting when a file it names is missing or unusable)."""
    where = without_secrets(config.url)
    options: dict[str, Any] = {}
    for setting, path in (("credentials", config.credentials), ("nkey", config.nkey)):
        if path is not None and not Path(path).expanduser().is_file():
            raise MessagingError(f"messaging.nats.{setting}: no such file: {path}", store=where)
    if config.credentials is not None:
        options["user_credentials"] = str(Path(config.credentials).expanduser())
    if config.nkey is not None:
        options["nkeys_seed"] = str(Path(config.nkey).expanduser())
    if config.user is not None:
        options["user"] = config.user
        options["password"] = config.password or ""
    if config.token is not None:
        options["token"] = config.token
    if config.tls is not None:
        tls = config.tls
        try:
            context = ssl.create_default_context(
                cafile=str(Path(tls.ca).expanduser()) if tls.ca else None
            )
            if tls.cert is not None:
                context.load_cert_chain(
                    str(Path(tls.cert).expanduser()),
                    str(Path(tls.key).expanduser()) if tls.key else None,
                )
        except (OSError, ssl.SSLError) as exc:
            raise MessagingError(f"messaging.nats.tls: {exc}", store=where) from None
        if not tls.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        options["tls"] = context
    if inbox is not None:
        options["inbox_prefix"] = inbox
    return options


async def open_connection(
    config: NatsConfig,
    *,
    name: str,
    inbox: str | None = None,
    on_error: Callable[[Exception], Awaitable[None]] | None = None,
    connect_timeout: int = CONNECT_TIMEOUT,
) -> Client:
    """A connected NATS client: the first connection fails after two tries of each server
    (MessagingError saying why, secrets left out); once connected it keeps reconnecting
    through any outage."""
    options = connect_options(config, inbox=inbox)
    where = without_secrets(config.url)
    failures: list[Exception] = []

    async def error_cb(exc: Exception) -> None:
        failures.append(exc)
        del failures[:-1]
        if on_error is not None:
            await on_error(exc)

    async def on_event() -> None:
        pass

    servers = [url.strip() for url in config.url.split(",") if url.strip()]
    nc = SturdyClient()
    try:
        await nc.connect(
            servers,
            name=name,
            error_cb=error_cb,
            disconnected_cb=on_event,
            reconnected_cb=on_event,
            closed_cb=on_event,
            connect_timeout=connect_timeout,
            reconnect_time_wait=1,
            # Fail the first connection after two tries of each server...
            max_reconnect_attempts=1,
            **options,
        )
    except Exception as exc:
        cause = failures[-1] if isinstance(exc, nats.errors.NoServersError) and failures else exc
        with contextlib.suppress(Exception):
            await nc.close()
        raise MessagingError(f"cannot connect to NATS: {describe(cause)}", store=where) from None
    # ... but once connected, outlive any NATS outage: keep reconnecting.
    nc.options["max_reconnect_attempts"] = -1
    return nc
