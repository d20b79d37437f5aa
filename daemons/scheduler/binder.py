"""A bounded pool of threads writing bindings in the background of placing.

Placing a pod takes microseconds; its binding is an HTTP round trip. The
scheduling workers hand bindings to this pool and go on with the next pod; at
most ``workers`` bindings are in flight, and a worker handing over one more
waits for a free slot, so a slow apiserver slows placing down instead of piling
up assumed pods.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


class BindPool:
    """Runs submitted calls on at most ``workers`` threads; ``join`` waits until none is in flight."""

    def __init__(self, workers: int) -> None:
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="scheduler-bind")
        self._slots = threading.BoundedSemaphore(workers)
        self._idle = threading.Condition()
        self._in_flight = 0

    def submit(self, call: Callable[[], None]) -> None:
        """Run ``call`` in the background once a slot is free; its exceptions are its own to handle."""
        self._slots.acquire()
        with self._idle:
            self._in_flight += 1
        try:
            self._executor.submit(self._run, call)
        except RuntimeError:  # shut down: the call never runs
            self._finished()
            raise

    def _run(self, call: Callable[[], None]) -> None:
        try:
            call()
        finally:
            self._finished()

    def _finished(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()
        self._slots.release()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until no call is in flight; False when ``timeout`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def shutdown(self) -> None:
        """Let the calls in flight finish, then stop the threads."""
        self._executor.shutdown(wait=True)
