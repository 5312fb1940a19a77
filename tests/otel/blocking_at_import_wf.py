"""As ``blocking_wf``, and a span ends as the module is imported (config loaded under a
span): the exporter is already stuck on it when the run starts."""

from __future__ import annotations

from opentelemetry import trace

import wf
from tests.otel import blocking_wf  # noqa: F401 - sets the blocking provider

with trace.get_tracer("config").start_as_current_span("loading config"):
    pass


@wf.workflow(name="otel_blocking_at_import")
async def onboarding(user_id: str) -> str:
    return f"user {user_id}"
