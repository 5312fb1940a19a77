"""Hook tokens: ``hooks/<sha256(token)>.json``, claimed by exclusive creation.

Claiming publishes a complete file with ``link`` (``_atomic.publish``), which fails if the name
exists: of two processes racing for one token exactly one wins, and a reader never sees a
half-written claim. The owning run also gets a marker ``hooks/runs/<run_id>/<sha>`` so that
listing one run's hooks reads one small directory; markers are hints, checked against the hook
file.

Only the owning run's driver releases a hook, so read-compare-unlink needs no lock: nobody else
can free the token between the read and the unlink.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import os

import orjson

from wf._exceptions import StoreCorrupted, StoreError
from wf.store._base import HookRecord, WebhookDelivery
from wf.store._faults import Faults
from wf.store.local import _atomic, _fsops, _waitlock
from wf.store.local._layout import hook_file


def _encode(hook: HookRecord) -> bytes:
    return orjson.dumps(
        {
            "token": hook.token,
            "run_id": hook.run_id,
            "op": hook.op,
            "schema": hook.schema,
            "created_at": hook.created_at,
        }
    )


def _decode(raw: bytes, path: str) -> HookRecord:
    try:
        return HookRecord.from_json(orjson.loads(raw))
    except ValueError as error:  # orjson's decode error is one
        raise StoreCorrupted(f"{path}: not a hook record ({error})") from None


class Hooks:
    """Operations on ``hooks/`` of one store."""

    def __init__(self, root: str, faults: Faults | None = None) -> None:
        self.dir = os.path.join(root, "hooks")
        self._marks = os.path.join(self.dir, "runs")
        self._delivered = os.path.join(self.dir, "delivered")
        self.faults = faults if faults is not None else Faults()

    def _path(self, token: str) -> str:
        return os.path.join(self.dir, hook_file(token))

    def get(self, token: str) -> HookRecord | None:
        """The live hook with that token."""
        path = self._path(token)
        try:
            raw = _fsops.read_bytes(path, allow=(errno.ENOENT,))
        except FileNotFoundError:
            return None
        return _decode(raw, path)

    def register(self, hook: HookRecord) -> str | None:
        """Claim the token; None if claimed (or already ours), else the owner's run id."""
        name = hook_file(hook.token)
        data = _encode(hook)
        while True:
            if _atomic.publish(self.dir, name, data):
                self._mark(hook.run_id, name)
                return None
            owner = self.get(hook.token)
            if owner is None:
                continue  # released between our attempt and our read: try again
            if owner.run_id != hook.run_id:
                return owner.run_id
            # Our own run registers again (replay): refresh the record in place.
            _atomic.replace(self.dir, name, data)
            self._mark(hook.run_id, name)
            return None

    def _mark(self, run_id: str, name: str) -> None:
        marks = os.path.join(self._marks, run_id)
        for directory in (self._marks, marks):
            if _fsops.mkdir(directory, allow=(errno.EEXIST,)):
                _fsops.fsync_dir(os.path.dirname(directory))
        if _atomic.touch(marks, name):
            _fsops.fsync_dir(marks)

    def release(self, token: str, run_id: str) -> None:
        """Free the token if ``run_id`` owns it."""
        owner = self.get(token)
        if owner is None or owner.run_id != run_id:
            return
        name = hook_file(token)
        _fsops.unlink(os.path.join(self.dir, name))
        _fsops.fsync_dir(self.dir)
        # The marker goes last: a stale marker is filtered out by ``of_run``.
        _fsops.unlink(os.path.join(self._marks, run_id, name))

    def save_delivery(self, delivery: WebhookDelivery) -> None:
        """Publish the delivery under its id unless one is there already."""
        os.makedirs(self._delivered, exist_ok=True)
        _atomic.publish(self._delivered, hook_file(delivery.id), orjson.dumps(delivery.to_json()))

    def lock_deliveries(self, *, wait: bool) -> int | None:
        """An exclusive ``flock`` on ``hooks/delivered/.lock``: its descriptor, which the
        caller closes to unlock; None if another holds it and ``wait`` is false. Held while
        a keyed post checks, posts and keeps."""
        os.makedirs(self._delivered, exist_ok=True)
        path = os.path.join(self._delivered, ".lock")
        fd = _fsops.open_fd(path, os.O_RDWR | os.O_CREAT)
        try:
            if wait:
                _waitlock.flock(fd, fcntl.LOCK_EX, path, "held while a keyed resume posts")
            else:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _fsops.close(fd)
            return None
        except OSError as error:
            _fsops.close(fd)
            raise StoreError(f"cannot lock {path}: {error.strerror}") from error
        return fd

    def get_delivery(self, delivery_id: str) -> WebhookDelivery | None:
        """The delivery kept under that id."""
        path = os.path.join(self._delivered, hook_file(delivery_id))
        try:
            raw = _fsops.read_bytes(path, allow=(errno.ENOENT, errno.ENOTDIR))
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            return WebhookDelivery.from_json(orjson.loads(raw))
        except ValueError as error:
            raise StoreCorrupted(f"{path}: not a webhook delivery ({error})") from None

    def prune_deliveries(self, before: float) -> int:
        """Remove the deliveries made before ``before`` (and damaged ones); how many."""
        try:
            names = _fsops.listdir(self._delivered, allow=(errno.ENOENT, errno.ENOTDIR))
        except (FileNotFoundError, NotADirectoryError):
            return 0
        pruned = 0
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue
            path = os.path.join(self._delivered, name)
            try:
                at = WebhookDelivery.from_json(orjson.loads(_fsops.read_bytes(path))).at
            except FileNotFoundError:
                continue
            except ValueError:
                at = -math.inf  # damaged: it answers nothing, so it goes
            if at < before:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                pruned += 1
        if pruned:
            _fsops.fsync_dir(self._delivered)
        return pruned

    def of_run(self, run_id: str) -> list[HookRecord]:
        """The run's live hooks."""
        marks = _fsops.listdir(os.path.join(self._marks, run_id))
        found = []
        for name in sorted(marks):
            if name.startswith("."):
                continue
            hook = self._listed(name)
            if hook is not None and hook.run_id == run_id:
                found.append(hook)
        return found

    def all(self) -> list[HookRecord]:
        """Every live hook (reads the whole hooks directory). A damaged hook file is skipped
        with a warning naming it: one bad file must not hide every other hook."""
        found = []
        for name in sorted(_fsops.listdir(self.dir)):
            if name.endswith(".json") and not name.startswith("."):
                hook = self._listed(name)
                if hook is not None:
                    found.append(hook)
        return found

    def _listed(self, name: str) -> HookRecord | None:
        """A listed hook; None for a damaged file, noted in ``faults`` (or handed to a
        collecting caller) and left out: one bad file must not hide every other hook."""
        hook = None
        path = os.path.join(self.dir, name)
        with self.faults.contain("hook", name.removesuffix(".json"), path):
            hook = self._read_name(name)
        return hook

    def _read_name(self, name: str) -> HookRecord | None:
        path = os.path.join(self.dir, name)
        try:
            raw = _fsops.read_bytes(path, allow=(errno.ENOENT,))
        except FileNotFoundError:
            return None
        return _decode(raw, path)
