"""The ReplicaSet controller: each ReplicaSet keeps ``spec.replicas`` active pods made from its template.

As Kubernetes' replicaset controller: a sync claims the namespace's pods (keeps its own
that match, adopts matching orphans, releases its own that stopped matching), creates
the missing pods in slow-start bursts (1, 2, 4, ... so a failing template costs one
error, not hundreds), deletes the surplus starting with the pods least worth keeping,
and reports counts through the status subresource. Expectations remember the creates
and deletes not yet seen in the pod cache, so a slow event feed never makes a second
sync create or delete the same pods again. A ReplicaSet being deleted creates nothing.

ReplicationControllers are served by the same code, as upstream's replication manager
wraps the ReplicaSet controller: only the row, the selector's form (a plain label map)
and the names differ.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from daemons.api.errors import APIError, ConnectionFailed, MiniK8sError, NotFound
from daemons.api.phases import TERMINAL_PHASES
from daemons.api.resources import Resource, require
from daemons.api.selectors import LabelSelectorQuery, SelectorError
from daemons.api.times import parse_time, rfc3339
from daemons.controllers.context import ControllerContext
from daemons.controllers.ownership import ChildControl, claim, controller_of, is_being_deleted
from daemons.machinery.controller import Controller, Expectations, PermanentError, TemporaryError
from daemons.machinery.events import EventRecorder
from daemons.machinery.keys import key_of, make_key, resource_version, split_key

log = logging.getLogger(__name__)

Obj = dict[str, Any]

REPLICASETS = require("apps/v1", "ReplicaSet")
PODS = require("v1", "Pod")
# At most this many creates or deletes per sync, as kube-controller-manager's burstReplicas.
BURST_REPLICAS = 500
SLOW_START_INITIAL_BATCH = 1
# Creates and deletes of a batch run at once, on one pool of this many threads that every sync shares.
PARALLEL_WRITES = 16
REPLICA_FAILURE = "ReplicaFailure"
# The Status cause of a create refused because the namespace is being deleted: no failure, nothing to retry.
NAMESPACE_TERMINATING = "NamespaceTerminating"
# Pods in these phases go first when scaling down: Pending, then Unknown, then Running.
PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


# --- which pods count, and which go first (pure) ----------------------------------------------------


def is_active(pod: Obj) -> bool:
    """Not finished and not being deleted: a pod that counts towards the replicas."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES and not is_being_deleted(pod)


def ready_condition(pod: Obj) -> Obj | None:
    return next((condition for condition in (pod.get("status") or {}).get("conditions") or []
                 if condition.get("type") == "Ready"), None)


def is_ready(pod: Obj) -> bool:
    condition = ready_condition(pod)
    return condition is not None and condition.get("status") == "True"


def epoch_seconds(value: str | None) -> float | None:
    """An RFC 3339 timestamp as seconds since the epoch; None when absent or unreadable."""
    moment = parse_time(value)
    return moment.timestamp() if moment else None


def ready_since(pod: Obj) -> float | None:
    """When the pod became Ready (its Ready condition's transition time), if it is Ready."""
    condition = ready_condition(pod)
    if condition is None or condition.get("status") != "True":
        return None
    return epoch_seconds(condition.get("lastTransitionTime"))


def available_in(pod: Obj, min_ready_seconds: int, now: float) -> float | None:
    """Seconds until the pod counts as available: 0 when it is, None when it is not ready (or its time unknown)."""
    if not is_ready(pod):
        return None
    if min_ready_seconds <= 0:
        return 0.0
    since = ready_since(pod)
    if since is None:
        return None
    return max(0.0, since + min_ready_seconds - now)


def restarts(pod: Obj) -> int:
    return sum(int(status.get("restartCount") or 0)
               for status in (pod.get("status") or {}).get("containerStatuses") or [])


def deletion_rank(pod: Obj) -> tuple[Any, ...]:
    """Sorts the pods least worth keeping first, as upstream's ActivePods ordering.

    Unscheduled before scheduled; Pending, then Unknown, then Running; not ready before
    ready; ready for a shorter time first; more restarts first; newer first.
    """
    metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ready = is_ready(pod)
    since = (ready_since(pod) or math.inf) if ready else 0.0  # an unknown time sorts as the newest
    created = epoch_seconds(metadata.get("creationTimestamp")) or math.inf
    return (bool(spec.get("nodeName")), PHASE_RANK.get(status.get("phase") or "Pending", 0), ready,
            -since, -restarts(pod), -created, metadata.get("name") or "")


def pods_to_delete(pods: Iterable[Obj], count: int) -> list[Obj]:
    """The ``count`` pods to delete when scaling down."""
    return sorted(pods, key=deletion_rank)[:max(count, 0)]


