"""A multi-turn chat with an AI agent as ONE durable run: the run waits for each message on a hook.

The workflow holds the conversation: it waits for the next user message on the hook
``chat:<conversation>``, answers it with a Pydantic AI agent (each model request and tool call a
wf step, the answer streaming into the run's ``agent`` stream as JSON lines), keeps the message
history, and waits for the next message — for minutes or for weeks, holding no process meanwhile.
A crash, a deploy or a restart loses nothing: the run replays its recorded steps (no model call
is made twice) and carries on. Saving a note needs a person's approval: the run asks on the
stream and waits on another hook.

Needs ``pip install 'wf-durable[ai]' 'pydantic-ai-slim[openai]'`` and ``OPENAI_API_KEY``; or try
it with no key and no network with Pydantic AI's test model (canned answers):
``WF_CHAT_MODEL=test``.

Talk to it with the terminal client (examples/agent_chat_client.py: it starts the run
``chat-demo`` unless it exists, then uses only ``wf hook resume`` and ``wf stream``)::

    python examples/agent_chat_client.py demo

or by hand::

    wf run examples/agent_chat.py:chat --input '{"conversation": "demo"}' --id chat-demo
                                              # returns once the run waits for a message

    wf hook resume chat:demo --data '"What is 6 times 7?"' --wait
    wf stream chat-demo --name agent          # the answer, as JSON lines
    wf hook resume chat:demo --data '"/bye"' --wait   # ends the run
"""

from __future__ import annotations

import os

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage

import wf
import wf.ai

agent = Agent(
    os.environ.get("WF_CHAT_MODEL", "openai:gpt-5-mini"),
    name="chat",  # names the agent's steps: keep it stable while conversations are running
    instructions="You are a concise, friendly assistant. Save a note only when asked to.",
)


@agent.tool_plain
def multiply(a: float, b: float) -> float:
    """Multiply two numbers exactly."""
    return a * b


@agent.tool_plain(requires_approval=True)
def save_note(text: str) -> str:
    """Save a note for the user (a person approves it first)."""
    return f"saved: {text}"


# Each model request and tool call a step; events (text deltas, tool calls, approval requests,
# each turn's result) on the run's "agent" stream, one JSON object per line.
durable = wf.ai.DurableAgent(agent, stream="agent", stream_format="events")


@wf.workflow
async def chat(conversation: str = "default") -> int:
    """Answer the messages sent to the hook ``chat:<conversation>`` until one says ``/bye``;
    returns how many turns there were."""
    inbox = wf.create_hook(str, token=f"chat:{conversation}")
    history: list[ModelMessage] = []  # rebuilt on replay from the recorded steps
    turns = 0
    async for message in inbox:  # the run suspends here between turns
        if message.strip() == "/bye":
            break
        result = await durable.run(message, message_history=history)
        history = result.all_messages()
        turns += 1
    return turns
