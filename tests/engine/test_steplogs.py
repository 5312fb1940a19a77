"""Step logs: output captured per step attempt, never mixed between steps, bounded."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import threading

import pytest

import wf
import wf.testing
from wf import Engine
from wf.store import LogEntry

both_started = threading.Barrier(2, timeout=10)


@wf.step
def sync_printer(tag: str) -> str:
    # Two of these run at once in two threads and interleave their prints on purpose.
    both_started.wait()
    for i in range(50):
        print(f"{tag} {i}")
    return tag


@wf.step
async def async_printer(tag: str) -> str:
    for i in range(50):
        print(f"{tag} {i}", end="")
        print(file=sys.stdout)
        if i % 5 == 0:
            await asyncio.sleep(0)  # let the other step write in between
    print(f"{tag} done", file=sys.stderr)
    return tag


@wf.workflow
async def concurrent() -> list[str]:
    return list(
        await asyncio.gather(
            sync_printer("s1"), sync_printer("s2"), async_printer("a1"), async_printer("a2")
        )
    )


def lines(entries: list[LogEntry], step: str, tag: str) -> list[str]:
    return [e["text"] for e in entries if e["step"] == step and e["text"].startswith(tag)]


async def test_concurrent_sync_and_async_steps_never_mix_their_output(wf_engine: Engine) -> None:
    run = await wf.start(concurrent)
    assert await run.result() == ["s1", "s2", "a1", "a2"]
    entries = await wf_engine.store.read_logs(run.id)
    by_op = {e["op"]: e["step"] for e in entries}
    assert by_op == {0: "sync_printer", 1: "sync_printer", 2: "async_printer", 3: "async_printer"}
    for op, tag in enumerate(("s1", "s2", "a1", "a2")):
        mine = [e["text"] for e in entries if e["op"] == op and e["stream"] == "stdout"]
        assert mine == [f"{tag} {i}" for i in range(50)], tag  # whole lines, in order, only mine
    # (Entries of different steps may be stored in either order: only each step's are ordered.)
    assert sorted((e["op"], e["text"]) for e in entries if e["stream"] == "stderr") == [
        (2, "a1 done"),
        (3, "a2 done"),
    ]
    assert all(e["attempt"] == 1 and e["resumes"] == 0 for e in entries)


shared: dict[str, int] = {}


@wf.step(max_retries=1, backoff=0.0)
def fails_once_loudly() -> str:
    shared["n"] = shared.get("n", 0) + 1
    print(f"attempt {shared['n']}")
    logging.getLogger("app.steps").error("about to %s", "fail" if shared["n"] == 1 else "pass")
    if shared["n"] == 1:
        raise ConnectionError("flaky")
    return "ok"


@wf.workflow
async def with_retry() -> str:
    return await fails_once_loudly()


async def test_each_attempt_has_its_own_output_and_log_records(wf_engine: Engine) -> None:
    shared.clear()
    run = await wf.start(with_retry)
    assert await run.result() == "ok"
    entries = await wf_engine.store.read_logs(run.id)
    assert [(e["attempt"], e["stream"], e["text"]) for e in entries] == [
        (1, "stdout", "attempt 1"),
        (1, "log", "about to fail"),
        (2, "stdout", "attempt 2"),
        (2, "log", "about to pass"),
    ]
    record = entries[1]
    assert record["level"] == "ERROR" and record["logger"] == "app.steps"


records: list[logging.LogRecord] = []


class Keep(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        records.append(record)


@wf.step
def logs_something() -> None:
    logging.getLogger("app.ids").warning("with ids")


@wf.workflow
async def logging_flow() -> None:
    await logs_something()


async def test_log_records_made_in_a_step_carry_its_ids(wf_engine: Engine) -> None:
    records.clear()
    handler = Keep()
    logger = logging.getLogger("app.ids")
    logger.addHandler(handler)
    try:
        run = await wf.start(logging_flow)
        await run.result()
    finally:
        logger.removeHandler(handler)
    (record,) = [r for r in records if r.getMessage() == "with ids"]
    assert (record.wf_run_id, record.wf_step, record.wf_attempt) == (run.id, "logs_something", 1)


@wf.step
def floods(size: int) -> int:
    for _ in range(size // 100):
        print("x" * 99)
    return size


@wf.workflow
async def flooding(size: int) -> int:
    return await floods(size)


async def test_output_beyond_the_bound_is_dropped_with_a_note() -> None:
    async with wf.testing.engine() as eng:
        eng.step_log_limit = 1000
        run = await wf.start(flooding, 5000)
        assert await run.result() == 5000
        entries = await eng.store.read_logs(run.id)
    kept = [e["text"] for e in entries if e["stream"] == "stdout"]
    assert sum(len(t) + 1 for t in kept) == 1000
    assert kept[:10] == ["x" * 99] * 10
    (note,) = [e["text"] for e in entries if e["stream"] == "wf"]
    assert "truncated" in note and "4000 more were dropped" in note


async def test_capture_off_stores_nothing_and_output_still_reaches_the_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with wf.testing.engine() as eng:
        eng.step_log_limit = 0
        run = await wf.start(flooding, 200)
        await run.result()
        assert await eng.store.read_logs(run.id) == []
    out = capsys.readouterr().out
    assert out.count("x" * 99) == 2


def test_output_outside_steps_is_not_captured_and_passes_through(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print("plain")
    assert capsys.readouterr().out == "plain\n"


def _helper(tag: str) -> None:
    print(f"{tag}: from a thread")
    logging.getLogger("app.threads").warning("%s: logged from a thread", tag)
    nested = threading.Thread(target=print, args=(f"{tag}: from a thread's thread",))
    nested.start()
    nested.join(timeout=10)


class Printer(threading.Thread):
    """A Thread subclass that overrides run(): captured too."""

    def run(self) -> None:
        print("subclass: from a thread")


@wf.step
def sync_with_threads() -> str:
    thread = threading.Thread(target=_helper, args=("sync",))
    thread.start()
    thread.join(timeout=10)
    printer = Printer()
    printer.start()
    printer.join(timeout=10)
    return wf.step_id()


@wf.step
async def async_with_thread() -> None:
    thread = threading.Thread(target=_helper, args=("async",))
    thread.start()
    await asyncio.to_thread(thread.join, 10)


@wf.workflow
async def threaded() -> str:
    await async_with_thread()
    return await sync_with_threads()


async def test_output_of_threads_a_step_starts_is_captured_with_the_step(
    wf_engine: Engine,
) -> None:
    run = await wf.start(threaded)
    assert await run.result() == f"{run.id}:1"
    entries = await wf_engine.store.read_logs(run.id)
    assert sorted((e["op"], e["step"], e["stream"], e["text"]) for e in entries) == [
        (0, "async_with_thread", "log", "async: logged from a thread"),
        (0, "async_with_thread", "stdout", "async: from a thread"),
        (0, "async_with_thread", "stdout", "async: from a thread's thread"),
        (1, "sync_with_threads", "log", "sync: logged from a thread"),
        (1, "sync_with_threads", "stdout", "subclass: from a thread"),
        (1, "sync_with_threads", "stdout", "sync: from a thread"),
        (1, "sync_with_threads", "stdout", "sync: from a thread's thread"),
    ]


def test_a_thread_started_outside_a_step_is_not_captured(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def main() -> list[LogEntry]:
        async with wf.testing.engine() as eng:
            run = await wf.start(threaded)  # installs capture (and its Thread.start wrapper)
            await run.result()
            before = await eng.store.read_logs(run.id)
            _helper("outside")  # prints in this thread, and starts one: neither captured
            return (await eng.store.read_logs(run.id))[len(before) :]

    assert asyncio.run(main()) == []
    assert "outside: from a thread's thread" in capsys.readouterr().out


pool_threads: list[threading.Thread] = []


@wf.step
def uses_a_pool() -> list[int]:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        pool_threads.extend(pool._threads)  # (to check below that they kept their own context)
        squares = list(pool.map(lambda i: i * i, range(4)))
        pool_threads.extend(pool._threads)
    return squares


@wf.workflow
async def pooled() -> list[int]:
    return await uses_a_pool()


async def test_pool_worker_threads_keep_a_context_of_their_own(wf_engine: Engine) -> None:
    pool_threads.clear()
    run = await wf.start(pooled)
    assert await run.result() == [0, 1, 4, 9]
    # A pool's worker outlives the step that started it and serves others: never the step's.
    assert pool_threads and all("run" not in vars(t) for t in pool_threads)


go_on = threading.Event()
left_behind: list[threading.Thread] = []


def _lingers() -> None:
    print("lingerer: while the step runs")
    go_on.wait(timeout=30)
    print("lingerer: after the step ended")
    logging.getLogger("app.threads").warning("lingerer: logged after the step ended")


@wf.step
def starts_a_lingerer() -> None:
    thread = threading.Thread(target=_lingers, daemon=True)
    thread.start()
    left_behind.append(thread)


@wf.workflow
async def lingering() -> None:
    await starts_a_lingerer()


async def test_a_thread_outliving_its_step_is_captured_only_while_the_step_runs(
    wf_engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    go_on.clear()
    left_behind.clear()
    run = await wf.start(lingering)
    await run.result()
    go_on.set()
    await asyncio.to_thread(left_behind[0].join, 10)
    entries = await wf_engine.store.read_logs(run.id)
    assert all("after the step ended" not in e["text"] for e in entries)
    assert "lingerer: after the step ended" in capsys.readouterr().out  # the terminal has it


class GoneReader(io.StringIO):
    """A stdout whose reader went away (``wf worker | head -c0``)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


