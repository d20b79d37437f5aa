"""The DaemonSet controller: one pod from the DaemonSet's template on every node that should run it.

As Kubernetes' daemonset controller. A node should run a daemon pod when the template's nodeSelector and
required node affinity select it and the pod tolerates its NoSchedule and NoExecute taints (daemon pods get
upstream's automatic tolerations: not-ready and unreachable NoExecute, the pressure conditions and
unschedulable NoSchedule, so a cordoned node keeps its daemons). A node whose only untolerated taints are
NoSchedule keeps the pod it has but gets no new one. Pods are created bound to their node (``spec.nodeName``):
the scheduler's readiness filter would otherwise hold them back from a not-ready node they tolerate.

Each pod carries the template's hash as label ``controller-revision-hash``. A RollingUpdate replaces pods whose
hash is not the current one, at most ``maxUnavailable`` nodes without an available pod at a time, or (with
``maxSurge``) by starting the new pod beside the old one and deleting the old one once the new one is
available. OnDelete replaces a pod only after someone deleted it. ControllerRevisions are not served here:
the revision history ``kubectl rollout history/undo`` reads is an annotation on the DaemonSet (see
daemons/api/kinds/daemonset.py).

The decisions (which nodes, which pods to create or delete, the status) are pure functions below; the
controller class only reads the caches and writes their result.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from daemons.api.errors import APIError, ConnectionFailed, MiniK8sError, NotFound
from daemons.api.kinds.daemonset import (
    HASH_LABEL,
    HISTORY_ANNOTATION,
    int_or_percent,
    recorded_history,
)
from daemons.api.phases import TERMINAL_PHASES
from daemons.api.resources import require
from daemons.api.selectors import LabelSelectorQuery, SelectorError
from daemons.api.times import parse_time
from daemons.controllers.context import ControllerContext
from daemons.controllers.ownership import ChildControl, claim, controller_of, is_being_deleted
from daemons.controllers.replicaset import available_in, burst_sizes, is_ready
from daemons.controllers.rollout import CHANGE_CAUSE, template_hash
from daemons.machinery.controller import Controller, Expectations, PermanentError, TemporaryError
from daemons.machinery.events import EventRecorder
from daemons.machinery.keys import key_of, make_key, resource_version, split_key
from daemons.scheduler.facts import node_info, pod_info
from daemons.scheduler.predicates import node_selector_matches, untolerated_taint
from daemons.scheduler.usage import NO_USAGE

log = logging.getLogger(__name__)

Obj = dict[str, Any]

DAEMONSETS = require("apps/v1", "DaemonSet")
PODS = require("v1", "Pod")
NODES = require("v1", "Node")
COMPONENT = "daemonset-controller"
# At most this many creates or deletes per sync, as kube-controller-manager's DaemonSet burstReplicas.
BURST_REPLICAS = 250
PARALLEL_WRITES = 16
NAMESPACE_TERMINATING = "NamespaceTerminating"

# upstream's AddOrUpdateDaemonPodTolerations: what every daemon pod tolerates, whatever its template says.
AUTOMATIC_TOLERATIONS: tuple[Obj, ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
# A host-network daemon (a CNI agent) must start before the node's network is up.
HOST_NETWORK_TOLERATION: Obj = {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists",
                                "effect": "NoSchedule"}


# --- which nodes should run a daemon pod (pure) ------------------------------------------------------


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def template_of(ds: Obj) -> Obj:
    return _spec(ds).get("template") or {}


def daemon_tolerations(pod_spec: Obj) -> list[Obj]:
    """The template's tolerations plus the automatic ones it does not list already."""
    tolerations = [dict(item) for item in pod_spec.get("tolerations") or []]
    wanted = [*AUTOMATIC_TOLERATIONS, *((HOST_NETWORK_TOLERATION,) if pod_spec.get("hostNetwork") else ())]
    for toleration in wanted:
        if not any(item.get("key") == toleration["key"] and item.get("effect") == toleration["effect"]
                   and (item.get("operator") or "Equal") == "Exists" for item in tolerations):
            tolerations.append(dict(toleration))
    return tolerations


@dataclass(frozen=True)
class Placement:
    """Whether a node should get a daemon pod, and whether a pod already there may stay."""

    should_run: bool
    should_continue: bool


