"""``wf._tasks.in_thread_alone``: work that holds the interpreter runs in a thread, one such
call of an event loop at a time, while the loop goes on."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

from wf._tasks import in_thread_alone


async def test_calls_run_in_threads_one_at_a_time_while_the_loop_goes_on() -> None:
    spans: list[tuple[float, float]] = []
    running = 0
    most = 0
    lock = threading.Lock()

    def work(n: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        began = time.monotonic()
        time.sleep(0.05)  # stands for a parse that holds the interpreter
        spans.append((began, time.monotonic()))
        with lock:
            running -= 1
        assert threading.current_thread() is not threading.main_thread()
        return n * 2

    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    ticker = asyncio.ensure_future(tick())
    try:
        assert await asyncio.gather(*(in_thread_alone(work, n) for n in range(4))) == [0, 2, 4, 6]
    finally:
        ticker.cancel()
    assert most == 1
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert ticks >= 10  # the loop ran meanwhile (0.2 s of work, a tick every 5 ms)
