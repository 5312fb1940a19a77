"""The bulkhead: one damaged item (a run, a schedule, a hook, a lane entry, a store file) is
skipped, said once and counted; everything else goes on.

Every place that handles items one at a time for a worker (the claim, schedule firing, the
invariant check, retention, the stores' readers) runs each item's work inside
``Faults.contain``: an exception from that item is noted (logged once per item, with its
kind, id and where it lives: a file path, or a table row) and swallowed. A ``StoreError``
that is not damage (the disk is full, the server is unreachable) is not the item's fault: it
goes on up, to be retried by whoever called.

Each store has one ``Faults`` (``Store.faults``), shared by the worker driving it, so that what
the store skipped while reading and what the worker skipped while driving are one list: the
worker's summary. ``wf store verify`` finds the same items by reading the store (it does not
need a worker to have met them).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import errno
import logging
import os
from collections.abc import Callable, Iterator

from wf._exceptions import RunNotFound, StoreCorrupted, StoreError

log = logging.getLogger("wf.worker")


@dataclasses.dataclass(frozen=True)
class Fault:
    """An item skipped because it cannot be read or driven."""

    kind: str
    """What it is: ``run``, ``schedule``, ``hook``, ``lane entry``, ..."""
    item: str
    """Its id (a run id, a schedule id, a file name when the file is too damaged to say)."""
    where: str
    """Where it lives: a file path, or a table row."""
    reason: str
    failed: bool = False
    """The item is a run the engine failed as damaged (its cause recorded, its journal left as
    it is), rather than one skipped and left alone."""
    again: bool = False
    """The item could not be read this time (one of its files refused: ``EACCES``, ``EIO``):
    it is skipped for now and tried again later, not left alone for good."""
    shown_as: str = ""
    """The name the item is shown under all the same, else empty: a byte stream whose only
    damage is its name file, read by the name its run's journal wrote (a run's detail says
    so; it is not left out)."""

    def __str__(self) -> str:
        return f"{self.kind} {self.item} ({self.where}): {self.reason}"

    def said(self) -> str:
        """What was done, for a log line: ``skipped run …`` or ``failed run … as damaged``."""
        if self.failed:
            return f"failed {self.kind} {self.item} as damaged ({self.where}): {self.reason}"
        if self.again:
            return f"skipped {self} (tried again later)"
        return f"skipped {self}"

    def to_json(self) -> dict[str, str]:
        """As a JSON object (``wf worker --log-format json``); ``shown_as`` only when set."""
        data = dataclasses.asdict(self)
        if not self.shown_as:
            del data["shown_as"]
        return data


_collected: contextvars.ContextVar[tuple[list[Fault], set[Fault]] | None] = contextvars.ContextVar(
    "wf_collected_faults", default=None
)
"""The list ``collect_faults`` fills, in the context it runs in, and the same faults as a set:
each is kept once, and a listing may meet tens of thousands (stray names in one bucket), so
telling whether one is kept already is no scan of the list."""


class Faults:
    """The items skipped so far, each noted (and logged) once."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], Fault] = {}
        self._tries: dict[tuple[str, str], int] = {}
        """For faults noted ``again``: how many times the item failed (one line said in all)."""

    def note(
        self,
        kind: str,
        item: str,
        where: str,
        error: BaseException | str,
        *,
        failed: bool = False,
        again: bool = False,
    ) -> Fault:
        """Record that ``item`` is skipped (``failed``: a run failed as damaged); log it the
        first time only. Within
        ``collect_faults`` it goes to the collecting caller instead, which says it (and a
        worker sharing these faults does not take a listing's find as its own)."""
        key = (kind, item)
        collected = _collected.get()
        fault = self._found.get(key)
        reason = _reason_of(error, where)
        if fault is None:
            fault = Fault(kind, item, where, reason, failed, again)
        elif collected is not None and (fault.where, fault.reason) != (where, reason):
            # A collecting caller says the damage as it is now: the item may have been read
            # mid-rewrite, or damaged otherwise, since it was first noted (what was done of
            # it, a run failed as damaged, stays).
            fault = dataclasses.replace(fault, where=where, reason=reason)
        if collected is not None:
            kept, seen = collected
            if fault not in seen:
                seen.add(fault)
                kept.append(fault)
            return fault
        if again:
            self._tries[key] = self._tries.get(key, 0) + 1
        if key in self._found:
            return fault
        self._found[key] = fault
        if again and self._tries[key] > 1:
            return fault  # said when it first failed; forgotten since, it failed again
        log.error("%s; everything else goes on", fault.said())
        return fault

    def note_collected(self, fault: Fault) -> Fault:
        """``note`` a fault a collecting caller (``collect_faults``) kept and did not say: as
        it would have been noted without the collecting."""
        return self.note(
            fault.kind,
            fault.item,
            fault.where,
            fault.reason,
            failed=fault.failed,
            again=fault.again,
        )

    @contextlib.contextmanager
    def contain(self, kind: str, item: str, where: str | Callable[[], str]) -> Iterator[None]:
        """Run one item's work: an exception of its own is noted and swallowed; a store
        failure that is not damage (``StoreError``), a run that is gone (``RunNotFound``) and
        cancellation go on up. ``where`` may be a function, called only on a fault (where a
        run lives can take a look to tell)."""
        try:
            yield
        except RunNotFound:
            raise  # gone is not damaged: the caller knows what a vanished run means
        except StoreError as error:
            if not isinstance(error, StoreCorrupted):
                raise
            self.note(kind, item, where if isinstance(where, str) else where(), error)
        except Exception as error:
            self.note(kind, item, where if isinstance(where, str) else where(), error)

    def forget(self, kind: str, item: str) -> None:
        """An item noted ``again`` was read after all: it is no longer skipped."""
        self._found.pop((kind, item), None)
        self._tries.pop((kind, item), None)

    def tries(self, kind: str, item: str) -> int:
        """How many times an item noted ``again`` has failed so far (0: none, or it healed)."""
        return self._tries.get((kind, item), 0)

    def for_now(self, kind: str) -> set[str]:
        """The ids of the items of one kind skipped only for now (noted ``again``)."""
        return {item for (k, item), f in self._found.items() if k == kind and f.again}

    def of_kind(self, kind: str) -> set[str]:
        """The ids of the skipped items of one kind."""
        return {item for (k, item) in self._found if k == kind}

    def __iter__(self) -> Iterator[Fault]:
        return iter(list(self._found.values()))

    def __len__(self) -> int:
        return len(self._found)