def placement(ds: Obj, node: Obj) -> Placement:
    """upstream's NodeShouldRunDaemonPod: the template's node name, selector and required node affinity must
    select the node; untolerated NoSchedule taints only keep new pods away, untolerated NoExecute ones evict."""
    pod_spec = dict(template_of(ds).get("spec") or {})
    name = _meta(node).get("name")
    if pod_spec.get("nodeName") and pod_spec["nodeName"] != name:
        return Placement(False, False)
    pod_spec["tolerations"] = daemon_tolerations(pod_spec)
    pod, facts = pod_info({"spec": pod_spec}), node_info(node)
    if node_selector_matches(pod, facts, NO_USAGE):
        return Placement(False, False)
    if untolerated_taint(pod, facts) is None:
        return Placement(True, True)
    executing = node_info({**node, "spec": {**_spec(node), "taints": [
        taint for taint in _spec(node).get("taints") or [] if taint.get("effect") == "NoExecute"]}})
    return Placement(False, untolerated_taint(pod, executing) is None)


def placement_facts(node: Obj) -> tuple[Any, Any]:
    """What of a node ``placement`` reads: its labels and taints."""
    return _meta(node).get("labels"), _spec(node).get("taints")


def node_of(pod: Obj) -> str:
    return _spec(pod).get("nodeName") or ""


def creation_order(pod: Obj) -> tuple[bool, float, str]:
    """upstream's podByCreationTimestampAndPhase: scheduled first, then oldest, then by name."""
    created = parse_time(_meta(pod).get("creationTimestamp"))
    return (not node_of(pod), created.timestamp() if created else math.inf, _meta(pod).get("name") or "")


def is_updated(pod: Obj, current_hash: str) -> bool:
    return (_meta(pod).get("labels") or {}).get(HASH_LABEL) == current_hash


def pods_by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    """The DaemonSet's pods grouped by the node they are bound to (unbound pods are left out, as upstream)."""
    grouped: dict[str, list[Obj]] = {}
    for pod in pods:
        if node_of(pod):
            grouped.setdefault(node_of(pod), []).append(pod)
    return grouped


@dataclass
class Plan:
    """What one sync does: create a pod on each of ``create_on`` (node names) and delete ``delete``."""

    create_on: list[str] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.create_on or self.delete)


def surge_allowed(ds: Obj) -> bool:
    return rolling_update(ds) and int_or_percent(_rolling(ds).get("maxSurge", 0)) not in (None, 0)


def _rolling(ds: Obj) -> Obj:
    return (_spec(ds).get("updateStrategy") or {}).get("rollingUpdate") or {}


def rolling_update(ds: Obj) -> bool:
    return ((_spec(ds).get("updateStrategy") or {}).get("type") or "RollingUpdate") == "RollingUpdate"


def manage_plan(ds: Obj, nodes: Iterable[Obj], node_pods: Mapping[str, list[Obj]], current_hash: str) -> Plan:
    """upstream's manage: a pod where one should run and none exists, none where none may stay, one where
    several run (two while a surge replaces an old pod), failed pods replaced; pods on vanished nodes go."""
    plan = Plan()
    known: set[str] = set()
    for node in sorted(nodes, key=lambda item: _meta(item).get("name") or ""):
        name = _meta(node).get("name") or ""
        known.add(name)
        pods = node_pods.get(name) or []
        where = placement(ds, node)
        if where.should_run and not pods:
            plan.create_on.append(name)
        elif where.should_continue:
            running = []
            for pod in pods:
                if is_being_deleted(pod):
                    continue
                if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
                    plan.delete.append(pod)
                else:
                    running.append(pod)
            plan.delete += _excess(ds, running, current_hash)
            if not running and where.should_run and surge_allowed(ds):
                plan.create_on.append(name)
        elif pods:
            plan.delete += [pod for pod in pods if not is_being_deleted(pod)]
    for name, pods in sorted(node_pods.items()):
        if name not in known:
            plan.delete += [pod for pod in pods if not is_being_deleted(pod)]
    return plan


