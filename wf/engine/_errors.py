"""Recording exceptions in the journal and rebuilding them on replay.

A recorded error keeps the exception's type (module and qualname), message, constructor args and
public attributes (those that encode), and the traceback text. Rebuilding imports the type and
restores args and attributes without calling ``__init__`` (which may need other arguments), so
``except TheOriginalType`` catches it after replay; if the type is gone, ``wf.StepFailed`` stands
in with the same message and fields. An exception group (a ``TaskGroup``'s) also keeps its
members, so the rebuilt group holds the rebuilt members and ``except*`` sees them.
"""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import traceback as _traceback
from typing import Any

import orjson

from wf._exceptions import FatalError, StepFailed, UsageError, ValueEncodingError
from wf._shadows import taken_hint
from wf.engine._codec import decode, encode, trusted_module, untrusted


def type_name(cls: type) -> str:
    """``module.QualName`` of a class (``ValueError`` for builtins), with wf's own errors named
    as users import them (``wf.FatalError``, not the private module they live in)."""
    if cls.__module__ == "builtins":
        return cls.__qualname__
    if cls.__module__ == "wf._exceptions":
        return f"wf.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _encodable(value: Any, where: str) -> tuple[bool, Any]:
    try:
        return True, encode(value, where=where)
    except (ValueEncodingError, RecursionError):
        return False, None


KEPT = 16_384
"""Characters of an error's message and traceback that are recorded, and the largest args or
field (as JSON) kept: an error is written to the journal and the record, and read by every
listing and page, so one run's huge message must not weigh on all of them."""


def describe_error(exc: BaseException) -> dict[str, Any]:
    """The JSON form of an exception, for the journal and the run record.

    Never raises for the exception's own sake: a ``__str__`` or an attribute that raises is
    said in the message instead (the run fails with what could be read, it is not damage)."""
    cls = type(exc)
    fields: dict[str, Any] = {}
    try:
        found = dict(vars(exc))
    except Exception:  # no __dict__, or one that raises
        found = {}
    for key, value in found.items():
        if key.startswith("_"):
            continue
        ok, encoded = _encodable(value, f"field {key!r} of {type_name(cls)}")
        if ok and _small(encoded):
            fields[key] = encoded
    try:
        ok, args = _encodable(list(exc.args), f"args of {type_name(cls)}")
    except Exception:
        ok, args = False, None
    described = {
        "type": type_name(cls),
        "module": cls.__module__,
        "qualname": cls.__qualname__,
        # A project file that is not what its ``import`` gets (wf needs the standard module of
        # its name) is named after the message, as a command's error names it.
        "message": _cut(_text(_message(exc) + taken_hint(exc))),
        "args": args if ok and _small(args) else None,
        "fields": fields,
        "traceback": _cut(_text("".join(_traceback.format_exception(exc)))),
    }
    if isinstance(exc, BaseExceptionGroup):
        described["exceptions"] = _members(exc)
    return described


def _members(group: BaseExceptionGroup[Any]) -> list[dict[str, Any]]:
    """The recorded members of an exception group, each without its traceback (the group's
    shows them all), as many as fit in ``KEPT`` characters of JSON."""
    members: list[dict[str, Any]] = []
    size = 0
    for member in group.exceptions:
        info = describe_error(member)
        info.pop("traceback", None)
        try:
            size += len(orjson.dumps(info))
        except (TypeError, orjson.JSONEncodeError):
            continue
        if size > KEPT:
            break
        members.append(info)
    return members


