"""``--log-format text|json``: how long-running commands (``wf worker``, ``wf serve``) log.

``text`` (the default) is one human line per event, ``HH:MM:SS message``. ``json`` is one JSON
object per line for log shippers: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, and
the event's fields (``run_id``, ``workflow``, ``status``, ``trace_id``...). Both go to stderr,
through ``logging`` (the ``wf`` logger), so wf's own warnings come out the same way.

A command adds the option with ``LogFormatOption`` and runs inside
``with logging_to_stderr(log_format):``; then ``emit(message, **fields)`` logs one event.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import enum
import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import typer


class LogFormat(enum.StrEnum):
    """The formats of ``--log-format``."""

    TEXT = "text"
    JSON = "json"


LogFormatOption = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        metavar="FORMAT",
        help="'text' (human lines) or 'json' (one object per line, for log shippers).",
    ),
]

log = logging.getLogger("wf")

_FIELDS = "wf_fields"


class TextFormatter(logging.Formatter):
    """``HH:MM:SS message``: what the worker has always printed.

    One line per record: a message carries recorded text (a run's error, a workflow name),
    and a newline in it must not start a line that reads as another event, nor an ESC in it
    drive the terminal; both show as escapes (``wf.admin._words.visible``). A traceback
    (an internal error's) keeps its lines, its controls shown alike."""

    def format(self, record: logging.LogRecord) -> str:
        from wf.admin._words import visible

        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        text = f"{stamp} {visible(record.getMessage())}"
        if record.exc_info:
            text += "\n" + visible(self.formatException(record.exc_info), newlines=True)
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = _dt.datetime.fromtimestamp(record.created, _dt.UTC)
        data: dict[str, Any] = {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update(getattr(record, _FIELDS, None) or {})
        for name in ("wf_run_id", "wf_step", "wf_attempt"):  # a record made inside a step
            value = getattr(record, name, None)
            if value is not None:
                data.setdefault(name[3:], value)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


@contextlib.contextmanager
def logging_to_stderr(
    log_format: LogFormat | str, *, quiet: bool = False, loggers: Sequence[str] = ()
) -> Iterator[None]:
    """Within the block, the ``wf`` logger's records go to stderr in ``log_format`` (and only
    there), at INFO (WARNING with ``quiet``). The logger is left as it was afterwards, so a
    command run in-process (tests, ``wf dev``) changes nothing for the code around it.

    ``loggers`` names other loggers whose records (WARNING and above: a library's errors, such
    as uvicorn's) go the same way, in the same format."""
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    saved = (log.level, log.propagate)
    log.addHandler(handler)
    log.setLevel(logging.WARNING if quiet else logging.INFO)
    log.propagate = False
    others = [logging.getLogger(name) for name in loggers]
    kept = [(other.propagate, list(other.handlers)) for other in others]
    library = _StderrHandler()
    library.setFormatter(handler.formatter)
    library.setLevel(logging.WARNING)
    for other in others:
        for existing in list(other.handlers):
            other.removeHandler(existing)
        other.addHandler(library)
        other.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(saved[0])
        log.propagate = saved[1]
        for other, (propagate, handlers) in zip(others, kept, strict=True):
            other.removeHandler(library)
            for existing in handlers:
                other.addHandler(existing)
            other.propagate = propagate


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (a test may swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def emit(message: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event of the command with its fields (None values are left out)."""
    log.log(level, message, extra={_FIELDS: {k: v for k, v in fields.items() if v is not None}})


def trace_id_of(trace: dict[str, str] | None) -> str | None:
    """The trace id in a run record's stored trace context (W3C ``traceparent``)."""
    parent = (trace or {}).get("traceparent", "")
    parts = parent.split("-")
    return parts[1] if len(parts) >= 3 else None
