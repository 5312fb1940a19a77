"""Every exception wf raises, in one place.

The tree::

    WFError                      base of every wf error (an ``Exception``)
    ├── UsageError               the program or the user asked for something malformed
    │   ├── ValueEncodingError   a value cannot be stored as tagged JSON (names the step and type)
    │   ├── InputValidationError run input does not fit the workflow's signature
    │   ├── OutputValidationError a run's output does not fit the workflow's return annotation
    │   ├── LoadError            ``module:attr`` / ``file.py:attr`` could not be loaded
    │   ├── WorkflowNotFound     no workflow is registered under a recorded name
    │   └── ServerRefused        the wf server refused the client's token, or wants one (401/403)
    ├── RunNotFound              no run with that id in the store
    │   └── ResultExpired        the run existed but retention deleted it (says when)
    ├── RunAlreadyExists         a run with that id exists with another workflow or input
    ├── StreamNotFound           a run has no byte stream of that name (lists the ones it has)
    ├── StreamIncomplete         a byte stream ended with its writer cut off (names the step)
    ├── HookError                a hook token is unknown, disposed, taken, or a payload is invalid
    ├── StoreError               the store failed or refused (names the file / operation)
    │   ├── StoreCorrupted       a stored file is damaged (names the file and line)
    │   ├── StoreVersionError    the store was written by a newer wf
    │   ├── UpgradeInterrupted   SIGTERM / Ctrl-C stopped an upgrade of the store's format
    │   ├── StoreUnavailable     the store's server did not answer, for now (a dropped or
    │                            refused connection, a lock or statement timeout): a worker
    │                            tries again
    │   ├── LeaseLost            a driver's hold on its run ended (its server connection
    │                            dropped, or another driver took the run over): the run is
    │                            fine, and driven again
    │   └── ServerUnavailable    the wf server of a remote client (``WF_URL``) cannot be
    │                            reached, timed out, failed (HTTP 5xx), asks to try again later
    │                            (429), or is no wf server of this client's API version
    ├── NondeterminismError      replay no longer matches the journal (index, recorded, current)
    ├── RunFailed                ``run.result()`` of a run that failed; carries the recorded error
    ├── RunStalled               its driving process died ``max_recoveries`` times in a row
                                 without progress (names the step it died in); not retried
    ├── RunCancelled             ``run.result()`` of a run that was cancelled
    ├── StepFailed               a recorded step error whose original type cannot be rebuilt
    ├── FatalError               raise in a step: fail it now, no retries
    └── RetryableError           raise in a step: retry it, optionally after a given delay

    BaseException
    └── Cancelled                raised inside a workflow when its run is cancelled; a
                                 ``BaseException`` like ``asyncio.CancelledError``, so that
                                 ``except Exception`` cannot swallow it

Exit codes of the ``wf`` command are derived from this tree (see ``docs/cli.md``).
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
from typing import Any


class WFError(Exception):
    """Base class of every error wf raises (except the ``Cancelled`` signal)."""


class UsageError(WFError):
    """The caller asked for something malformed; the message says what and how to fix it."""


class ValueEncodingError(UsageError, TypeError):
    """A value cannot be encoded as tagged JSON.

    The message names where the value came from (a step, the run input, a hook payload) and the
    offending type, e.g. ``step 'charge' returned a socket.socket, which wf cannot store``.
    """


class InputValidationError(UsageError, ValueError):
    """The input of a run does not fit the workflow's signature."""


class OutputValidationError(UsageError, ValueError):
    """A run's output does not fit its workflow's return annotation.

    The run fails with it at once (no further attempts: the same code would return the same
    value); the message names the workflow and each field that does not fit, e.g. ``output of
    workflow 'shop:total': Input should be a valid integer, unable to parse string as an integer
    (got 'nope')``.
    """


class LoadError(UsageError):
    """A ``module:attr`` or ``path/file.py:attr`` target could not be loaded."""


class WorkflowNotFound(UsageError):
    """No workflow is registered under a name recorded in the store."""


class ServerRefused(UsageError):
    """The wf server refused the client's credentials (HTTP 401 or 403): it needs a token and
    none was given, or the one given (``WF_TOKEN``) is not its own. ``status`` is the HTTP
    status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class RunNotFound(WFError, LookupError):
    """There is no run with the given id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id!r}")
        self.run_id = run_id


class ResultExpired(RunNotFound):
    """The run ended and was then deleted by retention (or ``wf gc``): its result is gone.

    ``deleted_at`` (epoch seconds) says when, ``reason`` why (``retention`` or ``gc``).
    """

    def __init__(self, run_id: str, deleted_at: float, reason: str = "retention") -> None:
        super().__init__(run_id)
        when = _dt.datetime.fromtimestamp(deleted_at, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        by = "retention" if reason == "retention" else "wf gc"
        self.args = (f"run {run_id!r} was deleted by {by} at {when}: its result is gone",)
        self.deleted_at = deleted_at
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id, self.deleted_at, self.reason))