def _reason_of(error: BaseException | str, where: str) -> str:
    reason = error if isinstance(error, str) else _reason(error)
    return reason.removeprefix(f"{where}: ")  # a store error names its file already


@contextlib.contextmanager
def collect_faults() -> Iterator[list[Fault]]:
    """The items any store would note as skipped while the block runs (in this context),
    each once: kept apart from the stores' ``Faults`` and their log, for the caller to say."""
    collected: list[Fault] = []
    token = _collected.set((collected, set()))
    try:
        yield collected
    finally:
        _collected.reset(token)


def collecting() -> bool:
    """Whether a ``collect_faults`` block is running in this context: what a store skips
    goes to its caller, to be said with the answer (and counted), not to a log."""
    return _collected.get() is not None


_STORE_WIDE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
"""Errors of a file system, whichever of its files met them: the store's, not one item's."""

_OUT_OF_FILES = frozenset({errno.EMFILE, errno.ENFILE})


def named_place(error: BaseException, default: str | None = None) -> str:
    """Where a store's error says its damage lives: a store's errors begin with the path or
    key they met (``<key>: WRONGTYPE …``), so the text before the first ``": "``; the whole
    text, or ``default`` when given, if it has none."""
    text = str(error)
    if default is not None and ": " not in text:
        return default
    return text.partition(": ")[0]


def os_error(error: BaseException) -> OSError | None:
    """The ``OSError`` a ``StoreError`` was raised from, if any."""
    cause = error.__cause__
    return cause if isinstance(cause, OSError) else None


def no_space(error: BaseException) -> bool:
    """Whether ``error`` is its file system being full (``ENOSPC``, ``EDQUOT``)."""
    found = os_error(error)
    return found is not None and found.errno in (errno.ENOSPC, errno.EDQUOT)


def out_of_files(error: BaseException) -> bool:
    """Whether ``error`` is this process running out of open files (``EMFILE``, ``ENFILE``):
    nothing wrong with the file it was opening, nor with the store."""
    found = os_error(error)
    return found is not None and found.errno in _OUT_OF_FILES


def item_own(error: BaseException, directory: str) -> bool:
    """Whether a ``StoreError`` is the failure of one of the files under ``directory`` (one
    run's): it could not be opened, read or locked (``EACCES``, ``EIO``), rather than the store
    as a whole failing (a full or read-only file system, a shared file)."""
    found = os_error(error)
    if found is None or found.errno in _STORE_WIDE or found.errno in _OUT_OF_FILES:
        return False
    path = found.filename
    if not isinstance(path, str):
        return False
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _reason(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if isinstance(error, StoreError):
        return text or type(error).__name__
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
