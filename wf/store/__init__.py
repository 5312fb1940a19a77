"""Persistence: the ``Store`` interface and its implementations.

``wf.store.memory.MemoryStore`` (tests), ``wf.store.local.LocalStore`` (the default: JSON files
under ``.workflows``), ``wf.store.postgres.PostgresStore`` (scale-out). Every store passes the
conformance kit in ``wf.store.conformance``.
"""

from wf.store._base import (
    Event,
    Hold,
    HookRecord,
    InboxMessage,
    Lease,
    LogEntry,
    QueueStats,
    RunRecord,
    RunStatus,
    Slot,
    Store,
)

__all__ = [
    "Event",
    "Hold",
    "HookRecord",
    "InboxMessage",
    "Lease",
    "LogEntry",
    "QueueStats",
    "RunRecord",
    "RunStatus",
    "Slot",
    "Store",
]
