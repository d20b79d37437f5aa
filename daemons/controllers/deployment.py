"""The Deployment controller: each Deployment runs its pod template through ReplicaSets, rolling between them.

As Kubernetes' deployment controller: a sync claims the ReplicaSets the selector
matches, finds (or creates, named ``<deploy>-<hash>``) the one whose template is the
Deployment's, and moves pods to it: RollingUpdate within maxSurge / maxUnavailable,
Recreate by emptying the old ones first. A resize spreads over the ReplicaSets in
proportion, old ReplicaSets beyond revisionHistoryLimit go, and the status says how far
the rollout got. The decisions are ``rollout``'s pure functions; this module reads the
caches and writes. Pods themselves belong to the ReplicaSet controller.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from daemons.api.errors import AlreadyExists, ConnectionFailed, NotFound
from daemons.api.resources import require
from daemons.api.selectors import LabelSelectorQuery, SelectorError
from daemons.controllers import rollout
from daemons.controllers.context import ControllerContext
from daemons.controllers.ownership import ChildControl, claim, controller_of, controller_reference
from daemons.controllers.rollout import Obj
from daemons.machinery.controller import Controller, PermanentError, TemporaryError
from daemons.machinery.events import EventRecorder
from daemons.machinery.keys import key_of, make_key, resource_version, split_key

log = logging.getLogger(__name__)

DEPLOYMENTS = require("apps/v1", "Deployment")
REPLICASETS = require("apps/v1", "ReplicaSet")
PODS = require("v1", "Pod")
COMPONENT = "deployment-controller"


class DeploymentController:
    """Syncs Deployment keys (``namespace/name``): ReplicaSets sized for the rollout, and the status."""

    name = "deployment"

    def __init__(self, context: ControllerContext, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.client = context.client
        self.clock = clock
        self.recorder = EventRecorder(context.client, COMPONENT)
        self.children = ChildControl(context.client, REPLICASETS, self.recorder)
        self.controller = Controller(self.name, self.sync, context.workers)
        self.deployments = context.informers.informer(DEPLOYMENTS)
        self.replicasets = context.informers.informer(REPLICASETS)
        self.pods = context.informers.informer(PODS)
        self.deployments.add_handlers(self.controller.enqueue_object, self._deployment_updated,
                                      self.controller.enqueue_object)
        self.replicasets.add_handlers(self._rs_added, self._rs_updated, self._rs_deleted)
        self.pods.add_handlers(on_update=self._pod_updated, on_delete=self._pod_deleted)

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    # --- informer handlers --------------------------------------------------------------------------

    def _deployment_updated(self, _old: Obj, new: Obj) -> None:
        self.controller.enqueue_object(new)

    def _owner_key(self, obj: Obj) -> str | None:
        """The key of the Deployment controlling ``obj`` (a ReplicaSet), if it is one we know by uid."""
        ref = controller_of(obj)
        if ref is None or ref.get("kind") != DEPLOYMENTS.kind:
            return None
        key = make_key((obj.get("metadata") or {}).get("namespace"), ref.get("name"))
        deployment = self.deployments.store.get_by_key(key)
        if deployment is None or (deployment.get("metadata") or {}).get("uid") != ref.get("uid"):
            return None
        return key

    def _enqueue_matching(self, rs: Obj) -> None:
        """An orphan ReplicaSet: every Deployment of its namespace whose selector matches may adopt it."""
        metadata = rs.get("metadata") or {}
        for deployment in self.deployments.store.list(metadata.get("namespace")):
            with contextlib.suppress(SelectorError):
                if selector_of(deployment).matches(metadata.get("labels")):
                    self.controller.enqueue_object(deployment)

    def _rs_added(self, rs: Obj) -> None:
        if controller_of(rs) is None:
            self._enqueue_matching(rs)
        elif (key := self._owner_key(rs)) is not None:
            self.controller.enqueue(key)

    def _rs_updated(self, old: Obj, new: Obj) -> None:
        if resource_version(old) == resource_version(new):
            return
        old_key, new_key = self._owner_key(old), self._owner_key(new)
        for key in {old_key, new_key} - {None}:
            self.controller.enqueue(str(key))
        if controller_of(new) is None:
            self._enqueue_matching(new)

    def _rs_deleted(self, rs: Obj) -> None:
        if (key := self._owner_key(rs)) is not None:
            self.controller.enqueue(key)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if (old.get("status") or {}).get("phase") != (new.get("status") or {}).get("phase"):
            self._pod_deleted(new)

    def _pod_deleted(self, pod: Obj) -> None:
        """A Recreate rollout waits for the old pods to be gone: their end may let it go on."""
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != REPLICASETS.kind:
            return
        rs = self.replicasets.store.get_by_key(make_key((pod.get("metadata") or {}).get("namespace"), ref["name"]))
        key = self._owner_key(rs) if rs is not None else None
        deployment = self.deployments.store.get_by_key(key) if key else None
        if deployment is not None and not rollout.is_rolling(deployment):
            self.controller.enqueue(str(key))

    # --- syncing one Deployment -----------------------------------------------------------------------

    def sync(self, key: str) -> None:
        """Converge the Deployment ``key``: claim ReplicaSets, take the rollout one step further, write status."""
        namespace, _ = split_key(key)
        cached = self.deployments.store.get_by_key(key)
        if cached is None:
            return
        deployment = copy.deepcopy(cached)
        try:
            selector = selector_of(deployment)
        except SelectorError as error:
            raise PermanentError(f"{key}: invalid selector: {error}") from error
        if not selector.requirements:
            log.warning("%s: a Deployment with an empty selector selects nothing; skipped", key)
            return
        try:
            Sync(self, deployment, self._claim(deployment, selector, namespace)).run()
        except (NotFound, ConnectionFailed) as error:
            raise TemporaryError(f"{key}: {error}") from error

    def _claim(self, deployment: Obj, selector: LabelSelectorQuery, namespace: str | None) -> list[Obj]:
        """The ReplicaSets this Deployment controls after adopting matching orphans and releasing strays."""
        decided = claim(deployment, selector, self.replicasets.store.list(namespace))
        owned = list(decided.owned)
        for rs in decided.adopt:
            owned.append(self.children.adopt(deployment, DEPLOYMENTS, rs))
        for rs in decided.release:
            self.children.release(deployment, rs)
        return owned


def selector_of(deployment: Obj) -> LabelSelectorQuery:
    return LabelSelectorQuery.from_label_selector((deployment.get("spec") or {}).get("selector"))


class Sync:
    """One pass over one Deployment and its ReplicaSets, upstream's syncDeployment; each write updates the lists."""

    def __init__(self, owner: DeploymentController, deployment: Obj, rses: list[Obj]) -> None:
        self.owner = owner
        self.client = owner.client
        self.deployment = deployment
        self.key = key_of(deployment)
        self.now = owner.clock()
        self.new_rs = rollout.find_new(deployment, rses)
        self.old_rses = [rs for rs in rses if rs is not self.new_rs]
        self.created = False

    @property
    def all_rses(self) -> list[Obj]:
        return [*self.old_rses, *([self.new_rs] if self.new_rs is not None else [])]

    def run(self) -> None:
        spec = self.deployment.get("spec") or {}
        if (self.deployment.get("metadata") or {}).get("deletionTimestamp"):
            self.write_status(rollout.counts(self.deployment, self.all_rses, self.new_rs), availability=True)
            return
        if spec.get("paused"):
            if rollout.is_scaling_event(self.deployment, self.all_rses):  # a paused Deployment still resizes
                self.sync_revision(create=False)
                self.apply_sizes(rollout.proportional_sizes(self.deployment, self.new_rs, self.old_rses))
            self.write_status(rollout.paused_status(self.deployment, self.all_rses, self.new_rs, self.now))
            return
        if rollout.is_scaling_event(self.deployment, self.all_rses):
            self.sync_revision(create=False)
            self.apply_sizes(rollout.proportional_sizes(self.deployment, self.new_rs, self.old_rses))
            self.write_status(rollout.counts(self.deployment, self.all_rses, self.new_rs), availability=True)
            return
        if rollout.is_rolling(self.deployment):
            self.roll()
        else:
            self.recreate()

    def roll(self) -> None:
        """One RollingUpdate step: grow the new ReplicaSet, else shrink old ones, else prune history."""
        self.sync_revision(create=True)
        assert self.new_rs is not None
        current = rollout.replicas(self.new_rs)
        wanted = min(rollout.replicas(self.deployment),
                     rollout.new_rs_replicas(self.deployment, self.all_rses, self.new_rs))
        if wanted != current:
            self.scale(self.new_rs, wanted)
            self.rollout_status()
            return
        shrink = rollout.old_rs_scale_down(self.deployment, self.new_rs, self.old_rses)
        if shrink:
            self.apply_sizes(shrink)
            self.rollout_status()
            return
        self.finish()

    def recreate(self) -> None:
        """Recreate: every old ReplicaSet to 0, wait for their pods to go, then the new one at full size."""
        self.sync_revision(create=False)
        emptied = {rollout.name_of(rs): 0 for rs in rollout.active(self.old_rses)}
        namespace = (self.deployment.get("metadata") or {}).get("namespace")
        if emptied:
            self.apply_sizes(emptied)
            self.rollout_status()
        elif rollout.old_pods_running(self.old_rses, self.owner.pods.store.list(namespace)):
            self.rollout_status()
        else:
            if self.new_rs is None:
                self.sync_revision(create=True)
            assert self.new_rs is not None
            if rollout.replicas(self.new_rs) != rollout.replicas(self.deployment):
                self.scale(self.new_rs, rollout.replicas(self.deployment))
            self.finish()

    def finish(self) -> None:
        """Prune history once the rollout is complete, then write the status."""
        status = rollout.rollout_status(self.deployment, self.all_rses, self.new_rs, self.now, self.created)
        if rollout.is_complete(self.deployment, status):
            for rs in rollout.history_to_delete(self.deployment, self.old_rses):
                with contextlib.suppress(NotFound):
                    self.client.delete(REPLICASETS, rollout.name_of(rs), (rs.get("metadata") or {}).get("namespace"))
                log.info("%s: deleted old replica set %s (revision %d) beyond the history limit", self.key,
                         rollout.name_of(rs), rollout.revision(rs))
                self.old_rses.remove(rs)
        self.write_status(status)

    def rollout_status(self) -> None:
        self.write_status(rollout.rollout_status(self.deployment, self.all_rses, self.new_rs, self.now, self.created))

    # --- writes ---------------------------------------------------------------------------------------

    def sync_revision(self, create: bool) -> None:
        """Give the new ReplicaSet the next revision (creating it if asked) and the Deployment the same revision."""
        new_revision = rollout.next_revision(self.old_rses)
        if self.new_rs is not None:
            updated = copy.deepcopy(self.new_rs)
            metadata = updated.setdefault("metadata", {})
            metadata["annotations"] = rollout.replica_set_annotations(self.deployment, self.new_rs, new_revision,
                                                                      exists=True)
            min_ready = (self.deployment.get("spec") or {}).get("minReadySeconds")
            if min_ready is not None:
                updated.setdefault("spec", {})["minReadySeconds"] = min_ready
            else:  # taken off the Deployment: off the ReplicaSet too
                updated.setdefault("spec", {}).pop("minReadySeconds", None)
            if updated != self.new_rs:
                self.new_rs = self.client.replace(REPLICASETS, updated)
                log.info("%s: replica set %s is revision %s", self.key, rollout.name_of(self.new_rs),
                         rollout.revision(self.new_rs))
        elif create:
            self.create_new_rs(new_revision)
        if self.new_rs is not None:
            self.set_deployment_revision(str(rollout.revision(self.new_rs)))

    def create_new_rs(self, new_revision: int) -> None:
        status = self.deployment.get("status") or {}
        body = rollout.new_replica_set(self.deployment, status.get("collisionCount"))
        body["metadata"]["ownerReferences"] = [controller_reference(self.deployment, DEPLOYMENTS)]
        body["spec"]["replicas"] = rollout.new_rs_replicas(self.deployment, [*self.old_rses, body], body)
        body["metadata"]["annotations"] = rollout.replica_set_annotations(self.deployment, body, new_revision,
                                                                         exists=False)
        name = body["metadata"]["name"]
        try:
            self.new_rs = self.client.create(REPLICASETS, body)
        except AlreadyExists:
            self.name_taken(name)
            raise
        self.created = True
        count = rollout.replicas(self.new_rs)
        log.info("%s: created replica set %s with %d replicas", self.key, name, count)
        if count > 0:
            self.owner.recorder.record(self.deployment, "Normal", "ScalingReplicaSet",
                                       f"Scaled up replica set {name} to {count}")

    def name_taken(self, name: str) -> None:
        """The new ReplicaSet's name exists: ours (a stale cache) retries; another template bumps collisionCount."""
        namespace = (self.deployment.get("metadata") or {}).get("namespace")
        existing = self.client.get(REPLICASETS, name, namespace)
        template = (self.deployment.get("spec") or {}).get("template") or {}
        ref = controller_of(existing)
        if ref is not None and ref.get("uid") == self.deployment["metadata"].get("uid") \
                and rollout.same_template((existing.get("spec") or {}).get("template") or {}, template):
            return
        status = copy.deepcopy(self.deployment.get("status") or {})
        status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
        self.client.update_status(DEPLOYMENTS, {**self.deployment, "status": status})
        log.info("%s: replica set name %s is taken; collision count now %d", self.key, name,
                 status["collisionCount"])

    def set_deployment_revision(self, revision: str) -> None:
        annotations = (self.deployment.get("metadata") or {}).get("annotations") or {}
        if annotations.get(rollout.REVISION) == revision:
            return
        updated = copy.deepcopy(self.deployment)
        updated["metadata"]["annotations"] = {**annotations, rollout.REVISION: revision}
        self.deployment = self.client.replace(DEPLOYMENTS, updated)

    def apply_sizes(self, sizes: dict[str, int]) -> None:
        for rs in list(self.all_rses):
            if rollout.name_of(rs) in sizes:
                self.scale(rs, sizes[rollout.name_of(rs)])

    def scale(self, rs: Obj, size: int) -> None:
        """Set a ReplicaSet's size and the Deployment size it was set for; ScalingReplicaSet when the size changed."""
        before = rollout.replicas(rs)
        updated = copy.deepcopy(rs)
        updated.setdefault("spec", {})["replicas"] = size
        metadata = updated.setdefault("metadata", {})
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **rollout.size_annotations(self.deployment)}
        if updated == rs:
            return
        written = self.client.replace(REPLICASETS, updated)
        if rs is self.new_rs:
            self.new_rs = written
        else:
            self.old_rses = [written if item is rs else item for item in self.old_rses]
        if size != before:
            direction = "up" if size > before else "down"
            message = f"Scaled {direction} replica set {rollout.name_of(rs)} to {size} from {before}"
            log.info("%s: %s", self.key, message)
            self.owner.recorder.record(self.deployment, "Normal", "ScalingReplicaSet", message)

    def write_status(self, status: Obj, availability: bool = False) -> None:
        """Write ``status`` through /status when it differs from the stored one; requeue for the deadline."""
        if availability:
            rollout.availability(self.deployment, status, self.now)
        if not (self.deployment.get("spec") or {}).get("paused"):
            rollout.resumed(status, self.now)
        if status != (self.deployment.get("status") or {}):
            self.deployment = self.client.update_status(DEPLOYMENTS, {**self.deployment, "status": status})
            log.info("%s: status %d replicas, %d updated, %d available", self.key, status.get("replicas", 0),
                     status.get("updatedReplicas", 0), status.get("availableReplicas", 0))
        remaining = rollout.deadline_remaining(self.deployment, status, self.now)
        if remaining is not None:
            self.owner.controller.enqueue_after(self.key, remaining + 1)
