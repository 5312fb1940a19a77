"""As ``blocking_wf``, and a span ends as the module is imported (config loaded under a
span): the exporter is already stuck on it when the run starts. Its provider says each flush
it is asked for on stderr (``blocking_said.FLUSHING``), as its exporter says each export."""

from __future__ import annotations

import sys

from opentelemetry import trace

import wf
from tests.otel import blocking_wf  # sets the blocking provider
from tests.otel.blocking_said import FLUSHING

_force_flush = blocking_wf._provider.force_flush


def _said_force_flush(timeout_millis: int = 30000) -> bool:
    print(FLUSHING, file=sys.stderr, flush=True)
    return _force_flush(timeout_millis)


blocking_wf._provider.force_flush = _said_force_flush  # type: ignore[method-assign]

with trace.get_tracer("config").start_as_current_span("loading config"):
    pass


@wf.workflow(name="otel_blocking_at_import")
async def onboarding(user_id: str) -> str:
    return f"user {user_id}"
