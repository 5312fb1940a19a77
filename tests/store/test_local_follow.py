"""Following a local journal (``read_journal(run_id, start)``) or a run's step logs
(``read_logs``): each read parses only what was appended since the last one, and never returns
what is not a complete line.

The conformance kit checks what a follower reads on every store; this checks what only a file
can get wrong: a line half written, a journal replaced by another file, damage after the place
the last read ended, and how much each read parses.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.store.helpers import acquire, created, write_journal_end
from wf import StoreCorrupted
from wf.store.local import LocalStore, _journal, _logs


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every piece of journal the store parses."""
    sizes: list[int] = []
    real = _journal._decode

    def spy(body: bytes, path: str) -> list[dict[str, object]]:
        sizes.append(len(body))
        return real(body, path)

    monkeypatch.setattr(_journal, "_decode", spy)
    return sizes


def journal_of(store: LocalStore, run_id: str) -> str:
    return os.path.join(store.run_location(run_id), "journal.jsonl")


async def test_each_read_parses_only_what_was_appended(tmp_path: Path, parsed: list[int]) -> None:
    store = LocalStore(tmp_path / ".workflows")
    run = await created(store)
    lease = await acquire(store, run.id)
    seen = await store.read_journal(run.id, 0)
    for n in range(300):
        await lease.append([{"type": "e", "n": n, "pad": "x" * 100}])
        parsed.clear()
        new = await store.read_journal(run.id, len(seen))
        assert [e["n"] for e in new] == [n]
        assert max(parsed) < 200  # the one new line, not the 30 KiB before it
        seen += new
    await lease.release()
    assert seen == await store.read_journal(run.id)


async def test_a_long_journal_is_parsed_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that parses more than ``OFF_LOOP_BYTES`` runs in a thread: a server's other
    requests go on meanwhile. What follows it, a few lines at a time, stays on the loop."""
    import threading

    from wf.store.local import _store

    monkeypatch.setattr(_store, "OFF_LOOP_BYTES", 8 << 10)
    store = LocalStore(tmp_path / ".workflows")
    run = await created(store)
    lease = await acquire(store, run.id)
    await lease.append([{"type": "e", "n": n, "pad": "x" * 100} for n in range(200)])  # 24 KiB
    threads: list[bool] = []
    real = _journal._decode

    def spy(body: bytes, path: str) -> list[dict[str, object]]:
        threads.append(threading.current_thread() is threading.main_thread())
        return real(body, path)

    monkeypatch.setattr(_journal, "_decode", spy)
    whole = await store.read_journal(run.id)
    assert threads == [False] and [e["n"] for e in whole[-200:]] == list(range(200))
    await lease.append([{"type": "e", "n": 200}])
    threads.clear()
    assert [e["n"] for e in await store.read_journal(run.id, len(whole))] == [200]
    assert threads == [True]  # one line: parsed where it was asked for
    await lease.release()


async def test_a_line_half_written_is_left_for_the_next_read(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / ".workflows")
    run = await created(store)
    seen = await store.read_journal(run.id, 0)
    write_journal_end(journal_of(store, run.id), b'{"type":"e","n":1}\n{"type":"e","n"')
    assert [e["n"] for e in await store.read_journal(run.id, len(seen))] == [1]
    write_journal_end(journal_of(store, run.id), b":2}\n")  # the rest of the line arrives
    assert [e["n"] for e in await store.read_journal(run.id, len(seen) + 1)] == [2]


async def test_a_journal_replaced_by_another_file_is_read_whole(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / ".workflows")
    run = await created(store)
    seen = await store.read_journal(run.id, 0)
    path = journal_of(store, run.id)
    with open(path, "rb") as file:
        first = file.read().rstrip(b"\0")
    # Another file in its place (a run unpacked, a restore from a backup): same first line,
    # different lines after it, fewer bytes than the place the last read ended at.
    os.unlink(path)
    with open(path, "wb") as file:
        file.write(first + b'{"type":"e","n":7}\n')
    assert [e.get("n") for e in await store.read_journal(run.id, len(seen))] == [7]


async def test_damage_after_the_last_read_is_named_by_its_line_in_the_file(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path / ".workflows")
    run = await created(store)
    lease = await acquire(store, run.id)
    await lease.append([{"type": "e", "n": 1}, {"type": "e", "n": 2}])
    await lease.release()
    seen = await store.read_journal(run.id, 0)
    write_journal_end(journal_of(store, run.id), b"{not json\n" + b'{"type":"e","n":3}\n')
    with pytest.raises(StoreCorrupted, match=r"journal\.jsonl: line 4 is not valid JSON"):
        await store.read_journal(run.id, len(seen))


async def test_following_step_logs_parses_only_what_was_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines: list[int] = []
    real = _logs.log_entries

    def spy(found: list[bytes]) -> list[object]:
        lines.append(len(found))
        return real(found)

    monkeypatch.setattr(_logs, "log_entries", spy)
    store = LocalStore(tmp_path / ".workflows")
    run = await created(store)
    lease = await acquire(store, run.id)
    assert await store.read_logs(run.id, 0) == []  # no logs file yet
    seen: list[dict[str, object]] = []
    for n in range(200):
        entry = {"ts": 1.0, "op": 1, "attempt": 1, "stream": "stdout", "text": f"line {n}"}
        await lease.append_logs([entry])
        lines.clear()
        new = await store.read_logs(run.id, len(seen))
        assert [e["text"] for e in new] == [f"line {n}"]
        assert lines == [1]  # the new line, not the ones before it
        seen += new
    await lease.release()
    assert seen == await store.read_logs(run.id)
