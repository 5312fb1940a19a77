"""Persistence: the ``Store`` interface and its implementations.

``wf.store.memory.MemoryStore`` (tests), ``wf.store.local.LocalStore`` (the default: JSON files
under ``.workflows``), ``wf.store.postgres.PostgresStore`` (scale-out). Every store passes the
conformance kit in ``wf.store.conformance``.
"""

from wf.store._base import (
    DELIVERY_KEPT,
    Deleted,
    Event,
    Hold,
    HookRecord,
    InboxMessage,
    Lease,
    LogEntry,
    QueueStats,
    RunRecord,
    RunStatus,
    Schedule,
    ScheduleLock,
    Slot,
    Store,
    StoreStats,
    Tombstone,
    WebhookDelivery,
    lane_key,
    lane_of,
)
from wf.store._faults import Fault, Faults, collect_faults

__all__ = [
    "DELIVERY_KEPT",
    "Deleted",
    "Event",
    "Fault",
    "Faults",
    "Hold",
    "HookRecord",
    "InboxMessage",
    "Lease",
    "LogEntry",
    "QueueStats",
    "RunRecord",
    "RunStatus",
    "Schedule",
    "ScheduleLock",
    "Slot",
    "Store",
    "StoreStats",
    "Tombstone",
    "WebhookDelivery",
    "collect_faults",
    "lane_key",
    "lane_of",
]
