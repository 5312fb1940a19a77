"""Pydantic AI's OpenAI model over real HTTP, against an OpenAI-compatible stub on 127.0.0.1:
the provider code path runs offline — streaming chunks, a 429 with retry-after, a 401."""

from __future__ import annotations

import pytest

pytest.importorskip("openai", reason="the OpenAI provider: pip install 'pydantic-ai-slim[openai]'")

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import wf
from tests.ai.openai_stub import Stub, error, serve, text_reply, text_stream, tool_call_stream
from wf.ai import DurableAgent, StepOptions

added: list[tuple[int, int]] = []


def make_agent(
    stub: Stub, *, stream: str | None = "agent", max_backoff: float | None = None
) -> DurableAgent[None, str]:
    provider = OpenAIProvider(base_url=stub.base_url, api_key="sk-test")
    # max_retries=0: the OpenAI SDK would otherwise retry 429s and 5xx itself, in the step.
    model = OpenAIChatModel("gpt-stub", provider=provider, settings={"max_retries": 0})
    agent = Agent(model, name="remote")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        added.append((a, b))
        return a + b

    model_step: StepOptions = {"max_retries": 2}
    if max_backoff is not None:
        model_step["max_backoff"] = max_backoff
    return DurableAgent(agent, stream=stream, model_step=model_step)


@pytest.fixture(autouse=True)
def _clear() -> None:
    added.clear()


async def chunks(engine: wf.Engine, run_id: str, name: str = "agent") -> bytes:
    data, _ = await engine.store.read_chunks(run_id, name)
    return b"".join(data)


async def run_agent(durable: DurableAgent[None, str], prompt: str) -> wf.Run[str]:
    @wf.workflow(name=f"tests.ai.http.{id(durable)}")
    async def ask(prompt: str) -> str:
        return (await durable.run(prompt)).output

    return await wf.start(ask, prompt)


async def test_a_streamed_run_with_a_tool_call_over_http(wf_engine: wf.Engine) -> None:
    script = [tool_call_stream("add", '{"a": 2, "b": 3}'), text_stream("The sum ", "is 5", ".")]
    with serve(script) as stub:
        run = await run_agent(make_agent(stub), "what is 2 + 3?")
        assert await run.result(timeout=30) == "The sum is 5."
    assert added == [(2, 3)]
    assert await chunks(wf_engine, run.id) == b"The sum is 5.\n"
    assert [r["authorization"] for r in stub.requests] == ["Bearer sk-test"] * 2
    assert all(r["body"]["stream"] is True for r in stub.requests)
    second = stub.requests[1]["body"]["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "5"}
    journal = await wf_engine.store.read_journal(run.id)
    steps = [e["name"] for e in journal if e["type"] == "step_completed"]
    assert steps == [
        "remote__model.request_stream",
        "remote__function_toolset__<agent>.call_tool:add",
        "remote__model.request_stream",
    ]


async def test_a_rate_limit_is_retried_after_what_the_provider_asked(wf_engine: wf.Engine) -> None:
    script = [error(429, "Rate limit reached", "rate_limit_exceeded", **{"retry-after": "7"})]
    script.append(text_reply("Hello!"))
    with serve(script) as stub:
        run = await run_agent(make_agent(stub, stream=None), "hi")
        assert await run.result(timeout=30) == "Hello!"
    assert len(stub.requests) == 2
    journal = await wf_engine.store.read_journal(run.id)
    [retrying] = [e for e in journal if e["type"] == "step_retrying"]
    assert retrying["name"] == "remote__model.request"
    assert retrying["retry_at"] - retrying["ts"] == pytest.approx(7.0)  # not the step's backoff
    assert "Rate limit reached" in retrying["error"]["message"]
    assert retrying["error"]["type"] == "wf.RetryableError"


@pytest.mark.parametrize("max_backoff", [None, 12.0])
async def test_a_providers_retry_after_waits_at_most_the_steps_max_backoff(
    wf_engine: wf.Engine, max_backoff: float | None
) -> None:
    # A header asking for ~3,000 years would suspend the run until then.
    asked = {"retry-after": "99999999999"}
    script = [error(429, "Rate limit reached", "rate_limit_exceeded", **asked)]
    script.append(text_reply("Hello!"))
    with serve(script) as stub:
        run = await run_agent(make_agent(stub, stream=None, max_backoff=max_backoff), "hi")
        assert await run.result(timeout=30) == "Hello!"
    journal = await wf_engine.store.read_journal(run.id)
    [retrying] = [e for e in journal if e["type"] == "step_retrying"]
    # The step's max_backoff (30 s unless given).
    assert retrying["retry_at"] - retrying["ts"] == pytest.approx(max_backoff or 30.0)


async def test_a_server_error_is_retried_with_the_step_backoff(wf_engine: wf.Engine) -> None:
    script = [error(503, "overloaded", "server_error"), text_reply("Back.")]
    with serve(script) as stub:
        run = await run_agent(make_agent(stub, stream=None), "hi")
        assert await run.result(timeout=30) == "Back."
    journal = await wf_engine.store.read_journal(run.id)
    [retrying] = [e for e in journal if e["type"] == "step_retrying"]
    assert 0 <= retrying["retry_at"] - retrying["ts"] <= 0.5  # wf's backoff: 0.5 s, full jitter


async def test_an_invalid_api_key_fails_the_run_at_once_with_the_providers_message(
    wf_engine: wf.Engine,
) -> None:
    message = "Incorrect API key provided: sk-test. You can find your API key at ..."
    with serve([error(401, message, "invalid_api_key")] * 3) as stub:
        run = await run_agent(make_agent(stub), "hi")
        with pytest.raises(wf.RunFailed) as failed:
            await run.result(timeout=30)
    assert len(stub.requests) == 1  # no retry
    assert isinstance(failed.value.original, wf.FatalError)
    assert "Incorrect API key provided" in str(failed.value.original)
    assert "401" in str(failed.value.original)
    journal = await wf_engine.store.read_journal(run.id)
    assert not [e for e in journal if e["type"] == "step_retrying"]
