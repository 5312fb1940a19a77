"""``settle_heap``: the collector of a process the ``wf`` command owns, once start-up is over."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from wf.cli._heap import YOUNG_THRESHOLD, settle_heap


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    """Each test changes this process's collector: put it back as it was."""
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_start_ups_garbage_is_freed_and_what_survives_is_frozen() -> None:
    gc.set_threshold(700, 10, 10)
    garbage = Cycle()
    dropped = weakref.ref(garbage)
    kept = Cycle()
    del garbage
    assert settle_heap()
    assert dropped() is None  # collected first, not frozen with the rest
    assert gc.get_freeze_count() > 0
    assert not any(obj is kept for obj in gc.get_objects())  # frozen: out of the collector's sight
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)


def test_a_threshold_the_process_chose_is_left_alone() -> None:
    gc.set_threshold(5000, 20, 30)
    assert settle_heap()
    assert gc.get_threshold() == (5000, 20, 30)
    assert gc.get_freeze_count() > 0


def test_a_disabled_collector_stays_as_it_is() -> None:
    gc.set_threshold(700, 10, 10)
    gc.disable()
    assert not settle_heap()
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == (700, 10, 10)
