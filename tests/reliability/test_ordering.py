"""Power-cut ordering: the order of the system calls that make the local store crash-safe.

A power cut keeps what was fsynced and may lose or reorder everything else, so correctness rests
on *order*: data made durable before the name that publishes it, the name made durable before
anyone is told, a journal line made durable before the step counts as complete. These tests
record the real system calls (``os.open/write/fsync/fdatasync/rename/link``, and ``syncfs``)
made by the store and the engine, and check that order; docs/reliability.md reviews it.

A *sync covering a path* is ``fsync``/``fdatasync`` of that file, or a ``syncfs`` (which flushes
the whole file system); a name (rename, link, create) is covered by an ``fsync`` of its
directory, or a ``syncfs``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import wf
from wf import Engine
from wf.engine._current import use_engine
from wf.store import Lease, RunRecord
from wf.store._ids import new_run_id
from wf.store.local import LocalStore, _atomic, _fsops, _pressure
from wf.store.local._layout import NOW, index_name

SYNCS = ("fsync", "fdatasync", "syncfs")


@dataclasses.dataclass
class Call:
    op: str
    path: str
    to: str = ""
    data: bytes = b""


class Recorder:
    """Records the file system calls made under ``root``, plus markers placed by the test."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.calls: list[Call] = []
        self.fds: dict[int, str] = {}

    def mark(self, name: str) -> int:
        self.calls.append(Call("mark", name))
        return len(self.calls) - 1

    def _add(self, call: Call) -> None:
        if call.op == "syncfs" or call.path.startswith(self.root) or call.to.startswith(self.root):
            self.calls.append(call)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = {
            n: getattr(os, n)
            for n in ("open", "write", "pwrite", "fsync", "fdatasync", "rename", "link")
        }

        def open_(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
            fd = int(real["open"](path, flags, mode, **kw))
            self.fds[fd] = os.fspath(path)
            self._add(Call("open", os.fspath(path)))
            return fd

        def write(fd: int, data: Any) -> int:
            count = int(real["write"](fd, data))
            self._add(Call("write", self.fds.get(fd, ""), data=bytes(data[:count])))
            return count

        def pwrite(fd: int, data: Any, offset: int) -> int:  # journal appends: into the slack
            count = int(real["pwrite"](fd, data, offset))
            self._add(Call("write", self.fds.get(fd, ""), data=bytes(data[:count])))
            return count

        def syncer(name: str) -> Callable[[int], None]:
            def sync(fd: int) -> None:
                real[name](fd)
                self._add(Call(name, self.fds.get(fd, "")))

            return sync

        def rename(src: Any, dst: Any, **kw: Any) -> None:
            real["rename"](src, dst, **kw)
            self._add(Call("rename", os.fspath(src), os.fspath(dst)))

        def link(src: Any, dst: Any, **kw: Any) -> None:
            real["link"](src, dst, **kw)
            self._add(Call("link", os.fspath(src), os.fspath(dst)))

        monkeypatch.setattr(os, "open", open_)
        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "fsync", syncer("fsync"))
        monkeypatch.setattr(os, "fdatasync", syncer("fdatasync"))
        monkeypatch.setattr(os, "rename", rename)
        monkeypatch.setattr(os, "link", link)
        if _fsops._syncfs is not None:
            real_syncfs = _fsops._syncfs

            def syncfs(fd: int) -> int:
                result = real_syncfs(fd)
                self._add(Call("syncfs", self.fds.get(fd, "")))
                return result

            monkeypatch.setattr(_fsops, "_syncfs", syncfs)

    # -- questions ---------------------------------------------------------------------------

    def index(self, predicate: Callable[[Call], bool], start: int = 0) -> int:
        for i in range(start, len(self.calls)):
            if predicate(self.calls[i]):
                return i
        raise AssertionError(f"no such call after #{start}:\n{self.dump()}")

    def last(self, predicate: Callable[[Call], bool], end: int | None = None) -> int:
        stop = len(self.calls) if end is None else end
        for i in reversed(range(stop)):
            if predicate(self.calls[i]):
                return i
        raise AssertionError(f"no such call before #{stop}:\n{self.dump()}")

    def synced(self, path: str, after: int, before: int) -> bool:
        """A sync covering ``path`` (a file, or a directory for its names) in (after, before)."""
        return any(
            c.op == "syncfs" or (c.op in SYNCS and c.path == path)
            for c in self.calls[after + 1 : before]
        )

    def dump(self) -> str:
        return "\n".join(
            f"#{i} {c.op} {c.path} {('-> ' + c.to) if c.to else ''} {c.data[:40]!r}"
            for i, c in enumerate(self.calls)
        )


