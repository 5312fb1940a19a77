"""Faults: a full disk, I/O errors, a read-only store, damaged files.

Faults are injected through the local store's one seam for system calls
(``wf.store.local._fsops.inject``), in this process, exactly where the kernel would report them.
For every fault the same questions: is the error clear (it names the file and the errno)? Are
the other runs untouched? Is the affected run recovered, or failed with the cause? Is no event
dropped or invented?
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import json
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import wf
from tests.reliability import _check
from tests.reliability.conftest import report
from wf import Engine, StoreCorrupted, StoreError
from wf.cli._app import build_app
from wf.engine._current import use_engine
from wf.engine._driver import drive
from wf.store import RunStatus
from wf.store.local import LocalStore, _fsops

calls: collections.Counter[tuple[str, int]] = collections.Counter()
armed: list[tuple[int, contextlib.AbstractContextManager[_fsops._Fault]]] = []
"""(step index, fault): step ``index`` arms the fault for what comes right after it (its own
completion's append, the outcome, the record), so it hits exactly there, whatever the timing."""
hits: list[_fsops._Fault] = []


@wf.step(max_retries=0)
async def tally(key: str, i: int) -> int:
    calls[(key, i)] += 1
    if armed and armed[0][0] == i:
        hits.append(stack.enter_context(armed.pop(0)[1]))
    return i * 10


stack = contextlib.ExitStack()


@wf.workflow(name="faults:three")
async def three(key: str) -> list[int]:
    return [await tally(key, i) for i in range(3)]


@wf.workflow(name="faults:nap")
async def nap(key: str) -> list[int]:
    first = await tally(key, 0)
    second = await tally(key, 1)
    await wf.sleep(3600)
    return [first, second, await tally(key, 2)]


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    calls.clear()
    armed.clear()
    hits.clear()
    yield
    stack.close()
    armed.clear()


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    store = LocalStore(tmp_path / ".workflows")
    eng = Engine(store, suspend_after=0)
    with use_engine(eng):
        yield eng
    await store.close()


def store_of(engine: Engine) -> LocalStore:
    assert isinstance(engine.store, LocalStore)
    return engine.store


def journal_path(engine: Engine, run_id: str) -> Path:
    return Path(store_of(engine).run_dir(run_id)) / "journal.jsonl"


async def finish(engine: Engine, run_id: str) -> object:
    """Drive the run again in a fresh driver (as a restarted worker would) and get its result."""
    await drive(engine, run_id)
    return await wf.get_run(run_id).result(timeout=10)


async def bystander(engine: Engine) -> str:
    """A completed run that must survive whatever happens to the others."""
    run = await wf.start(three, "bystander")
    assert await run.result() == [0, 10, 20]
    return run.id


async def assert_intact(engine: Engine, run_id: str) -> None:
    record = await engine.store.get_run(run_id)
    assert record.status is RunStatus.COMPLETED
    assert wf.engine._codec.decode(record.output) == [0, 10, 20]  # type: ignore[attr-defined]
    events = await engine.store.read_journal(run_id)
    assert [e["type"] for e in events].count("step_completed") == 3


async def cli(*args: str) -> Any:
    """``wf ARGS`` in-process. In a thread: the command runs its own event loop."""
    return await asyncio.to_thread(
        CliRunner().invoke, build_app(), list(args), catch_exceptions=False
    )


def step_completions(engine: Engine, run_id: str) -> list[int]:
    journal = _check.read_journal(journal_path(engine, run_id))
    assert not journal.torn_tail
    return [e["op"] for e in journal.events if e["type"] == "step_completed"]


# -- appends -----------------------------------------------------------------------------------


APPEND_FAULTS = [
    ("write", errno.ENOSPC),
    ("write", errno.EIO),
    ("fdatasync", errno.EIO),
    ("fdatasync", errno.ENOSPC),
]


@pytest.mark.parametrize(("op", "code"), APPEND_FAULTS)
async def test_append_fault_during_a_step_completion(engine: Engine, op: str, code: int) -> None:
    """The step's completion cannot be made durable. Required: a clear error naming the journal
    and the errno; the run either failed with that cause or left for the next driver, which
    finishes it re-running that one step at most once; the journal holds whole lines only and
    no event the disk refused; other runs untouched."""
    other = await bystander(engine)
    armed.append((1, _fsops.inject(op, code, match="journal.jsonl", times=1)))
    run = await wf.start(three, "victim")
    name = errno.errorcode[code]
    with pytest.raises((StoreError, wf.RunFailed)) as caught:
        await run.result(timeout=10)
    stack.close()
    assert "journal.jsonl" in str(caught.value) and name in str(caught.value), caught.value
    recorded = step_completions(engine, run.id)  # also: whole lines only
    assert recorded in ([0], [0, 1])  # step 1's line is there only if its write succeeded
    record = await engine.store.get_run(run.id)
    if record.status is RunStatus.FAILED:
        outcome = "run failed with the cause"
        assert record.error is not None
        assert "journal.jsonl" in record.error["message"] and name in record.error["message"]
        assert recorded == [0]
        assert dict(calls) == {
            ("bystander", 0): 1,
            ("bystander", 1): 1,
            ("bystander", 2): 1,
            ("victim", 0): 1,
            ("victim", 1): 1,
        }
    else:
        outcome = "run recovered by the next driver"
        assert not record.status.is_terminal  # nothing recorded as finished
        assert await finish(engine, run.id) == [0, 10, 20]
        assert step_completions(engine, run.id) == [0, 1, 2]
        assert calls[("victim", 0)] == 1 and calls[("victim", 2)] == 1
        assert calls[("victim", 1)] == (1 if recorded == [0, 1] else 2)
    await assert_intact(engine, other)
    report(
        f"faults: {name} on the {op} of a step completion -> clear error naming the "
        f"journal; {outcome}; other runs intact"
    )


async def test_a_full_disk_during_a_step_completion_does_not_fail_the_run(engine: Engine) -> None:
    armed.append((1, _fsops.inject("write", errno.ENOSPC, match="journal.jsonl", times=1)))
    run = await wf.start(three, "victim")
    with contextlib.suppress(StoreError, wf.RunFailed):
        await run.result(timeout=10)
    stack.close()
    assert not (await run.status()).is_terminal
    assert await finish(engine, run.id) == [0, 10, 20]


# -- atomic replacements -----------------------------------------------------------------------


@pytest.mark.parametrize("op", ["write", "rename", "fsync"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
async def test_fault_while_posting_to_a_run(engine: Engine, op: str, code: int) -> None:
    """A message (here a cancel request) is written with an atomic replace: a failure leaves no
    message, half or whole, and an error naming the inbox file."""
    other = await bystander(engine)
    run = await wf.start(nap, "posted")
    await asyncio.wait_for(engine.drivers[run.id], 10)
    assert await run.status() is RunStatus.SUSPENDED
    with _fsops.inject(op, code, match="inbox"), pytest.raises(StoreError) as caught:
        await run.cancel()
    assert "inbox" in str(caught.value) and errno.errorcode[code] in str(caught.value)
    inbox = Path(store_of(engine).run_dir(run.id)) / "inbox"
    assert sorted(os.listdir(inbox)) == []  # no message, no temporary file
    assert await run.status() is RunStatus.SUSPENDED
    assert await engine.store.read_inbox(run.id) == []
    # The store works again once the disk does.
    assert await run.cancel()
    with pytest.raises(wf.RunCancelled):
        await run.result(timeout=10)
    await assert_intact(engine, other)


BIG = "x" * 70_000
"""An output too large for the journal's ends to stand for the record: the final save writes
``run.json`` (and a blob). A small one writes no record file at all."""


@wf.workflow(name="faults:three_big")
async def three_big(key: str) -> list[object]:
    return [await tally(key, i) for i in range(3)] + [BIG]


@pytest.mark.parametrize(
    ("op", "match", "flow"),
    [
        ("open", "run.json", three_big),
        ("write", "run.json", three_big),
        ("rename", "run.json", three_big),
        ("rename", "index", three),
        ("unlink", "queue", three),
    ],
)
async def test_fault_while_saving_the_final_record(
    engine: Engine, op: str, match: str, flow: wf.Workflow[..., list[object]]
) -> None:
    """The outcome is in the journal but the record (a cache of it), its index entry or its
    queue entry cannot be updated: the next driver only repairs them. No step runs again, and
    the outcome is recorded once."""
    # The last step arms the fault: every such call fails from there on.
    armed.append((2, _fsops.inject(op, errno.ENOSPC, match=match)))
    run = await wf.start(flow, "final")
    with contextlib.suppress(StoreError):
        await asyncio.wait_for(engine.drivers[run.id], 10)
    stack.close()
    assert hits and hits[0].hits >= 1  # the save did fail
    events = _check.read_journal(journal_path(engine, run.id)).events
    assert [e["type"] for e in events].count("run_completed") <= 1
    expected = [0, 10, 20] + ([BIG] if flow is three_big else [])
    assert await finish(engine, run.id) == expected
    events = _check.read_journal(journal_path(engine, run.id)).events
    assert [e["type"] for e in events].count("run_completed") == 1
    assert events[-1]["type"] == "run_completed"
    assert dict(calls) == {("final", 0): 1, ("final", 1): 1, ("final", 2): 1}
    assert [r.id for r in await engine.store.list_runs(statuses=[RunStatus.COMPLETED])] == [run.id]
    assert await engine.store.due_runs(now=2e9) == []


# -- a read-only store -------------------------------------------------------------------------


@contextlib.contextmanager
def read_only() -> Iterator[None]:
    """EROFS on every call that would change the file system (reads still work).

    As root, ``chmod`` cannot make a directory read-only (root bypasses permissions), and a
    read-only bind mount needs privileges a test must not assume: the errors a read-only
    mount gives are injected instead.
    """
    with contextlib.ExitStack() as faults:
        for op in (
            "open",
            "write",
            "mkdir",
            "rename",
            "link",
            "unlink",
            "truncate",
            "fsync",
            "fdatasync",
            "syncfs",
        ):
            faults.enter_context(_fsops.inject(op, errno.EROFS))
        yield


async def test_read_only_store(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = await bystander(engine)
    before = [r.id for r in await engine.store.list_runs()]
    with read_only():
        # Reading works: listing, records, journals.
        assert [r.id for r in await engine.store.list_runs()] == before
        await assert_intact(engine, other)
        # Writing fails loudly, naming the path and EROFS, and leaves nothing half-made.
        with pytest.raises(StoreError, match="EROFS"):
            await wf.start(three, "refused")
        assert [r.id for r in await engine.store.list_runs()] == before
        # The command line: one line on stderr, exit 3, no traceback.
        monkeypatch.setenv("WF_DIR", str(tmp_path / ".workflows"))
        monkeypatch.chdir(tmp_path)
        result = await cli("runs", "--json")
        assert result.exit_code == 0 and len(json.loads(result.stdout)) == len(before)
        result = await cli("run", "tests.reliability.test_faults:three", "-i", '"cli"')
        assert result.exit_code == 3, result.output
        assert "Traceback" not in result.output and "EROFS" in result.stderr
    await assert_intact(engine, other)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permissions: see test_read_only_store")
async def test_read_only_store_by_permissions(engine: Engine, tmp_path: Path) -> None:
    other = await bystander(engine)
    root = tmp_path / ".workflows"
    modes = {p: p.stat().st_mode for p in [root, *root.rglob("*")]}
    try:
        for path in modes:
            path.chmod(modes[path] & ~0o222)
        with pytest.raises(StoreError):
            await wf.start(three, "refused")
        await assert_intact(engine, other)
    finally:
        for path, mode in modes.items():
            path.chmod(mode)


# -- damaged files -----------------------------------------------------------------------------


async def test_garbage_in_the_middle_of_a_journal(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = await bystander(engine)
    run = await wf.start(nap, "garbled")
    await asyncio.wait_for(engine.drivers[run.id], 10)
    path = journal_path(engine, run.id)
    lines = path.read_bytes().split(b"\n")
    lines[2] = b'{"type": "step_completed", "op": 0, "res'  # damaged, not the last line
    path.write_bytes(b"\n".join(lines))

    with pytest.raises(StoreCorrupted) as caught:
        await engine.store.read_journal(run.id)
    assert str(path) in str(caught.value) and "line 3" in str(caught.value)
    # The other runs are untouched, and listing still works.
    await assert_intact(engine, other)
    assert {r.id for r in await engine.store.list_runs()} == {run.id, other}
    monkeypatch.setenv("WF_DIR", str(tmp_path / ".workflows"))
    monkeypatch.chdir(tmp_path)
    result = await cli("inspect", "--json", run.id)
    assert result.exit_code == 3 and "journal.jsonl" in result.stderr, result.output
    assert "Traceback" not in result.output
    result = await cli("runs", "--json")
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 2
    # Driving it never guesses: the run is marked failed with that error, and the journal is
    # left exactly as it is (nothing dropped, nothing invented).
    size = path.stat().st_size
    record = await drive(engine, run.id)
    assert record is not None and record.status is RunStatus.FAILED
    assert record.error is not None and "line 3" in record.error["message"]
    assert path.stat().st_size == size
    assert calls[("garbled", 0)] == 1 and calls[("garbled", 1)] == 1


SWALLOWED: list[str] = []


@wf.workflow(name="faults:swallowing")
async def swallowing(key: str) -> list[int]:
    """Catches everything it can: a malformed event must not surface here as a KeyError."""
    out = []
    for i in range(2):
        try:
            out.append(await tally(key, i))
        except Exception as exc:
            SWALLOWED.append(repr(exc))
    await wf.sleep(3600)
    return out


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda e: e.pop("result"), "event 3 (step_completed) lacks 'result'"),
        (lambda e: e.update(op="0"), "event 3 (step_completed) has a non-integer op"),
        (lambda e: e.pop("type"), "event 3 has no type"),
        (
            lambda e: e.update(type="step_finished"),
            "event 3 (step_finished) is of no kind this wf knows",
        ),
        (
            lambda e: e.update(type="run_completed", output=[9]),
            "event 3 (run_completed) is not the last event",
        ),
    ],
)
async def test_a_valid_line_missing_what_replay_reads_is_corruption(
    engine: Engine, damage: Any, expected: str
) -> None:
    """A line replay cannot use (a field it reads missing; no type, or one wf does not know;
    an outcome before the end): ``wf store verify`` names the run, and its driver fails it as
    damaged rather than replaying around the line into a wrong result."""
    SWALLOWED.clear()
    run = await wf.start(swallowing, "malformed")
    await asyncio.wait_for(engine.drivers[run.id], 10)
    path = journal_path(engine, run.id)
    events = [json.loads(line) for line in path.read_text().rstrip("\0").splitlines()]
    assert events[2]["type"] == "step_completed"
    damage(events[2])
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    [named] = [line for line in await engine.store.verify() if run.id in line]
    assert f"{path}: {expected}" in named
    record = await drive(engine, run.id)  # resumes: replays the damaged completion
    assert record is not None and record.status is RunStatus.FAILED
    assert record.error is not None and record.error["type"].endswith("StoreCorrupted")
    assert expected in record.error["message"]
    assert SWALLOWED == []  # never raised into workflow code
    assert calls[("malformed", 0)] == 1 and calls[("malformed", 1)] == 1  # nothing re-ran


async def test_a_stored_input_that_is_no_arguments_fails_its_run_saying_so(
    engine: Engine,
) -> None:
    run = await wf.start(nap, "input", detach=True)
    path = journal_path(engine, run.id)
    first, rest = path.read_bytes().split(b"\n", 1)
    event = json.loads(first)
    event["input"] = "not arguments"
    path.write_bytes(json.dumps(event).encode() + b"\n" + rest)
    with pytest.raises(wf.RunFailed, match="its stored input is not arguments"):
        await asyncio.wait_for(run.result(), 10)


async def test_a_corrupt_run_is_marked_failed_with_the_cause(engine: Engine) -> None:
    run = await wf.start(nap, "garbled")
    await asyncio.wait_for(engine.drivers[run.id], 10)
    path = journal_path(engine, run.id)
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"\x00\x00garbage"
    path.write_bytes(b"\n".join(lines))
    worker = wf.Worker(engine, on_error=lambda run_id, error: None)
    await run.wake_up()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(worker.run(until_idle=True), 5)
    record = await engine.store.get_run(run.id)
    assert record.status is RunStatus.FAILED
    assert record.error is not None and "journal.jsonl" in str(record.error)


async def test_torn_journal_tail_is_dropped_and_the_run_recovers(engine: Engine) -> None:
    """A crash mid-append leaves a last line without its newline: it was never reported
    durable, so it is dropped and the step it would have completed runs once more."""
    other = await bystander(engine)
    run = await wf.start(nap, "torn")
    await asyncio.wait_for(engine.drivers[run.id], 10)
    path = journal_path(engine, run.id)
    data = path.read_bytes()
    lines = data.split(b"\n")
    # Keep everything up to step 1's completion, and half of that line.
    cut = next(
        i for i, line in enumerate(lines) if b'"step_completed"' in line and b'"op":1' in line
    )
    path.write_bytes(b"\n".join(lines[:cut]) + b"\n" + lines[cut][: len(lines[cut]) // 2])
    assert _check.read_journal(path).torn_tail

    events = await engine.store.read_journal(run.id)  # readers ignore the torn line
    assert [e["type"] for e in events][-1] == "step_started"
    await drive(engine, run.id)  # as a restarted worker: step 1 again, then the sleep
    assert await run.status() is RunStatus.SUSPENDED
    await run.wake_up()
    assert await finish(engine, run.id) == [0, 10, 20]
    assert [calls[("torn", i)] for i in range(3)] == [1, 2, 1]
    assert step_completions(engine, run.id) == [0, 1, 3]  # ops: step, step, sleep, step
    await assert_intact(engine, other)


@pytest.mark.parametrize("damage", [b"", b'{"id": "wrun_', b"\xff\xfe not json", b"[]"])
async def test_damaged_record_is_rebuilt_from_the_journal(engine: Engine, damage: bytes) -> None:
    """``run.json`` is a cache of the journal (saved without fsync): empty, truncated or
    garbage, it is rebuilt from the journal, never trusted or guessed."""
    other = await bystander(engine)
    run = await wf.start(three, "record")
    assert await run.result() == [0, 10, 20]
    (Path(store_of(engine).run_dir(run.id)) / "run.json").write_bytes(damage)
    record = await engine.store.get_run(run.id)
    assert record.status is RunStatus.COMPLETED
    assert await run.result() == [0, 10, 20]
    assert {r.id for r in await engine.store.list_runs()} == {run.id, other}
    await assert_intact(engine, other)


@pytest.mark.parametrize(
    "damage",
    [b'{"id": "msg_0", "ki', b'{"id": "msg_0", "kind": "hook", "data": null}'],
    ids=["torn", "data not an object"],
)
async def test_damaged_inbox_message(engine: Engine, damage: bytes) -> None:
    run = await wf.start(nap, "inbox")
    await asyncio.wait_for(engine.drivers[run.id], 10)
    inbox = Path(store_of(engine).run_dir(run.id)) / "inbox"
    inbox.mkdir(exist_ok=True)  # made by the first post
    (inbox / "msg_0000000000000000000000000.json").write_bytes(damage)
    with pytest.raises(StoreCorrupted, match=r"msg_0000000000000000000000000\.json"):
        await engine.store.read_inbox(run.id)
    with pytest.raises(StoreCorrupted, match="inbox"):
        await drive(engine, run.id)
    assert await run.status() is RunStatus.SUSPENDED


# -- damage reported, not guessed around -------------------------------------------------------


async def test_an_emptied_journal_beside_its_record_fails_the_run_instead_of_restarting_it(
    engine: Engine,
) -> None:
    run = await wf.start(nap, "emptied")
    await asyncio.wait_for(engine.drivers[run.id], 10)
    assert await run.status() is RunStatus.SUSPENDED
    run_dir = Path(store_of(engine).run_dir(run.id))
    record = await engine.store.get_run(run.id)
    (run_dir / "run.json").write_bytes(json.dumps(record.to_json()).encode())
    (run_dir / "journal.jsonl").write_bytes(b"")
    await run.wake_up()
    with pytest.raises(wf.RunFailed, match=r"journal of run .* is empty or lost its first event"):
        await run.result(timeout=10)
    assert calls[("emptied", 0)] == calls[("emptied", 1)] == 1  # nothing ran again
    assert (run_dir / "journal.jsonl").read_bytes() == b""  # the damage is left as it is


async def test_a_run_failed_as_damaged_is_said_failed_not_skipped(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's line says what it did with the run (failed it, its cause recorded), not
    that it skipped it and leaves it alone."""
    run = await wf.start(nap, "said")
    await asyncio.wait_for(engine.drivers[run.id], 10)
    run_dir = Path(store_of(engine).run_dir(run.id))
    record = await engine.store.get_run(run.id)
    (run_dir / "run.json").write_bytes(json.dumps(record.to_json()).encode())
    (run_dir / "journal.jsonl").write_bytes(b"")
    await run.wake_up()
    with caplog.at_level(logging.ERROR, logger="wf.worker"), pytest.raises(wf.RunFailed):
        await run.result(timeout=10)
    [fault] = list(engine.store.faults)
    assert (fault.kind, fault.item, fault.failed) == ("run", run.id, True)
    assert f"failed run {run.id} as damaged" in caplog.text
    assert "skipped" not in caplog.text


async def test_damaged_entries_are_skipped_and_named_not_fatal_to_listings(
    engine: Engine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = await bystander(engine)
    root = tmp_path / ".workflows"
    (root / "index" / "stray").write_text("not a bucket")
    (root / "hooks" / ("0" * 64 + ".json")).write_bytes(b"garbage")
    monkeypatch.setenv("WF_DIR", str(root))
    monkeypatch.chdir(tmp_path)
    listed = await cli("runs", "--json")
    assert listed.exit_code == 0, listed.output
    assert [r["id"] for r in json.loads(listed.stdout)] == [other]
    # Said with the answer, as every damaged item a listing leaves out (over WF_URL too).
    assert (
        "warning: index entry stray is damaged and not listed: " in listed.stderr
        and "index/stray: not a wf index directory; skipped" in listed.stderr
    )
    hooks = await cli("hooks")
    assert hooks.exit_code == 0, hooks.output
    assert f"{'0' * 64}.json: not a hook record" in hooks.stderr  # named by the listing


async def test_a_store_without_its_format_file_or_that_is_a_file_is_an_error(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await bystander(engine)
    root = tmp_path / ".workflows"
    (root / "wf-store.json").unlink()
    monkeypatch.setenv("WF_DIR", str(root))
    monkeypatch.chdir(tmp_path)
    for args in (["runs"], ["run", "tests.reliability.test_faults:three", "-i", '"x"']):
        result = await cli(*args)
        assert result.exit_code == 3, result.output
        assert "wf-store.json is missing, but" in result.stderr and "holds runs" in result.stderr
    assert not (root / "wf-store.json").exists()  # not silently started over
    (tmp_path / "plain").write_text("a file")
    monkeypatch.setenv("WF_DIR", str(tmp_path / "plain"))
    result = await cli("runs")
    assert result.exit_code == 3
    assert "plain is not a directory, so it cannot be a wf store" in result.stderr


def test_an_unknown_status_is_damage_not_a_value_error() -> None:
    with pytest.raises(StoreCorrupted, match="unknown status 'bogus'"):
        wf.RunRecord.from_json({"id": "r", "workflow": "w", "status": "bogus"})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_attempts", "abc"),
        ("priority", [1]),
        ("error", "boom"),
        ("workflow", 3),
        ("group", {"a": 1}),
        ("cancel_requested", "yes"),
        ("by_name", "x"),
    ],
)
def test_a_field_of_the_wrong_type_is_damage_not_a_type_error(field: str, value: object) -> None:
    """Said where the record is read, for that run alone, never a TypeError or an
    AttributeError wherever the field is used later (``wf inspect``, the driver)."""
    with pytest.raises(StoreCorrupted, match=f"run 'r': {field} is not "):
        wf.RunRecord.from_json({"id": "r", "workflow": "w", field: value})


async def test_worker_until_idle_fails_while_the_store_fails(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await wf.start(three, "full", detach=True)
    monkeypatch.setenv("WF_DIR", str(tmp_path / ".workflows"))
    monkeypatch.chdir(tmp_path)
    with _fsops.inject("write", errno.ENOSPC, match="journal.jsonl"):
        result = await cli("worker", "--until-idle")
    assert result.exit_code == 1, result.output
    assert (
        "could not drive 1 run(s), the store failed or they are damaged (each is named above): "
        f"{run.id}" in result.stderr
    )
    assert not (await run.status()).is_terminal
    assert (await cli("worker", "--until-idle")).exit_code == 0  # the disk has room again
    assert await run.result(timeout=10) == [0, 10, 20]


async def test_a_sleep_whose_until_is_no_time_is_damage_named_everywhere(engine: Engine) -> None:
    """A suspended run's sleep deadline edited to ``"soon"`` (in its journal, and in its
    ``run.json``'s ``waiting_for``): ``wf store verify`` names the journal event, the run's
    detail (``wf inspect``) shows the run with that damage named, and its driver fails it as
    damaged; each used to meet a TypeError comparing the deadline."""
    run = await wf.start(nap, "soon")
    await asyncio.wait_for(engine.drivers[run.id], 10)
    assert (await engine.store.get_run(run.id)).status is RunStatus.SUSPENDED
    path = journal_path(engine, run.id)
    events = [json.loads(line) for line in path.read_text().rstrip("\0").splitlines()]
    [at] = [i for i, e in enumerate(events) if e["type"] == "sleep_started"]
    events[at]["until"] = "soon"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    record_path = path.parent / "run.json"
    if record_path.exists():
        data = json.loads(record_path.read_text())
        for waiting in data.get("waiting_for") or []:
            waiting["until"] = "soon"
        record_path.write_text(json.dumps(data))
    expected = f"event {at + 1} (sleep_started) has an until that is not a time ('soon')"
    named = [line for line in await engine.store.verify() if run.id in line]
    assert any(f"{path}: {expected}" in line for line in named), named
    detail = await wf.admin.run_detail(engine.store, run.id)
    assert [(f.kind, f.item) for f in detail.damaged] == [("journal", run.id)], detail.damaged
    assert expected in detail.damaged[0].reason
    [sleep] = [row for row in detail.steps if row.kind == "sleep"]
    assert sleep.until is None  # not a time: shown without one
    record = await drive(engine, run.id)
    assert record is not None and record.status is RunStatus.FAILED
    assert record.error is not None and record.error["type"].endswith("StoreCorrupted")
    assert expected in record.error["message"]


@wf.workflow(name="faults:guarded_nap")
async def guarded_nap(key: str) -> str:
    async with wf.timeout(1800):
        await wf.sleep(3600)
    return "done"


@pytest.mark.parametrize("kind", ["sleep_started", "timeout_started"])
async def test_an_until_of_null_from_an_older_wf_is_no_deadline(engine: Engine, kind: str) -> None:
    """Before ``wf.sleep`` and ``wf.timeout`` refused infinity, ``wf.sleep(inf)`` and
    ``wf.timeout(inf)`` recorded ``"until": null`` (JSON has no infinity). Such a run is no
    damage: its sleep or timeout has no deadline (it ends only by a wake or a cancel, as
    infinity meant). ``verify`` names nothing, its detail shows no deadline, its driver
    replays it and leaves it suspended, and a wake ends its sleep."""
    run = await wf.start(nap if kind == "sleep_started" else guarded_nap, "inf")
    await asyncio.wait_for(engine.drivers[run.id], 10)
    assert (await engine.store.get_run(run.id)).status is RunStatus.SUSPENDED
    path = journal_path(engine, run.id)
    events = [json.loads(line) for line in path.read_text().rstrip("\0").splitlines()]
    [at] = [i for i, e in enumerate(events) if e["type"] == kind]
    events[at]["until"] = None
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    record_path = path.parent / "run.json"
    if record_path.exists() and kind == "sleep_started":
        data = json.loads(record_path.read_text())
        for waiting in data.get("waiting_for") or []:
            waiting["until"] = None
        data["wake_at"] = None
        record_path.write_text(json.dumps(data))
    assert [line for line in await engine.store.verify() if run.id in line] == []
    detail = await wf.admin.run_detail(engine.store, run.id)
    assert detail.damaged == []
    if kind == "sleep_started":
        [sleep] = [row for row in detail.steps if row.kind == "sleep"]
        assert sleep.until is None
    record = await drive(engine, run.id)
    assert record is not None and record.status is RunStatus.SUSPENDED, record
    await engine.store.post(run.id, "wake", {})
    record = await drive(engine, run.id)
    assert record is not None and record.status is RunStatus.COMPLETED, record
    assert await wf.get_run(run.id).result(timeout=10) == (
        [0, 10, 20] if kind == "sleep_started" else "done"
    )
