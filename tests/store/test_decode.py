"""Decoding a journal with the collector paused gives the collector back as it found it."""

from __future__ import annotations

import gc

import orjson
import pytest

from wf.store._decode import collector_paused, loads_each_paused, loads_paused


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_given_back_as_found(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        if not enabled:
            gc.disable()
        assert loads_paused(b'[{"type": "a"}]') == [{"type": "a"}]
        assert gc.isenabled() is enabled
        assert loads_each_paused([b'{"type": "a"}', b'{"type": "b"}']) == [
            {"type": "a"},
            {"type": "b"},
        ]
        assert gc.isenabled() is enabled
        with pytest.raises(orjson.JSONDecodeError):
            loads_paused(b"[{")
        assert gc.isenabled() is enabled
        with collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(KeyError), collector_paused():
            raise KeyError("x")
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()


def test_a_step_log_line_is_judged_by_its_own_fields_after_lines_of_the_same_keys() -> None:
    """Lines of a shape already taken are recognized by their shape (keys and the types of
    their values): one with the same keys and a field of another type is still skipped."""
    from wf.store._decode import log_entries

    good = {"ts": 1.0, "op": 0, "step": "s", "text": "x"}
    reordered = {"text": "y", "step": "s", "op": 1, "ts": 2}
    strays = [{**good, "op": True}, {**good, "step": 5}, {**good, "ts": "1"}, {**good, "op": 1.5}]
    lines = [orjson.dumps(line) for line in (good, *strays, good, reordered, *strays)]
    assert log_entries(lines) == [good, good, reordered]
