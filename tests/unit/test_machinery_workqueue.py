"""The work queue keeps client-go's guarantees: one copy per key, never two workers on a key, growing back-off."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from daemons.machinery.workqueue import ExponentialBackoff, WorkQueue

pytestmark = pytest.mark.unit


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_is_queued_once_and_handed_out_in_order() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("default/a", "default/b", "default/a", "default/a"):
        queue.add(key)
    assert len(queue) == 2
    assert queue.get(timeout=0) == "default/a"
    assert queue.get(timeout=0) == "default/b"
    assert queue.get(timeout=0) is None


def test_a_key_re_added_while_processing_waits_for_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("default/a")
    key = queue.get(timeout=0)
    queue.add("default/a")
    queue.add("default/a")
    assert len(queue) == 0, "a second worker must not get the key while the first holds it"
    assert queue.get(timeout=0) is None
    queue.done(key)
    assert len(queue) == 1
    assert queue.get(timeout=0) == "default/a"
    queue.done("default/a")
    assert queue.get(timeout=0) is None


def test_done_without_re_add_does_not_requeue() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.done(queue.get(timeout=0))
    assert len(queue) == 0


def test_backoff_doubles_from_base_up_to_the_cap_and_forget_resets() -> None:
    backoff: ExponentialBackoff[str] = ExponentialBackoff(base_delay=0.005, max_delay=1.0)
    delays = [backoff.when("a") for _ in range(10)]
    assert delays[:4] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert delays[-1] == 1.0
    assert all(later >= earlier for earlier, later in itertools.pairwise(delays))
    assert backoff.when("b") == pytest.approx(0.005), "back-off is per key"
    assert backoff.retries("a") == 10
    backoff.forget("a")
    assert backoff.retries("a") == 0
    assert backoff.when("a") == pytest.approx(0.005)


def test_backoff_survives_very_many_failures() -> None:
    backoff: ExponentialBackoff[str] = ExponentialBackoff()
    for _ in range(2000):
        delay = backoff.when("a")
    assert delay == 1000.0


def test_add_rate_limited_waits_for_the_growing_back_off() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(base_delay=1.0, max_delay=100.0, clock=clock)
    queue.add_rate_limited("a")
    assert queue.get(timeout=0) is None
    assert queue.delayed == 1
    clock.now += 1.0
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    queue.add_rate_limited("a")
    clock.now += 1.5
    assert queue.get(timeout=0) is None, "the second retry waits 2 s"
    clock.now += 0.5
    assert queue.get(timeout=0) == "a"
    assert queue.num_requeues("a") == 2
    queue.forget("a")
    assert queue.num_requeues("a") == 0


def test_add_after_keeps_the_earliest_time_and_dedups_with_the_queue() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 10)
    queue.add_after("a", 5)
    queue.add_after("a", 20)
    clock.now += 5
    assert len(queue) == 1
    assert queue.delayed == 0
    queue.add("a")
    assert len(queue) == 1
    assert queue.get(timeout=0) == "a"
    clock.now += 100
    assert queue.get(timeout=0) is None, "the superseded later times must not bring the key back"


def test_add_after_without_delay_adds_now() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 0)
    assert queue.get(timeout=0) == "a"


def test_get_wakes_for_a_delayed_key_in_real_time() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 0.05)
    started = time.monotonic()
    assert queue.get(timeout=5) == "a"
    assert 0.04 <= time.monotonic() - started < 2


def test_get_wakes_when_a_sooner_delay_is_added() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("late", 60)
    result: list[str | None] = []
    worker = threading.Thread(target=lambda: result.append(queue.get(timeout=5)), daemon=True)
    worker.start()
    time.sleep(0.05)
    queue.add_after("soon", 0.05)
    worker.join(5)
    assert result == ["soon"]


def test_shutdown_wakes_blocked_getters_and_refuses_adds() -> None:
    queue: WorkQueue[str] = WorkQueue()
    results: list[str | None] = []
    workers = [threading.Thread(target=lambda: results.append(queue.get()), daemon=True) for _ in range(3)]
    for worker in workers:
        worker.start()
    time.sleep(0.05)
    queue.shutdown()
    for worker in workers:
        worker.join(5)
    assert results == [None, None, None]
    assert queue.shutting_down
    queue.add("a")
    queue.add_after("b", 0.01)
    assert len(queue) == 0
    assert queue.get(timeout=0) is None


def test_concurrent_workers_never_hold_the_same_key() -> None:
    queue: WorkQueue[int] = WorkQueue()
    holding: set[int] = set()
    overlaps: list[int] = []
    processed: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        while (key := queue.get()) is not None:
            with lock:
                if key in holding:
                    overlaps.append(key)
                holding.add(key)
            time.sleep(0.001)
            with lock:
                holding.discard(key)
                processed.append(key)
            queue.done(key)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(4)]
    for worker in workers:
        worker.start()
    for round_ in range(50):
        queue.add(round_ % 3)
        time.sleep(0.0005)
    deadline = time.monotonic() + 5
    while len(queue) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    queue.shutdown()
    for worker in workers:
        worker.join(5)
    assert overlaps == []
    assert set(processed) == {0, 1, 2}