def burst_sizes(count: int, initial: int = SLOW_START_INITIAL_BATCH) -> list[int]:
    """The batch sizes of a slow start creating ``count`` pods: 1, 2, 4, ... and whatever remains last."""
    sizes: list[int] = []
    size = max(initial, 1)
    remaining = count
    while remaining > 0:
        sizes.append(min(size, remaining))
        remaining -= sizes[-1]
        size *= 2
    return sizes


def pod_from_template(rs: Obj) -> Obj:
    """A pod body from the ReplicaSet's template, named ``<rs>-<random>`` by the apiserver."""
    template = (rs.get("spec") or {}).get("template") or {}
    template_metadata = template.get("metadata") or {}
    metadata: Obj = {"generateName": f"{(rs.get('metadata') or {}).get('name')}-",
                     "labels": dict(template_metadata.get("labels") or {})}
    if template_metadata.get("annotations"):
        metadata["annotations"] = dict(template_metadata["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": dict(template.get("spec") or {})}


def calculate_status(rs: Obj, pods: list[Obj], manage_error: str | None, failure_reason: str,
                     now: float) -> tuple[Obj, float | None]:
    """The ReplicaSet's new status from its active owned pods, and when a pending availability falls due.

    ``manage_error`` adds a ReplicaFailure condition (``failure_reason`` FailedCreate or
    FailedDelete) if there is none; no error removes it. The second value is the number of
    seconds until the next ready pod becomes available (minReadySeconds), None if none waits.
    """
    spec = rs.get("spec") or {}
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    fully_labeled = ready = available = 0
    wait: float | None = None
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if all(labels.get(key) == value for key, value in template_labels.items()):
            fully_labeled += 1
        remaining = available_in(pod, min_ready, now)
        if is_ready(pod):
            ready += 1
        if remaining == 0:
            available += 1
        elif remaining is not None:
            wait = remaining if wait is None else min(wait, remaining)
    old_status = rs.get("status") or {}
    conditions = [dict(condition) for condition in old_status.get("conditions") or []]
    failure = next((condition for condition in conditions if condition.get("type") == REPLICA_FAILURE), None)
    if manage_error is not None and failure is None:
        conditions.append({"type": REPLICA_FAILURE, "status": "True", "reason": failure_reason,
                           "message": manage_error,
                           "lastTransitionTime": rfc3339(datetime.fromtimestamp(now, UTC))})
    elif manage_error is None and failure is not None:
        conditions.remove(failure)
    status: Obj = {"replicas": len(pods), "fullyLabeledReplicas": fully_labeled, "readyReplicas": ready,
                   "availableReplicas": available,
                   "observedGeneration": int((rs.get("metadata") or {}).get("generation") or 1)}
    if conditions:
        status["conditions"] = conditions
    return status, wait


def status_patch(current: Obj | None, desired: Obj) -> Obj | None:
    """The merge patch of ``status`` that turns ``current`` into ``desired``; None when they already agree.

    Zero counts are left out, as Kubernetes serializes them (``omitempty``), so they are removed.
    """
    current = current or {}
    fields = ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas", "observedGeneration",
              "conditions")
    if all((current.get(name) or None) == (desired.get(name) or None) for name in fields) \
            and "replicas" in current:
        return None
    patch: Obj = {name: desired.get(name) or None for name in fields}
    patch["replicas"] = desired.get("replicas", 0)
    return {"status": patch}


# --- the controller ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicatedKind:
    """What differs between the kinds this controller serves."""

    resource: Resource
    component: str  # the source of its Events
    selector: Callable[[Any], LabelSelectorQuery]  # ``spec.selector`` as a query

    def owns(self, ref: Obj) -> bool:
        """Whether an owner reference names this kind (any version of its group)."""
        return ref.get("kind") == self.resource.kind \
            and str(ref.get("apiVersion", "")).rpartition("/")[0] == self.resource.group


REPLICA_SETS = ReplicatedKind(REPLICASETS, "replicaset-controller", LabelSelectorQuery.from_label_selector)
REPLICATION_CONTROLLERS = ReplicatedKind(require("v1", "ReplicationController"), "replication-controller",
                                         LabelSelectorQuery.from_map)


