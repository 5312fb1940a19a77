"""What the torture tests assert about a store after the abuse: journals, step executions,
processes. Reads the files directly (not through the store), so a store bug cannot hide itself.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[2]

# Every event that opens (or continues) a durable operation carries its op id; these are the
# ones a run of ``flows.counted`` writes.
OP_EVENTS = {"step_started", "step_completed", "step_failed", "step_retrying", "sleep_started"}


@dataclasses.dataclass
class Execution:
    index: int
    pid: int
    exec: str
    start: float
    end: float | None = None


def executions(log: Path, key: str) -> list[Execution]:
    """Step executions of one run, from its trace file in ``log`` (see ``flows``)."""
    path = log / f"{key}.log"
    found: dict[str, Execution] = {}
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts[0] == "start":
            found[parts[3]] = Execution(int(parts[1]), int(parts[2]), parts[3], float(parts[4]))
        elif parts[0] == "end":
            found[parts[3]].end = float(parts[5])
    return list(found.values())


@dataclasses.dataclass
class Journal:
    path: Path
    events: list[dict[str, Any]]
    torn_tail: bool
    """The last line has no newline (a crash mid-append); it is not in ``events``."""


def read_journal(path: Path) -> Journal:
    """Parse every line of a journal; only the last one may be torn (no newline)."""
    data = path.read_bytes().rstrip(b"\0")  # the journal's unused slack (NUL bytes)
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    events = []
    for number, line in enumerate(lines, start=1):
        assert b"\0" not in line, f"{path}: line {number} holds a NUL byte: {line[:80]!r}"
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            raise AssertionError(f"{path}: line {number} is not JSON: {line[:80]!r}") from error
        assert isinstance(event, dict) and "type" in event, f"{path}: line {number}: {event!r}"
        events.append(event)
    return Journal(path, events, torn_tail=bool(tail))


def journals(store: Path) -> dict[str, Journal]:
    """Every run's journal, by run id."""
    runs = store / "runs"
    return {d.name: read_journal(d / "journal.jsonl") for d in sorted(runs.iterdir()) if d.is_dir()}


def check_steps(journal: Journal, steps: int) -> dict[int, str]:
    """A finished ``counted`` run's journal: each step completed exactly once, op ids contiguous
    from 0, nothing after the outcome. Returns step index -> exec id of the recorded execution."""
    events = journal.events
    assert not journal.torn_tail, f"{journal.path}: torn tail after recovery"
    assert events[0]["type"] == "run_started", journal.path
    assert events[-1]["type"] == "run_completed", f"{journal.path}: ends with {events[-1]}"
    assert sum(e["type"] == "run_completed" for e in events) == 1, journal.path
    ops = sorted({e["op"] for e in events if e["type"] in OP_EVENTS})
    assert ops == list(range(len(ops))), f"{journal.path}: op ids not contiguous: {ops}"
    completed: dict[int, str] = {}
    completed_ops: set[int] = set()
    for event in events:
        if event["type"] == "step_completed":
            assert event["op"] not in completed_ops, f"{journal.path}: op {event['op']} twice"
            completed_ops.add(event["op"])
            result = event["result"]
            index = int(_plain(result)["index"])
            assert index not in completed, f"{journal.path}: step {index} completed twice"
            completed[index] = str(_plain(result)["exec"])
    assert sorted(completed) == list(range(steps)), f"{journal.path}: steps {sorted(completed)}"
    return completed


def _plain(value: Any) -> Any:
    """Decode wf's tagged JSON (a dict result may come back tagged)."""
    from wf import decode

    return decode(value)


def env(store: Path, log: Path, **extra: str) -> dict[str, str]:
    out = {
        **os.environ,
        "WF_DIR": str(store),
        "WF_TORTURE_LOG": str(log),
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        **extra,
    }
    out.pop("WF_DEBUG", None)
    return out


def spawn_worker(store: Path, log: Path, *args: str, **extra: str) -> subprocess.Popen[bytes]:
    """``wf worker ARGS`` in a subprocess over ``store``; its stderr goes to a file in ``log``."""
    errors = open(log / f"worker-{os.urandom(4).hex()}.err", "wb")  # noqa: SIM115 - kept by Popen
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "wf", "worker", "--poll", "0.2", *args],
            cwd=store.parent,
            env=env(store, log, **extra),
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
    finally:
        errors.close()


def worker_errors(log: Path) -> str:
    """Everything the workers wrote to stderr (tracebacks, errors)."""
    return "".join(p.read_text(errors="replace") for p in sorted(log.glob("worker-*.err")))


def check_run(journal: Journal) -> tuple[Any, dict[int, str]]:
    """A finished run of any torture flow: valid journal (no torn tail, ``run_started`` first,
    one ``run_completed`` and it is last), each operation id opened by one kind of operation,
    each step operation completed exactly once. Returns the output and, for traced steps
    (``work``, ``resume_other``), step index -> exec id of the recorded execution."""
    from wf import _events

    events = journal.events
    assert not journal.torn_tail, f"{journal.path}: torn tail after recovery"
    assert events[0]["type"] == "run_started", journal.path
    assert events[-1]["type"] == "run_completed", f"{journal.path}: ends with {events[-1]}"
    assert sum(e["type"] == "run_completed" for e in events) == 1, journal.path
    kinds: dict[int, str] = {}
    completed_ops: set[int] = set()
    recorded: dict[int, str] = {}
    for event in events:
        kind = _events.OPENING_EVENTS.get(event["type"])
        if kind is None or "op" not in event:
            continue
        op = event["op"]
        assert kinds.setdefault(op, kind) == kind, f"{journal.path}: op {op} is two operations"
        if event["type"] == "step_completed":
            assert op not in completed_ops, f"{journal.path}: op {op} completed twice"
            completed_ops.add(op)
            result = _plain(event["result"])
            if isinstance(result, dict) and "exec" in result:
                index = int(result["index"])
                assert index not in recorded, f"{journal.path}: step {index} completed twice"
                recorded[index] = str(result["exec"])
    steps = {op for op, kind in kinds.items() if kind == "step"}
    assert steps == completed_ops, f"{journal.path}: steps {sorted(steps - completed_ops)} open"
    return _plain(events[-1].get("output")), recorded


def check_executions(log: Path, key: str, recorded: dict[int, str], killed: set[int]) -> int:
    """The traced step executions of run ``key`` against what its journal recorded: the
    recorded execution of each step is its last one (once a completion is durable the step
    never runs again); every earlier one was cut short by a kill, at most one per killed
    process. Returns how many executions re-ran after a kill."""
    by_index: dict[int, list[Execution]] = {}
    for execution in executions(log, key):
        by_index.setdefault(execution.index, []).append(execution)
    assert sorted(by_index) == sorted(recorded), (key, sorted(by_index), sorted(recorded))
    extra = 0
    for index, exec_id in recorded.items():
        runs_of_step = sorted(by_index[index], key=lambda e: e.start)
        assert runs_of_step[-1].exec == exec_id, (key, index, runs_of_step)
        earlier = runs_of_step[:-1]
        assert all(e.pid in killed for e in earlier), (key, index, earlier)
        assert len({e.pid for e in earlier}) == len(earlier), (key, index, earlier)
        extra += len(earlier)
    return extra


def repairs_logged(log: Path) -> int:
    """Runs the workers' wake-up invariant check repaired, from their stderr (each repair is
    logged as it is made: ``run X was suspended although ...``)."""
    return worker_errors(log).count("was suspended although")
