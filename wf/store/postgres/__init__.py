"""The PostgreSQL store: the same workflows, shared by any number of processes and machines.

    import wf
    from wf.store.postgres import PostgresStore

    wf.configure(store=PostgresStore("postgresql://user@db.example:5432/app"))

Needs the optional dependency group ``postgres`` (``pip install 'wf-durable[postgres]'``:
psycopg 3).
See ``docs/postgres.md`` for the tables, leases, queue, notifications and connection counts.
"""

from wf.store.postgres._schema import VERSION as SCHEMA_VERSION
from wf.store.postgres._store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]
