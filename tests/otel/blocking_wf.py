"""A workflow module whose batch span processor exports to a collector that accepts and never
answers (the exporter blocks, with no timeout of its own: bounded here only so a test cannot
leave it behind)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import wf
from tests.otel.blocking_said import EXPORTING


class _BlockingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        print(EXPORTING + json.dumps([span.name for span in spans]), file=sys.stderr, flush=True)
        threading.Event().wait(100)
        return SpanExportResult.SUCCESS


# No shutdown at exit: the SDK's own (up to 30 s for a blocked exporter) is the code's choice.
_provider = TracerProvider(shutdown_on_exit=False)
_provider.add_span_processor(BatchSpanProcessor(_BlockingExporter(), schedule_delay_millis=60000))
trace.set_tracer_provider(_provider)


@wf.step
def fetch_user(user_id: str) -> str:
    return f"user {user_id}"


@wf.workflow(name="otel_blocking")
async def onboarding(user_id: str) -> str:
    return await fetch_user(user_id)
