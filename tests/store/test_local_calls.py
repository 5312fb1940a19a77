"""The system calls a local store's hot paths make on a run's files: what each look is for, and
that none is made twice for one answer (a claim's lease, a read of a finished run). Counted by
stand-ins of the ``os`` functions, each noting the path it looked at."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import wf
from tests.store.helpers import created
from wf import RunNotFound
from wf.engine._current import use_engine
from wf.engine._engine import Engine
from wf.store import RunStatus
from wf.store.local import LocalStore, _fsops, _store


class Noted:
    """Stand-ins for ``os.open``, ``os.fstat``, ``os.stat``, ``os.lstat`` and ``os.readlink``:
    each notes (call, path) in ``calls``, a descriptor's path being the one it was opened on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self._paths: dict[int, str] = {}
        self._monkeypatch = monkeypatch
        real = {name: getattr(os, name) for name in ("open", "fstat", "stat", "lstat", "readlink")}

        def open_(path: Any, *args: Any, **kwargs: Any) -> int:
            fd: int = real["open"](path, *args, **kwargs)
            self._paths[fd] = str(path)
            self.calls["open", str(path)] += 1
            return fd

        def fstat(fd: int) -> Any:
            self.calls["fstat", self._paths.get(fd, "?")] += 1
            return real["fstat"](fd)

        def looking(name: str) -> Any:
            def look(path: Any, *args: Any, **kwargs: Any) -> Any:
                self.calls[name, str(path)] += 1
                return real[name](path, *args, **kwargs)

            return look

        self._stand_ins = {
            "open": open_,
            "fstat": fstat,
            "stat": looking("stat"),
            "lstat": looking("lstat"),
            "readlink": looking("readlink"),
        }

    def __enter__(self) -> Noted:
        for name, stand_in in self._stand_ins.items():
            self._monkeypatch.setattr(os, name, stand_in)
        return self

    def __exit__(self, *exc: object) -> None:
        self._monkeypatch.undo()

    def on(self, path: str) -> Counter[str]:
        """The calls made on ``path``, by name."""
        return Counter({call: n for (call, p), n in self.calls.items() if p == path})


async def claimed_elsewhere(root: Path, monkeypatch: pytest.MonkeyPatch, run_id: str) -> Noted:
    """The calls a claim of ``run_id`` made in another store instance (a worker that created
    none of the runs), its lease given back."""
    other = LocalStore(root)
    try:
        with Noted(monkeypatch) as noted:
            leases = await other.claim(time.time() + 1, 1)
        assert [lease.run_id for lease in leases] == [run_id]
        for lease in leases:
            await lease.release()
    finally:
        await other.close()
    return noted


async def test_a_claimed_run_s_journal_is_looked_at_once_under_its_lock(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim (by a worker that did not create the run) opens the run's journal, locks it
    and takes its ``fstat`` once: the length that ``fstat`` gave, with the lock held, is the
    one the repair of the journal's end starts from (only the lock's holder appends)."""
    run = await created(local)
    journal = os.path.join(local.run_dir(run.id), "journal.jsonl")
    noted = await claimed_elsewhere(root, monkeypatch, run.id)
    assert noted.on(journal)["fstat"] == 1


async def test_a_claimed_run_s_index_entry_is_looked_at_once(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's lease of a run another process created looks at the run's index entries
    once: its entry, found under the status the journal gives, says the run has not ended, so
    no entry under an ended status is looked for (a journal that lost its outcome is still
    found: its entry is then under an ended status, ``test_local_verify``)."""
    run = await created(local)
    noted = await claimed_elsewhere(root, monkeypatch, run.id)
    index = os.path.join(root, "index") + os.sep
    looks = [(call, path) for (call, path), n in noted.calls.items() for _ in range(n)]
    leaf = local.index.leaf(run.seq)
    assert [path for _call, path in looks if path.startswith(index)] == [
        os.path.join(leaf, name) for name in os.listdir(leaf)
    ]


