"""Queue options through public names: retries, delays, unique starts, progress, ordering, caps."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from typing import Any

import pytest

import wf
from wf import Engine, admin
from wf.engine._workflow import _registry
from wf.store import Store
from wf.testing import MockClock, TestEngine

log: list[str] = []
flaky_failures: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    log.clear()
    flaky_failures.clear()


@wf.step
def record(text: str) -> str:
    log.append(text)
    return text


@wf.step(max_retries=0)
def flaky(key: str, failures: int) -> str:
    seen = flaky_failures.get(key, 0)
    if seen < failures:
        flaky_failures[key] = seen + 1
        raise RuntimeError(f"{key} failure {seen + 1}")
    return f"{key} ok"


@wf.workflow(max_attempts=3, backoff=lambda attempt: 10.0)
async def retried(key: str, failures: int) -> str:
    await record("before")
    return await flaky(key, failures)


@wf.workflow(max_attempts=5)
async def fatal() -> None:
    await record("fatal")
    raise wf.FatalError("no point trying again")


@wf.workflow
async def plain(text: str) -> str:
    return await record(text)


@wf.workflow(progress=int)
async def reporting(n: int) -> int:
    for i in range(n):
        await record(f"step {i}")
        wf.progress(i + 1)
    return n


async def test_a_failed_attempt_is_retried_after_its_backoff_and_completed_steps_replay(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    run = await wf.start(retried, "a", 2)
    assert await run.result() == "a ok"
    assert log == ["before"]  # the completed step replayed on attempts 2 and 3
    record_ = await run.record()
    assert record_.attempt == 3
    journal = await wf_engine.store.read_journal(run.id)
    retries = [e for e in journal if e["type"] == "run_retrying"]
    assert [e["attempt"] for e in retries] == [2, 3]
    assert retries[1]["retry_at"] - retries[0]["retry_at"] >= 10.0


async def test_attempts_run_out_and_the_run_fails(wf_engine: Engine) -> None:
    run = await wf.start(retried, "b", 5)
    with pytest.raises(wf.RunFailed, match="b failure 3"):
        await run.result()
    assert (await run.record()).attempt == 3


async def test_fatal_error_fails_at_once(wf_engine: Engine) -> None:
    run = await wf.start(fatal)
    with pytest.raises(wf.RunFailed):
        await run.result()
    assert log == ["fatal"]
    assert (await run.record()).attempt == 1


@wf.step(max_retries=3)
def declined() -> None:
    log.append("declined")
    raise wf.FatalError("card declined")


@wf.workflow(max_attempts=3, backoff=lambda attempt: 1.0)
async def fatal_in_a_task_group() -> None:
    async with asyncio.TaskGroup() as group:
        group.create_task(declined())
        group.create_task(record("beside it"))


async def test_a_fatal_error_in_a_task_group_fails_the_run_at_once(wf_engine: Engine) -> None:
    run = await wf.start(fatal_in_a_task_group)
    with pytest.raises(wf.RunFailed, match="TaskGroup") as failed:
        await asyncio.wait_for(run.result(), 10)
    assert log.count("declined") == 1
    assert (await run.record()).attempt == 1
    original = failed.value.original
    assert isinstance(original, ExceptionGroup)
    assert [type(e) for e in original.exceptions] == [wf.FatalError]


def _fails_with_backoff(backoff: Any) -> wf.Workflow[[], None]:
    async def body() -> None:
        await record("attempt")
        raise RuntimeError("the body fails")

    return wf.workflow(name="queues:bad_backoff", max_attempts=3, backoff=backoff)(body)


def _divide_by_zero(attempt: int) -> float:
    return attempt / 0


@pytest.mark.parametrize(
    ("backoff", "said"),
    [
        (_divide_by_zero, "raised ZeroDivisionError for attempt 1: division by zero"),
        (lambda attempt: "soon", "returned 'soon' for attempt 1"),
        (lambda attempt: None, "returned None for attempt 1"),
        (lambda attempt: math.nan, "returned nan for attempt 1"),
        (lambda attempt: -1.0, "returned -1.0 for attempt 1"),
        (lambda attempt: math.inf, "returned inf for attempt 1"),
        (lambda attempt: 10**400, "returned 1000"),
        (lambda attempt: 1e30, "returned 1e\\+30 for attempt 1"),
    ],
    ids=["raises", "text", "none", "nan", "negative", "inf", "huge-int", "past-9999"],
)
async def test_a_backoff_that_fails_fails_its_run_alone_with_no_further_attempt(
    wf_engine: Engine, backoff: Any, said: str
) -> None:
    run = await wf.start(_fails_with_backoff(backoff))
    other = await wf.start(plain, "unharmed")
    with pytest.raises(wf.RunFailed, match=f"backoff .*{said}") as failed:
        await asyncio.wait_for(run.result(), 10)
    assert isinstance(failed.value.original, wf.UsageError)
    assert (await run.record()).attempt == 1
    assert log.count("attempt") == 1
    assert await asyncio.wait_for(other.result(), 10) == "unharmed"


async def test_a_backoff_may_give_a_timedelta(wf_engine: Engine, mock_clock: MockClock) -> None:
    run = await wf.start(_fails_with_backoff(lambda attempt: dt.timedelta(minutes=attempt)))
    with pytest.raises(wf.RunFailed, match="the body fails"):
        await asyncio.wait_for(run.result(), 10)
    assert (await run.record()).attempt == 3
    journal = await wf_engine.store.read_journal(run.id)
    retries = [e for e in journal if e["type"] == "run_retrying"]
    assert retries[1]["retry_at"] - retries[0]["retry_at"] >= 120.0


async def test_retry_of_a_failed_run_runs_one_more_attempt(wf_engine: Engine) -> None:
    run = await wf.start(retried.with_options(max_attempts=1), "c", 1)
    with pytest.raises(wf.RunFailed):
        await run.result()
    await run.retry()
    assert await run.status() == wf.RunStatus.PENDING
    assert await run.result() == "c ok"
    assert (await run.record()).attempt == 2
    with pytest.raises(wf.UsageError, match="only a failed run"):
        await run.retry()


async def test_delayed_start_is_pending_until_due(wf_engine: Engine, mock_clock: MockClock) -> None:
    mock_clock.autojump = False
    start = mock_clock.now()
    run = await wf.start(plain.with_options(delay=90), "late")
    record_ = await run.record()
    assert record_.status == wf.RunStatus.PENDING
    assert record_.wake_at == pytest.approx(start + 90)
    assert await wf_engine.store.due_runs(mock_clock.now()) == []
    mock_clock.autojump = True
    assert await run.result() == "late"
    assert mock_clock.now() >= start + 90


async def test_at_needs_a_time_zone(wf_engine: Engine) -> None:
    with pytest.raises(wf.UsageError, match="time zone"):
        plain.with_options(at=dt.datetime(2030, 1, 1))
    assert await wf_engine.store.list_runs() == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": -1}, "priority"),
        ({"priority": 2**21}, "priority"),
        ({"priority": "high"}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"colour": "red"}, "unknown run option"),
    ],
)
async def test_bad_run_options_are_one_clear_error(
    wf_engine: Engine, options: dict[str, object], message: str
) -> None:
    with pytest.raises(wf.UsageError, match=message):
        plain.with_options(**options)


def test_bad_workflow_options_are_refused_at_declaration() -> None:
    with pytest.raises(wf.UsageError, match="priority"):

        @wf.workflow(priority=2**21)
        async def too_high() -> None: ...

    with pytest.raises(wf.UsageError, match="rate_limit"):

        @wf.workflow(rate_limit=5)  # type: ignore[arg-type]
        async def no_window() -> None: ...


async def test_a_group_function_that_raises_or_returns_a_non_string(wf_engine: Engine) -> None:
    @wf.workflow(group=lambda text: 1 / 0)
    async def raising(text: str) -> None: ...

    @wf.workflow(group=lambda text: 42)
    async def numeric(text: str) -> None: ...

    with pytest.raises(wf.UsageError, match="ZeroDivisionError"):
        await wf.start(raising, "x")
    with pytest.raises(wf.UsageError, match="str or None"):
        await wf.start(numeric, "x")
    assert await wf_engine.store.list_runs() == []


async def test_unique_starts(wf_engine: Engine) -> None:
    first = await wf.start(plain, "one", run_id="order-1")
    again = await wf.start(plain, "one", run_id="order-1")
    assert again == first
    with pytest.raises(wf.RunAlreadyExists, match="another input"):
        await wf.start(plain, "two", run_id="order-1")
    with pytest.raises(wf.RunAlreadyExists, match="unique"):
        await wf.start(plain.with_options(unique=True), "one", run_id="order-1")
    assert len(await wf_engine.store.list_runs()) == 1


async def test_progress_is_watched_and_never_reemitted_by_replay(wf_engine: Engine) -> None:
    run = await wf.start(reporting, 3, detach=True)
    seen = []
    worker = wf.Worker(wf_engine)
    import asyncio

    task = asyncio.ensure_future(worker.run(until_idle=True))
    async for event in run.watch():
        seen.append((event.kind, event.attempt, event.data))
    await task
    assert seen == [
        ("started", 1, None),
        ("progress", None, 1),
        ("progress", None, 2),
        ("progress", None, 3),
        ("completed", None, None),
    ]
    finished = [e.kind async for e in run.watch()]
    assert finished == ["completed"]


async def test_progress_is_validated_against_the_declared_type(wf_engine: Engine) -> None:
    @wf.workflow(progress=int)
    async def wrong() -> None:
        wf.progress("not a number")

    run = await wf.start(wrong)
    with pytest.raises(wf.RunFailed, match="progress"):
        await run.result()


async def test_priorities_higher_first_fifo_within(wf_engine: Engine) -> None:
    runs = []
    for priority in (0, 5, 0, 9, 5):
        runs.append(
            await wf.start(plain.with_options(priority=priority), str(priority), detach=True)
        )
    due = await wf_engine.store.due_runs(wf_engine.clock.now())
    assert due == [runs[3].id, runs[1].id, runs[4].id, runs[0].id, runs[2].id]


async def test_a_group_runs_one_at_a_time_in_order(wf_engine: Engine) -> None:
    @wf.workflow(group="g")
    async def lane(n: int) -> int:
        await record(f"start {n}")
        await wf.sleep(5)
        await record(f"end {n}")
        return n

    runs = [await wf.start(lane, n, detach=True) for n in range(3)]
    await wf.Worker(wf_engine, concurrency=10).run(until_idle=True)
    assert [await r.result() for r in runs] == [0, 1, 2]
    assert log == ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"]


async def test_a_claimed_lane_head_is_admitted_without_reading_its_lane_again(
    wf_engine: Engine, engine_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store whose claim leaves out the runs that wait in their lanes leases only heads, and
    # a lane never gains a run ahead of one of them: admission takes the claim's word.
    store = engine_store
    looks: list[str] = []
    lane_ahead = store.lane_ahead

    async def counted(lane: str, run_id: str, limit: int) -> list[str]:
        looks.append(run_id)
        return await lane_ahead(lane, run_id, limit)

    monkeypatch.setattr(store, "lane_ahead", counted)

    @wf.workflow(group=lambda n: f"g{n % 2}")
    async def lane(n: int) -> int:
        await record(f"start {n}")
        await record(f"end {n}")
        return n

    runs = [await wf.start(lane, n, detach=True) for n in range(6)]
    await wf.Worker(wf_engine, concurrency=10).run(until_idle=True)
    assert [await r.result() for r in runs] == list(range(6))
    for group in (0, 1):
        mine = [e for e in log if int(e.split()[1]) % 2 == group]
        assert mine == [f"{w} {n}" for n in range(group, 6, 2) for w in ("start", "end")]
    if type(store).__name__ in ("PostgresStore", "LocalStore"):
        assert looks == []
    else:
        assert looks  # the other stores' admission still reads the lane


async def test_a_claimed_lane_head_without_caps_takes_no_turn_for_places(
    wf_engine: Engine, engine_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lane head the claim vouched for, with no cap and no rate limit, has nothing to ask
    # for: its drive does not queue for places behind the runs claimed before it. A capped
    # one still does (its cap's places go in claim order).
    turns: list[tuple[str, frozenset[str]]] = []
    order = wf_engine.admission_order
    turn = order.turn

    async def counted(run_id: str, keys: frozenset[str]) -> None:
        turns.append((run_id, keys))
        await turn(run_id, keys)

    monkeypatch.setattr(order, "turn", counted)

    @wf.workflow(group=lambda n: f"g{n % 2}")
    async def lane(n: int) -> int:
        await record(f"lane {n}")
        return n

    @wf.workflow(group="c", concurrency=1)
    async def capped(n: int) -> int:
        await record(f"capped {n}")
        return n

    runs = [await wf.start(lane, n, detach=True) for n in range(4)]
    held = [await wf.start(capped, n, detach=True) for n in range(2)]
    await wf.Worker(wf_engine, concurrency=10).run(until_idle=True)
    assert [await r.result() for r in runs] == list(range(4))
    assert [await r.result() for r in held] == [0, 1]
    capped_ids = {r.id for r in held}
    if type(engine_store).__name__ in ("PostgresStore", "LocalStore"):
        assert {run_id for run_id, _ in turns} == capped_ids
    assert all(keys for run_id, keys in turns if run_id in capped_ids)


async def test_equal_runs_start_in_creation_order_whatever_their_ids(wf_engine: Engine) -> None:
    # Caller-chosen ids created against their sort order: p3, p2, p1, p0.
    runs = [await wf.start(plain, f"p{n}", run_id=f"p{n}", detach=True) for n in (3, 2, 1, 0)]
    listed = await admin.list_runs(wf_engine.store)
    assert [r.id for r in listed.runs] == ["p0", "p1", "p2", "p3"]  # newest created first
    await wf.Worker(wf_engine, concurrency=1).run(until_idle=True)
    assert [await r.result() for r in runs] == ["p3", "p2", "p1", "p0"]
    assert log == ["p3", "p2", "p1", "p0"]


@wf.workflow(name="queues:onboard", group=lambda user: user)
async def onboard(user: str) -> str:
    return await record(f"onboard {user}")


@wf.workflow(name="queues:invoice", group=lambda user: user)
async def invoice(user: str) -> str:
    return await record(f"invoice {user}")


@wf.workflow(name="queues:welcome", group=lambda user: user, queue="mail")
async def welcome(user: str) -> str:
    await wf.sleep(5)
    return await record(f"welcome {user}")


@wf.workflow(name="queues:receipt", group=lambda user: user, queue="mail")
async def receipt(user: str) -> str:
    return await record(f"receipt {user}")


async def test_a_group_lane_belongs_to_a_queue(wf_engine: Engine) -> None:
    began = wf_engine.clock.now()
    later = await wf.start(onboard.with_options(delay=3600), "bob", detach=True)
    now = await wf.start(invoice, "bob", detach=True)  # its own queue: not behind onboard
    first = await wf.start(welcome, "bob", detach=True)
    second = await wf.start(receipt, "bob", detach=True)  # queue "mail": behind welcome
    detail = await admin.run_detail(wf_engine.store, second.id)
    [reason] = admin.explain(detail).reasons
    assert reason.kind == "held" and reason.count == 1
    assert reason.detail is not None and first.id in reason.detail  # names the run ahead
    assert "group 'bob' of queue 'mail'" in reason.detail
    free = admin.explain(await admin.run_detail(wf_engine.store, now.id)).reasons
    assert [r.kind for r in free] != ["held"]  # nothing of onboard's lane holds it
    await wf.Worker(wf_engine, concurrency=10, queues=["mail"]).run(until_idle=True)
    assert log == ["welcome bob", "receipt bob"]
    await wf.Worker(wf_engine, concurrency=10).run(until_idle=True)
    assert await now.result() == "invoice bob"
    assert await later.result() == "onboard bob"
    assert log.index("invoice bob") < log.index("onboard bob")
    assert wf_engine.clock.now() >= began + 3600


async def test_workflow_concurrency_cap_holds_runs_pending(wf_engine: Engine) -> None:
    from wf.engine._queueing import explain

    @wf.workflow(concurrency=1)
    async def capped(n: int) -> int:
        await record(f"start {n}")
        await wf.sleep(1)
        await record(f"end {n}")
        return n

    runs = [await wf.start(capped, n, detach=True) for n in range(3)]
    await wf.Worker(wf_engine, concurrency=10).run(until_idle=True)
    assert [await r.result() for r in runs] == [0, 1, 2]
    for n in range(3):
        assert log.index(f"end {n}") == log.index(f"start {n}") + 1
    assert await explain(wf_engine.store, await runs[0].record(), wf_engine.clock.now()) is None


@wf.workflow(name="queues:capped-one", concurrency=1)
async def capped_one(n: int) -> int:
    return n


@wf.workflow(name="queues:once-a-minute", rate_limit=(1, 60))
async def once_a_minute(n: int) -> int:
    return n


async def test_a_run_held_by_a_cap_is_explained_with_the_runs_ahead(wf_engine: Engine) -> None:
    # Another process drives a run of the workflow: its one place is taken.
    place = await wf_engine.store.try_slot("workflow:queues:capped-one", 1)
    assert place is not None
    runs = [await wf.start(capped_one, n, detach=True) for n in range(3)]
    await wf.start(plain, "other workflow", detach=True)  # not held by this cap: not ahead
    for n, run in enumerate(runs):
        why = admin.explain(await admin.run_detail(wf_engine.store, run.id))
        [reason] = why.reasons
        assert reason.kind == "held"
        assert reason.detail == "held by the cap of workflow 'queues:capped-one' (1 at once)"
        assert reason.count == n
    await place.release()
    await wf.Worker(wf_engine, concurrency=10).run(until_idle=True)
    assert [await r.result() for r in runs] == [0, 1, 2]


async def test_a_run_held_by_a_rate_limit_says_until_when(wf_engine: Engine) -> None:
    now = wf_engine.clock.now()
    first = await wf.start(once_a_minute, 0, detach=True)
    await wf.Worker(wf_engine, concurrency=10).run(until_idle=True)
    assert await first.result() == 0  # its start counted against the limit
    later = [await wf.start(once_a_minute, n, detach=True) for n in (1, 2)]
    for n, run in enumerate(later):
        detail = await admin.run_detail(wf_engine.store, run.id)
        [reason] = admin.explain(detail).reasons
        assert reason.kind == "held" and reason.count == n
        limit = "the rate limit of workflow 'queues:once-a-minute' (1 per 60 s)"
        assert reason.detail is not None and reason.detail.startswith(f"held by {limit} until ")
        assert reason.at == pytest.approx(now + 60, abs=1)
    # Looking counted nothing: the next start still comes when the minute is over.
    await wf.Worker(wf_engine, concurrency=10).run(until_idle=True)
    assert [await r.result() for r in later] == [1, 2]
    assert wf_engine.clock.now() >= now + 120


async def test_queue_names_route_runs_to_their_workers(wf_engine: Engine) -> None:
    @wf.workflow(queue="emails")
    async def email(n: int) -> int:
        return n

    mail = await wf.start(email, 1, detach=True)
    other = await wf.start(plain, "x", detach=True)
    await wf.Worker(wf_engine, queues=["emails"]).run(until_idle=True)
    assert await mail.status() == wf.RunStatus.COMPLETED
    assert await other.status() == wf.RunStatus.PENDING


async def test_a_worker_of_one_queue_stops_when_idle_without_waiting_for_other_queues(
    wf_engine: Engine,
) -> None:
    @wf.workflow(queue="a")
    async def in_a(n: int) -> int:
        return n

    @wf.workflow(queue="b")
    async def in_b(n: int) -> int:
        return n

    began = wf_engine.clock.now()
    mine = await wf.start(in_a, 1, detach=True)
    theirs = await wf.start(in_b.with_options(delay=82), 2, detach=True)
    await wf.Worker(wf_engine, queues=["a"]).run(until_idle=True)
    assert await mine.status() == wf.RunStatus.COMPLETED
    assert await theirs.status() == wf.RunStatus.PENDING
    assert wf_engine.clock.now() < began + 82  # never waited for queue b's timer
    assert await wf_engine.store.next_due_at(queues=["a"]) is None
    assert await wf_engine.store.next_due_at(queues=["b"]) == pytest.approx(began + 82, abs=0.01)


async def test_rate_limit_spaces_starts(wf_engine: Engine, mock_clock: MockClock) -> None:
    @wf.workflow(rate_limit=(2, 60))
    async def limited(n: int) -> float:
        return wf.now().timestamp()

    begin = mock_clock.now()
    runs = [await wf.start(limited, n, detach=True) for n in range(5)]
    await wf.Worker(wf_engine).run(until_idle=True)
    starts = sorted([await r.result() for r in runs])
    assert starts[1] - begin < 1
    assert starts[2] - begin >= 60
    assert starts[4] - begin >= 120


# -- failures that no further attempt can mend -------------------------------------------------

shape: dict[str, int] = {}


@wf.step
def noted(text: str) -> str:
    log.append(text)
    return text


@wf.step(max_retries=0)
def change_the_code_then_fail(what: str) -> None:
    """A deploy between two attempts: the code the next attempt replays is not this one."""
    if what == "steps":
        shape["steps"] = 2
    else:
        # A process declares one function a name: the deploy forgets the old one first.
        _registry.pop("queues:reshaped")
        wf.workflow(name="queues:reshaped", max_attempts=5, backoff=lambda attempt: 1.0)(
            _reshaped_v2
        )
    raise RuntimeError("attempt 1 failed")


@wf.workflow(max_attempts=5, backoff=lambda attempt: 1.0)
async def shifting() -> str:
    if shape.get("steps", 1) == 1:
        await record("v1")  # the journal has this step at op 1...
        await change_the_code_then_fail("steps")
    return await noted("v2")  # ...where the next attempt calls another


async def _reshaped_v1(n: int) -> int:
    await change_the_code_then_fail("signature")
    return n


async def _reshaped_v2(n: list[int]) -> int:  # the stored input (1) no longer validates
    return len(n)


async def test_nondeterminism_fails_the_run_with_no_further_attempt(wf_engine: Engine) -> None:
    shape.clear()
    run = await wf.start(shifting)
    with pytest.raises(wf.RunFailed, match="NondeterminismError"):
        await run.result()
    record_ = await run.record()
    assert record_.error is not None and record_.error["type"] == "wf.NondeterminismError"
    assert record_.attempt == 2  # of 5: the second attempt found the divergence, and it stood
    journal = await wf_engine.store.read_journal(run.id)
    assert [e["attempt"] for e in journal if e["type"] == "run_retrying"] == [2]
    assert log == ["v1"]  # "v2" never ran: the divergence is found before the step runs


async def test_input_that_no_longer_validates_fails_with_no_further_attempt(
    wf_engine: Engine,
) -> None:
    _registry.pop("queues:reshaped", None)  # the deploy of the test before (another store's)
    reshaped = wf.workflow(name="queues:reshaped", max_attempts=5, backoff=lambda a: 1.0)(
        _reshaped_v1
    )
    run = await wf.start(reshaped, 1)
    with pytest.raises(wf.RunFailed, match="parameter 'n'"):
        await run.result()
    record_ = await run.record()
    assert record_.attempt == 2  # of 5
    assert record_.error is not None and record_.error["type"] == "wf.InputValidationError"
    journal = await wf_engine.store.read_journal(run.id)
    assert [e["attempt"] for e in journal if e["type"] == "run_retrying"] == [2]


# -- the attempt count across a crash ---------------------------------------------------------

gate: list[asyncio.Event] = []
at_gate: list[asyncio.Event] = []


@wf.step
async def wait_at_gate() -> str:
    at_gate[0].set()
    await gate[0].wait()
    return "through"


@wf.workflow(max_attempts=3, backoff=lambda attempt: 1.0)
async def crashes_in_attempt_two(key: str) -> str:
    await record("before")
    await flaky(key, 1)  # fails in attempt 1 only
    return await wait_at_gate()  # attempt 2 waits here, and its driver dies


async def test_the_attempt_count_survives_a_crash_mid_attempt(wf_engine: TestEngine) -> None:
    gate[:] = [asyncio.Event()]
    at_gate[:] = [asyncio.Event()]
    worker = wf.Worker(wf_engine, poll=0.05)
    serving = asyncio.ensure_future(worker.run())
    try:
        run = await wf.start(crashes_in_attempt_two, "k", detach=True)
        await asyncio.wait_for(at_gate[0].wait(), 30)
        await wf_engine.crash(run)  # its driver dies in attempt 2, as a SIGKILL leaves it
        record_ = await run.record()
        assert (record_.attempt, record_.status) == (2, wf.RunStatus.RUNNING)
        gate[0].set()
        assert await run.result(timeout=30) == "through"
    finally:
        worker.stop()
        await asyncio.wait_for(serving, 10)
    assert (await run.record()).attempt == 2  # the next driver went on with attempt 2
    journal = await wf_engine.store.read_journal(run.id)
    assert [e["attempt"] for e in journal if e["type"] == "run_retrying"] == [2]
    assert log == ["before"]


# -- group_concurrency ------------------------------------------------------------------------


async def test_group_concurrency_two_runs_of_a_group_at_once_in_order(wf_engine: Engine) -> None:
    @wf.workflow(group="pair", group_concurrency=2)
    async def paired(n: int, seconds: int) -> int:
        await record(f"start {n}")
        # Fake time, shorter than suspend_after: in flight throughout. It does not pass while
        # the other run admitted with this one starts (its round trips hold the clock still).
        await wf.sleep(seconds)
        await record(f"end {n}")
        return n

    # Different lengths, so that runs end out of order and a freed place goes to the next.
    lengths = [10, 2, 3, 8, 1, 5, 2]
    runs = [await wf.start(paired, n, s, detach=True) for n, s in enumerate(lengths)]
    await wf.Worker(wf_engine, concurrency=10).run(until_idle=True)
    assert [await r.result() for r in runs] == list(range(len(lengths)))
    starts = [int(line.split()[1]) for line in log if line.startswith("start")]
    # In lane order: two runs of the group are admitted together and race to their first
    # line, so a run may precede the one just before it, but never one further ahead.
    assert sorted(starts) == list(range(len(lengths)))
    assert all(max(starts[: i + 1]) <= i + 1 for i in range(len(starts))), starts
    in_flight: set[int] = set()
    peak = 0
    for line in log:
        kind, n = line.split()
        if kind == "start":
            # Runs started before it and not ended: fewer than two.
            assert len(in_flight) < 2, (line, log)
            in_flight.add(int(n))
            peak = max(peak, len(in_flight))
        else:
            in_flight.discard(int(n))
    assert peak == 2


@wf.workflow(max_attempts=2, backoff=lambda attempt: 600.0)
async def backs_off(key: str) -> float:
    await record("before")
    await flaky(key, 1)  # fails in attempt 1 only
    return wf.now().timestamp()


async def test_the_next_due_time_survives_the_process(
    wf_engine: TestEngine, mock_clock: MockClock
) -> None:
    mock_clock.autojump = False  # the 600 s backoff does not pass in this process
    begin = mock_clock.now()
    run = await wf.start(backs_off, "d")
    await wf_engine.wait_driven(run)
    record_ = await run.record()
    assert (record_.status, record_.attempt) == (wf.RunStatus.PENDING, 2)
    assert record_.wake_at is not None and record_.wake_at >= begin + 600
    # The process is gone; another one, on the same store, keeps the due time.
    async with TestEngine(wf_engine.real_store, mock_clock) as other:
        mock_clock.autojump = True
        await wf.Worker(other).run(until_idle=True)
        done = await other.store.get_run(run.id)
    assert done.status is wf.RunStatus.COMPLETED and done.attempt == 2
    assert await run.result() >= record_.wake_at  # attempt 2 began when it was due, not before
    assert log == ["before"]


@wf.workflow(name="queues:capped-and-rated", concurrency=1, rate_limit=(5, 60))
async def capped_and_rated(n: int) -> int:
    return n


async def test_a_place_taken_before_a_later_limit_failed_is_given_back(
    engine_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's cap place is taken, then its rate limit cannot be read (the store failed for
    now): the drive fails and is tried again a second later (real time: a real ``Engine``),
    and the place goes back as it fails. It was kept (no drive held it, nothing released it:
    on Redis its key renewed for as long as the process lived), and the run itself, tried
    again, waited for it for ever."""
    from wf.engine._current import use_engine

    store = engine_store
    real = store.try_rate
    failures = [1]

    async def places() -> int:
        return await store.slots_taken("workflow:queues:capped-and-rated", 1)

    async def try_rate(name: str, n: int, window: float, now: float) -> float | None:
        if failures[0]:
            failures[0] -= 1
            assert await places() == 1  # taken as the limit is read
            raise wf.StoreUnavailable("the test cut the store")
        return await real(name, n, window, now)

    monkeypatch.setattr(store, "try_rate", try_rate)
    engine = Engine(store)
    with use_engine(engine):
        run = await wf.start(capped_and_rated, 7, detach=True)
        worker = wf.Worker(engine, concurrency=10, poll=0.05, on_error=lambda r, e: None)
        await asyncio.wait_for(worker.run(until_idle=True), 30)
        assert failures == [0]
        assert await run.result() == 7
    assert await places() == 0
