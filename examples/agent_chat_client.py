"""A terminal client for examples/agent_chat.py, built only on ``wf stream`` and ``wf hook resume``.

    python examples/agent_chat_client.py demo

It starts the run ``chat-demo`` if it does not exist yet (``wf run examples/agent_chat.py:chat
--id chat-demo``, in the background) and otherwise joins it, showing the conversation so far.

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
import time
from pathlib import Path
from typing import Any

Event = dict[str, Any]


def wf(*args: str) -> list[str]:
    return [sys.executable, "-m", "wf", *args]


def show(event: Event) -> None:
    """Print what a person wants to see of one event."""
    kind = event.get("event_kind")
    if kind == "part_start" and event["part"]["part_kind"] == "text":
        print(event["part"]["content"], end="", flush=True)
    elif kind == "part_delta" and event["delta"]["part_delta_kind"] == "text":
        print(event["delta"]["content_delta"], end="", flush=True)
    elif kind == "function_tool_call":
        part = event["part"]
        print(f"\n  [{part['tool_name']}({json.dumps(part['args'])})]", flush=True)
    elif kind == "agent_run_result":
        print()


def follow(run_id: str, skip: int, events: queue.Queue[Event]) -> None:
    """Follow the stream live (its first ``skip`` lines were shown already); hand approvals
    and turn ends to the main thread. A new conversation's run opens its stream only with its
    first answer: ``wf stream --follow`` waits for it while the run is not finished."""
    stream = subprocess.Popen(
        wf("stream", run_id, "--name", "agent", "--follow"), stdout=subprocess.PIPE, text=True
    )
    assert stream.stdout is not None
    for number, line in enumerate(stream.stdout):
        if number < skip:
            continue
        event = json.loads(line)
        show(event)
        if event.get("event_kind") in ("approval_request", "agent_run_result"):
            events.put(event)
    events.put({"event_kind": "run_ended"})


def start_if_needed(run_id: str, conversation: str, inbox: str) -> str:
    """The stream so far (none before the first answer); starts the run first if it does not
    exist (``wf run`` in the background drives it until it waits for its first message; each
    ``wf hook resume --wait`` then drives it, or ``wf worker``)."""
    probe = subprocess.run(wf("stream", run_id, "--name", "agent"), capture_output=True, text=True)
    if probe.returncode == 0:
        return probe.stdout
    if subprocess.run(wf("inspect", run_id, "--json"), capture_output=True).returncode == 0:
        return ""  # a run that has not answered yet: following its stream waits for it
    target = f"{Path(__file__).with_name('agent_chat.py')}:chat"
    subprocess.Popen(
        wf("run", target, "--input", json.dumps({"conversation": conversation}), "--id", run_id),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    print(f"starting run {run_id} ...")
    while inbox not in subprocess.run(wf("hooks"), capture_output=True, text=True).stdout:
        time.sleep(0.5)  # until the run waits for its first message
    return ""


class Sender:
    """``wf hook resume TOKEN --data JSON --wait`` in the background; errors shown when done."""

    def __init__(self, token: str, payload: Any) -> None:
        self.proc = subprocess.Popen(
            wf("hook", "resume", token, "--data", json.dumps(payload), "--wait"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self) -> None:
        _, err = self.proc.communicate()
        if self.proc.returncode != 0:
            print(err.strip(), file=sys.stderr)


def main() -> None:
    conversation = sys.argv[1] if len(sys.argv) > 1 else "default"
    run_id, inbox = f"chat-{conversation}", f"chat:{conversation}"
    history = [
        json.loads(line) for line in start_if_needed(run_id, conversation, inbox).splitlines()
    ]
    for event in history:  # the conversation so far
        show(event)
    events: queue.Queue[Event] = queue.Queue()
    threading.Thread(target=follow, args=(run_id, len(history), events), daemon=True).start()
    print(f"chatting in run {run_id} (/bye ends it, Ctrl-D leaves it waiting)")
    # Joined a turn that waits for an approval: answer that first.
    last = [e for e in history if e["event_kind"] in ("approval_request", "agent_run_result")]
    if last and last[-1]["event_kind"] == "approval_request":
        events.put(last[-1])
    while True:
        senders: list[Sender] = []
        if events.empty():
            try:
                message = input("\nyou> ")
            except EOFError:
                return
            senders.append(Sender(inbox, message))
            if message.strip() == "/bye":
                senders[0].finish()
                return
            print("agent> ", end="", flush=True)
        while True:  # until this turn's result arrives
            event = events.get()
            if event["event_kind"] == "approval_request":
                for call in event["calls"]:
                    print(f"\n  approve {call['tool_name']}({json.dumps(call['args'])})?", end="")
                answer = input(" [y/N] ").strip().lower() == "y"
                senders.append(Sender(event["token"], answer))
            elif event["event_kind"] == "agent_run_result":
                break
            else:
                print("\n(the run has ended)")
                return
        for sender in senders:
            sender.finish()


if __name__ == "__main__":
    main()
