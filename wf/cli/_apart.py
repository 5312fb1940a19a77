"""Driving a run apart: ``wf serve`` drives a run whose last driver died in a process of its own.

A run whose step ends its process (``os._exit``, a segfault in an extension, the out-of-memory
killer) would take the API down with it each time the server drives it: the server would die,
restart, recover the run and die again until ``max_recoveries``. So the server sets
``Engine.drive_apart`` (``wf.engine._alone``): a run whose last driver died is driven by a
child process (``python -m wf.cli._apart RUN_ID ...``) that runs in the server's directory with
its environment (so its configuration, store and deployment), drives that run once (to its end
or its next suspension) and exits. Its log lines go where the server's go. Its death is the
run's as any driver's is (counted from the journal), and the server goes on; it tries the run
again after a pause that grows with each death in a row, until the run ends or fails with
``wf.RunStalled``. Runs that never killed a driver are driven in the server's process.

One line says each such drive (the run, its workflow, the step its last driver died in, the
deaths in a row, the child's pid): the server's; the child does not say it again. A child
whose drive lost its lease or its store connection, or that could not reach its store at all,
exits with ``CUT`` (its one ``error:`` line says why): that drive did not die, and the server
takes it as a cut drive of its own (``wf.StoreUnavailable``: the run is driven again soon,
and the cut is no death of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from wf._exceptions import LeaseLost, StoreUnavailable

if TYPE_CHECKING:
    from wf.engine._engine import Engine

log = logging.getLogger("wf.serve")

PAUSE_FIRST = 1.0
"""Seconds the server waits after a child driving a run died, before the run is due here again;
doubled at each death of its children in a row, up to ``PAUSE_MOST``."""

PAUSE_MOST = 10.0

DRAIN_LOOK = 0.5
"""Seconds between two looks, while a child drives, at whether the server drains: then the
child is asked to drain too (SIGTERM), so its running step can finish within the grace."""

CUT = 75
"""The child's exit code when its drive lost its lease or its store connection (EX_TEMPFAIL)."""

ABANDON_WAIT = 2.0
"""Seconds a draining server whose grace is over waits for a child it asked to drain to end
by itself (it abandons its steps a moment after the server: ``DRAIN_LOOK``), before it kills
it; within the worker's ``CANCEL_GRACE``."""

KILL_WAIT = 5.0
"""Seconds a cancelled drive waits for its child to end after SIGKILL; in the child, seconds
it waits for drives that did not stop within the grace once cancelled."""


