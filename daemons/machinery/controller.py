"""The reconcile loop every controller runs, and the expectations that keep it from acting twice.

A controller is a ``sync(key)`` function plus a work queue: informer handlers
enqueue the keys of objects that changed, worker threads call ``sync`` for each,
and a failed key comes back after a growing back-off. ``sync`` reads the desired
and the observed state from informer caches and closes the gap; it does not
care which event brought the key, only what the caches say now.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from daemons.api.errors import Conflict, ConnectionFailed, MiniK8sError, ServiceUnavailable
from daemons.machinery.keys import key_of, split_key
from daemons.machinery.workqueue import DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY, WorkQueue

__all__ = [
    "EXPECTATIONS_TTL_SECONDS",
    "Controller",
    "Expectations",
    "PermanentError",
    "TemporaryError",
    "key_of",
    "split_key",
]

logger = logging.getLogger(__name__)

EXPECTATIONS_TTL_SECONDS = 300.0

SYNCS = Counter("minik8s_controller_syncs_total", "Syncs by controller and result", ["controller", "result"])
SYNC_SECONDS = Histogram("minik8s_controller_sync_duration_seconds", "Time spent in sync", ["controller"])
QUEUE_DEPTH = Gauge("minik8s_workqueue_depth", "Keys waiting for a worker", ["name"])


class TemporaryError(MiniK8sError):
    """The sync could not finish now (a dependency is missing, a write conflicted): retry the key.

    With ``delay`` the key comes back after that many seconds, otherwise after its back-off.
    """

    def __init__(self, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(MiniK8sError):
    """Retrying cannot help (the object is invalid); the key is dropped until it changes again."""


class Controller:
    """Worker threads taking keys from a work queue and calling ``sync`` for each."""

    def __init__(
        self,
        name: str,
        sync: Callable[[str], None],
        workers: int = 1,
        *,
        base_delay: float = DEFAULT_BASE_DELAY,
        max_delay: float = DEFAULT_MAX_DELAY,
    ) -> None:
        if workers < 1:
            raise ValueError("a controller needs at least one worker")
        self.name = name
        self.sync = sync
        self.workers = workers
        self.queue: WorkQueue[str] = WorkQueue(name, base_delay, max_delay)
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._lifecycle = threading.Lock()  # start and stop may race from different threads
        QUEUE_DEPTH.labels(name).set_function(lambda: len(self.queue))

    # --- feeding ------------------------------------------------------------------------------------

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def enqueue_after(self, key: str, delay: float) -> None:
        self.queue.add_after(key, delay)

    def enqueue_object(self, obj: dict[str, Any]) -> None:
        """Enqueue an object's key; usable directly as an informer's add or delete handler."""
        self.queue.add(key_of(obj))

    # --- running ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker threads and return."""
        with self._lifecycle:
            if self._threads:
                return
            for index in range(self.workers):
                thread = threading.Thread(target=self._work, name=f"{self.name}-worker-{index}", daemon=True)
                thread.start()
                self._threads.append(thread)
        logger.info("%s: started %d workers", self.name, self.workers)

    def run(self) -> None:
        """Start the workers and block until ``stop``."""
        self.start()
        self._stopped.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop handing out keys and wait for the syncs in progress to return."""
        self.queue.shutdown()
        with self._lifecycle:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)
        self._stopped.set()
        logger.info("%s: stopped", self.name)

    def _work(self) -> None:
        while self.process_next():
            pass

    def process_next(self, timeout: float | None = None) -> bool:
        """Sync one key from the queue; False once the queue is shut down (or ``timeout`` passed)."""
        key = self.queue.get(timeout)
        if key is None:
            return False
        started = time.monotonic()
        try:
            self.sync(key)
        except TemporaryError as error:
            self._requeue(key, error.delay)
            logger.info("%s: %s not synced, retrying: %s", self.name, key, error)
            SYNCS.labels(self.name, "retry").inc()
        except Conflict as error:
            self._requeue(key, None)
            logger.info("%s: %s changed while syncing, retrying: %s", self.name, key, error)
            SYNCS.labels(self.name, "retry").inc()
        except (ServiceUnavailable, ConnectionFailed) as error:
            # An apiserver restart or an etcd outage: expected, and the back-off covers it; no traceback.
            self._requeue(key, None)
            logger.warning("%s: %s not synced, the API is unavailable, retrying: %s", self.name, key, error)
            SYNCS.labels(self.name, "retry").inc()
        except PermanentError as error:
            self.queue.forget(key)
            logger.error("%s: giving up on %s: %s", self.name, key, error)
            SYNCS.labels(self.name, "dropped").inc()
        except Exception:
            self._requeue(key, None)
            logger.exception("%s: syncing %s failed, retrying", self.name, key)
            SYNCS.labels(self.name, "error").inc()
        else:
            self.queue.forget(key)
            SYNCS.labels(self.name, "success").inc()
        finally:
            SYNC_SECONDS.labels(self.name).observe(time.monotonic() - started)
            self.queue.done(key)
        return True

    def _requeue(self, key: str, delay: float | None) -> None:
        if delay is None:
            self.queue.add_rate_limited(key)
        else:
            self.queue.add_after(key, delay)


@dataclass
class _Expected:
    creations: int
    deletions: set[str]
    since: float


class Expectations:
    """What a controller is waiting to see in its caches after its own writes, per controller key.

    A ReplicaSet controller that has just created three pods must not create them
    again while the informer has not delivered them yet: it records the creations
    it expects, the pod handlers count them off, and ``satisfied`` holds the next
    sync back until they have all been seen. Deletions are tracked by victim key so
    that seeing one deletion twice (the graceful update, then the DELETED) counts
    once. After ``ttl`` seconds an expectation counts as satisfied anyway, so a lost
    event delays a controller but never wedges it.
    """

    def __init__(self, ttl: float = EXPECTATIONS_TTL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._records: dict[str, _Expected] = {}
        self._lock = threading.Lock()

    def expect_creations(self, key: str, count: int) -> None:
        """Record that ``count`` objects are being created for ``key``, replacing older expectations."""
        with self._lock:
            self._records[key] = _Expected(count, set(), self.clock())

    def expect_deletions(self, key: str, victims: Iterable[str]) -> None:
        """Record that the objects keyed ``victims`` are being deleted for ``key``, replacing older expectations."""
        with self._lock:
            self._records[key] = _Expected(0, set(victims), self.clock())

    def creation_observed(self, key: str) -> None:
        """One expected creation was seen (or failed, so it will never be seen)."""
        with self._lock:
            record = self._records.get(key)
            if record is not None:
                record.creations -= 1

    def deletion_observed(self, key: str, victim: str) -> None:
        """The deletion of ``victim`` was seen (or failed); repeated calls count once."""
        with self._lock:
            record = self._records.get(key)
            if record is not None:
                record.deletions.discard(victim)

    def satisfied(self, key: str) -> bool:
        """Whether ``key`` may be synced: nothing pending, or the expectation has expired."""
        with self._lock:
            record = self._records.get(key)
            if record is None or (record.creations <= 0 and not record.deletions):
                return True
            if self.clock() - record.since > self.ttl:
                logger.info("expectations for %s expired with %d creations and %d deletions unseen", key,
                            max(record.creations, 0), len(record.deletions))
                return True
            return False

    def pending(self, key: str) -> tuple[int, int]:
        """Creations and deletions still expected for ``key``."""
        with self._lock:
            record = self._records.get(key)
            return (max(record.creations, 0), len(record.deletions)) if record else (0, 0)

    def delete(self, key: str) -> None:
        """Forget ``key``, when its object is gone."""
        with self._lock:
            self._records.pop(key, None)
