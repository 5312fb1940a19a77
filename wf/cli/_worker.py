"""``wf worker``: deliver all due work of the store until stopped.

A first SIGTERM or Ctrl-C drains: runs in flight stop at their next durable operation (a running
step finishes first) and stay due for the next worker. A second one exits at once, which is safe
too: the journal survives any crash.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import TYPE_CHECKING, Annotated, Any

import typer

from wf.cli._errors import EXIT_FAILED, EXIT_INTERRUPTED, guarded
from wf.cli._logformat import LogFormat, LogFormatOption, emit, logging_to_stderr, trace_id_of
from wf.cli._logformat import log as _wf_log
from wf.cli._stopping import GraceOption, ended_despite_threads, leave_if_stuck

if TYPE_CHECKING:
    from wf import RunRecord
    from wf._interrupts import StopSignals


def register(app: typer.Typer) -> None:
    """Add ``wf worker`` to the app."""
    app.command("worker")(worker_command)


@guarded
def worker_command(
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            "-c",
            min=1,
            metavar="N",
            help="At most this many runs at once (default: [tool.wf.worker] concurrency, 100).",
            show_default=False,
        ),
    ] = None,
    until_idle: Annotated[
        bool,
        typer.Option(
            "--until-idle",
            help="Exit once nothing is due or running and no timer is pending (tests, cron).",
        ),
    ] = False,
    leave_timers: Annotated[
        bool,
        typer.Option(
            "--leave-timers",
            help="With --until-idle: exit once nothing is due now, leaving timers to come "
            "(sleeps, delayed runs) to a later worker (a cron drain job).",
        ),
    ] = False,
    poll: Annotated[
        float | None,
        typer.Option(
            "--poll",
            min=0.01,
            metavar="SECONDS",
            help="Look at the queue at least this often (seconds; default 2).",
            show_default=False,
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Log only failures and errors.")
    ] = False,
    queue: Annotated[
        list[str] | None,
        typer.Option(
            "--queue",
            metavar="NAME",
            help="Serve only runs of this named queue (repeatable); default: every run.",
            show_default=False,
        ),
    ] = None,
    grace: GraceOption = 30.0,
    any_deployment: Annotated[
        bool,
        typer.Option(
            "--any-deployment",
            help="Drive runs pinned to any deployment, not only this one's ([tool.wf] "
            "deployment / WF_DEPLOYMENT) and unpinned runs.",
        ),
    ] = False,
    log_format: LogFormatOption = LogFormat.TEXT,
) -> None:
    """Deliver all due work (new, orphaned, woken runs) until stopped; SIGTERM drains."""
    import math

    from wf._config import setting
    from wf._exceptions import UsageError
    from wf._loader import ensure_project_on_path, load_module

    if leave_timers and not until_idle:
        raise UsageError("--leave-timers goes with --until-idle (a worker without it waits anyway)")
    if poll is not None and not math.isfinite(poll):  # Click's range lets nan and inf through
        raise UsageError(f"--poll must be a number of seconds, not {poll!r}")
    from wf.cli._store import say_local

    say_local("wf worker")  # a worker drives the runs of the store it opens, never a server's
    ensure_project_on_path()
    # Runner modules named by the configuration are imported first: a module that cannot be
    # imported is a usage error now, not a run failing later.
    for module in setting("modules"):
        load_module(module)
    from wf.admin._engines import run_contained

    with logging_to_stderr(log_format, quiet=quiet):
        # Threads a step started keep running after the loop closed: never wait for them
        # beyond the grace (the interpreter's exit would), however the loop ended.
        code = ended_despite_threads(
            lambda: run_contained(
                _work(
                    concurrency=(
                        concurrency if concurrency is not None else setting("worker.concurrency")
                    ),
                    until_idle=until_idle,
                    leave_timers=leave_timers,
                    poll=poll if poll is not None else setting("worker.poll"),
                    queues=queue,
                    grace=grace,
                    any_deployment=any_deployment,
                ),
                lambda line: _log(line, level=logging.ERROR),
            ),
            grace,
            lambda line: _log(line, level=logging.WARNING),
        )
    if code:
        raise typer.Exit(code)


def _log(message: str, *, level: int = logging.INFO, **fields: Any) -> None:
    # Through logging: --quiet is the WARNING level, --log-format the formatter.
    emit(message, level=level, **fields)


def _hidden_tokens(waiting_for: Any) -> Any:
    """``waiting_for`` with its hook tokens shortened (``short_token``)."""
    from wf._events import read_waiting
    from wf.admin._words import short_token

    found = read_waiting(waiting_for)
    if not found:
        return waiting_for
    return [
        {**w, "target": short_token(w["target"])}
        if w["kind"] == "hook" and w["target"] is not None
        else w
        for w in found
    ]


def report_drive(record: RunRecord, took: float) -> None:
    """Log one line for a drive of a run that ended (``took`` seconds): how the run stands,
    over its whole life, not only this drive (a run resumed after a sleep took days)."""
    status = record.status.value
    if not _wf_log.isEnabledFor(logging.WARNING if status == "failed" else logging.INFO):
        # ``--quiet``: the line would be dropped. Not built (its words, times and fields):
        # about a tenth of the CPU of a three-step run's end in a worker's drain.
        return
    from wf.admin._words import duration, error_text, iso_time, waiting_text

    head = f"{record.id} {record.workflow}"
    drives = record.resumes + 1
    whole = max(0.0, record.updated_at - record.created_at)
    tail = (
        f" (this drive {duration(took)})"
        if drives == 1
        else f" ({drives} drives; this one {duration(took)})"
    )
    fields: dict[str, Any] = {
        "run_id": record.id,
        "workflow": record.workflow,
        "status": status,
        "seconds": round(whole, 6),
        "drive_seconds": round(took, 6),
        "drives": drives,
        "trace_id": trace_id_of(record.trace),
    }
    if status == "failed":
        error = error_text(record.error)
        message = f"{head} failed after {duration(whole)}{tail}: {error}"
        _log(message, level=logging.WARNING, error=error, **fields)
    elif status == "suspended":
        # A log line, for shippers too (``--log-format json``): its moments in ISO 8601, UTC.
        waits = waiting_text(_hidden_tokens(record.waiting_for), at=iso_time) or "waiting"
        _log(f"{head} suspended: {waits}", **fields)
    elif drives == 1:
        _log(f"{head} {status} in {duration(whole)}", **fields)
    else:
        _log(f"{head} {status} in {duration(whole)}{tail}", **fields)


def report_abandoned(run_id: str, op: int, name: str, grace: float) -> None:
    """One line per step still running when the grace ran out (the worker's own is not said)."""
    _log(
        f"{run_id} step {name!r} (operation #{op}) abandoned after the {grace:g}s grace: it "
        "runs again when the run resumes",
        level=logging.WARNING,
        run_id=run_id,
        step=name,
    )


def report_timer(due: float, run_id: str | None) -> None:
    """Log the timer ``--until-idle`` waits for (``due``, epoch seconds; ``run_id``'s): a log
    line, for shippers too, so its moment is in ISO 8601, UTC."""
    from wf.admin._words import iso_time

    of = f" (run {run_id})" if run_id else ""
    _log(f"waiting for a timer due at {iso_time(due)}{of}", run_id=run_id, due=due)


def report_left_timer(due: float, run_id: str | None) -> None:
    """Log the earliest timer ``--until-idle --leave-timers`` exits without waiting for."""
    from wf.admin._words import iso_time

    of = f" (run {run_id})" if run_id else ""
    _log(f"leaving a timer due at {iso_time(due)}{of} for a later worker", run_id=run_id, due=due)


async def _work(
    *,
    concurrency: int,
    until_idle: bool,
    poll: float,
    leave_timers: bool = False,
    queues: list[str] | None,
    grace: float,
    any_deployment: bool = False,
) -> int:
    from wf import Worker
    from wf._exceptions import (
        LeaseLost,
        LoadError,
        StoreCorrupted,
        StoreUnavailable,
        WFError,
        WorkflowNotFound,
    )
    from wf._loader import project_root
    from wf.admin._engines import driving
    from wf.cli import owns_interpreter
    from wf.cli._errors import one_line
    from wf.cli._heap import settle_heap
    from wf.cli._store import store_path

    async with driving(report_drive) as engine:

        def on_error(run_id: str, exc: BaseException) -> None:
            if isinstance(exc, LoadError | WorkflowNotFound):
                # Not a passing failure: this worker cannot run this code. Say so loudly.
                _log(
                    f"ERROR {run_id}: cannot load its workflow here: {one_line(str(exc))}",
                    level=logging.ERROR,
                    run_id=run_id,
                )
                if isinstance(exc, WorkflowNotFound) or str(exc).startswith("cannot import module"):
                    # Where it looked, only when it found nothing: a module found that raises
                    # as it is imported fails the same from anywhere.
                    _log(
                        f"  the worker imports runs' modules from {project_root()} (the project "
                        "root) and the current directory; start it in the project, or add the "
                        "module's package to [tool.wf] modules (wf help config)",
                        level=logging.ERROR,
                    )
                return
            if isinstance(exc, StoreCorrupted) or not isinstance(exc, WFError):
                return  # damaged: said once by the worker's bulkhead (worker.faults)
            if isinstance(exc, LeaseLost | StoreUnavailable):
                _log(
                    f"{run_id} warning: {one_line(str(exc))} (driven again)",
                    level=logging.WARNING,
                    run_id=run_id,
                )
                return
            error = one_line(f"{type(exc).__name__}: {exc}")
            _log(f"{run_id} error: {error} (retried later)", level=logging.ERROR, run_id=run_id)

        worker = Worker(
            engine,
            concurrency=concurrency,
            poll=poll,
            on_error=on_error,
            queues=queues or None,
            any_deployment=any_deployment,
        )
        worker.on_abandoned = report_abandoned
        if until_idle:
            worker.on_timer = report_left_timer if leave_timers else report_timer
            worker.leave_timers = leave_timers
        served = f", queues {', '.join(queues)}" if queues else ""
        if worker.deployments is not None:
            served += f", deployment {engine.deployment}{_overriding()} and unpinned runs"
        elif engine.deployment is not None:
            served += f", deployment {engine.deployment}{_overriding()}; runs of every deployment"
        with _stop_signals(worker):
            await worker.prepare()  # connected and listening when it says it started
            if owns_interpreter():
                # Start-up is over: keep the collector off what it built (wf.cli._heap).
                settle_heap()
            _log(
                f"worker started on {store_path()} (concurrency {concurrency}{served}, "
                f"pid {os.getpid()})",
                store=store_path(),
                concurrency=concurrency,
                queues=queues or None,
                pid=os.getpid(),
                deployment=engine.deployment,
            )
            await _say_waiting_elsewhere(engine.store, worker.deployments)
            await worker.run(until_idle=until_idle, grace=grace)
        undriven = await worker.undriven() if until_idle else []
        if worker.repairs:
            # Each was logged as it happened: runs suspended although they could move.
            _log(
                f"WARNING {len(worker.repairs)} stuck run(s) repaired: please report this bug",
                level=logging.WARNING,
            )
        skipped = list(worker.faults)
        _log(
            f"worker stopped ({worker.driven} run(s) driven, {len(skipped)} damaged item(s) "
            "skipped)",
            driven=worker.driven,
            skipped=len(skipped),
        )
        for fault in skipped:
            _log(
                f"  {one_line(fault.said())}",
                level=logging.ERROR,
                **{"skipped_" + k: v for k, v in fault.to_json().items()},
            )
        if any(fault.again for fault in skipped):
            _log(
                "  a run skipped for now (its files refused: tried again later) is tried "
                "again every 30 s while a worker runs",
                level=logging.ERROR,
            )
        if any(not fault.again for fault in skipped):
            _log(
                "  wf store verify names every damaged item; the worker leaves them alone"
                + (
                    " (a run failed as damaged keeps its cause: wf inspect)"
                    if any(fault.failed for fault in skipped)
                    else ""
                ),
                level=logging.ERROR,
            )
        code = 0
        if worker.unloadable:
            _log(
                f"ERROR {len(worker.unloadable)} run(s) could not be driven: their workflows "
                "cannot be imported here",
                level=logging.ERROR,
            )
            code = EXIT_FAILED if until_idle else 0
        if undriven:
            shown = ", ".join(undriven[:5]) + (", …" if len(undriven) > 5 else "")
            _log(
                f"error: could not drive {len(undriven)} run(s), the store failed or they are "
                f"damaged (each is named above): {shown}; they are still due",
                level=logging.ERROR,
            )
            code = EXIT_FAILED
    leave_if_stuck(worker, code)
    return code


def _overriding() -> str:
    """`` (WF_DEPLOYMENT over [tool.wf] deployment v1)`` when the variable overrides another
    id of the table (a leftover variable serves another release's runs on this code)."""
    from wf._config import overridden_deployment

    table = overridden_deployment()
    return "" if table is None else f" (WF_DEPLOYMENT over [tool.wf] deployment {table})"


async def _say_waiting_elsewhere(store: Any, pins: Any) -> None:
    """Say how many unfinished runs wait for workers of other deployments."""
    from wf.admin._deployments import waiting_elsewhere

    for deployment, count in (await waiting_elsewhere(store, pins)).items():
        _log(
            f"  {count} unfinished run(s) pinned to deployment {deployment} wait for its "
            "workers (not driven here; wf deployments)",
            waiting_for_deployment=deployment,
            runs=count,
        )


def _stop_signals(worker: Any) -> StopSignals:
    """First SIGTERM / Ctrl-C drains; a second exits at once (130), also while code blocks the
    event loop (runs in flight resume from their journals)."""
    from wf._interrupts import StopSignals

    def on_signal(sig: signal.Signals) -> None:
        _log(
            f"{sig.name}: draining (running steps finish first); repeat to exit at once",
            level=logging.WARNING,
        )
        worker.stop()

    return StopSignals(
        on_signal, say=lambda line: _log(line, level=logging.WARNING), code=EXIT_INTERRUPTED
    )