class DriveApart:
    """``Engine.drive_apart`` of ``wf serve``: drive one run in a child process, and wait."""

    def __init__(self, engine: Engine, *, log_format: str, grace: float) -> None:
        self.engine = engine
        self.log_format = log_format
        self.grace = grace
        self._deaths: dict[str, int] = {}
        """Children that died in a row, by run (a pause grows with them)."""

    def command(self, run_id: str) -> list[str]:
        """The child's command line."""
        return [
            sys.executable,
            "-m",
            "wf.cli._apart",
            run_id,
            self.log_format,
            repr(self.grace),
        ]

    async def __call__(self, run_id: str, said: Callable[[str], str]) -> None:
        """Drive ``run_id`` in a child process, until the child has ended; ``said`` makes the
        line that says so (``wf.engine._alone.recovered_line``). ``wf.StoreUnavailable`` if
        the child's drive was cut (``CUT``)."""
        child = await asyncio.create_subprocess_exec(
            *self.command(run_id), stdin=asyncio.subprocess.DEVNULL
        )
        log.warning("%s", said(f"in a process of its own, pid {child.pid}"))
        try:
            code = await self._wait(child)
        except BaseException:
            # The server stops and its grace is over: the child's steps are abandoned, as the
            # server's own would be. By the child, first: asked to drain up to ``DRAIN_LOOK``
            # after the server began to, its own grace ends a moment later, and its abandoned
            # drive then leaves the run due (suspended) as the server's drives do. Killed at
            # once, it would leave the run as a death does, and every restart of the server
            # while a child drives a long step would count one (to ``wf.RunStalled``).
            if self.engine.draining:
                with contextlib.suppress(BaseException):
                    async with asyncio.timeout(ABANDON_WAIT):
                        await child.wait()
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_WAIT):
                    await child.wait()
            raise
        if code == 0:
            self._deaths.pop(run_id, None)
        elif code == CUT:
            # Not a death: the child saw its drive end. A cut drive of this process, then: the
            # run is tried again soon, and the next drive does not count the cut (``DriveGate``).
            raise StoreUnavailable(
                f"run {run_id}: the process driving it ({child.pid}) lost its lease or its "
                "store connection"
            )
        elif self.engine.draining:
            log.info(
                "run %s: the process driving it (%d) stopped with the server", run_id, child.pid
            )
        else:
            deaths = self._deaths[run_id] = self._deaths.get(run_id, 0) + 1
            pause = min(PAUSE_MOST, PAUSE_FIRST * 2 ** (deaths - 1))
            ended = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            log.warning(
                "run %s: the process driving it (%d) %s; this server goes on, and tries the "
                "run again in %g s",
                run_id,
                child.pid,
                ended,
                pause,
            )
            await asyncio.sleep(pause)
        if len(self._deaths) > 10_000:
            self._deaths.clear()

    async def _wait(self, child: asyncio.subprocess.Process) -> int:
        """The child's exit code; asks it to drain as soon as the server drains."""
        ended = asyncio.ensure_future(child.wait())
        try:
            asked = False
            while True:
                done, _ = await asyncio.wait({ended}, timeout=None if asked else DRAIN_LOOK)
                if done:
                    return ended.result()
                if self.engine.draining and not asked:
                    asked = True
                    with contextlib.suppress(ProcessLookupError):
                        child.send_signal(signal.SIGTERM)
        finally:
            ended.cancel()


# -- the child ---------------------------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    """The child: drive the run named in ``argv`` (``RUN_ID LOG_FORMAT GRACE``), then exit 0;
    ``CUT`` (and one line) if the store was out of reach or the lease lost, the exit code of
    the error (and one line) if anything else failed."""
    from wf.cli._errors import report
    from wf.cli._logformat import logging_to_stderr

    run_id, log_format, grace = argv[0], argv[1], float(argv[2])
    # A drain asked for while this process starts is kept for the drive (``_drive``).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop_early)
    with logging_to_stderr(log_format):
        try:
            asyncio.run(_drive(run_id, grace))
        except _Cut as cut:
            report(cut.error)
            return CUT
        except (LeaseLost, StoreUnavailable) as error:
            # The store out of reach before or after the drive (opening it, closing the
            # engine): the run did not die here either. A misconfigured store (a plain
            # ``StoreError``) is no outage, and stays an error the server counts.
            report(error)
            return CUT
        except Exception as exc:
            return report(exc)
    return 0


class _Cut(Exception):
    """The child's drive ended with its lease or its store connection lost (``CUT``)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


_stopped_early = False


def _stop_early(signum: int, frame: object) -> None:
    global _stopped_early
    _stopped_early = True


async def _drive(run_id: str, grace: float) -> None:
    from wf.admin._engines import driving
    from wf.cli._worker import report_drive

    async with driving(report_drive) as engine:
        engine.said_elsewhere.add(run_id)  # the server said what drives it here
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if _stopped_early:
            return  # the server stops: the run stays due, undriven
        drive = engine.drive_soon(run_id)
        stopped = loop.create_task(stop.wait())
        await asyncio.wait({drive, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        # The run's drive ended, or the server drains: what still runs here (runs it started,
        # or it, when stopped) stops at its next durable operation and stays due.
        await engine.aclose(grace=grace, timeout=KILL_WAIT)
        if drive.done() and not drive.cancelled():
            try:
                drive.result()  # its error, if any, is this process's
            except (LeaseLost, StoreUnavailable) as error:
                raise _Cut(error) from error


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