class ReplicaSetController:
    """Keeps every ReplicaSet's pods at its replicas, syncing ReplicaSet keys (``namespace/name``)."""

    name = "replicaset"

    def __init__(self, context: ControllerContext, clock: Callable[[], float] | None = None,
                 kind: ReplicatedKind = REPLICA_SETS) -> None:
        self.client = context.client
        self.kind = kind
        self.controller = Controller(self.name, self.sync, context.workers)
        self.expectations = Expectations()
        self.recorder = EventRecorder(context.client, kind.component)
        self.pod_control = ChildControl(context.client, PODS, self.recorder)
        self.clock = clock or (lambda: datetime.now(UTC).timestamp())
        self.replicasets = context.informers.informer(kind.resource)
        self.pods = context.informers.informer(PODS)
        self.replicasets.add_handlers(self.controller.enqueue_object, self._replicaset_updated,
                                      self._replicaset_deleted)
        self.pods.add_handlers(self._pod_added, self._pod_updated, self._pod_deleted)
        # One pool for every sync's batches: starting and joining threads per batch cost thousands a run.
        self._writes = ThreadPoolExecutor(max_workers=PARALLEL_WRITES, thread_name_prefix="replicaset-write")

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()
        self._writes.shutdown(wait=True)

    # --- informer handlers --------------------------------------------------------------------------

    def _replicaset_updated(self, _old: Obj, new: Obj) -> None:
        self.controller.enqueue_object(new)

    def _replicaset_deleted(self, rs: Obj) -> None:
        key = key_of(rs)
        self.expectations.delete(key)
        self.controller.enqueue(key)

    def _owner_key(self, pod: Obj) -> str | None:
        """The key of the cached ReplicaSet that controls ``pod`` (same uid), if any."""
        ref = controller_of(pod)
        if ref is None or not self.kind.owns(ref):
            return None
        key = make_key((pod.get("metadata") or {}).get("namespace"), ref.get("name") or "")
        rs = self.replicasets.store.get_by_key(key)
        if rs is None or (rs.get("metadata") or {}).get("uid") != ref.get("uid"):
            return None
        return key

    def _selecting(self, pod: Obj) -> list[str]:
        """The keys of the namespace's ReplicaSets whose selector matches the orphan ``pod``."""
        metadata = pod.get("metadata") or {}
        keys = []
        for rs in self.replicasets.store.list(metadata.get("namespace")):
            try:
                selector = self.kind.selector((rs.get("spec") or {}).get("selector"))
            except SelectorError:
                continue
            if selector.requirements and selector.matches(metadata.get("labels")):
                keys.append(key_of(rs))
        return keys

    def _pod_added(self, pod: Obj) -> None:
        if is_being_deleted(pod):
            self._pod_deleted(pod)  # seen for the first time already terminating: it will never count
            return
        owner = self._owner_key(pod)
        if owner is not None:
            self.expectations.creation_observed(owner)
            self.controller.enqueue(owner)
            return
        if controller_of(pod) is None:
            for key in self._selecting(pod):
                self.controller.enqueue(key)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if resource_version(old) == resource_version(new):
            return  # a resync: the ReplicaSets' own resync covers it
        labels_changed = (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels")
        if is_being_deleted(new):
            self._pod_deleted(new)
            if labels_changed:
                self._pod_deleted(old)
            return
        old_ref, new_ref = controller_of(old), controller_of(new)
        if old_ref != new_ref and old_ref is not None:
            old_owner = self._owner_key(old)
            if old_owner is not None:
                self.controller.enqueue(old_owner)
        if new_ref is not None:
            owner = self._owner_key(new)
            if owner is not None:
                self.controller.enqueue(owner)
            return
        if labels_changed or old_ref != new_ref:
            for key in self._selecting(new):
                self.controller.enqueue(key)

    def _pod_deleted(self, pod: Obj) -> None:
        owner = self._owner_key(pod)
        if owner is not None:
            self.expectations.deletion_observed(owner, key_of(pod))
            self.controller.enqueue(owner)

    # --- syncing one ReplicaSet ---------------------------------------------------------------------

    def sync(self, key: str) -> None:
        """Converge the ReplicaSet ``key``: claim pods, create or delete the difference, report status."""
        rs = self.replicasets.store.get_by_key(key)
        if rs is None:
            self.expectations.delete(key)
            return
        namespace, _name = split_key(key)
        try:
            selector = self.kind.selector((rs.get("spec") or {}).get("selector"))
        except SelectorError as error:
            raise PermanentError(f"{key}: invalid selector: {error}") from error
        needs_sync = self.expectations.satisfied(key)
        active = [pod for pod in self.pods.store.list(namespace) if is_active(pod)]
        try:
            pods = self._claim(rs, selector, active)
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key}: claiming pods failed: {error}") from error
        manage_error: MiniK8sError | None = None
        diff = len(pods) - int((rs.get("spec") or {}).get("replicas", 1))
        if needs_sync and not is_being_deleted(rs):
            try:
                self._manage(key, rs, pods, diff)
            except (APIError, ConnectionFailed) as error:
                manage_error = error
        status, wait = calculate_status(rs, pods, None if manage_error is None else str(manage_error),
                                        "FailedCreate" if diff < 0 else "FailedDelete", self.clock())
        self._write_status(key, rs, status)
        if wait is not None:
            self.controller.enqueue_after(key, wait)
        if manage_error is not None:
            raise TemporaryError(f"{key}: {manage_error}") from manage_error

    def _claim(self, rs: Obj, selector: LabelSelectorQuery, pods: list[Obj]) -> list[Obj]:
        """The pods ``rs`` owns after adopting matching orphans and releasing its pods that stopped matching."""
        claimed = claim(rs, selector, pods)
        for pod in claimed.release:
            self.pod_control.release(rs, pod)
        if claimed.adopt and self._can_adopt(rs):
            for pod in claimed.adopt:
                try:
                    claimed.owned.append(self.pod_control.adopt(rs, self.kind.resource, pod))
                except NotFound:
                    continue  # the orphan is gone
        return claimed.owned

    def _can_adopt(self, rs: Obj) -> bool:
        """Whether ``rs`` still exists as cached and is not being deleted, read fresh (the cache may lag)."""
        metadata = rs.get("metadata") or {}
        try:
            fresh = self.client.get(self.kind.resource, metadata["name"], metadata.get("namespace"))
        except NotFound:
            return False
        return (fresh.get("metadata") or {}).get("uid") == metadata.get("uid") and not is_being_deleted(fresh)

    def _manage(self, key: str, rs: Obj, pods: list[Obj], diff: int) -> None:
        """Create or delete pods to close ``diff`` (owned minus desired), at most BURST_REPLICAS of them."""
        if diff < 0:
            wanted = min(-diff, BURST_REPLICAS)
            self.expectations.expect_creations(key, wanted)
            log.info("%s: too few replicas, need %d, creating %d", key, len(pods) - diff, wanted)
            created = 0
            try:
                for size in burst_sizes(wanted):
                    errors = self._in_parallel([lambda: self._create_pod(key, rs) for _ in range(size)])
                    created += size - len(errors)
                    if errors:
                        raise errors[0]
            finally:
                for _ in range(wanted - created):
                    self.expectations.creation_observed(key)  # never coming: failed or skipped
        elif diff > 0:
            victims = pods_to_delete(pods, min(diff, BURST_REPLICAS))
            self.expectations.expect_deletions(key, [key_of(pod) for pod in victims])
            log.info("%s: too many replicas, need %d, deleting %d", key, len(pods) - diff, len(victims))

            def delete(pod: Obj) -> Callable[[], None]:
                def run() -> None:
                    try:
                        deleted = self.pod_control.delete(rs, pod)
                    except (APIError, ConnectionFailed):
                        self.expectations.deletion_observed(key, key_of(pod))
                        raise
                    if not deleted:  # gone already: its DELETED event may have come before the expectation
                        self.expectations.deletion_observed(key, key_of(pod))
                return run

            errors = self._in_parallel([delete(pod) for pod in victims])
            if errors:
                raise errors[0]

    def _create_pod(self, key: str, rs: Obj) -> None:
        try:
            self.pod_control.create(rs, self.kind.resource, pod_from_template(rs))
        except APIError as error:
            if not any(cause.get("type") == NAMESPACE_TERMINATING for cause in error.causes):
                raise
            self.expectations.creation_observed(key)  # the namespace is going away: no pod will come

    def _in_parallel(self, actions: list[Callable[[], object]]) -> list[MiniK8sError]:
        """Run ``actions`` on the write pool and wait for all; the API errors they raised (others propagate)."""
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

    def _write_status(self, key: str, rs: Obj, status: Obj) -> None:
        patch = status_patch(rs.get("status"), status)
        if patch is None:
            return
        metadata = rs.get("metadata") or {}
        try:
            self.client.patch(self.kind.resource, metadata["name"], patch, metadata.get("namespace"),
                              subresource="status")
        except NotFound:
            return  # deleted meanwhile; its delete event comes next
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key}: writing status failed: {error}") from error
        log.info("%s: status replicas=%d ready=%d available=%d", key, status["replicas"], status["readyReplicas"],
                 status["availableReplicas"])


class ReplicationManager(ReplicaSetController):
    """Keeps every ReplicationController's pods at its replicas: the ReplicaSet controller over RCs."""

    name = "replicationcontroller"

    def __init__(self, context: ControllerContext, clock: Callable[[], float] | None = None) -> None:
        super().__init__(context, clock, REPLICATION_CONTROLLERS)
