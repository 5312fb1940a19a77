"""Step logs: ``runs/<run_id>/logs.jsonl``, one entry per line, appended by the lease holder.

Logs are not the run's truth: they are written without fsync (the OS writes them back soon; a
power cut may lose the last ones) and a line that does not decode (torn by a crash mid-write) is
skipped by readers rather than reported as corruption.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import orjson

from wf._exceptions import StoreError
from wf.store._base import LogEntry
from wf.store._decode import log_entries
from wf.store.local import _fsops, _tails

LOGS_FILE = "logs.jsonl"

_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND


def append(run_dir: str, entries: Sequence[LogEntry]) -> None:
    """Append the entries as whole lines (one ``write``, so a reader never sees half a batch
    except at the very end, which it skips)."""
    path = os.path.join(run_dir, LOGS_FILE)
    try:
        data = b"".join([orjson.dumps(entry) + b"\n" for entry in entries])
    except TypeError as error:
        raise StoreError(f"cannot append to {path}: entry is not JSON ({error})") from None
    fd = _fsops.open_fd(path, _APPEND)
    try:
        _fsops.write_all(fd, data, path)
    finally:
        _fsops.close(fd)


def read_from(run_dir: str, start: int, tails: _tails.Tails) -> list[LogEntry]:
    """Entries from index ``start`` on (a torn or undecodable line is skipped, not counted),
    parsing only what was appended since the last read that ``tails`` knows of the file."""
    return _tails.read_from(os.path.join(run_dir, LOGS_FILE), start, tails, _to_end, missing=[])


def _to_end(data: bytes) -> tuple[list[LogEntry], int]:
    end = data.rfind(b"\n") + 1
    return log_entries(data[:end].splitlines()), end


def parse(data: bytes, start: int) -> list[LogEntry]:
    """``read_from`` of the bytes of a logs file (a packed run's)."""
    return _to_end(data)[0][max(0, start) :]
