"""``wf._interrupts.StopSignals``'s look after each step attempt: its handlers are put back if
a step replaced them, and the look itself is cheap when nothing changed."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from wf._interrupts import StopSignals
from wf.engine import _signals


async def test_the_look_after_a_step_asks_no_enum_lookup_and_puts_handlers_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After each step attempt (twice per attempt in a worker: SIGTERM and SIGINT) the
    handlers are compared as set: ``signal.getsignal`` looks each up as a ``Handlers``
    member, an enum lookup that fails for a Python handler (about 5 µs). A handler a step
    replaced is still put back, and said once."""
    said: list[str] = []
    looked: list[Any] = []
    getsignal = signal.getsignal

    def noting(sig: Any) -> Any:
        looked.append(sig)
        return getsignal(sig)

    with StopSignals(lambda sig: None, say=said.append) as stops:
        monkeypatch.setattr(signal, "getsignal", noting)
        _signals.step_ended("plain")
        assert looked == [] and said == []
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a library's own, on first use
        _signals.step_ended("grabber")
        _signals.step_ended("grabber")
        monkeypatch.undo()
        assert signal.getsignal(signal.SIGTERM) is stops
        assert len(said) == 1 and "step 'grabber' replaced wf's SIGTERM handler" in said[0]
