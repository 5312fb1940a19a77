"""The Redis store: the same workflows, shared by any number of processes on one Redis server.

    import wf
    from wf.store.redis import RedisStore

    wf.configure(store=RedisStore("redis://cache.example:6379/0", prefix="billing"))

Needs the optional dependency group ``redis`` (``pip install 'wf-durable[redis]'``: redis-py 5 or
later). See ``docs/redis.md`` for the keys, leases, the queue, notifications and durability.
"""

from wf.store.redis._store import VERSION as FORMAT_VERSION
from wf.store.redis._store import RedisStore

__all__ = ["FORMAT_VERSION", "RedisStore"]
