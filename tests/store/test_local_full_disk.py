"""``LocalStore`` on a full disk: deleting still frees room, packing packs what fits.

A full disk is made by failing writes with ``ENOSPC`` (``_fsops.inject``), or by a write that
puts part of its bytes down first, as the kernel does when the disk fills mid-write.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.store.test_local_packed import finished, pack_all
from wf import RunNotFound, StoreError
from wf.store.local import LocalStore, _fsops
from wf.store.local._layout import RESERVE_FILE
from wf.store.local._segments import Segments


def _fill_up_midway(match: str, times: int) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """A write (``os.write`` or ``os.pwrite``) to a file whose path holds ``match`` that puts
    half its bytes down and then meets a full disk, ``times`` times."""
    left = [times]

    def wrap(real: Callable[..., int]) -> Callable[..., int]:
        def write(fd: int, data: Any, *rest: Any) -> int:
            if left[0] and match in os.readlink(f"/proc/self/fd/{fd}") and len(data) > 1:
                left[0] -= 1
                real(fd, bytes(data[: len(data) // 2]), *rest)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd, data, *rest)

        return write

    return wrap


@pytest.fixture
def full_tombstones(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The disk fills up during the first tombstone write."""
    wrap = _fill_up_midway("/tombstones/", 1)
    monkeypatch.setattr(os, "write", wrap(os.write))
    monkeypatch.setattr(os, "pwrite", wrap(os.pwrite))
    yield


