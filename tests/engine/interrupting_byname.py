"""A module that raises ``KeyboardInterrupt`` while it is imported (its own code, not a Ctrl-C)."""

from __future__ import annotations

raise KeyboardInterrupt("raised by the module")
