"""``wf run``: start a run of a workflow, drive it here with a live view, print its result."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from wf.cli._errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    closed_pipe,
    error,
    exit_with,
    guarded,
    hint,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from wf import Run, RunRecord
    from wf._interrupts import StopSignals
    from wf.admin import Admin, LocalAdmin, RunRequest
    from wf.admin._follow import Follower
    from wf.cli._progress import Sink

_INPUT_HELP = (
    "The run's input as JSON: an object maps parameters by name, an array gives them by "
    "position, any other value is the single argument. '@path' reads a file, '-' stdin."
)


def register(app: typer.Typer) -> None:
    """Add ``wf run`` to the app."""
    app.command("run")(run_command)


@guarded
def run_command(
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET", help="The workflow: 'package.module:attr' or 'path/file.py:attr'."
        ),
    ],
    input_: Annotated[
        str | None,
        typer.Option("--input", "-i", metavar="JSON", help=_INPUT_HELP, show_default=False),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            metavar="ID",
            help="Run id to use (letters, digits, '_', '.', '-'); starting an id that exists "
            "waits for that run instead of starting another; an id whose run was deleted (while "
            "its tombstone is kept) is an error, exit 2, and runs nothing.",
            show_default=False,
        ),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Only queue the run; print its id and exit.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help='Print {"run_id", "status", "output"} (and "error").'),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Keep waiting when the run suspends on hooks alone (by default wf run returns "
            "then, printing the run's id, and `wf hook resume` finishes it).",
        ),
    ] = False,
    priority: Annotated[
        int | None,
        typer.Option(
            "--priority", metavar="N", help="0 .. 2097151, higher first.", show_default=False
        ),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option("--group", metavar="KEY", help="Run in this FIFO lane.", show_default=False),
    ] = None,
    delay: Annotated[
        str | None,
        typer.Option(
            "--delay",
            metavar="DURATION",
            help="Start after this long: 90, 90s, 5m, 2h, 1d.",
            show_default=False,
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            metavar="ISO-8601",
            help="Start at this time, with its zone: 2027-01-01T09:00:00+01:00.",
            show_default=False,
        ),
    ] = None,
    max_attempts: Annotated[
        int | None,
        typer.Option(
            "--max-attempts",
            metavar="N",
            help="Run-level attempts (a failed run is retried).",
            show_default=False,
        ),
    ] = None,
    unique: Annotated[
        bool, typer.Option("--unique", help="An --id that exists already is an error.")
    ] = False,
) -> None:
    """Start a run of TARGET and drive it in this process; print its result as JSON.

    Exit 0 when the run completes, 1 when it fails or is cancelled, 2 for bad usage or bad input
    (then no run is created). A run that suspends on hooks alone (something only the outside
    delivers) is left waiting in the store: its id is printed, exit 0 (--wait keeps waiting).
    Ctrl-C or SIGTERM leaves the run in the store (exit 130): `wf worker` finishes it (with
    WF_URL, the server does).
    """
    from wf import admin
    from wf.cli._input import read_input

    # Everything that can be wrong with the command line is checked before the run exists.
    if wait and (detach or delay is not None or at is not None):
        from wf._exceptions import UsageError

        given = "--detach" if detach else "--delay" if delay is not None else "--at"
        raise UsageError(f"--wait waits for the run to end, and {given} only queues it: give one")
    data = read_input(input_)
    # A delayed run cannot finish now: it is only queued, as with --detach (docs/cli.md).
    detach = detach or delay is not None or at is not None
    options = _run_options(priority, group, delay, at, max_attempts, unique)
    if os.environ.get("WF_URL"):
        # The server imports the target and drives the run: no live view of steps here.
        remote = _run_remote(
            target,
            data,
            run_id,
            options,
            detach=detach,
            as_json=as_json,
            quiet=quiet,
            keep_waiting=wait,
        )
        exit_with(asyncio.run(remote))
    from wf.cli._stdout import stdout_to_stderr

    # Importing the target runs the module's code: what it prints is not the result either.
    # (Spans ended meanwhile are exported with the run's, after it: one wait, not two.)
    with stdout_to_stderr(flush_spans=False):
        workflow, canonical = admin.workflow_at(target)
        request = admin.run_request(workflow, data, options=options, target=canonical)
    code = asyncio.run(
        _start_and_wait(
            request,
            run_id=run_id,
            detach=detach,
            as_json=as_json,
            quiet=quiet,
            keep_waiting=wait,
        )
    )
    exit_with(code)


def _run_options(
    priority: int | None,
    group: str | None,
    delay: str | None,
    at: str | None,
    max_attempts: int | None,
    unique: bool,
) -> dict[str, Any]:
    """``with_options`` keywords from the command line (validated there: one line, exit 2)."""
    import datetime as dt

    from wf._durations import parse_duration
    from wf._exceptions import UsageError

    options: dict[str, Any] = {}
    if priority is not None:
        options["priority"] = priority
    if group is not None:
        options["group"] = group
    if delay is not None:
        options["delay"] = parse_duration(delay, what="--delay")
    if at is not None:
        try:
            when = dt.datetime.fromisoformat(at)
        except ValueError:
            raise UsageError(f"--at must be an ISO-8601 time, not {at!r}") from None
        if when.tzinfo is None:
            raise UsageError(f"--at needs a time zone, e.g. {at}+00:00 or {at}Z")
        options["at"] = when
    if max_attempts is not None:
        options["max_attempts"] = max_attempts
    if unique:
        options["unique"] = True
    return options


async def _start_and_wait(
    request: RunRequest,
    *,
    run_id: str | None,
    detach: bool,
    as_json: bool,
    quiet: bool,
    keep_waiting: bool = False,
) -> int:
    from wf import RunNotFound, StoreCorrupted, StoreError, admin
    from wf._config import deployment_setting
    from wf.admin._follow import Follower
    from wf.cli._progress import make_sink
    from wf.cli._stdout import stdout_to_stderr
    from wf.cli._store import say_crossing

    # stdout carries the result only (`wf run ... | jq` always works): whatever the workflow and
    # its steps print goes to stderr meanwhile (and into the step logs, see `wf logs`), through
    # descriptor 1 too (a console span exporter holds the original stdout).
    with stdout_to_stderr():
        async with admin.local(on_crossing=say_crossing(deployment_setting())) as client:
            existed = await _existing(client, run_id) if run_id is not None else None
            sink = make_sink(quiet, attached=existed is not None)
            follower = None
            if existed is not None and not detach:
                follower = Follower(client.store, existed.id, sink)
                if not quiet:
                    # Its past as found, before the drive here adds to it: what this command
                    # makes happen is shown as it happens, not summed up as history.
                    with contextlib.suppress(RunNotFound, StoreCorrupted):
                        # Deleted or damaged since: the first refresh says so.
                        await follower.read_past()
            run = await admin.start_run(client.engine, request, run_id=run_id, detach=detach)
            elsewhere: str | None = None  # the deployment whose workers drive the run, not here
            if existed is not None and not quiet:
                _say_exists(existed, detach=detach)
            if detach:
                record = await run.record() if as_json else None
                if record is None and run_id is not None:
                    # A chosen id may be a deleted run's (never run again): say so, exit 2.
                    await run.status()
            else:
                pinned = (await run.record()).deployment
                here = client.engine.deployment
                if pinned is not None and here is not None and not client.engine.drives_pin(pinned):
                    from wf.cli._control import say_pinned_elsewhere

                    say_pinned_elsewhere(run.id, pinned, here)
                    elsewhere = pinned
                sink.start()
                try:
                    if follower is None:
                        follower = Follower(client.store, run.id, sink)
                    record = await _wait_with_view(
                        client,
                        run,
                        follower,
                        keep_waiting=keep_waiting,
                        quiet=quiet,
                        elsewhere=elsewhere,
                    )
                except StoreError as exc:
                    if isinstance(exc, StoreCorrupted):
                        raise
                    # The store failed under the run (a full disk): the run is not lost, as
                    # with a closed output or a Ctrl-C; the line says so, or a script that
                    # retries on the error would start it again.
                    raise StoreError(
                        f"{exc}; run {run.id} stays running and resumes from its journal "
                        "(`wf worker` finishes it once the store can be written again)"
                    ) from exc
                finally:
                    sink.stop()
    try:
        # A run that exists is not queued by --detach: the line on it said what it is.
        return _report_run(
            run.id,
            record,
            detach=detach,
            as_json=as_json,
            quiet=quiet or (detach and existed is not None),
            elsewhere=elsewhere,
        )
    except BrokenPipeError:
        # The run is there whatever became of the output: the line says so, or a script that
        # retries on the error would queue it again.
        state = "queued" if record is None else record.status.value
        return closed_pipe(f"run {run.id} is {state}")


async def _existing(client: LocalAdmin, run_id: str) -> RunRecord | None:
    """The record of run ``run_id`` if it exists before this command starts it (an idempotent
    start attaches to it); None for a new id, a deleted run's or a malformed one, which
    starting it then says."""
    from wf._exceptions import RunNotFound, UsageError
    from wf.admin._read import existing_run

    try:
        return await existing_run(client.store, run_id)
    except (RunNotFound, UsageError):
        return None


def _say_exists(record: RunRecord, *, detach: bool) -> None:
    """``wf run --id X`` of a run that exists: say so first, with when it started and where it
    stands, so that what follows does not read as a new run (``detach``: nothing follows)."""
    from wf.admin._words import timestamp, visible

    status = record.status.value
    if record.status.is_terminal:
        where = f"{status} at {timestamp(record.updated_at)}; it is not run again"
    elif detach:
        where = f"{status} now; --detach leaves it as it is (`wf inspect {record.id}` follows it)"
    else:
        where = f"{status} now; following it from here"
    started = timestamp(record.created_at)
    _say(f"wf: run {visible(record.id)} exists already: started {started}, {where}")


def _report_run(
    run_id: str,
    record: RunRecord | None,
    *,
    detach: bool,
    as_json: bool,
    quiet: bool,
    elsewhere: str | None = None,
) -> int:
    """Print what became of the started run (``record`` None: only queued); the exit code.
    ``elsewhere``: the deployment whose workers drive the run (not this process)."""
    if record is None:
        sys.stdout.write(run_id + "\n")
        sys.stdout.flush()  # here, where a closed output can still name the run
        if not quiet:
            from wf.admin._words import visible
            from wf.cli._store import store_path

            hint(
                f"queued in {visible(store_path())}: a worker picks it up (`wf worker` or "
                f"`wf dev` in this project); follow it with `wf inspect {run_id}`"
            )
        return EXIT_OK
    code = _print_outcome(record, as_json=as_json)
    if record.status.value == "suspended":
        # Left waiting for the outside: the id is the result a script carries on with.
        from wf.cli._suspended import left_waiting

        if not as_json:
            sys.stdout.write(record.id + "\n")
            sys.stdout.flush()
        if not quiet:
            from wf.admin._words import visible

            sys.stderr.write(f"wf: {visible(left_waiting(record, elsewhere=elsewhere))}\n")
    return EXIT_OK if detach else code


async def _wait_with_view(
    client: LocalAdmin,
    run: Run[Any],
    follower: Follower[Sink],
    *,
    keep_waiting: bool,
    quiet: bool,
    elsewhere: str | None = None,
) -> RunRecord:
    """Wait for the run to end while the follower feeds the view; Ctrl-C ends the process.

    Unless ``keep_waiting``, return the run's record as soon as it suspends on hooks alone.
    ``elsewhere``: the deployment whose workers drive the run (not this process)."""
    from wf.cli._suspended import follow_run

    interrupted = asyncio.Event()
    following = asyncio.ensure_future(
        follow_run(
            follower,
            keep_waiting=keep_waiting,
            quiet=quiet,
            driving=lambda: client.driving(run.id),
            elsewhere=elsewhere,
        )
    )
    waiting = asyncio.ensure_future(_wait_quietly(run))
    stopper = asyncio.ensure_future(interrupted.wait())
    left: RunRecord | None = None
    # SIGTERM as Ctrl-C: the drive ends on purpose, noted so (no death of the run), and a
    # second signal, also while the drive's note is being written, exits at once.
    with _catch_sigint(interrupted, signals=(signal.SIGINT, signal.SIGTERM)):
        try:
            pending: set[asyncio.Future[Any]] = {waiting, stopper, following}
            while left is None and not (waiting.done() or stopper.done()):
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if following in done:
                    left = following.result()  # a record: suspended on the outside alone
        finally:
            following.cancel()
            stopper.cancel()
            # Bounded: a view that failed to stop must not keep Ctrl-C from ending the command.
            await asyncio.wait({following}, timeout=EXIT_STEP)
            if following.done() and not following.cancelled():
                following.exception()  # retrieved: the view's own error is not the outcome
        if left is None and not waiting.done():
            follower.sink.stop()
            waiting.cancel()
            await _interrupted(client, run.id)
    if left is not None and not waiting.done():
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        return left
    waiting.result()  # an error while waiting (a store error, say) surfaces here
    return await follower.refresh()


async def _run_remote(
    target: str,
    data: Any,
    run_id: str | None,
    options: dict[str, Any],
    *,
    detach: bool,
    as_json: bool,
    quiet: bool = False,
    keep_waiting: bool = False,
) -> int:
    """``wf run`` with ``WF_URL``: the server imports the target, applies the run options and
    drives the run; this waits for the result (long polls) unless ``--detach``, and says what
    the local command says (``_report_run``): a run that waits for hooks alone is left
    waiting, its id printed (unless ``keep_waiting``: ``--wait``). Ctrl-C or SIGTERM leaves
    the run to the server (exit 130); a server that restarts meanwhile is waited for
    (``wf._remote.RIDE_OUT``)."""
    from wf._exceptions import ServerUnavailable
    from wf.admin import connect

    async with connect() as client:
        rid = await client.start(target, data, run_id=run_id, options=options)
        if detach:
            if as_json:
                from wf.cli._format import print_json

                print_json({"run_id": rid, "status": "pending", "output": None})
            else:
                sys.stdout.write(rid + "\n")
                sys.stdout.flush()  # here, where a closed output can still name the run
                if not quiet:
                    await _say_queued_remote(client, rid)
            return EXIT_OK
        interrupted = asyncio.Event()
        waiting = asyncio.ensure_future(_say_then_wait(client, rid, keep_waiting))
        stopper = asyncio.ensure_future(interrupted.wait())
        try:
            # SIGTERM (a container's stop, `timeout`) as Ctrl-C: stop following, say so; from
            # the moment the run exists on the server, the line saying who drives it included.
            with _catch_sigint(interrupted, signals=(signal.SIGINT, signal.SIGTERM)):
                await asyncio.wait({waiting, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not waiting.done():
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await waiting
        if not waiting.done() or waiting.cancelled():
            _say(
                f"\ninterrupted: run {rid} continues durably on the wf server; "
                f"`wf inspect {rid}` follows it"
            )
            return EXIT_INTERRUPTED
        try:
            record = waiting.result()
        except ServerUnavailable as exc:
            # The run is there whatever became of the server: the line names it, or a script
            # that retries on the error would start it again.
            raise ServerUnavailable(
                f"{exc}; run {rid} goes on on the server (`wf inspect {rid}` follows it)",
                exc.status,
            ) from exc
    return _report_run(rid, record, detach=False, as_json=as_json, quiet=quiet)


async def _say_queued_remote(client: Admin, run_id: str) -> None:
    """``wf run --detach`` over ``WF_URL``: where the run waits and what picks it up, as the
    local command says it (``_report_run``)."""
    from wf._exceptions import WFError
    from wf.admin._words import visible
    from wf.cli._store import remote_url

    try:
        drives: bool | None = (await client.store_info()).drives
    except WFError:
        drives = None  # the run is queued all the same: only the hint is vaguer
    who = {
        True: "its worker picks it up",
        False: "a `wf worker` on its store picks it up (the server does not drive runs)",
        None: "its worker, or a `wf worker` on its store, picks it up",
    }[drives]
    where = visible(remote_url() or "WF_URL")
    hint(f"queued on the wf server at {where}: {who}; follow it with `wf inspect {run_id}`")


def _catch_sigint(
    interrupted: asyncio.Event, signals: tuple[signal.Signals, ...] = (signal.SIGINT,)
) -> StopSignals:
    # Ctrl-C (and whatever else of ``signals``) sets a flag instead of letting asyncio cancel
    # the command, so the command can say what becomes of the run; a second exits at once,
    # also while the run's code blocks the event loop. Only in the main thread (not in some
    # test runners).
    from wf._interrupts import StopSignals

    def say(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    return StopSignals(
        lambda _sig: interrupted.set(), say=say, signals=signals, code=EXIT_INTERRUPTED
    )


async def _wait_quietly(run: Run[Any]) -> None:
    """Drive the run here until it ends, riding out a store that fails for now under the
    drive (``wf.admin.drive_through_outages``: said once, and once when it answers)."""
    from wf import admin
    from wf.admin._words import visible
    from wf.cli._errors import one_line

    def failed(error: BaseException, limit: float) -> None:
        _say(
            f"wf: the store failed under run {run.id}: {visible(one_line(str(error)))}; it is "
            f"driven again from its journal once the store answers (waiting up to {limit:g}s)"
        )

    def back(after: float) -> None:
        _say(f"wf: the store answers again (after {after:.1f}s)")

    await admin.drive_through_outages(run, on_failed=failed, on_back=back)


def _say(line: str) -> None:
    """One line on stderr (best effort: a closed stderr must not end the wait)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _print_outcome(record: RunRecord, *, as_json: bool) -> int:
    """Print the run's outcome (result JSON on stdout, failure on stderr); its exit code."""
    from wf.admin._words import error_text
    from wf.cli._format import print_json

    status = record.status.value
    if as_json:
        data: dict[str, Any] = {"run_id": record.id, "status": status, "output": record.output}
        if record.error is not None:
            data["error"] = {
                "type": record.error.get("type"),
                "message": record.error.get("message"),
            }
        print_json(data)
    elif status == "completed":
        print_json(record.output)
    if status == "failed":
        if not as_json:
            error(f"run {record.id} failed: {error_text(record.error)}")
            hint(f"wf inspect {record.id}")
        return EXIT_FAILED
    if status == "cancelled":
        if not as_json:
            error(f"run {record.id} was cancelled")
        return EXIT_FAILED
    return EXIT_OK


