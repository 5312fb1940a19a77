"""A workflow module that sets up the OpenTelemetry SDK as it is imported (spans as JSON lines
to ``$WF_TEST_SPANS``): a worker imports it only when it drives the run."""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import wf
from tests.otel.traced_wf import FileExporter

_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["WF_TEST_SPANS"])))
trace.set_tracer_provider(_provider)


@wf.step
def greet(name: str) -> str:
    return f"hello {name}"


@wf.workflow(name="otel_at_import")
async def flow(name: str) -> str:
    return await greet(name)
