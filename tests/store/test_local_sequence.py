"""A damaged creation sequence (``sequence``) is rebuilt, never trusted and never a reason to
refuse every creation of the store: the next number comes after every number in use (index,
children, queue and lane entries, the creation log) and after those taken but not written yet
(``_sequence.REBUILD_GAP``), and the damaged file is kept aside (``sequence.damaged``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.store.helpers import acquire, created
from wf.store import RunStatus
from wf.store._base import lane_of
from wf.store.local import LocalStore, _sequence

DAMAGE = [b"garbage", b"\x00" * 21, b"", b"12ab\n"]


@pytest.mark.parametrize("damage", DAMAGE, ids=["garbage", "zeros", "empty", "partly"])
async def test_a_damaged_sequence_is_rebuilt_past_every_number_in_use(
    local: LocalStore, root: Path, damage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """A creation that finds the sequence damaged rebuilds it and goes on (it raised
    ``StoreCorrupted``: ``wf run`` exit 3, and no schedule, child or worker could create a
    run). Its number is past every one in use: a run's, a lane entry's (a retry takes a new
    number), and one another process took but has not written anywhere yet."""
    first = await created(local, group="g")
    lane = lane_of(first)
    assert lane is not None
    local.lanes.join(lane, first.id, local.sequence.take, attempt=2)  # a retry's new place
    other = LocalStore(root)
    in_flight = other.sequence.take()  # taken, its run not written yet
    (root / "sequence").write_bytes(damage)
    with caplog.at_level(logging.WARNING, logger="wf.store.local"):
        run = await created(local)
    assert run.seq > in_flight > first.seq
    assert (await created(local)).seq == run.seq + 1
    assert (root / "sequence.damaged").read_bytes() == damage
    [warning] = [r.getMessage() for r in caplog.records if "sequence" in r.getMessage()]
    assert "rebuilt past the highest creation number in use" in warning
    assert "sequence.damaged" in warning
    await other.close()


async def test_an_empty_sequence_of_a_store_without_runs_starts_at_one(local: LocalStore) -> None:
    """An empty file (a creation killed between making it and writing it) in a store that
    holds no run is not damage: nothing can be given twice."""
    await local.wait_for_activity(0.0)  # the store made, no run in it
    Path(local.sequence.path).write_bytes(b"")
    assert (await created(local)).seq == 1
    assert not Path(local.sequence.path + ".damaged").exists()


async def test_verify_rebuilds_a_damaged_sequence_and_says_so(
    local: LocalStore, root: Path
) -> None:
    """``verify`` names the damage and repairs it as a creation would (it said "no run can be
    created" and left it), naming where the damaged file is kept; the next verify is clean."""
    runs = [await created(local) for _ in range(3)]
    (root / "sequence").write_bytes(b"garbage")
    [problem] = await local.verify()
    assert "not a sequence number" in problem and problem.endswith(": repaired")
    assert "sequence.damaged" in problem
    assert await local.verify() == []
    assert int((root / "sequence").read_bytes()) > runs[-1].seq + _sequence.REBUILD_GAP - 1
    assert (await created(local)).seq > runs[-1].seq


async def test_the_numbers_of_deleted_runs_are_not_given_again(
    local: LocalStore, root: Path
) -> None:
    """The newest runs may be deleted (their tombstones keep their numbers, which a listing
    paged before them goes by): a rebuilt sequence goes past those too."""
    old = await created(local)
    newest = [await created(local) for _ in range(3)]
    for run in newest:
        lease = await acquire(local, run.id)
        run.status = RunStatus.COMPLETED
        await lease.save(run)
        await lease.release()
    deleted = await local.delete_runs([r.id for r in newest], now=9.0, reason="gc")
    assert sorted(deleted.ids) == sorted(r.id for r in newest)
    (root / "sequence").write_bytes(b"garbage")
    run = await created(local)
    assert run.seq == newest[-1].seq + _sequence.REBUILD_GAP + 1  # the tombstones' highest
    assert old.seq < newest[-1].seq


async def test_verify_repairing_while_the_same_store_creates_never_gives_a_number_twice(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``verify`` runs in a worker thread and repairs with the store's own descriptor, while
    the loop's creations take numbers from it: an ``flock`` on one open file never blocks
    itself, so both saw the damage and both rebuilt; the creation handed out H+1,000,001,
    the repair then wrote H+1,000,000 and the next creation got H+1,000,001 again."""
    import threading

    await created(local)
    (root / "sequence").write_bytes(b"garbage")
    scanning, go_on = threading.Event(), threading.Event()
    scan = local.sequence._highest_in_use
    calls = 0

    def slow_scan() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:  # the repair's: the creation comes meanwhile
            scanning.set()
            go_on.wait(10)
        return scan()

    monkeypatch.setattr(local.sequence, "_highest_in_use", slow_scan)
    repairing = threading.Thread(target=local.sequence.repair)
    repairing.start()
    assert scanning.wait(10)
    taken: list[int] = []
    taking = threading.Thread(target=lambda: taken.append(local.sequence.take()))
    taking.start()
    taking.join(0.2)  # the fixed take waits for the repair; the unfixed one is done by now
    go_on.set()
    repairing.join(10)
    taking.join(10)
    assert taken[0] < local.sequence.take()
    assert int((root / "sequence").read_bytes()) >= taken[0] + 1


async def test_the_rebuild_scan_is_made_off_the_loop_and_holds_up_no_other_taker(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The numbers in use are read in a worker thread before the lock is taken: on a store
    of a million runs the scan held up the event loop for seconds (10.7 s cold), and every
    other process's creation waited for it in ``flock``."""
    import threading

    first = await created(local)
    (root / "sequence").write_bytes(b"garbage")
    other = LocalStore(root)
    scan = _sequence.CreationSequence._highest_in_use
    threads: list[bool] = []
    others: list[int] = []

    def watched(sequence: _sequence.CreationSequence) -> int:
        threads.append(threading.current_thread() is threading.main_thread())
        if sequence is local.sequence and not others:
            taking = threading.Thread(target=lambda: others.append(other.sequence.take()))
            taking.start()
            taking.join(5.0)  # held up by the scan's lock, it would not be done
        return scan(sequence)

    monkeypatch.setattr(_sequence.CreationSequence, "_highest_in_use", watched)
    run = await created(local)
    assert threads[0] is False  # the creation's scan: in a worker thread
    assert others == [first.seq + _sequence.REBUILD_GAP + 1]  # not held up by it
    assert run.seq == others[0] + 1
    await other.close()