@pytest.fixture
def rec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    recorder = Recorder(tmp_path)
    recorder.install(monkeypatch)
    yield recorder


def test_atomic_replace(rec: Recorder, tmp_path: Path) -> None:
    """Data fsync before rename, directory fsync after it."""
    directory = str(tmp_path)
    target = os.path.join(directory, "file.json")
    _atomic.replace(directory, "file.json", b'{"v": 1}')
    renamed = rec.index(lambda c: c.op == "rename" and c.to == target)
    temp = rec.calls[renamed].path
    written = rec.last(lambda c: c.op == "write" and c.path == temp, renamed)
    assert rec.synced(temp, written, renamed), rec.dump()  # data durable before its name
    assert not any(c.op == "write" and c.path == temp for c in rec.calls[renamed:])
    assert rec.synced(directory, renamed, len(rec.calls)), rec.dump()  # the name, after
    assert Path(target).read_bytes() == b'{"v": 1}'


def test_atomic_publish(rec: Recorder, tmp_path: Path) -> None:
    """The exclusive variant (hook tokens): data fsync before link, directory fsync after."""
    directory = str(tmp_path)
    target = os.path.join(directory, "token.json")
    assert _atomic.publish(directory, "token.json", b"{}")
    linked = rec.index(lambda c: c.op == "link" and c.to == target)
    temp = rec.calls[linked].path
    written = rec.last(lambda c: c.op == "write" and c.path == temp, linked)
    assert rec.synced(temp, written, linked), rec.dump()
    assert rec.synced(directory, linked, len(rec.calls)), rec.dump()
    assert not _atomic.publish(directory, "token.json", b"{}")  # taken: exactly one winner


async def test_run_creation_is_durable_before_it_returns(rec: Recorder, tmp_path: Path) -> None:
    """A run appears by renaming its staged directory into ``runs/``. Every byte and name the
    creation wrote (staged files, queue and index entries, the rename) is covered by a sync
    before ``create_run`` returns; with syncfs that is one flush, shared with other appends,
    after the rename (a directory published without its data is not a run: see the test
    below), without it each file before the rename and ``runs/`` after it."""
    store = LocalStore(tmp_path / ".workflows")
    await store.create_run(RunRecord(id=new_run_id(), workflow="warm-up"))  # creates the store
    rec.calls.clear()
    record = RunRecord(id=new_run_id(), workflow="ordering")
    assert await store.create_run(record, [{"type": "run_started", "ts": 1.0}])
    done = rec.mark("returned")
    target = store.run_dir(record.id)
    published = rec.index(lambda c: c.op == "rename" and c.to == target)
    staging = rec.calls[published].path
    # Queue and index entries are names: hard links to a shared empty file, or empty files.
    written = [i for i, c in enumerate(rec.calls[:published]) if c.op in ("write", "open", "link")]
    names = [rec.calls[i].to or rec.calls[i].path for i in written]
    assert any(name.startswith(staging) for name in names)
    assert any("/queue/" in name for name in names)
    assert any("/index/" in name for name in names)
    for i, name in zip(written, names, strict=True):
        call = rec.calls[i]
        if _fsops.HAVE_SYNCFS:
            assert rec.synced(name, i, done), f"#{i}\n{rec.dump()}"
        elif call.op == "write":
            assert rec.synced(call.path, i, published), f"#{i}\n{rec.dump()}"
    assert rec.synced(store.runs, published, done), rec.dump()
    await store.close()


async def leased_runs(store: LocalStore, count: int) -> tuple[list[RunRecord], list[Lease]]:
    """``count`` new runs of ``store``, and a lease on each."""
    records = [RunRecord(id=new_run_id(), workflow="ordering") for _ in range(count)]
    leases = []
    for record in records:
        await store.create_run(record)
        lease = await store.try_acquire(record.id)
        assert lease is not None
        leases.append(lease)
    return records, leases


async def append_marked(rec: Recorder, lease: Lease, op: int) -> int:
    """Append a completion of operation ``op``; the index of the mark placed once it returned."""
    await lease.append([{"type": "step_completed", "ts": 2.0, "op": op}])
    return rec.mark(f"returned {op}")