def _excess(ds: Obj, running: list[Obj], current_hash: str) -> list[Obj]:
    """The running pods of one node beyond the one (or, mid-surge, the new and the old one) it keeps."""
    if len(running) <= 1:
        return []
    ordered = sorted(running, key=creation_order)
    if not surge_allowed(ds):
        return ordered[1:]
    excess: list[Obj] = []
    oldest_new = oldest_old = None
    for pod in ordered:
        if is_updated(pod, current_hash) and oldest_new is None:
            oldest_new = pod
        elif not is_updated(pod, current_hash) and oldest_old is None:
            oldest_old = pod
        else:
            excess.append(pod)
    # The old pod stays only while it is ready and its replacement is not.
    if oldest_new is not None and oldest_old is not None and (not is_ready(oldest_old) or is_ready(oldest_new)):
        excess.append(oldest_old)
    return excess


def scaled(value: object, total: int) -> int:
    """An IntOrString against ``total``, percentages rounded up (upstream's GetScaledValueFromIntOrPercent)."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil((int_or_percent(value) or 0) * total / 100)
    return int_or_percent(value) or 0


def _updated_and_old(pods: list[Obj], current_hash: str) -> tuple[Obj | None, Obj | None, bool]:
    """upstream's findUpdatedPodsOnNode: the node's new and old live pod; False when it has two of either."""
    new = old = None
    for pod in pods:
        if is_being_deleted(pod):
            continue
        if is_updated(pod, current_hash):
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


def rolling_plan(ds: Obj, nodes: Iterable[Obj], node_pods: Mapping[str, list[Obj]], current_hash: str,
                 now: float) -> Plan:
    """upstream's rollingUpdate: which old pods to delete (and, surging, where to start new ones beside old
    ones) so that at most maxUnavailable nodes lack an available pod, or at most maxSurge run two."""
    nodes = list(nodes)
    min_ready = int(_spec(ds).get("minReadySeconds") or 0)
    desired = sum(1 for node in nodes if placement(ds, node).should_run)
    max_surge = scaled(_rolling(ds).get("maxSurge", 0), desired) if surge_allowed(ds) else 0
    max_unavailable = scaled(_rolling(ds).get("maxUnavailable", 1), desired)
    if max_surge == 0 and max_unavailable == 0:
        max_unavailable = 1

    def available(pod: Obj) -> bool:
        return available_in(pod, min_ready, now) == 0

    plan = Plan()
    if max_surge == 0:
        unavailable, replace_now, candidates = 0, [], []
        for name in sorted(node_pods):
            new, old, single = _updated_and_old(node_pods[name], current_hash)
            if not single or (new is None) == (old is None):
                unavailable += 1  # the manage pass creates or prunes here: count it as down
            elif new is not None:
                unavailable += not available(new)
            elif old is not None and not available(old):
                replace_now.append(old)  # down anyway: replacing it costs nothing
            elif old is not None and unavailable < max_unavailable:
                candidates.append(old)
        room = min(max(max_unavailable - unavailable, 0), len(candidates))
        plan.delete = replace_now + candidates[:room]
        return plan
    by_name = {_meta(node).get("name"): node for node in nodes}
    surging, allowed, candidates = 0, [], []
    for name in sorted(node_pods):
        new, old, single = _updated_and_old(node_pods[name], current_hash)
        if not single:
            surging += 1
        elif old is None:
            continue
        elif new is None:
            if not available(old):
                node = by_name.get(name)
                if node is None or not placement(ds, node).should_run:
                    plan.delete.append(old)
                else:
                    allowed.append(name)
            elif surging < max_surge:
                candidates.append(name)
        elif not available(new):
            surging += 1  # waiting for the new pod beside the old one
        else:
            plan.delete.append(old)
    room = min(max(max_surge - surging, 0), len(candidates))
    plan.create_on = allowed + candidates[:room]
    return plan


def calculate_status(ds: Obj, nodes: Iterable[Obj], node_pods: Mapping[str, list[Obj]], current_hash: str,
                     now: float) -> tuple[Obj, float | None]:
    """upstream's updateDaemonSetStatus, judging each node by its oldest pod; and the seconds until a ready pod
    becomes available (minReadySeconds), None when none waits."""
    min_ready = int(_spec(ds).get("minReadySeconds") or 0)
    desired = current = ready = available = updated = misscheduled = 0
    wait: float | None = None
    for node in nodes:
        pods = sorted(node_pods.get(_meta(node).get("name") or "") or [], key=creation_order)
        if not placement(ds, node).should_run:
            misscheduled += bool(pods)
            continue
        desired += 1
        if not pods:
            continue
        current += 1
        pod = pods[0]
        if is_ready(pod):
            ready += 1
            remaining = available_in(pod, min_ready, now)
            if remaining == 0:
                available += 1
            elif remaining is not None:
                wait = remaining if wait is None else min(wait, remaining)
        updated += is_updated(pod, current_hash)
    status: Obj = {"desiredNumberScheduled": desired, "currentNumberScheduled": current, "numberReady": ready,
                   "numberAvailable": available, "numberUnavailable": desired - available,
                   "updatedNumberScheduled": updated, "numberMisscheduled": misscheduled,
                   "observedGeneration": int(_meta(ds).get("generation") or 1)}
    return status, wait


STATUS_FIELDS = ("desiredNumberScheduled", "currentNumberScheduled", "numberReady", "numberAvailable",
                 "numberUnavailable", "updatedNumberScheduled", "numberMisscheduled", "observedGeneration")


def status_patch(current: Obj | None, desired: Obj) -> Obj | None:
    """The merge patch of ``status`` that makes it ``desired``; None when it says that already."""
    current = current or {}
    if all((current.get(name) or 0) == (desired.get(name) or 0) for name in STATUS_FIELDS) \
            and "observedGeneration" in current:
        return None
    return {"status": {name: desired.get(name, 0) for name in STATUS_FIELDS}}


def daemon_pod(ds: Obj, node_name: str, current_hash: str) -> Obj:
    """A pod body for ``node_name`` from the template: bound to the node, hash-labelled, tolerating what daemon
    pods tolerate; named ``<ds>-<random>`` by the apiserver."""
    template = template_of(ds)
    template_metadata = template.get("metadata") or {}
    metadata: Obj = {"generateName": f"{_meta(ds).get('name')}-",
                     "labels": {**(template_metadata.get("labels") or {}), HASH_LABEL: current_hash}}
    if template_metadata.get("annotations"):
        metadata["annotations"] = dict(template_metadata["annotations"])
    spec = dict(template.get("spec") or {})
    spec["nodeName"] = node_name
    spec["tolerations"] = daemon_tolerations(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def next_history(ds: Obj, current_hash: str) -> list[Obj] | None:
    """The revision history with the current template as the newest revision, trimmed to
    ``revisionHistoryLimit`` older ones; None when it records the current template last already.

    Going back to a recorded template (``rollout undo``) renumbers that revision as the newest, as upstream
    renumbers the matching ControllerRevision."""
    history = recorded_history(ds)
    if history and history[-1].get("hash") == current_hash:
        return None
    newest = max((int(entry.get("revision") or 0) for entry in history), default=0) + 1
    entry: Obj = {"revision": newest, "hash": current_hash, "template": template_of(ds)}
    cause = (_meta(ds).get("annotations") or {}).get(CHANGE_CAUSE)
    if cause:
        entry["changeCause"] = cause
    kept = [item for item in history if item.get("hash") != current_hash]
    limit = _spec(ds).get("revisionHistoryLimit")
    limit = max(10 if limit is None else int(limit), 0)
    return [*kept[len(kept) - limit:], entry] if len(kept) > limit else [*kept, entry]


# --- the controller ---------------------------------------------------------------------------------


class DaemonSetController:
    """Keeps a daemon pod on every eligible node for every DaemonSet, syncing DaemonSet keys
    (``namespace/name``)."""

    name = "daemonset"

    def __init__(self, context: ControllerContext, clock: Callable[[], float] | None = None) -> None:
        self.client = context.client
        self.controller = Controller(self.name, self.sync, context.workers)
        self.expectations = Expectations()
        self.recorder = EventRecorder(context.client, COMPONENT)
        self.pod_control = ChildControl(context.client, PODS, self.recorder)
        self.clock = clock or (lambda: datetime.now(UTC).timestamp())
        self.daemonsets = context.informers.informer(DAEMONSETS)
        self.pods = context.informers.informer(PODS)
        self.nodes = context.informers.informer(NODES)
        self.daemonsets.add_handlers(self.controller.enqueue_object, self._daemonset_updated,
                                     self._daemonset_deleted)
        self.pods.add_handlers(self._pod_added, self._pod_updated, self._pod_deleted)
        self.nodes.add_handlers(self._node_changed, self._node_updated, self._node_changed)
        self._writes = ThreadPoolExecutor(max_workers=PARALLEL_WRITES, thread_name_prefix="daemonset-write")

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()
        self._writes.shutdown(wait=True)

    # --- informer handlers --------------------------------------------------------------------------

    def _daemonset_updated(self, _old: Obj, new: Obj) -> None:
        self.controller.enqueue_object(new)

    def _daemonset_deleted(self, ds: Obj) -> None:
        key = key_of(ds)
        self.expectations.delete(key)
        self.controller.enqueue(key)

    def _enqueue_all(self) -> None:
        for ds in self.daemonsets.store.list():
            self.controller.enqueue_object(ds)

    def _node_changed(self, _node: Obj) -> None:
        self._enqueue_all()

    def _node_updated(self, old: Obj, new: Obj) -> None:
        """Only labels and taints decide placement; heartbeats change nodes all the time."""
        if placement_facts(old) != placement_facts(new):
            self._enqueue_all()

    def _owner_key(self, pod: Obj) -> str | None:
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != DAEMONSETS.kind or not str(ref.get("apiVersion", "")).startswith("apps/"):
            return None
        key = make_key(_meta(pod).get("namespace"), ref.get("name") or "")
        ds = self.daemonsets.store.get_by_key(key)
        if ds is None or _meta(ds).get("uid") != ref.get("uid"):
            return None
        return key

    def _selecting(self, pod: Obj) -> list[str]:
        keys = []
        for ds in self.daemonsets.store.list(_meta(pod).get("namespace")):
            try:
                selector = LabelSelectorQuery.from_label_selector(_spec(ds).get("selector"))
            except SelectorError:
                continue
            if selector.requirements and selector.matches(_meta(pod).get("labels")):
                keys.append(key_of(ds))
        return keys

    def _pod_added(self, pod: Obj) -> None:
        owner = self._owner_key(pod)
        if owner is not None:
            self.expectations.creation_observed(owner)
            self.controller.enqueue(owner)
        elif controller_of(pod) is None:
            for key in self._selecting(pod):
                self.controller.enqueue(key)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if resource_version(old) == resource_version(new):
            return
        for pod in (old, new):
            owner = self._owner_key(pod)
            if owner is not None:
                self.controller.enqueue(owner)
            elif controller_of(pod) is None:
                for key in self._selecting(pod):
                    self.controller.enqueue(key)

    def _pod_deleted(self, pod: Obj) -> None:
        owner = self._owner_key(pod)
        if owner is not None:
            self.expectations.deletion_observed(owner, key_of(pod))
            self.controller.enqueue(owner)

    # --- syncing one DaemonSet ----------------------------------------------------------------------

    def sync(self, key: str) -> None:
        """Converge the DaemonSet ``key``: claim pods, create and delete per node, roll out, report status."""
        ds = self.daemonsets.store.get_by_key(key)
        if ds is None:
            self.expectations.delete(key)
            return
        namespace, _name = split_key(key)
        try:
            selector = LabelSelectorQuery.from_label_selector(_spec(ds).get("selector"))
        except SelectorError as error:
            raise PermanentError(f"{key}: invalid selector: {error}") from error
        current_hash = template_hash(template_of(ds))
        needs_sync = self.expectations.satisfied(key)
        try:
            pods = self._claim(ds, selector, self.pods.store.list(namespace))
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key}: claiming pods failed: {error}") from error
        nodes = self.nodes.store.list()
        node_pods = pods_by_node(pods)
        now = self.clock()
        manage_error: MiniK8sError | None = None
        if needs_sync and not is_being_deleted(ds):
            plan = manage_plan(ds, nodes, node_pods, current_hash)
            if not plan and rolling_update(ds):
                plan = rolling_plan(ds, nodes, node_pods, current_hash, now)
            try:
                self._apply(key, ds, plan, current_hash)
                self._record_history(key, ds, current_hash)
            except (APIError, ConnectionFailed) as error:
                manage_error = error
        status, wait_seconds = calculate_status(ds, nodes, node_pods, current_hash, now)
        self._write_status(key, ds, status)
        if wait_seconds is not None:
            self.controller.enqueue_after(key, wait_seconds)
        if manage_error is not None:
            raise TemporaryError(f"{key}: {manage_error}") from manage_error

    def _claim(self, ds: Obj, selector: LabelSelectorQuery, pods: list[Obj]) -> list[Obj]:
        """The pods ``ds`` owns after adopting matching orphans and releasing its pods that stopped matching."""
        claimed = claim(ds, selector, pods)
        for pod in claimed.release:
            self.pod_control.release(ds, pod)
        for pod in claimed.adopt:
            try:
                claimed.owned.append(self.pod_control.adopt(ds, DAEMONSETS, pod))
            except NotFound:
                continue
        return claimed.owned

    def _apply(self, key: str, ds: Obj, plan: Plan, current_hash: str) -> None:
        """Create and delete what ``plan`` says, at most BURST_REPLICAS of each, creates in slow-start batches."""
        create_on, victims = plan.create_on[:BURST_REPLICAS], plan.delete[:BURST_REPLICAS]
        if victims:
            self.expectations.expect_deletions(key, [key_of(pod) for pod in victims])
            log.info("%s: deleting %d daemon pods", key, len(victims))
            errors = self._in_parallel([self._deleter(key, ds, pod) for pod in victims])
            if errors:
                raise errors[0]
        if create_on:
            self.expectations.expect_creations(key, len(create_on))
            log.info("%s: creating daemon pods on %d nodes", key, len(create_on))
            created, start = 0, 0
            try:
                for size in burst_sizes(len(create_on)):
                    batch = create_on[start:start + size]
                    start += size
                    errors = self._in_parallel([self._creator(key, ds, node, current_hash) for node in batch])
                    created += size - len(errors)
                    if errors:
                        raise errors[0]
            finally:
                for _ in range(len(create_on) - created):
                    self.expectations.creation_observed(key)

    def _creator(self, key: str, ds: Obj, node: str, current_hash: str) -> Callable[[], None]:
        def run() -> None:
            try:
                self.pod_control.create(ds, DAEMONSETS, daemon_pod(ds, node, current_hash))
            except APIError as error:
                if not any(cause.get("type") == NAMESPACE_TERMINATING for cause in error.causes):
                    raise
                self.expectations.creation_observed(key)
        return run

    def _deleter(self, key: str, ds: Obj, pod: Obj) -> Callable[[], None]:
        def run() -> None:
            try:
                deleted = self.pod_control.delete(ds, pod)
            except (APIError, ConnectionFailed):
                self.expectations.deletion_observed(key, key_of(pod))
                raise
            if not deleted:
                self.expectations.deletion_observed(key, key_of(pod))
        return run

    def _in_parallel(self, actions: list[Callable[[], None]]) -> list[MiniK8sError]:
        futures = [self._writes.submit(action) for action in actions]
        wait(futures)
        errors: list[MiniK8sError] = []
        for future in futures:
            error = future.exception()
            if isinstance(error, (APIError, ConnectionFailed)):
                errors.append(error)
            elif error is not None:
                raise error
        return errors

    def _record_history(self, key: str, ds: Obj, current_hash: str) -> None:
        """Keep the template in the revision history annotation (pinned to the resourceVersion read, so a
        template changed meanwhile is recorded by the next sync instead)."""
        history = next_history(ds, current_hash)
        if history is None:
            return
        metadata = _meta(ds)
        patch = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                              "annotations": {HISTORY_ANNOTATION: json.dumps(history, separators=(",", ":"))}}}
        try:
            self.client.patch(DAEMONSETS, metadata["name"], patch, metadata.get("namespace"))
        except NotFound:
            return
        log.info("%s: template %s recorded as revision %d", key, current_hash, history[-1]["revision"])

    def _write_status(self, key: str, ds: Obj, status: Obj) -> None:
        patch = status_patch(ds.get("status"), status)
        if patch is None:
            return
        metadata = _meta(ds)
        try:
            self.client.patch(DAEMONSETS, metadata["name"], patch, metadata.get("namespace"), subresource="status")
        except NotFound:
            return
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key}: writing status failed: {error}") from error
        log.info("%s: status desired=%d current=%d ready=%d updated=%d available=%d", key,
                 status["desiredNumberScheduled"], status["currentNumberScheduled"], status["numberReady"],
                 status["updatedNumberScheduled"], status["numberAvailable"])
