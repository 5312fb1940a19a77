"""A workflow module that prints its spans with OpenTelemetry's console exporter, set up as
docs/observability.md shows (the exporter holds the original ``sys.stdout``). With
``WF_TEST_BATCH_SPANS`` set, through a batch processor instead, which exports later: at exit."""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)

import wf

_provider = TracerProvider()
_processor = BatchSpanProcessor if os.environ.get("WF_TEST_BATCH_SPANS") else SimpleSpanProcessor
_provider.add_span_processor(_processor(ConsoleSpanExporter()))
trace.set_tracer_provider(_provider)


@wf.step
def fetch_user(user_id: str) -> str:
    return f"user {user_id}"


@wf.workflow(name="otel_console")
async def onboarding(user_id: str) -> str:
    return await fetch_user(user_id)
