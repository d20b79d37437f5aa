"""The scheduling loop: informers over pods and nodes feed a work queue of pod keys; each is placed and bound.

A key is handled from what the caches say now (level-triggered): a pod that
still wants a node is filtered against every node, one fitting node is chosen
by the strategy and counted on it at once, and the binding is written. A pod
that fits nowhere gets a FailedScheduling event and PodScheduled=False, and
comes back after the work queue's back-off, or sooner when a node changes or
a bound pod goes away and frees room.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime

from prometheus_client import Counter, Histogram

from daemons.api.client import ApiClient
from daemons.api.errors import APIError, Conflict, ConnectionFailed, NotFound
from daemons.api.resources import require
from daemons.machinery.controller import Controller, TemporaryError
from daemons.machinery.events import EventRecorder
from daemons.machinery.informer import Informer, wait_all_synced
from daemons.machinery.keys import key_of, resource_version, split_key
from daemons.scheduler.cache import UsageCache
from daemons.scheduler.predicates import failure_message, filter_nodes, ready_status
from daemons.scheduler.settings import SchedulerSettings
from daemons.scheduler.strategies import STRATEGIES, StrategyState
from daemons.scheduler.usage import Obj, is_terminal, pod_requests

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


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def _scheduling_view(node: Obj) -> tuple[object, ...]:
    """The parts of a node that predicates read; heartbeats change none of them."""
    metadata, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    return (metadata.get("labels"), spec.get("unschedulable"), spec.get("taints"), status.get("allocatable"),
            status.get("capacity"), ready_status(node))


def node_changed_for_scheduling(old: Obj, new: Obj) -> bool:
    return _scheduling_view(old) != _scheduling_view(new)


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
        self.state = StrategyState()
        self.cache = UsageCache()
        self.recorder = EventRecorder(client, settings.scheduler_name)
        self.controller = Controller("scheduler", self.sync, settings.workers, base_delay=INITIAL_BACKOFF_SECONDS,
                                     max_delay=MAX_BACKOFF_SECONDS)
        # Schedulers of other names keep queues of their own: consumers sharing a queue would split its events.
        prefix = "scheduler" if self.scheduler_name == DEFAULT_SCHEDULER else f"scheduler.{self.scheduler_name}"
        self.pods = Informer(client, PODS, amqp_url=settings.amqp_url, queue_name=f"{prefix}.pods",
                             resync_seconds=settings.resync_seconds, on_add=self._pod_added,
                             on_update=self._pod_updated, on_delete=self._pod_deleted)
        self.nodes = Informer(client, NODES, amqp_url=settings.amqp_url, queue_name=f"{prefix}.nodes",
                              resync_seconds=settings.resync_seconds, on_add=self._node_added,
                              on_update=self._node_updated)
        self._placing = threading.Lock()  # choosing a node and counting the pod on it is one step
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
        if self.cache.remove(pod):
            self._enqueue_pending()

    def _node_added(self, node: Obj) -> None:
        self._enqueue_pending()

    def _node_updated(self, old: Obj, new: Obj) -> None:
        if node_changed_for_scheduling(old, new):
            self._enqueue_pending()

    def _enqueue_pending(self) -> None:
        """Look at every pending pod again now: room was made, or the nodes changed."""
        for pod in self.pods.store.list():
            key = key_of(pod)
            if wants_scheduling(pod, self.scheduler_name) and not self.cache.is_assumed(key):
                self.controller.enqueue(key)

    # --- scheduling one pod -------------------------------------------------------------------------

    def sync(self, key: str) -> None:
        """Place and bind the pod ``key`` if it still needs a node; TemporaryError brings it back after back-off."""
        pod = self.pods.store.get_by_key(key)
        if pod is None or not wants_scheduling(pod, self.scheduler_name) or self.cache.is_assumed(key):
            return
        started = time.monotonic()
        result = "error"
        try:
            node, message = self._place(key, pod)
            if node is None:
                result = "unschedulable"
                self._report_unschedulable(key, pod, message)
                raise TemporaryError(message)
            self._bind(key, pod, node)
            result = "scheduled"
        finally:
            ATTEMPTS.labels(result).inc()
            ATTEMPT_SECONDS.labels(result).observe(time.monotonic() - started)

    def _place(self, key: str, pod: Obj) -> tuple[str | None, str]:
        """The chosen node, already counted for the pod, or None and the FailedScheduling message."""
        with self._placing:
            nodes = self.nodes.store.list()
            usage = self.cache.snapshot()
            feasible, refusals = filter_nodes(pod, nodes, usage)
            if not feasible:
                return None, failure_message(len(nodes), refusals)
            node = self.strategy(pod, feasible, usage, self.state)
            self.state = replace(self.state, last_node=node)
            self.cache.assume(key, node, pod_requests(pod))
            return node, ""

    def _bind(self, key: str, pod: Obj, node: str) -> None:
        namespace, name = split_key(key)
        try:
            self.client.request("POST", PODS.path(namespace, name, "binding"), json=binding(pod, node))
        except Exception as error:
            self.cache.forget(key)
            if not isinstance(error, APIError | ConnectionFailed):
                raise
            if _refused_for_good(error):
                log.info("%s: not bound to %s, dropped: %s", key, node, error)
                return
            raise TemporaryError(f"binding to {node} failed: {error}") from error
        log.info("%s: bound to %s", key, node)
        self.recorder.record(pod, "Normal", "Scheduled", f"Successfully assigned {key} to {node}")

    def _report_unschedulable(self, key: str, pod: Obj, message: str) -> None:
        """A FailedScheduling event, and PodScheduled=False on the pod, as Kubernetes reports it."""
        self.recorder.record(pod, "Warning", "FailedScheduling", message)
        condition = unschedulable_condition(pod, message, _now())
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