def busy_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another program writes to the disk: a syncfs would wait for its data (``_pressure``)."""
    monkeypatch.setattr(_pressure, "whole_flush_ok", lambda items: False)


async def test_run_creation_on_a_busy_disk_syncs_file_by_file(
    rec: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a syncfs would wait for another program's data, creation's flush fsyncs what it
    owes one by one instead: each file it staged (under the run's own name once published) and
    the creation number's file, and the directory of each name it made (the queue and index
    entries, the rename into ``runs/``), all before ``create_run`` returns, and no syncfs.
    (The workflow's name file beside its index is a cache, written without a flush.)"""
    store = LocalStore(tmp_path / ".workflows")
    await store.create_run(RunRecord(id=new_run_id(), workflow="warm-up"))  # creates the store
    busy_disk(monkeypatch)
    rec.calls.clear()
    record = RunRecord(id=new_run_id(), workflow="ordering")
    assert await store.create_run(record, [{"type": "run_started", "ts": 1.0}])
    done = rec.mark("returned")
    assert not [c for c in rec.calls if c.op == "syncfs"], rec.dump()
    target = store.run_dir(record.id)
    published = rec.index(lambda c: c.op == "rename" and c.to == target)
    staging = rec.calls[published].path

    def now_at(path: str) -> str:
        return target + path[len(staging) :] if path.startswith(staging) else path

    owed_writes = (staging + os.sep, os.path.join(store.root, "sequence"))
    made = [
        (i, c)
        for i, c in enumerate(rec.calls[:published])
        if c.op == "link" or (c.op == "write" and c.path.startswith(owed_writes))
    ] + [(published, rec.calls[published])]
    assert any(c.op == "write" and c.path.startswith(staging) for _, c in made)
    assert any("/queue/" in c.to for _, c in made)
    assert any("/index/" in c.to for _, c in made)
    for i, call in made:
        if call.op == "write":
            assert rec.synced(now_at(call.path), i, done), f"#{i}\n{rec.dump()}"
        else:  # a name: its directory
            directory = os.path.dirname(now_at(call.to))
            assert rec.synced(directory, i, done), f"#{i} {directory}\n{rec.dump()}"
    assert rec.synced(store.runs, published, done), rec.dump()
    assert (await store.get_run(record.id)).workflow == "ordering"
    await store.close()


