"""The reply a run writes for its webhook's caller: read within a bound, whatever the run wrote."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.serve.conftest import Api
from wf import UsageError
from wf.engine._webhooks import MAX_REPLY


def _count_reads(api: Api, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes of each ``read_chunks`` the server makes from now on."""
    read: list[int] = []
    real = api.engine.store.read_chunks

    async def counted(*args: Any, **kwargs: Any) -> tuple[list[bytes], bool]:
        chunks, closed = await real(*args, **kwargs)
        read.append(sum(map(len, chunks)))
        return chunks, closed

    monkeypatch.setattr(api.engine.store, "read_chunks", counted)
    return read


async def test_a_retry_reads_the_reply_not_the_whole_reply_stream(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run wrote 24 MiB more after its reply to the reply's stream: a retry after the run
    # ended read all of it (24 MiB held to send a reply of 40 bytes).
    run_id = await api.start("flooding_webhook", {"token": "wh-flood", "body_bytes": 0, "more": 24})
    await api.until(run_id, lambda d: d["hooks"])
    key = {"Idempotency-Key": "evt-1"}
    first = await api.client.post("/webhooks/wh-flood", json={}, headers=key)
    assert (first.status_code, first.json()) == (200, {"ok": True, "pad": ""})
    assert (await api.result(run_id))["output"] == "replied"
    read = _count_reads(api, monkeypatch)
    retry = await api.client.post("/webhooks/wh-flood", json={}, headers=key)
    assert (retry.status_code, retry.json()) == (200, {"ok": True, "pad": ""})
    assert read and sum(read) <= MAX_REPLY, f"{sum(read) / 2**20:.1f} MiB read for one reply"


async def test_a_reply_the_run_wrote_over_the_bound_is_sent_as_written(api: Api) -> None:
    """A run that wrote its reply's stream itself, a first chunk over ``MAX_REPLY``: the server
    sends it (it holds the chunk already; the bound is ``respond``'s, where a reply is made)."""
    run_id = await api.start(
        "flooding_webhook", {"token": "wh-big", "body_bytes": MAX_REPLY, "more": 0}
    )
    await api.until(run_id, lambda d: d["hooks"])
    key = {"Idempotency-Key": "evt-1"}
    for attempt in ("first", "retry"):
        answer = await api.client.post("/webhooks/wh-big", json={}, headers=key)
        assert answer.status_code == 200, attempt
        assert answer.json() == {"ok": True, "pad": "p" * MAX_REPLY}, attempt
        await api.result(run_id)


async def test_respond_refuses_a_reply_over_the_bound(api: Api) -> None:
    run_id = await api.start("respond_with", {"token": "wh-huge", "size": MAX_REPLY})
    await api.until(run_id, lambda d: d["hooks"])
    answer = await api.client.post("/webhooks/wh-huge", json={})
    assert answer.status_code == 202  # the run failed to reply: the caller is told accepted
    output = (await api.result(run_id))["output"]
    assert output.startswith(UsageError.__name__) and "at most" in output, output


async def test_a_reply_recorded_before_the_limit_replays(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that replied with more than ``MAX_REPLY`` under an older wf (no limit then), and
    waits on: its reply is recorded, so replaying it does not check it again (that failed the
    run in flight, and ``wf check --replay`` said error)."""
    import wf
    import wf.engine._webhooks as webhooks
    from wf.engine._replay_check import check_run

    monkeypatch.setattr(webhooks, "MAX_REPLY", 1 << 30)  # the wf that recorded it
    run_id = await api.start(
        "respond_then_wait", {"token": "wh-big", "size": 2 << 20, "token2": "after-big"}
    )
    await api.until(run_id, lambda d: d["hooks"])
    answer = await api.client.post("/webhooks/wh-big", json={})
    assert answer.status_code == 200
    await api.until(run_id, lambda d: any(h.get("token") == "after-big" for h in d["hooks"]))
    monkeypatch.setattr(webhooks, "MAX_REPLY", 1 << 20)  # this wf
    report = await check_run(api.engine.store, run_id)
    assert report.status == "ok", report.message
    await wf.resume_hook("after-big", {}, engine=api.engine)
    assert (await api.result(run_id))["output"] == "done"


async def test_a_retry_gets_a_reply_recorded_before_the_limit_as_recorded(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply over ``MAX_REPLY`` that ``respond`` recorded under an older wf (no limit then):
    a retried delivery gets it as recorded, while the run waits on and after it ended, as
    replaying the run accepts it (the server answered ``502 reply_too_large``)."""
    import wf
    import wf.engine._webhooks as webhooks

    monkeypatch.setattr(webhooks, "MAX_REPLY", 1 << 30)  # the wf that recorded it
    run_id = await api.start(
        "respond_then_wait", {"token": "wh-old", "size": 2 << 20, "token2": "after-old"}
    )
    await api.until(run_id, lambda d: d["hooks"])
    key = {"Idempotency-Key": "evt-old"}
    first = await api.client.post("/webhooks/wh-old", json={}, headers=key)
    assert (first.status_code, len(first.content)) == (200, 2 << 20)
    await api.until(run_id, lambda d: any(h.get("token") == "after-old" for h in d["hooks"]))
    monkeypatch.setattr(webhooks, "MAX_REPLY", 1 << 20)  # this wf
    in_flight = await api.client.post("/webhooks/wh-old", json={}, headers=key)
    assert (in_flight.status_code, in_flight.content) == (200, first.content)
    await wf.resume_hook("after-old", {}, engine=api.engine)
    assert (await api.result(run_id))["output"] == "done"
    ended = await api.client.post("/webhooks/wh-old", json={}, headers=key)
    assert (ended.status_code, ended.content) == (200, first.content)


@pytest.mark.parametrize(
    "reply",
    [
        "not json",
        "[1]",
        '{"headers": [1]}',
        '{"status": "ok"}',
        '{"kind": "base64", "body": 1}',
        # Not strict base64 (it was sent as the bytes left once the rest was dropped, an
        # empty 200 for the first): stray characters, a line break, no text at all.
        pytest.param('{"kind": "base64", "body": "!!!!"}', id="base64-stray-only"),
        pytest.param('{"kind": "base64", "body": "aGk=*"}', id="base64-stray"),
        pytest.param('{"kind": "base64", "body": "aGVs\\nbG8="}', id="base64-newline"),
        pytest.param('{"kind": "base64", "body": null}', id="base64-null"),
        pytest.param("[" * 100_000, id="nested-too-deep"),
    ],
)
async def test_a_first_chunk_that_is_no_reply_is_502_in_one_line(
    api: Api, caplog: pytest.LogCaptureFixture, reply: str
) -> None:
    """A run that wrote its reply's stream itself, a first chunk that is no reply object:
    ``502 bad_reply`` and one log line, on the delivery and on a retry after the run ended
    (it was a 500 with a traceback, and a retry's silent 202)."""
    run_id = await api.start("bad_reply_webhook", {"token": "wh-bad", "reply": reply})
    await api.until(run_id, lambda d: d["hooks"])
    key = {"Idempotency-Key": "evt-1"}
    for attempt in ("first", "retry"):
        caplog.clear()
        with caplog.at_level("WARNING", logger="wf.serve"):
            answer = await api.client.post("/webhooks/wh-bad", json={}, headers=key)
        assert answer.status_code == 502, (attempt, answer.text)
        assert answer.json()["error"]["type"] == "bad_reply", attempt
        said = [r for r in caplog.records if r.name.startswith("wf.serve")]
        assert len(said) == 1 and said[0].exc_info is None, (attempt, said)
        assert "\n" not in said[0].getMessage()
        await api.result(run_id)


def test_a_base64_reply_is_sent_as_its_bytes() -> None:
    """What ``request.respond(status, b"...")`` records (``base64.b64encode``: no line
    breaks) is sent as the bytes it encodes."""
    from wf.serve._webhooks import reply_response

    body = bytes(range(256))
    reply = {"status": 200, "kind": "base64", "body": base64.b64encode(body).decode()}
    response = reply_response({**reply, "headers": {}})
    assert (response.status_code, response.body) == (200, body)
    assert response.headers["content-type"] == "application/octet-stream"