async def test_a_deletion_on_a_full_disk_gives_up_the_reserve_and_deletes(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = [await finished(local) for _ in range(3)]
    pack_all(local)  # a packing pass keeps the room a deletion may give up
    kept = [await finished(local) for _ in range(3)]  # directories
    reserve = root / "tombstones" / RESERVE_FILE
    assert reserve.stat().st_size > 0
    wrap = _fill_up_midway("/tombstones/", 1)
    monkeypatch.setattr(os, "write", wrap(os.write))
    monkeypatch.setattr(os, "pwrite", wrap(os.pwrite))
    ids = [r.id for r in runs + kept]
    done = await local.delete_runs(ids, now=9.0, reason="gc")
    assert sorted(done.ids) == sorted(ids)
    for run_id in ids:
        # Every tombstone reads: the half line the full disk left was cut away, not run into.
        assert (await local.get_tombstone(run_id)) is not None
        with pytest.raises(RunNotFound):
            await local.get_run(run_id)
    assert reserve.stat().st_size > 0  # made again once there was room
    assert await local.verify() == []
    assert (await local.store_info()).tombstones == len(ids)


async def test_the_first_deletion_of_a_new_store_on_a_full_disk_has_the_reserve_to_give_up(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that never deleted nor packed a run has the reserve from its creation: on a
    disk that is full until something is freed, giving the reserve up makes the room the
    first deletion's tombstones need."""
    runs = [await finished(local) for _ in range(3)]
    reserve = root / "tombstones" / RESERVE_FILE
    freed = [False]  # the disk is full until the reserve is given up
    real_unlink = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        real_unlink(path, *args, **kwargs)
        freed[0] = freed[0] or str(path).endswith(RESERVE_FILE)

    def full(real: Callable[..., int]) -> Callable[..., int]:
        def write(fd: int, data: Any, *rest: Any) -> int:
            if not freed[0] and "/tombstones/" in os.readlink(f"/proc/self/fd/{fd}"):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd, data, *rest)

        return write

    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(os, "write", full(os.write))
    monkeypatch.setattr(os, "pwrite", full(os.pwrite))
    done = await local.delete_runs([r.id for r in runs], now=9.0, reason="gc")
    assert freed[0] and sorted(done.ids) == sorted(r.id for r in runs)
    for run in runs:
        assert (await local.get_tombstone(run.id)) is not None
    assert reserve.stat().st_size > 0  # made again once there was room
    assert await local.verify() == []
    reserve.unlink()  # as a store made by an earlier wf, which made none at creation
    assert await local.verify() == []
    assert reserve.stat().st_size > 0


async def test_a_deletion_deletes_what_fits_then_the_rest_in_the_room_it_made(
    local: LocalStore,
) -> None:
    runs = [await finished(local) for _ in range(4)]
    # No reserve: the batch's write fails, the first run's own fits (in the room a file's
    # last block has left), the second's does not; the first run deleted makes room.
    with (
        _fsops.inject("write", errno.ENOSPC, match="tombstones", times=1),
        _fsops.inject("write", errno.ENOSPC, match="tombstones", after=1, times=1) as second,
    ):
        done = await local.delete_runs([r.id for r in runs], now=9.0, reason="gc")
    assert second.hits == 1
    assert sorted(done.ids) == sorted(r.id for r in runs)
    assert await local.verify() == []


async def test_a_deletion_that_cannot_write_one_tombstone_says_the_disk_is_full(
    local: LocalStore,
) -> None:
    run = await finished(local)
    with (
        _fsops.inject("write", errno.ENOSPC, match="tombstones"),
        pytest.raises(StoreError, match=r"^no space left on the device of .*not one fits"),
    ):
        await local.delete_runs([run.id], now=9.0, reason="gc")
    assert (await local.get_run(run.id)).output == 3
    assert await local.get_tombstone(run.id) is None
    assert await local.verify() == []


async def test_a_deletion_whose_counts_meet_a_full_disk_is_done_and_recounted(
    local: LocalStore, root: Path
) -> None:
    runs = [await finished(local) for _ in range(2)]
    await finished(local)
    with _fsops.inject("write", errno.ENOSPC, match="/counts/"):
        done = await local.delete_runs([r.id for r in runs], now=9.0, reason="gc")
    assert len(done.ids) == 2
    assert not (root / "counts" / "ready").exists()  # store info scans meanwhile
    info = await local.store_info()
    assert info.runs["completed"] == 1 and info.tombstones == 2
    await local.verify()
    assert (root / "counts" / "ready").exists()
    assert (await local.store_info()).runs["completed"] == 1


def _room_for(lines: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments take at most ``lines`` lines per append, as a nearly full disk would."""
    append = Segments.append

    def tight(self: Segments, batch: list[bytes]) -> Any:
        if len(batch) > lines:
            try:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError as error:
                raise StoreError("cannot write a segment: [ENOSPC]") from error
        return append(self, batch)

    monkeypatch.setattr(Segments, "append", tight)


async def test_packing_on_a_nearly_full_disk_packs_the_batches_that_fit(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = [await finished(local) for _ in range(5)]
    _room_for(2, monkeypatch)
    # Each pass halves a batch until it fits: of 5, 2; of 3, 1; of 2, 2.
    assert [pack_all(local) for _ in range(3)] == [2, 1, 2]
    for run in runs:
        assert not (root / "runs" / run.id).exists()
        assert (await local.get_run(run.id)).output == 3
    assert await local.verify() == []


async def test_packing_with_no_room_for_one_line_says_so_and_changes_nothing(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await finished(local)
    _room_for(0, monkeypatch)
    with pytest.raises(StoreError, match=r"^no space left on the device of .* to pack"):
        pack_all(local)
    assert (root / "runs" / run.id).is_dir()
    assert (await local.get_run(run.id)).output == 3


async def test_deleting_packed_runs_on_a_full_disk_loses_only_a_dead_count(
    local: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Their dead count cannot be written (nor their segment's live lines moved): the
    deletion is done, and verify counts the dead bytes again, for the next pass to reclaim."""
    monkeypatch.setattr("wf.store.local._segments.SEGMENT_LIMIT", 1)  # a segment per batch
    runs = [await finished(local) for _ in range(3)]
    pack_all(local)
    await finished(local)
    pack_all(local)
    segments = Segments(str(root))
    with _fsops.inject("write", errno.ENOSPC, match=".dead"):
        done = await local.delete_runs([r.id for r in runs[:2]], now=9.0, reason="gc")
    assert len(done.ids) == 2 and segments.dead(1) == 0
    assert await local.verify() == []
    assert segments.dead(1) > os.path.getsize(segments.path(1)) / 2
    with _fsops.inject("write", errno.ENOSPC, match="/segments/0") as move:
        pack_all(local)  # no room to move its last live run: left for a later pass
    assert move.hits == 1 and 1 in segments.numbers()
    pack_all(local)  # its last live run moved, the segment removed
    assert 1 not in segments.numbers()
    assert (await local.get_run(runs[2].id)).output == 3