class RunAlreadyExists(WFError):
    """A run with that id exists already, for another workflow or with another input.

    Starting an id that exists with the same workflow and the same input is not an error: it
    returns the existing run (idempotent retries).
    """

    def __init__(self, message: str, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class StreamNotFound(WFError, LookupError):
    """A run has no byte stream of that name, and it ended (or waits) without creating one."""

    def __init__(self, run_id: str, name: str, streams: list[str]) -> None:
        have = ", ".join(repr(s) for s in sorted(streams)) if streams else "none"
        super().__init__(f"run {run_id} has no stream {name!r} (its streams: {have})")
        self.run_id = run_id
        self.name = name
        self.streams = sorted(streams)


class StreamIncomplete(WFError):
    """A byte stream ended without its writer finishing: the step writing it failed, or its run
    ended (failed, cancelled) while it wrote, and no writer closed the stream. Raised by its
    readers after the last chunk, so what they read is known to be a cut-off answer."""

    def __init__(self, run_id: str, name: str, step: str) -> None:
        super().__init__(
            f"run {run_id}'s stream {name!r} is incomplete: step {step!r} was cut off while "
            "writing it (its attempt failed, or the run ended, before it finished)"
        )
        self.run_id = run_id
        self.name = name
        self.step = step


class HookError(WFError):
    """A hook token is unknown or disposed, already taken, or a payload does not validate."""


class StoreError(WFError):
    """The store failed or refused an operation; the message names the file or operation."""


class StoreCorrupted(StoreError):
    """A stored file is damaged; the message names the file and, for journals, the line."""


class StoreVersionError(StoreError):
    """The store was written by a newer version of wf and is refused."""


class UpgradeInterrupted(StoreError):
    """SIGTERM or Ctrl-C stopped an upgrade of the store's format (or the wait for another
    process's); nothing is lost: the next process to open the store upgrades it."""


class StoreUnavailable(StoreError):
    """The store's server could not be reached for an operation, for now: a dropped
    connection, a server that refuses new connections (``too many connections``, starting
    up), a lock or statement timeout. Nothing is wrong with the data; the same operation may
    succeed a moment later (a worker tries again, see ``wf.Worker``). A write that fails so
    may or may not have been applied: wf's own writes are safe to send again."""

    _refused = False
    """Whether the server answered and refused the command for now (a read-only replica or
    standby, out of memory): set by the stores; a worker starting says so rather than "does
    not answer"."""


class LeaseLost(StoreError):
    """A driver's hold on its run ended before the drive did: its connection to the server
    dropped (PostgreSQL's lock connection, Redis's holder connection), the lease expired, or
    another driver took the run over. Nothing is wrong with the run; the driver stops, writes
    nothing more, and the run is driven again (a worker tries it again within a second)."""


class ServerUnavailable(StoreError):
    """The wf server a remote client talks to (``WF_URL``, ``wf.configure(url=...)``) did not
    serve the request: it cannot be reached, timed out, failed (HTTP 5xx), asks to be asked
    again later (429), or answered as no wf server of this client's API version does. The
    message names the server and which; ``status`` is the HTTP status, when one came. A
    ``StoreError``, as the failure of a store used directly is (``wf`` exits 3)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.unreached = False
        """No answer came: the server refused the connection or dropped it (not a timeout)."""
        self.cut = False
        """An answer began and was cut off (a followed body the server's stop ended)."""
        self.ended = False
        """The server answered, then ended a run's feed before the run ended (it stops, or a
        proxy ends such a response): ``unreached`` too, as a follow opens it again."""


class NondeterminismError(WFError):
    """The workflow code no longer matches the run's journal.

    Raised (and recorded as the run's failure) when replay reaches operation ``index`` and the
    journal recorded a different operation there. wf never hands one step's result to another.
    """

    def __init__(
        self,
        index: int,
        recorded: str | None,
        current: str | None,
        location: str | None = None,
        reason: str | None = None,
    ) -> None:
        self.index = index
        self.recorded = recorded
        self.current = current
        self.location = location
        self.reason = reason
        """Why, when it is not a code change (the advice about ``wf.patched`` otherwise)."""
        where = f" at {location}" if location else ""
        message = (
            f"operation #{index}: the journal recorded {recorded or 'nothing'} "
            f"but the code now calls {current or 'nothing'}{where}; "
        ) + (
            reason
            or (
                "either the code changed under a run in flight: guard the change with "
                '`if wf.patched("change-id"):` and run `wf check --replay` before deploying; '
                "or the workflow's choices depend on state outside its journal (a module-level "
                "object it changes, the clock, randomness, the host): `wf check` flags those "
                "(wf help nondeterminism)"
            )
        )
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.index, self.recorded, self.current, self.location, self.reason)
        return (type(self), args)


class RunFailed(WFError):
    """Raised by ``Run.result()`` when the run failed.

    ``error_type`` is the qualified name of the original exception type, ``message`` its text,
    ``fields`` its public attributes, ``traceback`` the recorded traceback text, and ``original``
    the rebuilt original exception when its type can be imported (else ``None``).
    """

    def __init__(
        self,
        run_id: str,
        error_type: str,
        message: str,
        fields: dict[str, Any] | None = None,
        traceback: str | None = None,
        original: BaseException | None = None,
    ) -> None:
        super().__init__(f"run {run_id} failed: {error_type}: {message}")
        self.run_id = run_id
        self.error_type = error_type
        self.message = message
        self.fields = fields or {}
        self.traceback = traceback
        self.original = original
        # Chained, so a traceback of the RunFailed shows the original error below it.
        self.__cause__ = original


class RunStalled(WFError):
    """A run's driving process died ``recoveries`` times in a row without recording progress.

    Recorded as the run's failure (the ``original`` of the ``wf.RunFailed`` that
    ``run.result()`` raises) once ``max_recoveries`` is reached, and never retried: a step
    that ends its process (``os._exit``, an out-of-memory kill, a crash in a C extension)
    would otherwise take down every worker that resumes the run. ``steps`` names the step
    each death happened in (``{"op": ..., "name": ...}``), oldest first: none for a death in
    the workflow's own code, nor (on PostgreSQL and Redis) for the first death in a row of a
    drive that died in its first step (docs/reliability.md, "Stalled runs").
    """

    def __init__(self, run_id: str, recoveries: int, steps: list[dict[str, Any]]) -> None:
        self.run_id = run_id
        self.recoveries = recoveries
        self.steps = steps
        names = list(dict.fromkeys(f"{s['name']!r} (op {s['op']})" for s in steps))
        where = f" in step {names[0]}" if len(names) == 1 else f" in steps {', '.join(names)}"
        super().__init__(
            f"run {run_id} stalled: its driving process died {recoveries} "
            f"time{'' if recoveries == 1 else 's'} in a row"
            f"{where if names else ''} without recording progress"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id, self.recoveries, self.steps))


