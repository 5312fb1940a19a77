"""``python -m tests.otel.traced_wf ARGS``: the ``wf`` command in a program that set up the
OpenTelemetry SDK, exporting each finished span as a JSON line to ``$WF_TEST_SPANS``."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class FileExporter(SpanExporter):
    """Appends one line per span: enough to rebuild the tree in the test."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                context = span.get_span_context()
                assert context is not None
                out.write(
                    json.dumps(
                        {
                            "name": span.name,
                            "trace_id": f"{context.trace_id:032x}",
                            "span_id": f"{context.span_id:016x}",
                            "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                            "pid": os.getpid(),
                            "attributes": dict(span.attributes or {}),
                        }
                    )
                    + "\n"
                )
        return SpanExportResult.SUCCESS


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["WF_TEST_SPANS"])))
    trace.set_tracer_provider(provider)
    from wf.cli import main as wf_main

    wf_main()


if __name__ == "__main__":
    main()
