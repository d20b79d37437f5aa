"""Who controls an object, and the writes a controller makes on its children (Kubernetes' ControllerRefManager).

An object has at most one controller: the ownerReference with ``controller: true``.
A controller claims the objects its selector matches: it keeps those it already
controls, adopts orphans and releases those that stopped matching; objects another
controller holds are never touched. Adoption and release are patches with a
precondition on the child's uid (and resourceVersion), so a child deleted and
recreated under the same name, or changed since the cache showed it, is not
patched blindly: the write fails and the sync retries from fresh caches.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from daemons.api.client import ApiClient
from daemons.api.errors import APIError, ConnectionFailed, NotFound
from daemons.api.resources import Resource
from daemons.api.selectors import LabelSelectorQuery
from daemons.machinery.events import EventRecorder

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def _metadata(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _name(obj: Obj) -> str:
    metadata = _metadata(obj)
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


def controller_reference(owner: Obj, kind_resource: Resource) -> Obj:
    """The ownerReference that makes ``owner`` (of kind ``kind_resource``) the controller of a child."""
    metadata = _metadata(owner)
    return {"apiVersion": kind_resource.api_version, "kind": kind_resource.kind, "name": metadata.get("name"),
            "uid": metadata.get("uid"), "controller": True, "blockOwnerDeletion": True}


def controller_of(obj: Obj) -> Obj | None:
    """The ownerReference with ``controller: true``, if any."""
    return next((ref for ref in _metadata(obj).get("ownerReferences") or [] if ref.get("controller")), None)


def is_controlled_by(obj: Obj, owner: Obj) -> bool:
    """Whether ``owner`` (compared by uid) is the controller of ``obj``."""
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == _metadata(owner).get("uid")


def is_being_deleted(obj: Obj) -> bool:
    return bool(_metadata(obj).get("deletionTimestamp"))


@dataclass
class Claim:
    """How ``claim`` sorted the candidates: keep ``owned``, adopt ``adopt``, let go of ``release``."""

    owned: list[Obj] = field(default_factory=list)
    adopt: list[Obj] = field(default_factory=list)
    release: list[Obj] = field(default_factory=list)


def claim(owner: Obj, selector_query: LabelSelectorQuery, candidates: Iterable[Obj]) -> Claim:
    """Sort ``candidates`` as Kubernetes' ControllerRefManager does.

    Owned children that match stay owned; owned ones that stopped matching are released
    (unless the owner is being deleted: then they are left as they are for the garbage
    collector). Matching orphans of the owner's namespace are adopted unless the owner or
    the orphan is being deleted. Children of another controller are ignored.
    """
    result = Claim()
    owner_namespace = _metadata(owner).get("namespace")
    owner_deleted = is_being_deleted(owner)
    for candidate in candidates:
        metadata = _metadata(candidate)
        matches = selector_query.matches(metadata.get("labels"))
        ref = controller_of(candidate)
        if ref is not None:
            if ref.get("uid") != _metadata(owner).get("uid"):
                continue
            if matches:
                result.owned.append(candidate)
            elif not owner_deleted:
                result.release.append(candidate)
            continue
        if not matches or owner_deleted or is_being_deleted(candidate) \
                or metadata.get("namespace") != owner_namespace:
            continue
        result.adopt.append(candidate)
    return result


def _guarded(child: Obj) -> list[Obj]:
    """JSON patch tests that make a patch apply only to the very child the cache showed."""
    metadata = _metadata(child)
    tests = [{"op": "test", "path": "/metadata/uid", "value": metadata.get("uid")}]
    if metadata.get("resourceVersion"):
        tests.append({"op": "test", "path": "/metadata/resourceVersion", "value": metadata["resourceVersion"]})
    return tests


def adoption_patch(owner: Obj, owner_resource: Resource, child: Obj) -> list[Obj]:
    """The JSON patch that adds ``owner``'s controller reference to ``child``, guarded by its uid."""
    references = [*(_metadata(child).get("ownerReferences") or []), controller_reference(owner, owner_resource)]
    return [*_guarded(child), {"op": "add", "path": "/metadata/ownerReferences", "value": references}]


def release_patch(owner: Obj, child: Obj) -> list[Obj]:
    """The JSON patch that removes ``owner``'s references from ``child``, guarded by its uid."""
    uid = _metadata(owner).get("uid")
    references = [ref for ref in _metadata(child).get("ownerReferences") or [] if ref.get("uid") != uid]
    change = {"op": "add", "path": "/metadata/ownerReferences", "value": references} if references \
        else {"op": "remove", "path": "/metadata/ownerReferences"}
    return [*_guarded(child), change]


class ChildControl:
    """Creates, deletes, adopts and releases one kind of child for controllers, recording Events on the owner."""

    def __init__(self, client: ApiClient, resource: Resource, recorder: EventRecorder) -> None:
        self.client = client
        self.resource = resource
        self.recorder = recorder
        self._word = resource.kind.lower()

    def create(self, owner: Obj, owner_resource: Resource, body: Obj) -> Obj:
        """Create ``body`` in the owner's namespace with the owner's controller reference; FailedCreate on error."""
        child = dict(body)
        metadata = dict(_metadata(child))
        namespace = _metadata(owner).get("namespace")
        metadata["namespace"] = namespace
        metadata["ownerReferences"] = [controller_reference(owner, owner_resource)]
        child["metadata"] = metadata
        try:
            created = self.client.create(self.resource, child, namespace)
        except (APIError, ConnectionFailed) as error:
            self.recorder.record(owner, "Warning", "FailedCreate", f"Error creating: {error}")
            raise
        name = _metadata(created).get("name")
        log.info("%s: created %s %s", _name(owner), self._word, name)
        self.recorder.record(owner, "Normal", "SuccessfulCreate", f"Created {self._word}: {name}")
        return created

    def delete(self, owner: Obj, child: Obj) -> bool:
        """Delete ``child``: True when this call deleted it, False when it was gone already; FailedDelete on other
        errors."""
        name = _metadata(child).get("name")
        try:
            self.client.delete(self.resource, name, _metadata(child).get("namespace"))
        except NotFound:
            return False
        except (APIError, ConnectionFailed) as error:
            self.recorder.record(owner, "Warning", "FailedDelete", f"Error deleting: {error}")
            raise
        log.info("%s: deleted %s %s", _name(owner), self._word, name)
        self.recorder.record(owner, "Normal", "SuccessfulDelete", f"Deleted {self._word}: {name}")
        return True

    def adopt(self, owner: Obj, owner_resource: Resource, child: Obj) -> Obj:
        """Make ``owner`` the controller of the orphan ``child``; fails if the child changed since it was read."""
        patched = self.client.patch(self.resource, _metadata(child)["name"],
                                    adoption_patch(owner, owner_resource, child),
                                    _metadata(child).get("namespace"), patch_type="json")
        log.info("%s: adopted %s %s", _name(owner), self._word, _metadata(child).get("name"))
        return patched

    def release(self, owner: Obj, child: Obj) -> None:
        """Remove ``owner``'s references from ``child``; a child already gone needs no release."""
        with contextlib.suppress(NotFound):
            self.client.patch(self.resource, _metadata(child)["name"], release_patch(owner, child),
                              _metadata(child).get("namespace"), patch_type="json")
            log.info("%s: released %s %s", _name(owner), self._word, _metadata(child).get("name"))
