"""The node lifecycle controller: a node whose kubelet went silent turns Unknown, is tainted, and loses its pods.

As Kubernetes' node lifecycle controller and taint manager: a node whose kubelet
has not posted status for ``--node-monitor-grace-period`` gets Ready=Unknown and
the ``node.kubernetes.io/unreachable:NoExecute`` taint; each pod bound to it is
deleted (gracefully: it stays Terminating until its kubelet returns and finishes
it) once its toleration of that taint, or ``--pod-eviction-timeout``, has run
out. When the kubelet posts again it writes Ready=True itself and the taint goes.

Level-triggered: node and pod changes and a pass every ``--node-monitor-period``
enqueue node names, and ``sync`` converges one node from the caches. The only
state kept is when each node's heartbeat was last seen to change. Before a node
is condemned the node cache is checked against a fresh LIST, so lost events do
not make a node look silent; a LIST that succeeds after a failed one counts as
seeing every node (the API was away, not the kubelets).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from daemons.api.errors import APIError, Conflict, ConnectionFailed, MiniK8sError, NotFound
from daemons.api.resources import NODE_LEASE_NAMESPACE, require
from daemons.controllers import node_health
from daemons.controllers.context import ControllerContext
from daemons.machinery.controller import Controller, TemporaryError
from daemons.machinery.events import EventRecorder
from daemons.machinery.keys import key_of

log = logging.getLogger(__name__)

Obj = dict[str, Any]

COMPONENT = "node-controller"
NODES = require("v1", "Node")
PODS = require("v1", "Pod")
LEASES = require("coordination.k8s.io/v1", "Lease")


def pod_node(pod: Obj) -> str | None:
    return (pod.get("spec") or {}).get("nodeName") or None


class NodeLifecycleController:
    """Marks silent nodes Unknown and unreachable, evicts their pods, and lifts the taint when they return."""

    name = "nodelifecycle"

    def __init__(self, context: ControllerContext) -> None:
        self.client = context.client
        self.period = context.node_monitor_period
        self.grace = context.node_monitor_grace_period
        self.eviction_timeout = context.pod_eviction_timeout
        self.controller = Controller(self.name, self.sync, context.workers)
        self.recorder = EventRecorder(context.client, COMPONENT)
        self.started_at = time.monotonic()
        self._observations: dict[str, node_health.Observation] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._monitor = threading.Thread(target=self._monitor_loop, name=f"{self.name}-monitor", daemon=True)
        self.nodes = context.informers.informer(NODES)
        self.pods = context.informers.informer(PODS)
        self.nodes.add_handlers(self.controller.enqueue_object, lambda _old, new: self.controller.enqueue_object(new),
                                self.controller.enqueue_object)
        self.pods.add_handlers(self._pod_changed, lambda _old, new: self._pod_changed(new))
        self.leases = context.informers.informer(LEASES)
        self.leases.add_handlers(self._lease_changed, lambda _old, new: self._lease_changed(new))

    def start(self) -> None:
        # Caches are full now: this is the controller's first look at every node.
        self.started_at = time.monotonic()
        self.controller.start()
        self._monitor.start()

    def stop(self) -> None:
        self._stopping.set()
        self.controller.stop()

    # --- feeding ------------------------------------------------------------------------------------

    def _monitor_loop(self) -> None:
        """Every period, every node: silence is the absence of events, so no event would ever report it."""
        while not self._stopping.wait(self.period):
            for node in self.nodes.store.list():
                self.controller.enqueue_object(node)

    def _pod_changed(self, pod: Obj) -> None:
        """A pod bound to a tainted node may be due for eviction (or just got a toleration)."""
        name = pod_node(pod)
        if name is None:
            return
        node = self.nodes.store.get_by_key(name)
        if node is not None and node_health.unreachable_taint(node) is not None:
            self.controller.enqueue(name)

    def _lease_changed(self, lease: Obj) -> None:
        """A node's Lease renewed: its node is heard from."""
        metadata = lease.get("metadata") or {}
        if metadata.get("namespace") == NODE_LEASE_NAMESPACE and metadata.get("name"):
            self.controller.enqueue(metadata["name"])

    # --- health -------------------------------------------------------------------------------------

    def _view_since(self) -> float:
        """When the controller's view of the nodes last (re)started: its start or the API's return."""
        return max(self.started_at, self.nodes.recovered_at or 0.0, self.leases.recovered_at or 0.0)

    def _listed_at(self) -> float:
        """When both caches that carry heartbeats were last listed in full."""
        return min(self.nodes.listed_at or 0.0, self.leases.listed_at or 0.0)

    def _observed_at(self, name: str, node: Obj, now: float) -> float:
        lease = self.leases.store.get(NODE_LEASE_NAMESPACE, name)
        with self._lock:
            observation = node_health.observe(self._observations.get(name), node, now, lease)
            self._observations[name] = observation
            return observation.at

    def _silent(self, name: str, node: Obj, now: float) -> bool:
        return node_health.is_silent(self._observed_at(name, node, now), self._view_since(), now, self.grace)

    # --- syncing one node ---------------------------------------------------------------------------

    def sync(self, name: str) -> None:
        """Converge one node: its Ready condition, its unreachable taint, and the eviction of its pods."""
        node = self.nodes.store.get_by_key(name)
        if node is None:
            with self._lock:
                self._observations.pop(name, None)
            return
        now = time.monotonic()
        observed_at = self._observed_at(name, node, now)
        silent = node_health.is_silent(observed_at, self._view_since(), now, self.grace)
        if silent and self._listed_at() < node_health.silent_since(observed_at, self._view_since(), self.grace):
            self._refresh(name)
            return
        try:
            node = self._mark_unreachable(name, node) if silent else self._lift_taint(name, node)
        except Conflict:
            raise
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"updating node {name} failed: {error}") from error
        taint = node_health.unreachable_taint(node)
        if taint is not None:
            self._evict(name, taint)

    def _refresh(self, name: str) -> None:
        """Make sure the cache is no older than a node's silence before condemning it, then judge the node again.

        Lost events must not look like silence; a LIST that fails means the API is away
        and nothing is decided until it answers (its return then counts as seeing every node).
        """
        try:
            self.nodes.relist()
            self.leases.relist()
        except (MiniK8sError, httpx.HTTPError, ValueError) as error:
            raise TemporaryError(f"node {name} looks silent, but the API does not answer: {error}",
                                 delay=self.period) from error
        self.controller.enqueue(name)

    def _mark_unreachable(self, name: str, node: Obj) -> Obj:
        """Ready=Unknown through the status subresource, then the taint through the node's spec."""
        wall = datetime.now(UTC)
        status = node_health.unknown_status(node, wall)
        if status is not None:
            updated = copy.deepcopy(node)
            updated["status"] = status
            node = self.client.replace(NODES, updated, subresource="status")
            log.warning("node %s: kubelet stopped posting status for %.0fs; Ready is Unknown", name, self.grace)
            self.recorder.record(node, "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady")
        taints = node_health.with_unreachable_taint((node.get("spec") or {}).get("taints"), wall)
        if taints is not None:
            updated = copy.deepcopy(node)
            updated.setdefault("spec", {})["taints"] = taints
            node = self.client.replace(NODES, updated)
            log.info("node %s: tainted %s:%s", name, node_health.UNREACHABLE_TAINT_KEY, node_health.UNREACHABLE_EFFECT)
        return node

    def _lift_taint(self, name: str, node: Obj) -> Obj:
        """Remove our taint once the kubelet has reported again (its Ready is no longer the Unknown we wrote)."""
        if (node_health.ready_condition(node) or {}).get("status") == "Unknown":
            return node
        taints = node_health.without_unreachable_taint((node.get("spec") or {}).get("taints"))
        if taints is None:
            return node
        updated = copy.deepcopy(node)
        updated["spec"]["taints"] = taints
        node = self.client.replace(NODES, updated)
        log.info("node %s: kubelet posts status again; removed the unreachable taint", name)
        return node

    def _evict(self, name: str, taint: Obj) -> None:
        """Delete the pods whose time on the unreachable node is up; come back for the next one due."""
        now = time.monotonic()
        verdicts = [self._silent(key_of(node), node, now) for node in self.nodes.store.list()]
        if node_health.all_silent(verdicts):
            log.warning("node %s: every node is silent, so the control plane is the likely fault; no pod is evicted",
                        name)
            return
        pods = [pod for pod in self.pods.store.list() if pod_node(pod) == name]
        due, upcoming = node_health.evictions(pods, taint, datetime.now(UTC), self.eviction_timeout)
        failed: list[str] = []
        for pod in due:
            metadata = pod["metadata"]
            target = f"{metadata.get('namespace')}/{metadata.get('name')}"
            try:
                with contextlib.suppress(NotFound):
                    self.client.delete(PODS, metadata["name"], metadata.get("namespace"))
            except (APIError, ConnectionFailed) as error:
                failed.append(f"{target}: {error}")
                continue
            log.info("node %s: evicting pod %s", name, target)
            self.recorder.record(pod, "Normal", "TaintManagerEviction", f"Marking for deletion Pod {target}")
        if failed:
            raise TemporaryError(f"evicting from node {name} failed: {'; '.join(failed)}")
        if upcoming is not None:
            self.controller.enqueue_after(name, max((upcoming - datetime.now(UTC)).total_seconds(), 0.0))
