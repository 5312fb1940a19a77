"""``LocalStore`` shared by processes: locks, exclusive claims, and waking across processes."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.store.helpers import (
    acquire,
    created,
    forking_holder,
    python,
    taken_over_beside_a_forked_helper,
    write_journal_end,
)
from wf.store import HookRecord
from wf.store._ids import new_run_id
from wf.store.local import LocalStore
from wf.store.local._store import HEAR_INBOXES_AFTER


def _holder(root: Path, run_id: str) -> str:
    return f"""
import asyncio, time
from wf.store.local import LocalStore

async def main():
    store = LocalStore({str(root)!r})
    lease = await store.try_acquire({run_id!r})
    if lease is None:
        print("busy", flush=True)
        return
    await lease.append([{{"type": "step_completed", "ts": 2.0, "by": "child"}}])
    print("locked", flush=True)
    time.sleep(120)

asyncio.run(main())
"""


async def test_lease_held_by_another_process_until_it_dies(local: LocalStore, root: Path) -> None:
    run = await created(local)
    child = python(_holder(root, run.id))
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "locked"
        assert await local.try_acquire(run.id) is None
        other = LocalStore(root)
        assert await other.try_acquire(run.id) is None
        await other.close()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # The kernel dropped the dead holder's lock: the orphan is ours, with its durable events.
    lease = await acquire(local, run.id)
    assert [e.get("by") for e in await local.read_journal(run.id)] == [None, "child"]
    await lease.append([{"type": "run_resumed", "ts": 3.0}])
    await lease.release()


async def test_a_forked_helper_keeps_no_lease_of_a_dead_worker(
    local: LocalStore, root: Path
) -> None:
    """A step's helper forked by the worker inherits the journal's locked descriptor (an
    ``flock`` belongs to the open file description): the worker killed, the run and the cap's
    place are free at once, not when the helper exits."""
    run = await created(local)
    code = forking_holder(f"LocalStore({str(root)!r})", run.id)
    code = "from wf.store.local import LocalStore\n" + code
    await taken_over_beside_a_forked_helper(local, code, run.id)


_CLAIMER = """
import asyncio, sys
from wf.store import HookRecord
from wf.store.local import LocalStore

async def main():
    store = LocalStore({root!r})
    print("ready", flush=True)
    sys.stdin.readline()
    owner = await store.register_hook(HookRecord({token!r}, {run_id!r}, op=1))
    print("won" if owner is None else "lost " + owner, flush=True)

asyncio.run(main())
"""


async def test_processes_racing_for_a_hook_token(local: LocalStore, root: Path) -> None:
    await created(local)  # the store exists before the race
    token = "order-42:approved"
    run_ids = [new_run_id() for _ in range(4)]
    children = [
        python(_CLAIMER.format(root=str(root), token=token, run_id=run_id), stdin=-1)
        for run_id in run_ids
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = [child.communicate(timeout=30)[0].strip() for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    winners = [run_id for run_id, result in zip(run_ids, results, strict=True) if result == "won"]
    assert len(winners) == 1, results
    assert all(r == f"lost {winners[0]}" for r in results if r != "won")
    hook = await local.get_hook(token)
    assert hook is not None and hook.run_id == winners[0]
    assert [h.token for h in await local.list_hooks(winners[0])] == [token]


async def test_post_from_another_process_wakes_a_waiting_worker(
    local: LocalStore, root: Path
) -> None:
    run = await created(local)
    await local.due_runs(0.0)
    local._interval = 60.0  # only a file-system event can wake it in time
    waiter = asyncio.ensure_future(local.wait_for_activity(30.0))
    await asyncio.sleep(0.01)
    code = f"""
import asyncio
from wf.store.local import LocalStore
print(asyncio.run(LocalStore({str(root)!r}).post({run.id!r}, "wake", {{}})))
"""
    child = python(code)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    await asyncio.wait_for(waiter, 20.0)
    assert [m.id for m in await local.read_inbox(run.id)] == [out.strip()]


async def test_post_from_another_process_calls_the_inbox_watcher(
    local: LocalStore, root: Path
) -> None:
    # How a run's driver hears of a cancel posted by ``wf cancel``: the post's due-now entry
    # in ``queue/`` (no directory of the run is watched), not a poll.
    run, other = await created(local), await created(local)
    heard: list[str] = []
    wanted = asyncio.Event()

    def called(name: str) -> None:
        heard.append(name)
        if name == run.id:
            wanted.set()

    unwatch = local.watch_inbox(run.id, lambda: called(run.id))
    local.watch_inbox(other.id, lambda: called(other.id))
    local._interval = 60.0
    await asyncio.sleep(HEAR_INBOXES_AFTER + 0.1)  # the watcher starts for runs that live on
    assert local.hub.hearing()
    heard.clear()
    code = f"""
