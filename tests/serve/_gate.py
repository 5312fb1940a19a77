"""The gate ``tests.serve.slow_import`` waits for while it is imported."""

from __future__ import annotations

import threading

GATE = threading.Event()
TIMED_OUT: list[bool] = []
"""Whether each import gave up waiting (the gate was not opened in time)."""