async def _left_to(client: LocalAdmin, run_id: str) -> str:
    """Who finishes a run ``wf run`` leaves at Ctrl-C: a worker, or for a run that waits for
    hooks alone (``--wait``) their payload, which no worker can deliver."""
    from wf.admin._words import waiting_text

    with contextlib.suppress(Exception):
        explained = await _within(client.explain(run_id), EXIT_STEP)
        waits = explained.waiting_for or []
        if (
            explained.status == "suspended"
            and explained.wake_at is None
            and waits
            and all(item["kind"] == "hook" for item in waits)
        ):
            return (
                f"run {run_id} waits for {waiting_text(waits)} in the store; `wf hook resume "
                f"{waits[0]['target']} --data JSON` delivers it and finishes the run"
            )
    return f"run {run_id} continues durably; `wf worker` will finish it"


T = TypeVar("T")

EXIT_STEP = 0.5
"""Seconds each part of ``wf run``'s exit at Ctrl-C or SIGTERM may take: the view's end, the
words on who finishes the run, the store's close, and three of them for the drive's end:
3 s from the signal to the exit, whatever the store does."""


async def _within(work: Awaitable[T], seconds: float) -> T:
    """``work``'s result within ``seconds``, else ``TimeoutError`` at once: it is cancelled
    and left, not waited for (``asyncio.timeout`` waits for a cancellation to end, which
    psycopg's handling of a frozen server holds for seconds)."""
    task = asyncio.ensure_future(work)
    await asyncio.wait({task}, timeout=seconds)
    if not task.done():
        task.cancel()
        task.add_done_callback(_retrieved)
        raise TimeoutError
    return task.result()


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # its error comes too late to matter


async def _interrupted(client: LocalAdmin, run_id: str) -> NoReturn:
    """Ctrl-C or SIGTERM: leave the run to the store and exit now. The drive notes that it
    was interrupted (``drive_failed``), so that its end is not counted as its process's death
    (``max_recoveries``)."""
    sys.stderr.write(f"\ninterrupted: {await _left_to(client, run_id)}\n")
    sys.stderr.flush()
    # Give the driver a moment to note its end, release the run and flush its journal; a step
    # still running in a thread cannot be stopped, so rather than wait for it the process ends
    # below (the run is safe: a crash at any point is recovered from the journal).
    await client.engine.aclose(timeout=3 * EXIT_STEP)
    with contextlib.suppress(Exception):
        # A store that hangs (PostgreSQL frozen) is left as it is: the process ends anyway.
        await _within(client.store.close(), EXIT_STEP)
    sys.stdout.flush()
    os._exit(EXIT_INTERRUPTED)


async def _say_then_wait(client: Any, rid: str, keep_waiting: bool) -> Any:
    """Say who drives the run ``rid`` on the server, then wait for its end (``client.ended``)."""
    from wf.cli._control import say_who_drives

    await say_who_drives(client, rid)
    return await client.ended(rid, hooks_only=not keep_waiting)