def fails_at_once(exc: BaseException) -> bool:
    """Whether ``exc`` ends a step's or a run's attempts without another: a ``wf.FatalError``
    or a ``wf.UsageError`` (a name or value wf refuses is refused again), or an exception group
    (a ``TaskGroup``'s) holding one at any depth."""
    if isinstance(exc, FatalError | UsageError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(lambda e: isinstance(e, FatalError | UsageError)) is not None
    return False


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as error:
        return f"<str() of the {type_name(type(exc))} raised {type(error).__name__}>"


def _cut(text: str) -> str:
    if len(text) <= KEPT:
        return text
    return f"{text[:KEPT]}… ({len(text) - KEPT:,} more characters not recorded)"


def _small(encoded: Any) -> bool:
    try:
        return len(orjson.dumps(encoded)) <= KEPT
    except (TypeError, orjson.JSONEncodeError):
        return False


def _text(text: str) -> str:
    """``text`` as valid UTF-8: lone surrogates (an undecodable file name in an ``OSError``)
    become ``\\udcff`` escapes, readable, where no store could take them as they are."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def public_fields(info: dict[str, Any]) -> dict[str, Any]:
    """The decoded public attributes of a recorded error."""
    out: dict[str, Any] = {}
    for key, value in (info.get("fields") or {}).items():
        try:
            out[key] = decode(value)
        except Exception:  # a field whose type is gone stays in its stored form
            out[key] = value
    return out


def rebuild_error(info: dict[str, Any]) -> BaseException:
    """The exception a recorded error describes, or ``StepFailed`` if its type cannot be had."""
    fields = public_fields(info)
    try:
        # Only a module imported here already (or trusted): a recorded error names its own
        # type, and stored data must not make wf import a module of its choosing.
        obj: Any = trusted_module(info["module"])
        if obj is None:
            untrusted(f"{info['module']}:{info['qualname']}", "a recorded error")
            raise LookupError(info["module"])
        for part in info["qualname"].split("."):
            obj = getattr(obj, part)
        # Only an ``Exception`` is ever recorded: a journal naming ``SystemExit`` (edited, or
        # written elsewhere) must not end the process that replays it.
        if not (isinstance(obj, type) and issubclass(obj, Exception)):
            raise TypeError(f"{info['type']} is not an exception type wf records")
        if issubclass(obj, BaseExceptionGroup):
            exc = _rebuild_group(obj, info)
            for key, value in fields.items():
                setattr(exc, key, value)
            return exc
        exc = obj.__new__(obj)
        args = info.get("args")
        exc.args = tuple(decode(args)) if args is not None else (info.get("message", ""),)
        for key, value in fields.items():
            setattr(exc, key, value)
        return exc
    except Exception:
        return StepFailed(info.get("type", "Exception"), info.get("message", ""), fields)


_GROUP_COUNT = re.compile(r" \(\d+ sub-exceptions?\)$")
"""What ``str()`` of an exception group adds to its message."""


def _rebuild_group(cls: type[Exception], info: dict[str, Any]) -> Exception:
    """The exception group ``info`` records, holding its rebuilt members (not calling
    ``__init__``, as for other errors); ``ValueError`` if it recorded none."""
    members = [rebuild_error(m) for m in info.get("exceptions") or () if isinstance(m, dict)]
    if not members:
        raise ValueError("an exception group recorded without its members")
    message = _GROUP_COUNT.sub("", str(info.get("message", "")))
    group: Exception = cls.__new__(cls, message, members)
    return group


def exited(what: str, exit: SystemExit) -> FatalError:
    """The error a step or a workflow that raised ``SystemExit`` (``sys.exit``) fails with:
    durable code cannot end the process that drives it, which would end every run in it and
    then its next driver, again and again. Not retried: exiting is not a passing fault."""
    return FatalError(
        f"{what} called sys.exit({exit.code!r}); code in a run cannot end the process that"
        " drives it: raise an exception instead"
    )


def uncaught(what: str, exc: BaseException) -> FatalError | None:
    """The error a step or a workflow fails with when its code raises ``exc``, a
    ``BaseException`` that is not an ``Exception``; None if the exception is not the code's
    to raise and must go on as it is.

    Left to asyncio, a ``KeyboardInterrupt`` (like ``SystemExit``) out of a task ends the event
    loop: the worker and every run in it, then the run's next driver, again and again; any
    other one leaves the run unrecorded, run again by each driver. None for wf's own signals
    (a cancellation, a suspension), for asyncio's ``CancelledError`` (the caller tells a real
    cancellation from one the code made up) and for a ``KeyboardInterrupt`` that may be a real
    Ctrl-C (``sigint_may_raise``). Not retried: none of these is a passing fault.
    """
    if isinstance(exc, SystemExit):
        return exited(what, exc)
    if isinstance(exc, asyncio.CancelledError) or _is_wf_signal(exc):
        return None
    if isinstance(exc, KeyboardInterrupt):
        if sigint_may_raise():
            return None
        return FatalError(
            f"{what} raised KeyboardInterrupt; code in a run cannot interrupt the process that"
            " drives it: raise an exception instead"
        )
    message = _message(exc)
    return FatalError(
        f"{what} raised {type_name(type(exc))}{f' ({message})' if message else ''}, a"
        " BaseException that is not an Exception: raise an exception instead"
    )


def made_up_cancel(what: str) -> FatalError:
    """The error a step or a workflow fails with when its code raises asyncio's
    ``CancelledError`` while nothing cancelled it: not a cancellation to obey (it would leave
    the run unrecorded and driven again at once, forever), a fault of the code."""
    return FatalError(
        f"{what} raised CancelledError, but nothing cancelled it: raise an exception instead"
    )


def _is_wf_signal(exc: BaseException) -> bool:
    # wf's own BaseExceptions (``wf.Cancelled``, a suspension, a store failure, the test kit's
    # crash) unwind a run on purpose; each is defined in wf.
    module = type(exc).__module__
    return module == "wf" or module.startswith("wf.")


def sigint_may_raise() -> bool:
    """Whether a ``KeyboardInterrupt`` raised in this thread may be a real SIGINT (Ctrl-C)
    rather than code raising it: only the main thread runs signal handlers, and only a Python
    handler that raises (Python's default, or ``asyncio.run``'s on a second Ctrl-C) makes one
    of a signal. ``wf worker``, ``wf serve``, ``wf dev`` and ``wf run`` take SIGINT with a
    handler that raises nothing (``wf._interrupts``), as does an event loop's
    (``loop.add_signal_handler``)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        return False  # SIG_DFL, SIG_IGN, or set outside Python: no exception is made of it
    if getattr(handler, "raises_nothing", False) is True:
        return False  # wf's own (wf._interrupts.StopSignals)
    # The handler ``loop.add_signal_handler`` sets (the loop itself runs the real one).
    return not (
        getattr(handler, "__module__", None) == "asyncio.unix_events"
        and getattr(handler, "__name__", None) == "_sighandler_noop"
    )
