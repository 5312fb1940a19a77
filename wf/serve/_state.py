"""What the routes share: the engine, the secrets, and the server's settings."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from starlette.requests import Request

if TYPE_CHECKING:
    from wf.engine._engine import Engine
    from wf.serve._newest import NewestRuns
    from wf.serve._security import Secrets
    from wf.store import Store

MAX_BODY = 1 << 20
"""Request bodies are limited to 1 MiB by default (``create_app(max_body=...)``)."""

BODY_TIMEOUT = 30.0
"""Seconds a request body may take to arrive (``create_app(body_timeout=...)``)."""


@dataclasses.dataclass
class ServerState:
    """The app's shared state (``request.app.state.wf``)."""

    engine: Engine
    keys: Secrets
    drive: bool
    """Whether this server drives runs (``wf serve`` without ``--no-worker``)."""
    max_body: int = MAX_BODY
    _newest: NewestRuns | None = None
    pruned_at: float | None = None
    stopping: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set when the server begins to stop: long waits (``?wait``) answer at once then, instead
    of being cut off by uvicorn's shutdown."""
    imports: asyncio.Semaphore = dataclasses.field(default_factory=lambda: asyncio.Semaphore(4))
    """At most this many by-name starts import their target at once (each in a thread)."""
    """When this server last pruned the kept webhook deliveries (``wf.serve._webhooks``)."""

    @property
    def store(self) -> Store:
        """The store the runs live in."""
        return self.engine.store

    def newest(self, keepalive: float) -> NewestRuns:
        """The newest runs' listing every event stream of this server shares."""
        if self._newest is None:
            from wf.serve._newest import NewestRuns

            self._newest = NewestRuns(self.store, keepalive)
        return self._newest


def state(request: Request) -> ServerState:
    """The server's state, from a request."""
    found: ServerState = request.app.state.wf
    return found
