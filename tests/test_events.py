"""The journal schema (``wf._events``): every operation has an opening event, every event kind
a reader, every event the engine writes is declared, and the tables elsewhere derive from it."""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Callable
from typing import Any

import wf
from wf import _events
from wf.admin import _journal
from wf.engine import _context, _driver
from wf.engine._child import ChildState
from wf.engine._context import RunContext
from wf.engine._driver import recorded_outcome
from wf.engine._hooks import HookState
from wf.engine._recovery import recoveries
from wf.engine._streams import StreamState
from wf.engine._watch import events_of
from wf.store import RunRecord, RunStatus
from wf.store._base import record_from_journal
from wf.testing import MemoryStore, engine

ENGINE = pathlib.Path(wf.__file__).parent / "engine"


def _string_calls(method: str) -> set[str]:
    """First string arguments of ``<anything>.method("...")`` calls in the engine's sources."""
    found: set[str] = set()
    for path in ENGINE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == method
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.add(node.args[0].value)
    return found


def _literal_types() -> set[str]:
    """``{"type": "..."}`` dict literals in the engine's sources."""
    found: set[str] = set()
    for path in ENGINE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if (
                        isinstance(key, ast.Constant)
                        and key.value == "type"
                        and isinstance(value, ast.Constant)
                        and isinstance(value.value, str)
                    ):
                        found.add(value.value)
    return found


def test_every_operation_kind_the_engine_begins_has_an_opening_event() -> None:
    begun = _string_calls("begin_op")
    assert begun == set(_events.OPERATION_KINDS)


def test_every_event_the_engine_writes_is_declared() -> None:
    written = _string_calls("event") | _literal_types() | set(_driver.OUTCOME_EVENTS)
    assert written - set(_events.KINDS) == set()


def test_the_tables_of_event_names_derive_from_the_schema() -> None:
    assert _context.OPENING_EVENTS is _events.OPENING_EVENTS
    assert _context._REQUIRED is _events.REQUIRED
    assert {k: v.value for k, v in _driver.OUTCOME_EVENTS.items()} == _events.OUTCOME_EVENTS
    assert set(_events.OUTCOME_EVENTS) == _journal.OUTCOME_TYPES
    assert set(_journal._ROW_KINDS) <= set(_events.OPENING_EVENTS)
    assert (
        _journal._HOOK_EVENTS
        == _events.HOOK_EVENTS
        == {
            "hook_waiting",
            "hook_payload",
            "hook_payload_refused",
            "hook_disposed",
        }
    )
    for kind in _events.KINDS.values():
        assert set(kind.fields).isdisjoint(kind.optional), kind.name
        if kind.opens:
            assert "op" in kind.fields + kind.optional, kind.name


_SAMPLE: dict[str, Any] = {
    "op": 0,
    "hook": 0,
    "step": 0,
    "index": 0,
    "name": "n",
    "until": 1.0,
    "retry_at": 1.0,
    "wake_at": None,
    "waiting_for": [{"kind": "hook", "target": "t", "until": None}],
    "status": "completed",
    "child": "wrun_00000000000000000000000000.0",
    "token": "t",
    "stream": "default",
    "at": "call",
    "resumes": 1,
    "data": None,
    "attempt": 2,
    "max_attempts": 3,
    "parent": "wrun_00000000000000000000000001",
    "began": 1,
}

_STARTED = {"type": "step_started", "ts": 1.0, "op": 0, "name": "s"}


def sample(kind: str) -> dict[str, Any]:
    """An event of ``kind`` with every declared field."""
    return {
        "type": kind,
        "ts": 1.0,
        **{f: _SAMPLE.get(f) for f in _events.KINDS[kind].fields},
    }


def _opened(kind: str) -> Callable[[RunContext, list[dict[str, Any]]], bool]:
    return lambda ctx, _journal: ctx.history[0].kind == _events.OPENING_EVENTS[kind]