async def test_appends_of_several_runs_on_a_busy_disk_fdatasync_each(
    rec: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush of several journals is one syncfs on a quiet disk, and an fdatasync of each
    while another program's writes would make that syncfs wait for them."""
    store = LocalStore(tmp_path / ".workflows")
    records, leases = await leased_runs(store, 3)
    busy_disk(monkeypatch)
    rec.calls.clear()
    marks = await asyncio.gather(*(append_marked(rec, leases[n], n) for n in range(3)))
    assert not [c for c in rec.calls if c.op == "syncfs"], rec.dump()
    for n, done in enumerate(marks):
        journal = os.path.join(store.run_dir(records[n].id), "journal.jsonl")
        written = rec.last(lambda c, path=journal: c.op == "write" and c.path == path, done)
        synced = [c for c in rec.calls[written:done] if c.op == "fdatasync" and c.path == journal]
        assert synced, f"append {n}\n{rec.dump()}"
    for lease in leases:
        await lease.release()
    await store.close()


async def test_a_published_run_without_its_data_is_a_leftover(tmp_path: Path) -> None:
    """What a power cut before creation's flush can leave: the run's directory with empty
    files (names reach the disk before data). It is no run: readers skip it, and creating
    the same id again (a child run's id is deterministic) replaces it."""
    store = LocalStore(tmp_path / ".workflows")
    await store.create_run(RunRecord(id=new_run_id(), workflow="warm-up"))
    record = RunRecord(id=new_run_id(), workflow="cut short")
    leftover = Path(store.run_dir(record.id))
    leftover.mkdir()
    for name in ("run.json", "journal.jsonl", "lock"):
        (leftover / name).write_bytes(b"")
    store.queue.add(NOW, record.id)
    seq = 999  # the number its creation took, before the cut
    store.index.add(seq, index_name(seq, record.id, record.status, record.workflow, None))
    with pytest.raises(wf.RunNotFound):
        await store.get_run(record.id)
    assert record.id not in [r.id for r in await store.list_runs()]
    assert record.id not in await store.due_runs(now=2e9)
    assert await store.create_run(record, [{"type": "run_started", "ts": 1.0}])
    assert (await store.get_run(record.id)).workflow == "cut short"
    assert [e["type"] for e in await store.read_journal(record.id)] == ["run_started"]
    await store.close()


async def test_append_is_durable_before_it_returns(rec: Recorder, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / ".workflows")
    records, leases = await leased_runs(store, 3)
    rec.calls.clear()
    # One alone, then three at once (group commit: one flush may cover them all).
    marks = [
        await append_marked(rec, leases[0], 0),
        *await asyncio.gather(*(append_marked(rec, leases[n], n) for n in range(3))),
    ]
    for n, done in zip([0, 0, 1, 2], marks, strict=True):
        journal = os.path.join(store.run_dir(records[n].id), "journal.jsonl")
        line = f'"op":{n}'.encode()
        written = rec.last(
            lambda c, path=journal, line=line: (
                c.op == "write" and c.path == path and line in c.data
            ),
            done,
        )
        assert rec.synced(journal, written, done), f"append {n} #{done}\n{rec.dump()}"
    for lease in leases:
        await lease.release()
    await store.close()


@wf.step
async def first() -> int:
    return 1


MARKS: list[Callable[[str], int]] = []


@wf.step
async def second() -> int:
    MARKS[0]("second step runs")
    return 2


@wf.workflow(name="ordering:two")
async def two() -> int:
    return await first() + await second()


async def _run_two(rec: Recorder, tmp_path: Path) -> tuple[LocalStore, str, int]:
    """Run ``two`` to its result on a fresh local store, recording; the store, the run's id and
    the index of the "result returned" mark."""
    store = LocalStore(tmp_path / ".workflows")
    MARKS[:] = [rec.mark]
    with use_engine(Engine(store)):
        run = await wf.start(two)
        assert await run.result() == 3
        return store, run.id, rec.mark("result returned")


async def test_a_step_counts_only_once_its_completion_is_durable(
    rec: Recorder, tmp_path: Path
) -> None:
    """The next step runs only after the previous step's completion line is synced (the
    workflow may see the result before: nothing leaves the run until then); the record and the
    index entry (caches of the journal, replaced without fsync) say "completed" only after the
    outcome's line is synced."""
    store, run_id, done = await _run_two(rec, tmp_path)
    journal = os.path.join(store.run_dir(run_id), "journal.jsonl")
    record_file = os.path.join(store.run_dir(run_id), "run.json")
    second_runs = rec.index(lambda c: c.op == "mark" and c.path == "second step runs")
    completed = rec.last(
        lambda c: c.op == "write" and c.path == journal and b'"step_completed"' in c.data,
        second_runs,
    )
    assert b'"op":0' in rec.calls[completed].data
    assert rec.synced(journal, completed, second_runs), rec.dump()

    outcome = rec.index(
        lambda c: c.op == "write" and c.path == journal and b'"run_completed"' in c.data
    )
    outcome_synced = next(
        i for i in range(outcome + 1, done) if rec.synced(journal, outcome, i + 1)
    )
    assert outcome_synced < done, rec.dump()
    # The record's file is written only if the journal's ends cannot stand for it (here they
    # can, so there is none); the index entry is what says "completed" outside the journal.
    indexed = rec.last(lambda c: c.op == "rename" and "+completed+" in c.to, done)
    assert outcome_synced < indexed, "the index said completed before the journal did"
    assert all(
        i > outcome_synced
        for i, c in enumerate(rec.calls)
        if c.op == "rename" and c.to == record_file
    )
    await store.close()


async def test_a_runs_last_step_shares_the_outcomes_flush(rec: Recorder, tmp_path: Path) -> None:
    """Nothing leaves the run between its last step and its outcome, so the last completion is
    not flushed on its own: the outcome's flush makes both durable, before the result returns."""
    store, run_id, done = await _run_two(rec, tmp_path)
    journal = os.path.join(store.run_dir(run_id), "journal.jsonl")
    last = rec.index(
        lambda c: (
            c.op == "write"
            and c.path == journal
            and b'"op":1' in c.data
            and b'"step_completed"' in c.data
        )
    )
    outcome = rec.index(
        lambda c: c.op == "write" and c.path == journal and b'"run_completed"' in c.data, last
    )
    assert not rec.synced(journal, last, outcome), rec.dump()
    assert rec.synced(journal, outcome, done), rec.dump()
    await store.close()


@wf.workflow(name="ordering:echo")
async def echo(x: int) -> int:
    return x


@wf.workflow(name="ordering:leaves")
async def leaves(how: str, other: str) -> int:
    x = await first()
    if how == "child":
        await wf.start(echo, x, detach=True)
    elif how == "hook":
        await wf.create_hook(int, token=f"ordering-{other}-{x}").get_conflict()
    else:
        await wf.get_run(other).cancel()
    return x


@pytest.mark.parametrize("how", ["child", "hook", "cancel"])
async def test_what_leaves_the_run_waits_for_the_results_it_may_come_from(
    how: str, rec: Recorder, tmp_path: Path
) -> None:
    """A step's completion need not be durable before the workflow goes on, but it is before
    anything the workflow does next can be seen outside the run: a child's creation, a hook
    token's registration, a cancel sent to another run (all may carry the step's result)."""
    store = LocalStore(tmp_path / ".workflows")
    with use_engine(Engine(store)):
        other = await wf.start(echo, 0, detach=True)
        run = await wf.start(leaves, how, other.id)
        assert await run.result() == 1
        journal = os.path.join(store.run_dir(run.id), "journal.jsonl")
        inbox = os.path.join(store.run_dir(other.id), "inbox")
    outside = {
        "child": lambda c: c.op == "open" and f"{run.id}.1" in c.path,
        "hook": lambda c: os.sep + "hooks" + os.sep in c.path + c.to,
        "cancel": lambda c: c.path.startswith(inbox) or c.to.startswith(inbox),
    }[how]
    completed = rec.index(
        lambda c: c.op == "write" and c.path == journal and b'"step_completed"' in c.data
    )
    seen = rec.index(outside, completed)
    assert rec.synced(journal, completed, seen), rec.dump()
    await store.close()


async def test_a_message_is_durable_before_the_run_is_made_due(
    rec: Recorder, tmp_path: Path
) -> None:
    """``post`` (hook payloads, cancel, wake): the message is durably in the inbox before the
    queue entry that makes the run due, so a worker that sees the entry finds the message."""
    store = LocalStore(tmp_path / ".workflows")
    record = RunRecord(id=new_run_id(), workflow="ordering")
    await store.create_run(record)
    rec.calls.clear()
    await store.post(record.id, "wake", {})
    inbox = os.path.join(store.run_dir(record.id), "inbox")
    queue = os.path.join(store.root, "queue")
    placed = rec.index(lambda c: c.op == "rename" and c.to.startswith(inbox + os.sep))
    temp = rec.calls[placed].path
    written = rec.last(lambda c: c.op == "write" and c.path == temp, placed)
    assert rec.synced(temp, written, placed), rec.dump()
    due = rec.index(lambda c: c.op in ("open", "rename") and (c.to or c.path).startswith(queue))
    assert placed < due and rec.synced(inbox, placed, due), rec.dump()
    await store.close()


@pytest.mark.parametrize("disk", ["quiet", "busy"])
async def test_concurrent_posts_share_flushes_without_reordering(
    disk: str, rec: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Posts in flight together share their flushes (a server's burst of wakes): still, for
    every one of them, its message's bytes are synced before its name is made, and its name
    before its run's due entry exists, so a power cut at any point never leaves a run due
    without its message, nor a message's name without its bytes. On a quiet disk a shared
    flush is a syncfs; on a busy one, an fsync of each path the batch owes."""
    monkeypatch.setattr(_pressure, "whole_flush_ok", lambda items: disk == "quiet")
    store = LocalStore(tmp_path / ".workflows")
    records = [RunRecord(id=new_run_id(), workflow="ordering") for _ in range(12)]
    for record in records:
        await store.create_run(record)
    rec.calls.clear()
    await asyncio.gather(*(store.post(r.id, "wake", {}) for r in records))
    queue = os.path.join(store.root, "queue")
    for record in records:
        inbox = os.path.join(store.run_dir(record.id), "inbox")
        placed = rec.index(lambda c, inbox=inbox: c.op == "rename" and c.to.startswith(inbox))
        temp = rec.calls[placed].path
        written = rec.last(lambda c, temp=temp: c.op == "write" and c.path == temp, placed)
        assert rec.synced(temp, written, placed), rec.dump()
        due = rec.index(
            lambda c, run_id=record.id: (
                c.op in ("open", "rename")
                and (c.to or c.path).startswith(queue)
                and run_id in (c.to or c.path)
            )
        )
        assert placed < due and rec.synced(inbox, placed, due), rec.dump()
        assert rec.synced(queue, due, len(rec.calls)), rec.dump()
    if _fsops.HAVE_SYNCFS:  # one by one, there were four a post (with the inbox's making)
        syncs = sum(c.op in SYNCS for c in rec.calls)
        # Quiet: a few syncfs. Busy: each file and inbox once, queue/ once a batch.
        assert syncs <= (6 if disk == "quiet" else 12 * 3 + 3), rec.dump()
    await store.close()
