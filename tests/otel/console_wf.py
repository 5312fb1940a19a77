"""A workflow module that prints its spans with OpenTelemetry's console exporter, set up as
docs/observability.md shows (the exporter holds the original ``sys.stdout``)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import wf

_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
trace.set_tracer_provider(_provider)


@wf.step
def fetch_user(user_id: str) -> str:
    return f"user {user_id}"


@wf.workflow(name="otel_console")
async def onboarding(user_id: str) -> str:
    return await fetch_user(user_id)