# How each kind of event is read back: by the engine's replay (the context built from a journal),
# by the store's record rebuild, or by the driver's outcome check. A new kind needs a line here.
READERS: dict[str, Callable[[RunContext, list[dict[str, Any]]], bool]] = {
    **{kind: _opened(kind) for kind in _events.OPENING_EVENTS},
    "progress": lambda _, journal: [e.kind for e in events_of("r", journal)] == ["progress"],
    "run_attempt": lambda _, journal: [e.kind for e in events_of("r", journal)] == ["started"],
    "run_retrying": lambda _, journal: _journal_status(journal) is RunStatus.PENDING,
    "hook_payload": lambda ctx, _: ctx.state(HookState).payloads == {0: [None]},
    "child_finished": lambda ctx, _: _SAMPLE["child"] in ctx.state(ChildState).results,
    "child_waiter": lambda ctx, _: ctx.state(ChildState).waiters == {_SAMPLE["parent"]},
    "cancel_requested": lambda ctx, _: ctx.root_scope.fired,
    "cancel_delivered": lambda ctx, _: ctx.delivery_marks == {0: ("call", None)},
    "wake_requested": lambda ctx, _: ctx.wake_marks == [1],
    "hook_payload_refused": lambda ctx, _: ctx.state(HookState).refused == {(0, 0)},
    # Without ``attempt`` (as an older wf wrote it): taken as the attempt that re-runs it.
    "stream_write": lambda ctx, _: ctx.state(StreamState).writes == {(0, "default", None): [0]},
    "stream_closed": lambda ctx, _: ctx.state(StreamState).closed == {("default", None)},
    "run_started": lambda _, journal: record_from_journal(journal) is not None,
    "run_resumed": lambda _, journal: _journal_status(journal) is RunStatus.RUNNING,
    # The drive that began at 1 (the step started there) is no death: the store stopped it.
    "drive_failed": lambda _, journal: (
        recoveries([*journal[:1], _STARTED, *journal[1:]]).count == 0
        and recoveries([*journal[:1], _STARTED]).count == 1
    ),
    "run_suspended": lambda _, journal: _journal_status(journal) is RunStatus.SUSPENDED,
    "run_completed": lambda _, journal: recorded_outcome(journal) is journal[-1],
    "run_failed": lambda _, journal: recorded_outcome(journal) is journal[-1],
    "run_cancelled": lambda _, journal: recorded_outcome(journal) is journal[-1],
}


def _journal_status(journal: list[dict[str, Any]]) -> RunStatus | None:
    record = record_from_journal(journal)
    return None if record is None else record.status


def test_every_event_kind_has_a_reader() -> None:
    assert set(READERS) == set(_events.KINDS)


async def test_each_reader_reads_its_event_kind() -> None:
    record = RunRecord(id="wrun_00000000000000000000000000", workflow="w")
    start = {"type": "run_started", "ts": 0.0, "workflow": "w", "input": None, "record": {}}
    start["record"] = {k: v for k, v in record.to_json().items() if k != "input"}
    async with engine(MemoryStore()) as eng:
        for kind, reads in READERS.items():
            journal = [start] if kind == "run_started" else [start, sample(kind)]
            ctx = RunContext(eng, record, None, journal)  # type: ignore[arg-type]
            assert reads(ctx, journal), kind


def test_waiting_for_reads_structured_and_older_sentences() -> None:
    entry = {"kind": "child", "target": "wrun_x.1", "until": None}
    assert _events.read_waiting([entry]) == [entry]
    assert _events.read_waiting("hook 'k1'") == [
        {"kind": "text", "target": "hook 'k1'", "until": None}
    ]
    assert _events.read_waiting(None) is None and _events.read_waiting("") is None
    assert _events.is_evicted([{"kind": "resume", "target": None, "until": 5.0}])
    assert not _events.is_evicted([entry]) and not _events.is_evicted("resume")
    old = RunRecord.from_json({"id": "wrun_x", "workflow": "w", "waiting_for": "sleep until X"})
    assert old.waiting_for == [{"kind": "text", "target": "sleep until X", "until": None}]
