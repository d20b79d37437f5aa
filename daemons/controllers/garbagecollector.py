"""The garbage collector: objects whose owners are all gone are deleted, and deletions that propagate are finished.

Ownership is recorded in ``metadata.ownerReferences`` (owner kind, name and uid).
The collector watches the namespaced resources that carry such references, keeps an
index from each owner's uid to its dependents, and syncs items of either role:

- a dependent whose every owner is gone (absent from the owner's cache and confirmed
  absent by a GET, or present under another uid) is deleted in the background, so its
  own dependents follow; references to gone owners next to a live one are dropped;
- an owner deleted with ``propagationPolicy: Foreground`` (finalizer ``foregroundDeletion``)
  gets its dependents deleted in the foreground, and loses the finalizer once none
  remain, at which point the apiserver removes it;
- an owner deleted with ``Orphan`` (finalizer ``orphan``) has the references to it
  removed from its dependents (as listed by the apiserver, not only as cached), then
  loses the finalizer.

A dependent is judged again as stored before it is deleted: the cache may lag the store.

Every write is a JSON patch or DELETE with a precondition on the uid, computed from a
fresh GET, so an object recreated under the same name is never touched by mistake.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from daemons.api.errors import APIError, Conflict, ConnectionFailed, Invalid, NotFound
from daemons.api.resources import RESOURCES, Resource, by_kind
from daemons.controllers.context import ControllerContext
from daemons.controllers.ownership import is_being_deleted
from daemons.machinery.controller import Controller, TemporaryError
from daemons.machinery.informer import Informer
from daemons.machinery.keys import key_of, make_key, split_key

log = logging.getLogger(__name__)

Obj = dict[str, Any]

FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
# Events are many and own nothing; every other namespaced kind may be a dependent or an owner.
UNWATCHED_KINDS = ("Event",)
# Cluster-scoped kinds that own namespaced objects: a Node owns its Lease.
CLUSTER_SCOPED_OWNERS = ("Node",)


class OwnerState(Enum):
    PRESENT = "present"
    ABSENT = "absent"
    UNKNOWN = "unknown"  # a kind missing from the resource table: nothing can be said about it


Duty = Literal["foreground", "orphan"]


@dataclass(frozen=True)
class Verdict:
    """What becomes of a dependent: kept, deleted, or stripped of the references in ``dangling``."""

    action: Literal["keep", "delete", "drop"]
    dangling: tuple[str, ...] = ()


KEEP = Verdict("keep")


# --- decisions (pure) --------------------------------------------------------------------------------


def watched_resources(resources: Collection[Resource] = RESOURCES) -> list[Resource]:
    """The rows the collector keeps informers for."""
    return [resource for resource in resources
            if (resource.namespaced and resource.kind not in UNWATCHED_KINDS) or resource.kind in CLUSTER_SCOPED_OWNERS]


def owner_references(obj: Obj) -> list[Obj]:
    return list((obj.get("metadata") or {}).get("ownerReferences") or [])


def uid_of(obj: Obj) -> str | None:
    return (obj.get("metadata") or {}).get("uid")


def finalizer_duty(obj: Obj) -> Duty | None:
    """The propagation the collector owes an object being deleted: orphaning first, as Kubernetes does."""
    metadata = obj.get("metadata") or {}
    finalizers = metadata.get("finalizers") or []
    if not metadata.get("deletionTimestamp"):
        return None
    if ORPHAN_FINALIZER in finalizers:
        return "orphan"
    if FOREGROUND_FINALIZER in finalizers:
        return "foreground"
    return None


def judge_dependent(obj: Obj, owners: Mapping[str, OwnerState]) -> Verdict:
    """The verdict on ``obj`` given the state of each owner (by reference uid).

    Nothing happens to an object already being deleted, nor to one with an owner of an
    unknown kind. All owners gone: delete it; some: drop the references to those.
    """
    refs = owner_references(obj)
    if not refs or is_being_deleted(obj):
        return KEEP
    states = [owners.get(ref.get("uid") or "", OwnerState.UNKNOWN) for ref in refs]
    if OwnerState.UNKNOWN in states:
        return KEEP
    dangling = tuple(ref.get("uid") or "" for ref, state in zip(refs, states, strict=True)
                     if state is OwnerState.ABSENT)
    if not dangling:
        return KEEP
    if len(dangling) == len(refs):
        return Verdict("delete")
    return Verdict("drop", dangling)


OWNERSHIP_FIELDS = ("uid", "ownerReferences", "finalizers", "deletionTimestamp")


def ownership_changed(old: Obj, new: Obj) -> bool:
    """Whether an update can change what the collector owes the object; most updates (pod statuses) cannot."""
    old_metadata, new_metadata = old.get("metadata") or {}, new.get("metadata") or {}
    return any(old_metadata.get(name) != new_metadata.get(name) for name in OWNERSHIP_FIELDS)


def owner_is_there(ref: Obj, found: Obj | None) -> bool:
    """Whether ``found`` (the object at the reference's name, if any) is the owner the reference means."""
    return found is not None and uid_of(found) == ref.get("uid")


def _removals(values: list[Any], path: str, unwanted: Callable[[Any], bool], probe: Callable[[Any], Any],
              probe_suffix: str) -> list[Obj]:
    """JSON patch operations removing the ``unwanted`` entries of the list at ``path``, each guarded by a test,
    last index first so that earlier removals do not shift later ones."""
    ops: list[Obj] = []
    for index in reversed(range(len(values))):
        if unwanted(values[index]):
            ops.append({"op": "test", "path": f"{path}/{index}{probe_suffix}", "value": probe(values[index])})
            ops.append({"op": "remove", "path": f"{path}/{index}"})
    return ops


def without_owners(obj: Obj, uids: Collection[str]) -> list[Obj]:
    """JSON patch operations removing the ownerReferences to ``uids`` from ``obj`` as it is now."""
    return _removals(owner_references(obj), "/metadata/ownerReferences", lambda ref: ref.get("uid") in uids,
                     lambda ref: ref.get("uid"), "/uid")


def without_finalizer(obj: Obj, finalizer: str) -> list[Obj]:
    """JSON patch operations removing ``finalizer`` from ``obj`` as it is now."""
    finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
    return _removals(finalizers, "/metadata/finalizers", lambda name: name == finalizer, lambda name: name, "")


def guarded(obj: Obj, ops: list[Obj]) -> list[Obj]:
    """``ops`` preceded by a test of the uid, so the patch fails on an object recreated under the same name."""
    return [{"op": "test", "path": "/metadata/uid", "value": uid_of(obj)}, *ops]


def item_of(resource: Resource, key: str) -> str:
    """The work-queue item for one object: ``<plural.group>:<namespace>/<name>`` (names never hold a colon)."""
    return f"{resource.qualified_name}:{key}"


def split_item(item: str) -> tuple[str, str]:
    qualified_name, _, key = item.partition(":")
    return qualified_name, key


def owner_item(dependent: Obj, ref: Obj) -> str | None:
    """The item of the owner ``ref`` names, or None for a kind the resource table lacks."""
    resource = by_kind(ref.get("apiVersion") or "", ref.get("kind") or "")
    if resource is None or not ref.get("name"):
        return None
    namespace = (dependent.get("metadata") or {}).get("namespace") if resource.namespaced else None
    return item_of(resource, make_key(namespace, ref["name"]))


class DependentsIndex:
    """Owner uid → the items of the objects that reference it, kept in step with the informers."""

    def __init__(self) -> None:
        self._dependents: dict[str, set[str]] = defaultdict(set)
        self._owners: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def set(self, item: str, obj: Obj) -> None:
        """File ``item`` under the owners ``obj`` references now."""
        uids = {ref["uid"] for ref in owner_references(obj) if ref.get("uid")}
        with self._lock:
            self._remove_locked(item)
            if uids:
                self._owners[item] = uids
                for uid in uids:
                    self._dependents[uid].add(item)

    def remove(self, item: str) -> None:
        with self._lock:
            self._remove_locked(item)

    def _remove_locked(self, item: str) -> None:
        for uid in self._owners.pop(item, ()):
            dependents = self._dependents.get(uid)
            if dependents is not None:
                dependents.discard(item)
                if not dependents:
                    del self._dependents[uid]

    def dependents_of(self, uid: str) -> set[str]:
        with self._lock:
            return set(self._dependents.get(uid, ()))


# --- the controller ---------------------------------------------------------------------------------


class GarbageCollector:
    """Syncs items (``<plural.group>:<namespace>/<name>``) of dependents and of owners being deleted."""

    name = "garbagecollector"

    def __init__(self, context: ControllerContext) -> None:
        self.client = context.client
        self.informers = context.informers
        self.controller = Controller(self.name, self.sync, context.workers)
        self.index = DependentsIndex()
        self.watched: dict[str, tuple[Resource, Informer]] = {}
        self._unknown_kinds: set[tuple[str, str]] = set()
        self._unknown_lock = threading.Lock()
        for resource in watched_resources():
            informer = context.informers.informer(resource)
            self.watched[resource.qualified_name] = (resource, informer)
            informer.add_handlers(*self._handlers(resource))

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    # --- informer handlers --------------------------------------------------------------------------

    def _handlers(self, resource: Resource) -> tuple[Callable[[Obj], None], Callable[[Obj, Obj], None],
                                                     Callable[[Obj], None]]:
        def added(obj: Obj) -> None:
            self._observe(resource, obj)

        def updated(old: Obj, new: Obj) -> None:
            if ownership_changed(old, new):
                self._observe(resource, new)

        def deleted(obj: Obj) -> None:
            item = item_of(resource, key_of(obj))
            self.index.remove(item)
            uid = uid_of(obj)
            for dependent in self.index.dependents_of(uid) if uid else ():
                self.controller.enqueue(dependent)  # perhaps orphaned now
            for ref in owner_references(obj):
                owner = owner_item(obj, ref)
                if owner is not None and split_item(owner)[0] in self.watched:
                    self.controller.enqueue(owner)  # an owner waiting for its dependents to go

        return added, updated, deleted

    def _observe(self, resource: Resource, obj: Obj) -> None:
        item = item_of(resource, key_of(obj))
        self.index.set(item, obj)
        if owner_references(obj) or finalizer_duty(obj):
            self.controller.enqueue(item)

    # --- syncing one item ---------------------------------------------------------------------------

    def sync(self, item: str) -> None:
        """Converge one object: finish its foreground or orphan deletion, or collect it if its owners are gone."""
        qualified_name, key = split_item(item)
        resource, informer = self.watched[qualified_name]
        obj = informer.store.get_by_key(key)
        if obj is None:
            return
        try:
            match finalizer_duty(obj):
                case "orphan":
                    self._orphan_dependents(resource, obj)
                case "foreground":
                    self._delete_dependents(resource, obj)
                case None:
                    self._collect(resource, obj)
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key_of(obj)}: {error}") from error

    def _collect(self, resource: Resource, obj: Obj) -> None:
        verdict = self._verdict(obj)
        if verdict.action == "delete":
            # The cache may lag the store: an orphaning may have just removed the reference. Judge it as stored.
            live = self._stored(resource, obj)
            if live is None:
                return
            obj, verdict = live, self._verdict(live)
        if verdict.action == "delete":
            gone = ", ".join(f"{ref.get('kind')} {ref.get('name')}" for ref in owner_references(obj))
            if self._delete(resource, obj, "Background"):
                log.info("%s %s: deleted, its owners are gone (%s)", resource.kind, key_of(obj), gone)
        elif verdict.action == "drop":
            self._patch(resource, obj, lambda live: without_owners(live, verdict.dangling))
            log.info("%s %s: dropped references to gone owners %s", resource.kind, key_of(obj),
                     ", ".join(verdict.dangling))

    def _delete_dependents(self, resource: Resource, owner: Obj) -> None:
        dependents = list(self._dependents(owner))
        if not dependents:
            self._patch(resource, owner, lambda live: without_finalizer(live, FOREGROUND_FINALIZER))
            log.info("%s %s: no dependents left, removed finalizer %s", resource.kind, key_of(owner),
                     FOREGROUND_FINALIZER)
            return
        uid = uid_of(owner) or ""
        for dependent_resource, dependent in dependents:
            if is_being_deleted(dependent):
                continue
            if self._has_other_owner(dependent, uid):  # it stays with its other owners, without this one
                self._patch(dependent_resource, dependent, lambda live: without_owners(live, (uid,)))
                log.info("%s %s: kept for its other owners, dropped %s %s", dependent_resource.kind,
                         key_of(dependent), resource.kind, key_of(owner))
            elif self._delete(dependent_resource, dependent, "Foreground"):
                log.info("%s %s: deleted in the foreground with its owner %s %s", dependent_resource.kind,
                         key_of(dependent), resource.kind, key_of(owner))
        log.info("%s %s: waiting for %d dependents to go", resource.kind, key_of(owner), len(dependents))

    def _orphan_dependents(self, resource: Resource, owner: Obj) -> None:
        uid = uid_of(owner) or ""
        for dependent_resource, dependent in self._listed_dependents(owner):
            self._patch(dependent_resource, dependent, lambda live: without_owners(live, (uid,)))
            log.info("%s %s: orphaned from %s %s", dependent_resource.kind, key_of(dependent), resource.kind,
                     key_of(owner))
        self._patch(resource, owner, lambda live: without_finalizer(live, ORPHAN_FINALIZER))
        log.info("%s %s: dependents orphaned, removed finalizer %s", resource.kind, key_of(owner), ORPHAN_FINALIZER)

    # --- reading ------------------------------------------------------------------------------------

    def _dependents(self, owner: Obj) -> Iterator[tuple[Resource, Obj]]:
        """The cached objects that still reference ``owner``."""
        uid = uid_of(owner)
        for item in self.index.dependents_of(uid) if uid else ():
            qualified_name, key = split_item(item)
            resource, informer = self.watched[qualified_name]
            dependent = informer.store.get_by_key(key)
            if dependent is not None and any(ref.get("uid") == uid for ref in owner_references(dependent)):
                yield resource, dependent

    def _listed_dependents(self, owner: Obj) -> Iterator[tuple[Resource, Obj]]:
        """The objects in ``owner``'s namespace that reference it, as the apiserver lists them now.

        Each kind has its informer and queue, so a dependent created just before its owner's deletion may not
        be cached yet; were orphaning to miss it, its first sync would find the owner gone and delete it.
        Orphaning is rare, so one LIST per watched kind is affordable.
        """
        uid = uid_of(owner)
        namespace = (owner.get("metadata") or {}).get("namespace")
        for resource, _informer in self.watched.values():
            if namespace is not None and not resource.namespaced:
                continue  # a cluster-scoped object never depends on a namespaced owner
            listed = self.client.list(resource, namespace, all_namespaces=namespace is None)
            for dependent in listed.get("items") or []:
                if any(ref.get("uid") == uid for ref in owner_references(dependent)):
                    yield resource, dependent

    def _verdict(self, dependent: Obj) -> Verdict:
        owners = {ref.get("uid") or "": self._owner_state(dependent, ref) for ref in owner_references(dependent)}
        return judge_dependent(dependent, owners)

    def _stored(self, resource: Resource, obj: Obj) -> Obj | None:
        """``obj`` as the apiserver holds it now; None when it is gone or replaced by another uid."""
        namespace, name = split_key(key_of(obj))
        try:
            live = self.client.get(resource, name, namespace)
        except NotFound:
            return None
        return live if uid_of(live) == uid_of(obj) else None

    def _has_other_owner(self, dependent: Obj, uid: str) -> bool:
        """Whether an owner of ``dependent`` besides the one with ``uid`` still exists (or cannot be judged)."""
        return any(self._owner_state(dependent, ref) is not OwnerState.ABSENT
                   for ref in owner_references(dependent) if (ref.get("uid") or "") != uid)

    def _owner_state(self, dependent: Obj, ref: Obj) -> OwnerState:
        """Whether the owner ``ref`` names exists: the cache may say so; only the apiserver may say it does not."""
        resource = by_kind(ref.get("apiVersion") or "", ref.get("kind") or "")
        if resource is None or not ref.get("name"):
            self._unknown_kind(dependent, ref)
            return OwnerState.UNKNOWN
        namespace = (dependent.get("metadata") or {}).get("namespace") if resource.namespaced else None
        watched = self.watched.get(resource.qualified_name)
        if watched is not None and owner_is_there(ref, watched[1].store.get(namespace, ref["name"])):
            return OwnerState.PRESENT
        try:
            live = self.client.get(resource, ref["name"], namespace)
        except NotFound:
            return OwnerState.ABSENT
        return OwnerState.PRESENT if owner_is_there(ref, live) else OwnerState.ABSENT

    def _unknown_kind(self, dependent: Obj, ref: Obj) -> None:
        kind = (ref.get("apiVersion") or "", ref.get("kind") or "")
        with self._unknown_lock:
            if kind in self._unknown_kinds:
                return
            self._unknown_kinds.add(kind)
        log.warning("%s: owner %s %s of unknown kind %s; such dependents are left alone", key_of(dependent),
                    ref.get("name"), ref.get("uid"), "/".join(kind))

    # --- writing ------------------------------------------------------------------------------------

    def _delete(self, resource: Resource, obj: Obj, policy: str) -> bool:
        """DELETE ``obj`` (this very uid) with ``policy``; False when it was already gone or replaced."""
        metadata = obj.get("metadata") or {}
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy,
                   "preconditions": {"uid": metadata.get("uid")}}
        try:
            self.client.request("DELETE", resource.path(metadata.get("namespace"), metadata.get("name")),
                                json=options)
        except (NotFound, Conflict):
            return False
        return True

    def _patch(self, resource: Resource, obj: Obj, changes: Callable[[Obj], list[Obj]]) -> None:
        """Apply the JSON patch ``changes`` computes from a fresh read of ``obj``, guarded by its uid.

        Nothing is written when the object is gone, replaced, or needs no change; a test that
        fails because the object changed between the read and the write retries the sync.
        """
        live = self._stored(resource, obj)
        if live is None:
            return
        ops = changes(live)
        if not ops:
            return
        namespace, name = split_key(key_of(obj))
        try:
            self.client.patch(resource, name, guarded(obj, ops), namespace, patch_type="json")
        except NotFound:
            return
        except Invalid as error:
            raise TemporaryError(f"{key_of(obj)} changed while being patched: {error}") from error