async def test_a_save_that_keeps_the_run_due_now_makes_no_queue_entry(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claimed run saved as running keeps its due-now entry, which its lease made sure of:
    the save links no queue entry (it tried one, refused as there already)."""
    run = await created(local)
    other = LocalStore(root)  # another worker: it created none of the runs
    try:
        [lease] = await other.claim(time.time() + 1, 1)
        links: list[str] = []
        real = os.link

        def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            links.append(str(dst))
            real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "link", link)
        run.status = RunStatus.RUNNING
        await lease.save(run)
        monkeypatch.undo()
        queue = os.path.join(root, "queue") + os.sep
        assert [path for path in links if path.startswith(queue)] == []
        assert run.id in await other.due_runs(time.time() + 1)
        await lease.release()
    finally:
        await other.close()


async def test_a_read_of_a_run_looks_at_its_journal_once(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``get_run`` of a run without ``run.json`` (most runs: the journal gives the record
    back) finds the run (one ``stat`` of its journal, the existence check), opens the
    journal and takes its ``fstat`` once to read its ends (a regular file, and how long),
    and takes no other look on the way: the read after the look is the check, and a run gone
    between the two is looked for again (``RunNotFound``)."""
    run = await created(local)
    run_dir = local.run_dir(run.id)
    if os.path.exists(os.path.join(run_dir, "run.json")):
        os.unlink(os.path.join(run_dir, "run.json"))  # as the engine's runs have none
    journal = os.path.join(run_dir, "journal.jsonl")
    with Noted(monkeypatch) as noted:
        assert (await local.get_run(run.id)).id == run.id
    # The fingerprint a later ``wait_for_run`` starts from takes how far it is written from
    # that read (its listing's look made before it), not from another read of its tail.
    assert noted.on(journal) == Counter({"stat": 1, "open": 1, "fstat": 1})


async def test_a_read_of_a_run_misses_no_append_made_after_it(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fingerprint ``get_run`` leaves for the next ``wait_for_run`` has the journal's
    written length as the read found it: an append made after the read (into the slack: the
    file's length stays) wakes that wait; one made between the look and the read, which the
    record has already, wakes it too (the journal's mtime), never the other way round."""
    run = await created(local)
    run_file = os.path.join(local.run_dir(run.id), "run.json")
    if os.path.exists(run_file):
        os.unlink(run_file)  # as the engine's runs have none: the read goes by the journal
    lease = await local.try_acquire(run.id)
    assert lease is not None
    try:
        await local.get_run(run.id)
        await lease.append([{"type": "step_completed", "ts": 2.0, "op": 1}])
        await asyncio.wait_for(local.wait_for_run(run.id, 30.0), 10.0)

        look = _store._look

        def appended_meanwhile(run_dir: str) -> list[tuple[str, int, int, int]]:
            seen = look(run_dir)
            lease.append_soon([{"type": "step_completed", "ts": 3.0, "op": 2}])
            return seen

        monkeypatch.setattr(_store, "_look", appended_meanwhile)
        await local.get_run(run.id)
        monkeypatch.undo()
        await asyncio.wait_for(local.wait_for_run(run.id, 30.0), 10.0)
    finally:
        await lease.release()


async def test_a_run_deleted_between_the_look_and_the_read_is_not_found(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read after ``_find``'s look takes no look of its own: a run deleted in between (by
    another process) fails the read, is looked for again, and is ``RunNotFound``, not
    damage."""
    run = await created(local)
    run_dir = local.run_dir(run.id)
    look = _store._look

    def deleted_meanwhile(found_dir: str) -> list[tuple[str, int, int, int]]:
        seen = look(found_dir)
        shutil.rmtree(found_dir)
        return seen

    monkeypatch.setattr(_store, "_look", deleted_meanwhile)
    with pytest.raises(RunNotFound):
        await local.get_run(run.id)
    assert not os.path.exists(run_dir)


async def test_a_read_of_a_run_never_posted_to_does_not_list_an_inbox(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fingerprint a read takes (for a later ``wait_for_run``) lists the run's inbox only
    when the run's directory has one: most runs are never posted to, and the failed open of
    a missing directory was one system call of every read. A post makes it, and a wait that
    started before sees it (the directory's listing changed)."""
    run = await created(local)
    inbox = os.path.join(local.run_dir(run.id), "inbox")
    listed: list[str] = []
    scandir = os.scandir

    def noting(path: Any) -> Any:
        listed.append(str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", noting)
    await local.get_run(run.id)
    assert inbox not in listed
    waiter = asyncio.ensure_future(local.wait_for_run(run.id, 10.0))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await local.post(run.id, "m1", {"hello": 1})
    await asyncio.wait_for(waiter, 5.0)
    await local.get_run(run.id)
    assert inbox in listed


async def test_a_claim_looks_the_running_loop_up_once_for_all_its_leases(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each lease writes through its loop's committer: a claim looks it up once for all the
    runs it leases (a lookup of the running loop asks the process id, a system call)."""
    runs = [await created(local) for _ in range(3)]
    other = LocalStore(root)  # another worker: it created none of the runs
    lookups = 0
    lookup = asyncio.get_running_loop

    def counted() -> asyncio.AbstractEventLoop:
        nonlocal lookups
        lookups += 1
        return lookup()

    try:
        monkeypatch.setattr(asyncio, "get_running_loop", counted)
        leases = await other.claim(time.time() + 1, 10)
        monkeypatch.undo()
        assert sorted(lease.run_id for lease in leases) == sorted(run.id for run in runs)
        assert lookups == 1
        for lease in leases:
            await lease.release()
    finally:
        await other.close()


async def test_a_creation_reads_the_sequence_once_and_takes_no_fstat_of_it(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The creation number's file is read once, under its lock (a damaged one is told of then
    and scanned for off the loop: ``test_local_sequence``). It holds exactly one number, which
    that read shows: writing the next needs no ``fstat`` to know nothing of the old is left
    after it."""
    reads: list[str] = []
    pread = _fsops.pread

    def noting(fd: int, size: int, offset: int, path: str) -> bytes:
        if os.path.basename(path) == "sequence":
            reads.append(path)
        return pread(fd, size, offset, path)

    with Noted(monkeypatch) as noted:
        await created(local)  # the sequence's descriptor opened (and checked: a file)
        noted.calls.clear()
        monkeypatch.setattr(_fsops, "pread", noting)
        run = await created(local)
    assert noted.on(str(root / "sequence"))["fstat"] == 0
    assert reads == [str(root / "sequence")]
    assert (root / "sequence").read_bytes() == f"{run.seq:020d}\n".encode()


@wf.workflow(name="tests:calls:one")
async def one() -> int:
    return 1


async def test_a_start_looks_for_no_run_under_the_id_it_made(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wf.start`` given no id makes one for this very creation (``MINTED_ID``): nobody's,
    so the creation takes no ``lstat`` of ``runs/<id>`` and no ``readlink`` of
    ``packed/<id>`` (the one ``lstat`` left is the lease's link check). An id given by the
    caller is looked for (a run, a leftover of a creation cut short, a packed run may stand
    under it), and a run under it is handed back."""
    with use_engine(Engine(local)):
        await (await wf.start(one)).result()  # the store's directories made
        with Noted(monkeypatch) as noted:
            made = await wf.start(one)
        assert await made.result() == 1
        assert noted.on(local.run_dir(made.id))["lstat"] == 1
        assert noted.on(str(root / "packed" / made.id))["readlink"] == 0
        with Noted(monkeypatch) as noted:
            given = await wf.start(one, run_id="given-1")
        assert noted.on(local.run_dir(given.id))["lstat"] == 2
        assert noted.on(str(root / "packed" / given.id))["readlink"] == 1
        assert await given.result() == 1
        again = await wf.start(one, run_id="given-1")
        assert again.id == given.id and await again.result() == 1


async def test_a_start_s_lease_looks_at_the_journal_once_under_its_lock(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease ``wf.start`` takes of the run it created (while the creation's flush runs,
    or right after) opens the journal, locks it and takes its ``fstat`` once: that one tells
    a regular file, and the one the path's ``stat`` is compared with. The creation made the
    journal (``O_EXCL``): it takes none."""
    with use_engine(Engine(local)):
        with Noted(monkeypatch) as noted:
            run = await wf.start(one)
        assert noted.on(os.path.join(local.run_dir(run.id), "journal.jsonl"))["fstat"] == 1
        assert await run.result() == 1


async def test_a_start_s_first_drive_asks_for_no_random_bytes(
    local: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drive's token (``secrets.token_hex``, a ``getrandom`` system call) goes in its
    markers only: the first drive of a run by its creator writes none, so makes none."""
    made: list[str] = []
    token_hex = secrets.token_hex

    def noted(nbytes: int) -> str:
        made.append(token := token_hex(nbytes))
        return token

    monkeypatch.setattr(secrets, "token_hex", noted)
    with use_engine(Engine(local)):
        run = await wf.start(one)
        assert await run.result() == 1
    assert made == []
    assert "drive" not in str(await local.read_journal(run.id))


async def _hearing(root: Path) -> LocalStore:
    """Another store instance (a worker that created none of the runs), its watcher up."""
    store = LocalStore(root)
    await store.wait_for_activity(0.01)  # the store open, its watcher up
    if not store.hub.hearing():
        await store.close()
        pytest.skip("no file-system events here")
    return store


async def test_a_claimed_run_never_posted_to_lists_no_inbox_at_its_drive_s_first_read(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's look at the run's directory (its link check, under the lock) says it has
    no subdirectory, hence no inbox, on a file system that counts them: the first read of
    the inbox lists nothing (the failed open of a missing directory was one system call of
    every claimed run). A post heard of since that look makes the read list it."""
    quiet, posted = await created(local), await created(local)
    other = await _hearing(root)
    subdirectories = sum(1 for entry in os.scandir(root) if entry.is_dir())
    if os.lstat(root).st_nlink != 2 + subdirectories:
        await other.close()
        pytest.skip("this file system does not count subdirectories in link counts")
    listed: list[str] = []
    real = os.listdir

    def listdir(path: Any) -> list[str]:
        listed.append(str(path))
        return real(path)

    try:
        leases = await other.claim(time.time() + 1, 2)
        assert sorted(lease.run_id for lease in leases) == sorted([quiet.id, posted.id])
        monkeypatch.setattr(os, "listdir", listdir)
        by_id = {lease.run_id: lease for lease in leases}
        assert await by_id[quiet.id].read_inbox(other) == []
        message = await local.post(posted.id, "m1", {"hello": 1})  # after the claim's look
        assert [m.id for m in await by_id[posted.id].read_inbox(other)] == [message]
        monkeypatch.undo()
        assert listed == [os.path.join(other.run_dir(posted.id), "inbox")]
        for lease in leases:
            await lease.release()
    finally:
        await other.close()
