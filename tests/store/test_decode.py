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
