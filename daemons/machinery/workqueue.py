"""A thread-safe work queue with the semantics of Kubernetes' client-go workqueue.

Controllers are level-triggered: a key in the queue means "look at this object
again", so adding a key that is already waiting changes nothing, and a key that
a worker is processing is handed out again only after ``done`` so that no two
workers ever sync the same object at once.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_BASE_DELAY = 0.005
DEFAULT_MAX_DELAY = 1000.0


class ExponentialBackoff(Generic[K]):
    """Per-key exponential back-off: ``base * 2**failures``, capped; ``forget`` starts the key over."""

    def __init__(self, base_delay: float = DEFAULT_BASE_DELAY, max_delay: float = DEFAULT_MAX_DELAY) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("back-off needs 0 < base_delay <= max_delay")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[K, int] = {}
        self._lock = threading.Lock()

    def when(self, key: K) -> float:
        """The delay before the next retry of ``key``, counting this failure."""
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        # Past 2**64 the cap has long been reached; the bound keeps the float finite.
        return min(self.base_delay * 2.0 ** min(failures, 64), self.max_delay)

    def retries(self, key: K) -> int:
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        with self._lock:
            self._failures.pop(key, None)


class WorkQueue(Generic[K]):
    """Keys waiting to be processed, each at most once, with delayed and rate-limited adds."""

    def __init__(
        self,
        name: str = "",
        base_delay: float = DEFAULT_BASE_DELAY,
        max_delay: float = DEFAULT_MAX_DELAY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.backoff: ExponentialBackoff[K] = ExponentialBackoff(base_delay, max_delay)
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()  # keys that need processing (queued, or re-added while processing)
        self._processing: set[K] = set()
        self._waiting: dict[K, float] = {}  # key -> earliest time it becomes ready
        self._heap: list[tuple[float, int, K]] = []  # may hold superseded entries; _waiting is the truth
        self._sequence = itertools.count()
        self._shutting_down = False

    # --- adding -------------------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Mark ``key`` for processing; a no-op when it is already waiting for a worker."""
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: K) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return  # done() queues it again, so the same key never runs on two workers
        self._queue.append(key)
        self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` once ``delay`` seconds have passed; an earlier pending time for it wins."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutting_down:
                return
            ready = self._clock() + delay
            if key in self._waiting and self._waiting[key] <= ready:
                return
            self._waiting[key] = ready
            heapq.heappush(self._heap, (ready, next(self._sequence), key))
            self._cond.notify_all()  # a sleeping get() may now have an earlier deadline

    def add_rate_limited(self, key: K) -> None:
        """Retry ``key`` after its exponential back-off, which grows with every call until ``forget``."""
        self.add_after(key, self.backoff.when(key))

    def forget(self, key: K) -> None:
        """Reset the back-off of ``key``, after it was processed successfully."""
        self.backoff.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.backoff.retries(key)

    # --- consuming ----------------------------------------------------------------------------------

    def _promote_due_locked(self) -> float | None:
        """Move delayed keys whose time has come into the queue; return the seconds until the next one."""
        now = self._clock()
        while self._heap:
            ready, _, key = self._heap[0]
            if self._waiting.get(key) != ready:
                heapq.heappop(self._heap)  # superseded by an earlier add_after of the same key
                continue
            if ready > now:
                return ready - now
            heapq.heappop(self._heap)
            del self._waiting[key]
            self._add_locked(key)
        return None

    def get(self, timeout: float | None = None) -> K | None:
        """Block until a key is ready and hand it out; ``None`` once shut down (or when ``timeout`` passes).

        The caller must call ``done(key)`` when it has finished with the key.
        """
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shutting_down:
                    return None
                next_due = self._promote_due_locked()
                if self._queue:
                    key = self._queue.popleft()
                    self._processing.add(key)
                    self._dirty.discard(key)
                    return key
                wait = next_due
                if deadline is not None:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        """Finish processing ``key``; if it was added meanwhile, it goes back into the queue now."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty and not self._shutting_down:
                self._queue.append(key)
                self._cond.notify()

    # --- lifecycle ----------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Wake every blocked ``get`` with ``None`` and refuse further adds.

        Waiting keys are dropped: controllers are level-triggered, so the next
        start relists and finds the same work again.
        """
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def __len__(self) -> int:
        """Keys ready for a worker now (delayed keys count once they are due)."""
        with self._cond:
            self._promote_due_locked()
            return len(self._queue)

    @property
    def delayed(self) -> int:
        """Keys scheduled by ``add_after`` that are not due yet."""
        with self._cond:
            self._promote_due_locked()
            return len(self._waiting)