@wf.step
def chatty(name: str) -> str:
    print("hello", name)
    print("again", name, flush=True)
    sys.stdout.flush()
    return name


@wf.workflow
async def greets(name: str) -> str:
    print("workflow code prints too")
    return await chatty(name)


async def test_a_stdout_whose_reader_went_away_never_fails_a_run(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", GoneReader())
    monkeypatch.setattr(sys, "stderr", err)
    first = await wf.start(greets, "a")
    second = await wf.start(greets, "b")
    assert await first.result() == "a"
    assert await second.result() == "b"
    texts = [e["text"] for e in await wf_engine.store.read_logs(first.id) if e["op"] == 0]
    assert texts == ["hello a", "again a"]  # the step's log has it all the same
    said = err.getvalue().splitlines()
    assert len(said) == 1 and "stdout failed (BrokenPipeError" in said[0]  # said once
    assert "no longer passed on" in said[0]


async def test_a_closed_stdout_never_fails_a_run(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stdout", closed)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    run = await wf.start(greets, "c")
    assert await run.result() == "c"


async def test_output_the_stream_cannot_encode_is_passed_on_escaped_and_stored(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lone surrogate is a valid wf value; stdout's strict UTF-8 cannot write it, and no store
    # takes it as it is: the outcome must not depend on the terminal's encoding.
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="utf-8", errors="strict"))
    run = await wf.start(greets, "\ud800")
    assert await run.result() == "\ud800"
    sys.stdout.flush()
    assert b"hello \\ud800\n" in raw.getvalue()
    texts = [e["text"] for e in await wf_engine.store.read_logs(run.id) if e["op"] == 0]
    assert texts == ["hello \\ud800", "again \\ud800"]


async def test_with_capture_off_a_gone_reader_never_fails_a_run(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    wf_engine.step_log_limit = 0
    monkeypatch.setattr(sys, "stdout", GoneReader())
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    run = await wf.start(greets, "d")
    assert await run.result() == "d"


@wf.step
async def says_once() -> str:
    print("the step's one line")
    logging.getLogger("wf.store").warning("wf's own line, logged inside a step")
    await asyncio.sleep(0)  # its output is being stored while it runs
    return "said"


@wf.workflow
async def saying() -> str:
    return await says_once()


async def test_a_store_that_cannot_take_step_output_is_told_so_once_not_without_end(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The store failing to take a step's output: one warning, which is wf's, not the step's
    output (it was captured in turn, failed to be stored, was warned of, captured... 10,000
    lines a second on a PostgreSQL outage)."""
    from wf.store.memory import _MemoryLease

    tries = [0]

    async def append_logs(self: _MemoryLease, entries: object) -> None:
        tries[0] += 1
        raise wf.StoreUnavailable("PostgreSQL failed to append logs: the test cut it")

    monkeypatch.setattr(_MemoryLease, "append_logs", append_logs)
    async with wf.testing.engine():
        with caplog.at_level(logging.WARNING, logger="wf"):
            run = await wf.start(saying)
            assert await run.result() == "said"
            for _ in range(200):  # let a writer that feeds itself spin, if there is one
                await asyncio.sleep(0)
    said = [r.getMessage() for r in caplog.records if "step output not stored" in r.getMessage()]
    assert tries[0] == 1 and len(said) == 1, (tries, said[:3])


async def test_wfs_own_log_lines_are_never_a_steps_output(wf_engine: Engine) -> None:
    run = await wf.start(saying)
    assert await run.result() == "said"
    entries = await wf_engine.store.read_logs(run.id)
    assert [e["text"] for e in entries] == ["the step's one line"]
