"""``TestEngine``: an engine on a fake clock whose runs a test can crash and settle on demand."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Iterator
from typing import Any, cast

from wf.engine import _current
from wf.engine._engine import Engine
from wf.engine._run import Run
from wf.engine._worker import Worker
from wf.store import Lease, RunRecord, Store
from wf.store.memory import MemoryStore
from wf.testing._busy import busy_store
from wf.testing._clock import MockClock


class _Abandoned(BaseException):
    """Raised inside a crashed driver at its next store write: the write never happens, as if
    the process had died (a ``BaseException`` so workflow code cannot catch it)."""


class _FencedLease:
    """A run's lease that a crash can fence: every write after the crash raises ``_Abandoned``.

    It forwards everything to the real lease, so it keeps up with whatever a store's lease
    offers, and fences all of it but the reads: a write method a store adds is fenced too.
    """

    _READS = frozenset({"run_id", "read_run", "read_inbox", "on_lost"})
    """What a dead process could not do either, but which never changes the store."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self.fenced = False

    def _check(self) -> None:
        if self.fenced:
            raise _Abandoned(self._lease.run_id)

    async def release(self) -> None:
        if not self.fenced:
            await self._lease.release()

    async def os_release(self) -> None:
        """What the OS does for a killed process: drop the lock, write nothing more."""
        await self._lease.release()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._lease, name)
        if name in self._READS or not callable(found):
            return found
        if inspect.iscoroutinefunction(found):

            @functools.wraps(found)
            async def fenced_call(*args: Any, **kwargs: Any) -> Any:
                self._check()
                return await found(*args, **kwargs)

            return fenced_call

        @functools.wraps(found)
        def fenced(*args: Any, **kwargs: Any) -> Any:
            self._check()
            return found(*args, **kwargs)

        return fenced


class _CrashableStore:
    """The store as the engine sees it: leases come fenced, all else goes straight through."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.leases: dict[str, _FencedLease] = {}

    async def try_acquire(self, run_id: str) -> Lease | None:
        lease = await self._store.try_acquire(run_id)
        return None if lease is None else self._fence(lease)

    async def claim(self, *args: Any, **kwargs: Any) -> list[Lease]:
        """The worker's way to leases (``Worker``): fenced like ``try_acquire``'s."""
        return [self._fence(lease) for lease in await self._store.claim(*args, **kwargs)]

    def _fence(self, lease: Lease) -> Lease:
        fenced = _FencedLease(lease)
        self.leases[lease.run_id] = fenced
        return cast(Lease, fenced)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class TestEngine(Engine):
    """An engine for tests: a store (default: a fresh ``MemoryStore``) on a ``MockClock``.

    Use it as an async context manager; inside the block it is the current engine, so
    ``wf.start`` and ``wf.get_run`` use it::

        async with wf.testing.TestEngine() as eng:
            run = await wf.start(order, 3)
            await eng.crash(run)           # as a SIGKILL of the driving process would leave it
            await eng.settle()             # deliver everything due, as a worker would
            assert await run.result() == "shipped"

    Any store works (``LocalStore(tmp_path)`` exercises the real files); the fake clock makes
    week-long sleeps instant.
    """

    __test__ = False  # not a test class, whatever pytest's name rules think

    def __init__(
        self,
        store: Store | None = None,
        clock: MockClock | None = None,
        *,
        suspend_after: float = 30.0,
        deployment: str | None = None,
    ) -> None:
        clock = clock or MockClock()
        self._real_store = store or MemoryStore()
        # The clock stands still while the store works, as it does while a sync step runs.
        self._crashable = _CrashableStore(busy_store(self._real_store, clock))
        super().__init__(
            cast(Store, self._crashable), clock, suspend_after=suspend_after, deployment=deployment
        )
        self._token: Any = None

    @property
    def mock_clock(self) -> MockClock:
        """The fake clock (``jump(seconds)`` moves time on)."""
        return cast(MockClock, self.clock)

    @property
    def real_store(self) -> Store:
        """The store itself, without the fencing the engine sees."""
        return self._real_store

    @contextlib.contextmanager
    def installed(self) -> Iterator[TestEngine]:
        """Make this engine current within the block: for the context and process-wide (an
        event loop started later may run code in a context copied before the block)."""
        previous = _current.set_process_engine(self)
        try:
            with _current.use_engine(self):
                yield self
        finally:
            _current.set_process_engine(previous)

    async def __aenter__(self) -> TestEngine:
        self._token = _current._engine_var.set(self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.aclose()
        finally:
            if self._token is not None:
                _current._engine_var.reset(self._token)
                self._token = None

    async def crash(self, run: Run[Any] | str) -> None:
        """Abandon the run's driver as a SIGKILL would: from now on it writes nothing (not even
        from ``finally`` blocks), its lease is released as the OS releases a dead process's
        locks, and the run is left as the crash left it, for the next driver to recover.

        A sync step already running in a thread runs on, as a thread of a killed process would
        not; whatever it returns is dropped.
        """
        run_id = run if isinstance(run, str) else run.id
        lease = self._crashable.leases.get(run_id)
        if lease is not None:
            lease.fenced = True
        task = self.drivers.get(run_id)
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if lease is not None:
            await lease.os_release()
        self.live.pop(run_id, None)

    async def quiet(self) -> bool:
        """Wait until the runs driven here go no further without time passing or outside news
        (``MockClock.quiet``). ``wf.resume_hook`` waits so on an unknown token: a run just
        started has not reached its ``create_hook`` yet."""
        await self.mock_clock.quiet()
        return True

    async def wait_driven(self, run: Run[Any] | str, *, timeout: float = 60.0) -> RunRecord | None:
        """Wait until this process's drive of the run ends (the run ended, suspended, or was
        left due for another driver); its record then, or None if nothing drives it here.
        ``TimeoutError`` after ``timeout`` seconds of real time."""
        run_id = run if isinstance(run, str) else run.id
        task = self.drivers.get(run_id)
        if task is None:
            return None
        async with asyncio.timeout(timeout):
            return await asyncio.shield(task)

    async def settle(self, *, timeout: float = 60.0) -> None:
        """Deliver everything due, as ``wf worker --until-idle`` does, until nothing is due and
        nothing can become due but by outside action (a hook payload, a cancel). Timers jump
        on the fake clock. ``TimeoutError`` after ``timeout`` seconds of real time."""
        worker = Worker(self, concurrency=1_000)
        async with asyncio.timeout(timeout):
            await worker.run(until_idle=True)
