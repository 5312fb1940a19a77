"""``wf.configure``: the layer above the kernel that turns the project's configuration into the
process-wide engine.

The kernel (``wf.engine``) never reads configuration nor builds a concrete store; it asks
``wf.engine._current`` for the current engine, and this module, imported by the ``wf``
package itself, installs how a default engine and a remote client are built.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, overload

from wf.engine import _current

if TYPE_CHECKING:
    import datetime as dt

    from wf._remote import RemoteClient
    from wf.engine._clock import Clock
    from wf.engine._engine import Engine
    from wf.engine._instruments import Instrument
    from wf.store import Store


@overload
def configure(
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    suspend_after: float | None = None,
    dir: str | os.PathLike[str] | None = None,
    postgres_dsn: str | None = None,
    redis_url: str | None = None,
    concurrency: int | None = None,
    retention: float | dt.timedelta | str | None = None,
    url: None = None,
    token: str | None = None,
    instruments: Sequence[Instrument] = (),
) -> Engine: ...


@overload
def configure(*, url: str, token: str | None = None, timeout: float | None = None) -> None: ...


def configure(
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    suspend_after: float | None = None,
    dir: str | os.PathLike[str] | None = None,
    postgres_dsn: str | None = None,
    redis_url: str | None = None,
    concurrency: int | None = None,
    retention: float | dt.timedelta | str | None = None,
    url: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
    instruments: Sequence[Instrument] = (),
) -> Engine | None:
    """Set the process-wide engine: its store, clock and options.

    Without ``store`` the store is the one the configuration names: ``[tool.wf]`` in the
    project's pyproject.toml, overridden by ``WF_*`` variables, overridden by the settings given
    here (``dir``: the local store's directory; ``postgres_dsn``: use PostgreSQL instead;
    ``redis_url``: use Redis instead).
    ``concurrency``: the store-wide cap, runs driven at once by all processes on the store
    (default: the configuration's ``concurrency``, else none).

    ``retention`` (seconds, a ``timedelta`` or text like ``"30d"``) is the store-wide retention
    of finished runs (else ``WF_RETENTION`` / ``[tool.wf] retention``).

    ``url`` (and ``token``) instead points ``wf.start``, ``wf.get_run`` and ``wf.resume_hook``
    at a ``wf serve`` over HTTP (``pip install 'wf-durable[serve]'``); then no store is opened
    here and this returns None. ``timeout``: the seconds each of its requests waits for the
    server's answer (above 0; default: ``WF_TIMEOUT``, else 60).
    """
    if url is not None:
        from wf._remote import configure_remote

        configure_remote(url, token, timeout)
        return None
    if timeout is not None:
        from wf._exceptions import UsageError

        raise UsageError("wf.configure(timeout=...) is the remote client's: give url=... with it")
    from wf._config import (
        default_store,
        deployment_setting,
        max_recoveries_setting,
        retention_setting,
        set_overrides,
        step_threads_setting,
        store_wide_concurrency,
    )
    from wf._exceptions import UsageError
    from wf.engine._durations import parse_retention

    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise UsageError(f"concurrency must be an integer >= 1, not {concurrency!r}")
    # Checked before anything is set: a refused setting leaves the configuration as it was.
    _check_store(store)
    seconds_kept = None if retention is None else parse_retention(retention, what="retention")
    if dir is not None or postgres_dsn is not None or redis_url is not None:
        set_overrides(
            dir=None if dir is None else os.fspath(dir),
            postgres_dsn=postgres_dsn,
            redis_url=redis_url,
        )
    if concurrency is not None:
        set_overrides(concurrency=concurrency)
    else:
        concurrency = store_wide_concurrency()
    if seconds_kept is not None:
        set_overrides(retention=seconds_kept)
    if store is None:
        store = default_store()
    from wf.engine._engine import Engine  # the kernel's top, imported on first use

    engine = Engine(
        store,
        clock,
        suspend_after=suspend_after,
        concurrency=concurrency,
        instruments=instruments,
        retention=retention_setting(),
        max_recoveries=max_recoveries_setting(),
        deployment=deployment_setting(),
        step_threads=step_threads_setting(),
    )
    _current.set_process_engine(engine)
    return engine


def _check_store(store: object) -> None:
    """``UsageError`` now for a ``store=`` that is not a store (a DSN or URL string, usually),
    instead of an ``AttributeError`` from inside the engine at the first ``wf.start``."""
    from wf.store import Store

    if store is None or isinstance(store, Store):
        return
    from wf._exceptions import UsageError
    from wf.store._limits import with_article

    kind = with_article(type(store).__name__)
    if isinstance(store, str | os.PathLike):
        raise UsageError(
            f"wf.configure(store=...) takes a wf.store.Store, not {kind}: pass "
            "postgres_dsn='postgresql://...' or redis_url='redis://...' for a server store, "
            "dir=... for the local store's directory"
        )
    raise UsageError(f"wf.configure(store=...) takes a wf.store.Store, not {kind}")


def remote() -> RemoteClient | None:
    """The server this program talks to (``configure(url=...)``, else ``WF_URL``), or None.
    ``wf._remote`` (and its imports) is loaded only once a server is named, and nothing here
    loads the engine: a command that only reads the store here asks this first."""
    loaded = sys.modules.get("wf._remote")
    if (loaded is None or loaded._configured is None) and not os.environ.get("WF_URL"):
        return None
    from wf._remote import remote_client

    return remote_client()


def default_engine() -> Engine:
    """An engine on the configured store (``default_store()``) with the system clock, the
    store-wide cap and the configured retention."""
    from wf._config import (
        default_store,
        deployment_setting,
        max_recoveries_setting,
        retention_setting,
        step_threads_setting,
        store_wide_concurrency,
    )
    from wf.engine._engine import Engine

    return Engine(
        default_store(),
        concurrency=store_wide_concurrency(),
        retention=retention_setting(),
        max_recoveries=max_recoveries_setting(),
        deployment=deployment_setting(),
        step_threads=step_threads_setting(),
    )


_current.install_factories(engine=default_engine)