import asyncio
from wf.store.local import LocalStore
print(asyncio.run(LocalStore({str(root)!r}).post({run.id!r}, "cancel", {{}})))
"""
    child = python(code)
    _out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    await asyncio.wait_for(wanted.wait(), 20.0)
    assert other.id not in heard  # a post wakes its own run's driver only
    unwatch()
    heard.clear()
    await local.post(run.id, "wake", {})
    await local.post(other.id, "wake", {})  # this process's post: at once, on the loop
    await asyncio.sleep(0)
    # At once, on the loop; its file-system event may call again (hints may repeat), and on a
    # loaded machine the watcher's thread can do so before this turn ends.
    assert heard and set(heard) == {other.id}
    await asyncio.sleep(0.05)
    assert set(heard) == {other.id}


async def test_file_events_wake_wait_for_run(local: LocalStore, root: Path) -> None:
    run = await created(local)
    await local.read_journal(run.id)
    local._interval = 60.0
    waiter = asyncio.ensure_future(local.wait_for_run(run.id, 30.0))
    await asyncio.sleep(0.01)
    # Another process's append, as the file system sees it (no in-process signal).
    write_journal_end(
        root / "runs" / run.id / "journal.jsonl", b'{"type": "step_completed", "ts": 2.0}\n'
    )
    await asyncio.wait_for(waiter, 20.0)
    assert len(await local.read_journal(run.id)) == 2


async def test_polling_when_events_are_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WF_POLL_INTERVAL", "0.02")
    store = LocalStore(tmp_path / "polled")
    try:
        run = await created(store)
        await store.read_journal(run.id)
        waiter = asyncio.ensure_future(store.wait_for_run(run.id, 30.0))
        await asyncio.sleep(0.01)
        write_journal_end(
            tmp_path / "polled" / "runs" / run.id / "journal.jsonl",
            b'{"type": "step_completed", "ts": 2.0}\n',
        )
        await asyncio.wait_for(waiter, 20.0)
        assert store.hub._watcher is None
        await store.due_runs(0.0)
        waiter = asyncio.ensure_future(store.wait_for_activity(30.0))
        await asyncio.sleep(0.01)
        (tmp_path / "polled" / "queue" / f"00000000000000+{new_run_id()}").touch()
        await asyncio.wait_for(waiter, 20.0)
    finally:
        await store.close()


async def test_a_change_between_read_and_wait_is_not_slept_through(
    local: LocalStore, root: Path
) -> None:
    run = await created(local)
    await local.get_run(run.id)
    local._interval = 60.0
    write_journal_end(
        root / "runs" / run.id / "journal.jsonl", b'{"type": "step_completed", "ts": 2.0}\n'
    )
    # The write landed before anyone watched: the fingerprint from the read catches it.
    await asyncio.wait_for(local.wait_for_run(run.id, 30.0), 5.0)


async def test_hooks_survive_reopening(root: Path) -> None:
    first = LocalStore(root)
    run_id = new_run_id()
    assert (
        await first.register_hook(HookRecord("t", run_id, op=2, schema={"type": "string"})) is None
    )
    await first.close()
    second = LocalStore(root)
    assert await second.get_hook("t") == HookRecord("t", run_id, op=2, schema={"type": "string"})
    await second.close()


_FORKED_IN_C = """
import asyncio, ctypes, os, sys, threading, time
from tests.store.helpers import created
from wf.store.local import LocalStore, _commit, _pressure

run, flushing = _commit._run, threading.Event()
# A fresh interpreter: tests/conftest.py's pin is not here. Without it a busy disk (another
# program's writes) makes the flush file by file, on the loop, and the flushing thread idle.
_pressure.whole_flush_ok = lambda items: True

def slow(plan):
    if threading.current_thread().name == "wf-flush":  # the flushing thread's flush only
        flushing.set()
        time.sleep(0.5)
    return run(plan)

_commit._run = slow
_commit.others_ready = lambda loop: True  # creations' flushes go to the flushing thread
root = sys.argv[1]

async def parent():
    store = LocalStore(root)
    task = asyncio.ensure_future(created(store))
    deadline = time.monotonic() + 10
    while not flushing.is_set():
        if time.monotonic() > deadline:
            sys.exit("the parent's creation was never flushed in the flushing thread")
        await asyncio.sleep(0.01)
    return store, task

async def child():
    _commit._run = run
    store = LocalStore(root)
    try:
        await asyncio.wait_for(asyncio.gather(*(created(store) for _ in range(3))), 10)
        return 0
    except TimeoutError:
        return 3
    finally:
        await store.close()

loop = asyncio.new_event_loop()
store, task = loop.run_until_complete(parent())
pid = ctypes.PyDLL(None).fork()  # as an extension forks: no Python fork hook runs
if pid == 0:
    os._exit(asyncio.new_event_loop().run_until_complete(child()))
_, status = os.waitpid(pid, 0)
loop.run_until_complete(task)
loop.run_until_complete(store.close())
print(os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_child_forked_in_c_flushes_its_creations_in_a_thread_of_its_own(root: Path) -> None:
    """A process forked by C code (an extension's ``fork()``, which runs no Python fork hook)
    while the parent's flushing thread was mid-flush: the child's creations are flushed by a
    thread it starts, not queued for the parent's, which did not fork with it."""
    proc = python(_FORKED_IN_C.replace("sys.argv[1]", repr(str(root))))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip() == "0", err  # 3: the child's creations waited for ever