class RunCancelled(WFError):
    """Raised by ``Run.result()`` when the run was cancelled."""

    def __init__(self, run_id: str, reason: str | None = None) -> None:
        super().__init__(f"run {run_id} was cancelled" + (f": {reason}" if reason else ""))
        self.run_id = run_id
        self.reason = reason


class StepFailed(WFError):
    """A step's recorded failure whose original exception type cannot be rebuilt."""

    def __init__(self, error_type: str, message: str, fields: dict[str, Any] | None = None):
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message
        self.fields = fields or {}


class FatalError(WFError):
    """Raise inside a step to fail it at once, without retries."""


class RetryableError(WFError):
    """Raise inside a step to have it retried, after ``after`` (seconds or a timedelta) if given.

    A negative ``after`` retries at once; one that is not a finite number of seconds (NaN,
    infinity, not a number) is a ``UsageError`` here, which fails the step without a retry."""

    def __init__(self, message: str = "", after: float | _dt.timedelta | None = None) -> None:
        super().__init__(message)
        self.after: float | None = (
            None if after is None else finite_seconds("RetryableError(after=...)", after)
        )


def unreadable_json(exc: BaseException) -> str:
    """Why JSON text that is valid JSON could not be read (``ValueError`` or ``RecursionError``
    from ``json.loads``), in a few words for one line: an integer beyond Python's digit limit
    is said as such, not with Python's advice to raise the limit."""
    if isinstance(exc, RecursionError):
        return "it nests too deep"
    if "integer string conversion" in str(exc):
        import sys

        return f"an integer in it has more than {sys.get_int_max_str_digits()} digits"
    return str(exc)


def finite_seconds(what: str, value: Any) -> float:
    """Seconds of a wait given as a real number or a ``timedelta``; a ``UsageError`` naming
    ``what`` for anything else, NaN or infinity. An int too large for a float is 1e300 s (past
    any due time: the caller's check of the latest one says so). Here, below every other
    module, for ``RetryableError``; ``wf.engine._durations.wait_seconds`` builds on it."""
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(f"{what}: expected seconds or a timedelta, got {type(value).__name__}")
    else:
        number: Any = value  # a Real: compares with 0 (typeshed's Real says not)
        try:
            seconds = float(number)
        except OverflowError:
            seconds = 1e300 if number > 0 else 0.0
    if not math.isfinite(seconds):
        raise UsageError(f"{what}: {value!r:.40} is not a finite number of seconds")
    return seconds


class Cancelled(BaseException):
    """Raised inside a workflow at its next durable operation once its run is cancelled.

    A ``BaseException`` so that ``except Exception`` in workflow code cannot swallow it; ``finally``
    blocks and registered rollbacks still run.
    """


def _name_publicly() -> None:
    # Tracebacks, reprs, ``wf runs`` and recorded errors name each error as users import and
    # catch it (``wf.RunFailed``), never by this private module. ``wf`` resolves every one of
    # them (its lazy exports), so pickling and rebuilding a recorded error still work.
    for value in list(globals().values()):
        is_error = isinstance(value, type) and issubclass(value, BaseException)
        if is_error and value.__module__ == __name__:
            value.__module__ = "wf"


_name_publicly()
