"""Keep a command's stdout for its result: everything else written meanwhile goes to stderr.

Swapping ``sys.stdout`` is not enough: a library may hold the original stream (OpenTelemetry's
``ConsoleSpanExporter`` takes ``sys.stdout`` as its default when it is imported), and C code or
a subprocess writes to file descriptor 1 itself. So descriptor 1 is pointed at stderr too, and
pointed back when the command writes its result. Spans a batch processor still holds are
exported first: at exit they would land after the result, on stdout.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import TextIO


def _flush(*streams: TextIO | None) -> None:
    for stream in streams:
        if stream is not None:
            with contextlib.suppress(Exception):  # a closed or broken stream: nothing to keep
                stream.flush()


FLUSH_SPANS_MS = 3000
"""How long the spans of a batch processor may take to export before the result is written."""


_stuck: threading.Thread | None = None
"""A flush that outlived its wait (the exporter blocks): no other is waited for meanwhile."""


def _flush_spans() -> None:
    """Export the spans the tracer provider still holds, if the code used OpenTelemetry (it
    is not imported here otherwise); an exporter that fails or hangs is the code's own.

    The flush runs in a daemon thread, waited for at most ``FLUSH_SPANS_MS``: the SDK's
    ``force_flush`` does not keep to its timeout when the exporter blocks (a collector that
    never answers), and the command's result must not wait on it."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return
    with contextlib.suppress(Exception):
        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is None:
            return

        def run() -> None:
            with contextlib.suppress(Exception):
                flush(FLUSH_SPANS_MS)

        global _stuck
        if _stuck is not None and _stuck.is_alive():
            return  # an earlier flush still waits on the exporter: said once, waited once
        thread = threading.Thread(target=run, name="wf-flush-spans", daemon=True)
        thread.start()
        thread.join(FLUSH_SPANS_MS / 1000)
        if thread.is_alive():
            _stuck = thread
            print(
                f"wf: the span exporter did not finish within {FLUSH_SPANS_MS / 1000:g} s: "
                "spans not yet exported may be lost",
                file=sys.stderr,
                flush=True,
            )


@contextlib.contextmanager
def stdout_to_stderr(*, flush_spans: bool = True) -> Iterator[None]:
    """While the block runs, what is written to stdout (the stream or descriptor 1) goes to
    stderr; afterwards stdout is what it was, for the result.

    ``flush_spans``: export the spans ended meanwhile first (a console exporter's go to
    stderr); False when a later block flushes them with its own (``wf run``'s import, then
    its run)."""
    original = sys.stdout
    _flush(original, sys.__stdout__)
    try:
        saved: int | None = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        saved = None  # no descriptor 1 or 2 (a closed stream): the stream swap alone
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        # What was written to the held streams belongs before the result, on stderr.
        if flush_spans:
            _flush_spans()
        _flush(original, sys.__stdout__)
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)
