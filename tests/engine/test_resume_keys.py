"""``wf.resume_hook(token, payload, key=...)``: a caller that retries after its reply was lost
(the store applied the post, then the connection dropped) delivers once."""

from __future__ import annotations

from typing import Any

import pytest

import wf
from wf.testing import MockClock, TestEngine


@wf.workflow(name="resume_keys:two")
async def two_payloads(token: str) -> list[int]:
    hook = wf.create_hook(int, token=token)
    return [await hook.next(), await hook.next()]


def _lost_replies(engine: TestEngine, times: int = 1) -> list[int]:
    """Make the store's ``post_once`` apply the post and then fail with
    ``wf.StoreUnavailable`` (``times`` times), as a commit that landed before the connection
    dropped does; how many replies were lost so far."""
    store = engine.store
    real = store.post_once
    lost = [0]

    async def post_once(*args: Any, **kwargs: Any) -> Any:
        answer = await real(*args, **kwargs)
        if lost[0] < times:
            lost[0] += 1
            raise wf.StoreUnavailable("the connection dropped before the reply: the test cut it")
        return answer

    store.post_once = post_once  # type: ignore[method-assign]
    return lost


@pytest.mark.timeout(60)
async def test_a_retry_after_a_lost_reply_delivers_once(wf_engine: TestEngine) -> None:
    run = await wf.start(two_payloads, "approve:1")
    await run.settle(timeout=10)
    lost = _lost_replies(wf_engine)
    with pytest.raises(wf.StoreUnavailable):
        await wf.resume_hook("approve:1", 1, key="delivery-1")
    assert lost == [1]
    # The docs' advice: retry with the same key. The first post landed: nothing new is posted.
    assert await wf.resume_hook("approve:1", 1, key="delivery-1") == run
    assert await wf.resume_hook("approve:1", 2, key="delivery-2") == run
    assert await run.result(timeout=10) == [1, 2]


@pytest.mark.timeout(60)
async def test_only_the_same_token_and_key_is_a_repeat(wf_engine: TestEngine) -> None:
    first = await wf.start(two_payloads, "tok:a")
    second = await wf.start(two_payloads, "tok:b")
    await first.settle(timeout=10)
    await second.settle(timeout=10)
    assert await wf.resume_hook("tok:a", 1, key="k") == first
    assert await wf.resume_hook("tok:b", 10, key="k") == second  # another token: its own key
    assert await wf.resume_hook("tok:a", 99, key="k") == first  # a repeat: 99 goes nowhere
    assert await wf.resume_hook("tok:a", 2, key="k2") == first
    assert await wf.resume_hook("tok:b", 20) == second  # no key: delivered as before
    assert await first.result(timeout=10) == [1, 2]
    assert await second.result(timeout=10) == [10, 20]


@pytest.mark.timeout(60)
async def test_a_repeat_after_the_run_ended_answers_its_run(wf_engine: TestEngine) -> None:
    run = await wf.start(two_payloads, "done")
    await run.settle(timeout=10)
    await wf.resume_hook("done", 1, key="a")
    await wf.resume_hook("done", 2, key="b")
    assert await run.result(timeout=10) == [1, 2]
    assert await wf.resume_hook("done", 2, key="b") == run  # the hook is gone: still its run
    with pytest.raises(wf.HookError, match="no live hook"):
        await wf.resume_hook("done", 3, key="c")  # a new key: a new delivery, to no hook


@pytest.mark.timeout(60)
async def test_a_keyed_repeat_is_forgotten_after_a_day(
    wf_engine: TestEngine, mock_clock: MockClock
) -> None:
    run = await wf.start(two_payloads, "later")
    await run.settle(timeout=10)
    await wf.resume_hook("later", 1, key="k")
    mock_clock.jump(wf.store.DELIVERY_KEPT + 1)
    await wf_engine.store.prune_deliveries(mock_clock.now() - wf.store.DELIVERY_KEPT)
    await wf.resume_hook("later", 2, key="k")  # pruned: delivered again
    assert await run.result(timeout=10) == [1, 2]


@pytest.mark.stores("memory")
@pytest.mark.parametrize("key", ["", " k", "k ", "é", "a\nb", "x" * 256, 5])
async def test_a_key_that_cannot_be_one_is_a_usage_error(wf_engine: TestEngine, key: Any) -> None:
    with pytest.raises(wf.UsageError, match="idempotency key"):
        await wf.resume_hook("any", 1, key=key)
