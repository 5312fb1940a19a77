"""A terminal client for examples/agent_chat.py, built only on ``wf stream`` and ``wf hook resume``.

    wf run examples/agent_chat.py:chat --input '{"conversation": "demo"}' --id chat-demo
    python examples/agent_chat_client.py demo            # in another terminal

It follows the run's ``agent`` stream (``wf stream chat-demo --name agent --follow``: one JSON
event per line) and prints the answer as it grows, sends each line you type to the run with
``wf hook resume chat:demo --data ... --wait`` (which drives the run here if no other process
does), and when a tool needs approval asks you and answers that hook. Quit with ``/bye`` (ends
the run) or Ctrl-D (leaves it waiting: come back any time, even after a reboot).
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from typing import Any


def wf(*args: str) -> list[str]:
    return [sys.executable, "-m", "wf", *args]


def follow(run_id: str, events: queue.Queue[dict[str, Any]]) -> None:
    """Print the run's events as they arrive; hand approvals and turn ends to the main thread."""
    stream = subprocess.Popen(
        wf("stream", run_id, "--name", "agent", "--follow"), stdout=subprocess.PIPE, text=True
    )
    assert stream.stdout is not None
    for line in stream.stdout:
        event = json.loads(line)
        kind = event.get("event_kind")
        if kind == "part_start" and event["part"]["part_kind"] == "text":
            print(event["part"]["content"], end="", flush=True)
        elif kind == "part_delta" and event["delta"]["part_delta_kind"] == "text":
            print(event["delta"]["content_delta"], end="", flush=True)
        elif kind == "function_tool_call":
            part = event["part"]
            print(f"\n  [{part['tool_name']}({json.dumps(part['args'])})]", flush=True)
        elif kind in ("approval_request", "agent_run_result"):
            events.put(event)
    events.put({"event_kind": "run_ended"})


def send(token: str, payload: Any) -> subprocess.Popen[str]:
    """Deliver a payload; ``--wait`` drives the run in this child if nobody else does."""
    return subprocess.Popen(
        wf("hook", "resume", token, "--data", json.dumps(payload), "--wait"),
        stdout=subprocess.DEVNULL,
        text=True,
    )


def main() -> None:
    conversation = sys.argv[1] if len(sys.argv) > 1 else "default"
    run_id, inbox = f"chat-{conversation}", f"chat:{conversation}"
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=follow, args=(run_id, events), daemon=True).start()
    print(f"chatting with run {run_id} (/bye ends it, Ctrl-D leaves it waiting)")
    while True:
        try:
            message = input("\nyou> ")
        except EOFError:
            return
        senders = [send(inbox, message)]
        if message.strip() == "/bye":
            senders[0].wait()
            return
        print("agent> ", end="", flush=True)
        while True:  # until this turn's result arrives
            event = events.get()
            if event["event_kind"] == "approval_request":
                for call in event["calls"]:
                    print(f"\n  approve {call['tool_name']}({json.dumps(call['args'])})?", end="")
                answer = input(" [y/N] ").strip().lower() == "y"
                senders.append(send(event["token"], answer))
            elif event["event_kind"] == "agent_run_result":
                print()
                break
            else:
                print("\n(the run has ended)")
                return
        for sender in senders:
            sender.wait()


if __name__ == "__main__":
    main()
