"""The scheduling loop: informers over pods and nodes feed a work queue of pod keys; each is placed and bound.

A key is handled from what the caches say now (level-triggered): a pod that
still wants a node is judged against the cached nodes (all of them, or on a
large cluster enough of them, from where the last pod stopped), one fitting node
is chosen by the strategy and the pod is counted on it at once (assumed), and
the binding is written in the background by a bounded pool. A failed binding
forgets the assumption and brings the pod back after back-off. A pod that fits
nowhere gets a FailedScheduling event and PodScheduled=False, and comes back
after the work queue's back-off, or sooner when a node changes or a bound pod
goes away and frees room.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from prometheus_client import Counter, Histogram

from daemons.api.client import ApiClient
from daemons.api.errors import APIError, Conflict, ConnectionFailed, NotFound
from daemons.api.resources import require
from daemons.api.times import rfc3339
from daemons.machinery.controller import Controller, TemporaryError
from daemons.machinery.events import EventRecorder
from daemons.machinery.informer import Informer, wait_all_synced
from daemons.machinery.keys import key_of, resource_version, split_key
from daemons.scheduler.binder import BindPool
from daemons.scheduler.cache import NodeCache, UsageCache
from daemons.scheduler.facts import pod_info
from daemons.scheduler.predicates import failure_message, feasible_nodes_to_find, filter_nodes
from daemons.scheduler.settings import SchedulerSettings
from daemons.scheduler.strategies import STRATEGIES, StrategyState
from daemons.scheduler.usage import Obj, is_terminal

log = logging.getLogger(__name__)


PODS = require("v1", "Pod")
NODES = require("v1", "Node")
DEFAULT_SCHEDULER = "default-scheduler"
INITIAL_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 10.0  # Kubernetes' podMaxBackoffSeconds: an unschedulable pod is looked at again this often
# An HTTP watch ends only with its stream; the informer threads are daemons, so shutdown need not wait for it.
INFORMER_STOP_SECONDS = 1.0
# Binding refusals that no retry can turn around: someone else placed the pod, or it is going away.
FINAL_CONFLICTS = ("already assigned", "being deleted")

ATTEMPTS = Counter("minik8s_scheduler_schedule_attempts_total", "Scheduling attempts by result", ["result"])
ATTEMPT_SECONDS = Histogram("minik8s_scheduler_scheduling_attempt_duration_seconds",
                            "Time to place (and bind) one pod", ["result"])
BIND_SECONDS = Histogram("minik8s_scheduler_binding_duration_seconds", "Time to write one binding", ["result"])


def wants_scheduling(pod: Obj, scheduler_name: str) -> bool:
    """A pod this scheduler must place: no node yet, ours by schedulerName, not being deleted, not finished."""
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == scheduler_name
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
        and not is_terminal(pod)
    )


def pod_changed_for_scheduling(old: Obj, new: Obj) -> bool:
    """Whether an update can change where a pending pod fits.

    A resync (the same resourceVersion again) or a new spec can; a status-only write,
    such as our own PodScheduled condition, cannot, and must not cut its back-off short.
    """
    return resource_version(old) == resource_version(new) or old.get("spec") != new.get("spec")


def binding(pod: Obj, node: str) -> Obj:
    """The body of ``POST pods/<name>/binding``."""
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod["metadata"]["name"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def unschedulable_condition(pod: Obj, message: str, now: str) -> Obj | None:
    """PodScheduled=False (Unschedulable) with ``message``; None when the pod already says exactly that."""
    current = next((condition for condition in (pod.get("status") or {}).get("conditions") or []
                    if condition.get("type") == "PodScheduled"), None) or {}
    if (current.get("status"), current.get("reason"), current.get("message")) == ("False", "Unschedulable", message):
        return None
    since = current.get("lastTransitionTime") if current.get("status") == "False" else None
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
            "lastTransitionTime": since or now}


def _refused_for_good(error: Exception) -> bool:
    """A binding error after which the pod is no longer ours to place."""
    if isinstance(error, NotFound):
        return True
    return isinstance(error, Conflict) and any(text in str(error) for text in FINAL_CONFLICTS)


class Scheduler:
    """Places every pending pod of its ``schedulerName`` until ``stop``."""

    def __init__(self, client: ApiClient, settings: SchedulerSettings) -> None:
        self.client = client
        self.scheduler_name = settings.scheduler_name
        self.strategy = STRATEGIES[settings.strategy]
        self.percentage = settings.percentage_of_nodes_to_score
        self.state = StrategyState()
        self.cache = UsageCache()
        self.node_cache = NodeCache()
        self.binder = BindPool(settings.bind_workers)
        self.recorder = EventRecorder(client, settings.scheduler_name)
        self.controller = Controller("scheduler", self.sync, settings.workers, base_delay=INITIAL_BACKOFF_SECONDS,
                                     max_delay=MAX_BACKOFF_SECONDS)
        # Schedulers of other names keep queues of their own: consumers sharing a queue would split its events.
        prefix = "scheduler" if self.scheduler_name == DEFAULT_SCHEDULER else f"scheduler.{self.scheduler_name}"
        self.pods = Informer(client, PODS, amqp_url=settings.amqp_url, queue_name=f"{prefix}.pods",
                             resync_seconds=settings.resync_seconds, on_add=self._pod_added,
                             on_update=self._pod_updated, on_delete=self._pod_deleted)
        self.nodes = Informer(client, NODES, amqp_url=settings.amqp_url, queue_name=f"{prefix}.nodes",
                              resync_seconds=settings.resync_seconds, on_add=self._node_changed,
                              on_update=lambda old, new: self._node_changed(new), on_delete=self.node_cache.remove)
        self._placing = threading.Lock()  # choosing a node, counting the pod on it and moving the start are one step
        # Where the next pod's walk over the nodes (sorted by name) begins: just after the node the last pod went
        # to, so that successive samples move round the cluster with the placements and RoundRobin stays a rotation.
        self._next_start = 0
        # Pods that found no node (or are being placed): what a node change or freed room sends back to the queue.
        self._pending: set[str] = set()
        self._pending_lock = threading.Lock()
        self._stopping = threading.Event()

    # --- lifecycle ----------------------------------------------------------------------------------

    def run(self) -> None:
        """Schedule until ``stop``; workers start once both caches are filled, so every bound pod is counted."""
        self.pods.start()
        self.nodes.start()
        try:
            if wait_all_synced((self.pods, self.nodes), self._stopping):
                self.controller.start()
                log.info("scheduling pods of %s: %d nodes, %d pods cached", self.scheduler_name,
                         len(self.nodes.store), len(self.pods.store))
                self._stopping.wait()
        finally:
            self.controller.stop()
            self.binder.shutdown()
            self.pods.stop(INFORMER_STOP_SECONDS)
            self.nodes.stop(INFORMER_STOP_SECONDS)

    def stop(self) -> None:
        self._stopping.set()

    # --- informer handlers --------------------------------------------------------------------------

    def _pod_added(self, pod: Obj) -> None:
        if self.cache.observe(pod):
            self._enqueue_pending()
        elif wants_scheduling(pod, self.scheduler_name):
            self.controller.enqueue(key_of(pod))

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if self.cache.observe(new):
            self._enqueue_pending()
        elif wants_scheduling(new, self.scheduler_name) and pod_changed_for_scheduling(old, new):
            self.controller.enqueue(key_of(new))

    def _pod_deleted(self, pod: Obj) -> None:
        self._set_pending(key_of(pod), False)
        if self.cache.remove(pod):
            self._enqueue_pending()

    def _node_changed(self, node: Obj) -> None:
        """A new node, or one whose facts changed (a heartbeat changes none): pending pods may fit now."""
        if self.node_cache.update(node):
            self._enqueue_pending()

    def _set_pending(self, key: str, pending: bool) -> None:
        with self._pending_lock:
            if pending:
                self._pending.add(key)
            else:
                self._pending.discard(key)

    def _enqueue_pending(self) -> None:
        """Look at every pod that found no node again now: room was made, or the nodes changed."""
        with self._pending_lock:
            keys = list(self._pending)
        for key in keys:
            self.controller.enqueue(key)

    # --- scheduling one pod -------------------------------------------------------------------------

    def sync(self, key: str) -> None:
        """Place the pod ``key`` if it still needs a node and hand its binding to the pool.

        An assumed pod is skipped, so a pod never has two bindings in flight; a pod that
        fits nowhere raises TemporaryError and comes back after back-off.
        """
        pod = self.pods.store.get_by_key(key)
        if pod is None or not wants_scheduling(pod, self.scheduler_name) or self.cache.is_assumed(key):
            self._set_pending(key, False)
            return
        # Marked before judging, so a node that appears meanwhile sends the pod round again.
        self._set_pending(key, True)
        started = time.monotonic()
        try:
            node, message = self.place(key, pod)
        except Exception:
            self._attempted("error", started)
            raise
        if node is None:
            self._attempted("unschedulable", started)
            self._report_unschedulable(key, pod, message)
            raise TemporaryError(message)
        self._set_pending(key, False)
        self.binder.submit(lambda: self._bind(key, pod, node, started))

    @staticmethod
    def _attempted(result: str, started: float) -> None:
        ATTEMPTS.labels(result).inc()
        ATTEMPT_SECONDS.labels(result).observe(time.monotonic() - started)

    def place(self, key: str, pod: Obj) -> tuple[str | None, str]:
        """The chosen node, already counted for the pod, or None and the FailedScheduling message."""
        facts = pod_info(pod)
        with self._placing:
            nodes = self.node_cache.nodes()
            usage = self.cache.snapshot()
            start = self._next_start % len(nodes) if nodes else 0
            found = filter_nodes(facts, nodes, usage, start, feasible_nodes_to_find(len(nodes), self.percentage))
            if not found.feasible:
                return None, failure_message(len(nodes), found.refusals)
            node = self.strategy(facts, found.feasible, usage, self.state)
            self.state = replace(self.state, last_node=node)
            self._next_start = (self.node_cache.position(node) or 0) + 1
            self.cache.assume(key, node, facts.requests)
            return node, ""

    def _bind(self, key: str, pod: Obj, node: str, started: float) -> None:
        """Write the binding (on the pool); a failure forgets the assumption and, unless final, requeues the pod."""
        namespace, name = split_key(key)
        posted = time.monotonic()
        try:
            self.client.request("POST", PODS.path(namespace, name, "binding"), json=binding(pod, node))
        except Exception as error:
            BIND_SECONDS.labels("error").observe(time.monotonic() - posted)
            self._attempted("error", started)
            self.cache.forget(key)
            if isinstance(error, APIError | ConnectionFailed) and _refused_for_good(error):
                log.info("%s: not bound to %s, dropped: %s", key, node, error)
                return
            if isinstance(error, APIError | ConnectionFailed):
                log.info("%s: binding to %s failed, retrying: %s", key, node, error)
            else:
                log.exception("%s: binding to %s failed, retrying", key, node)
            self.controller.queue.add_rate_limited(key)
            return
        BIND_SECONDS.labels("bound").observe(time.monotonic() - posted)
        self._attempted("scheduled", started)
        log.info("%s: bound to %s", key, node)
        self.recorder.record(pod, "Normal", "Scheduled", f"Successfully assigned {key} to {node}")

    def _report_unschedulable(self, key: str, pod: Obj, message: str) -> None:
        """A FailedScheduling event, and PodScheduled=False on the pod, as Kubernetes reports it."""
        self.recorder.record(pod, "Warning", "FailedScheduling", message)
        condition = unschedulable_condition(pod, message, rfc3339())
        if condition is None:
            return
        namespace, name = split_key(key)
        # Pinned to the version judged, so a pod bound meanwhile never gets told it is unschedulable.
        patch = {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]},
                 "status": {"conditions": [condition]}}
        try:
            self.client.patch(PODS, name, patch, namespace, patch_type="strategic", subresource="status")
        except (Conflict, NotFound) as error:
            log.debug("%s: changed before PodScheduled=False was written: %s", key, error)
        except (APIError, ConnectionFailed) as error:
            log.warning("%s: could not set PodScheduled=False: %s", key, error)
