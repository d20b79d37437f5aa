"""The generic REST semantics of every resource: create, read, update, patch, delete, subresources.

One implementation serves every row of the resource table and names no kind: what differs between kinds is
the row's hooks (defaults, checks, initial status, deletion grace and hold) and, for work needing storage,
the kind's strategy in ``strategies``. Every create and update runs one pipeline (``_admit``).
"""

from __future__ import annotations

import logging
import pickle
import random
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from daemons.api import errors, models
from daemons.api.bundle import FieldError
from daemons.api.resources import Resource
from daemons.api.selectors import FieldSelectorQuery, LabelSelectorQuery, SelectorError
from daemons.apiserver import patch as patches
from daemons.apiserver.admission import Admission, Attributes, NamespaceLifecycle
from daemons.apiserver.cache import WatchCache
from daemons.apiserver.services import ServiceNetwork
from daemons.apiserver.storage import ClaimTaken, Storage
from daemons.apiserver.strategies import strategy_for
from daemons.apiserver.validation import invalid, validate

log = logging.getLogger(__name__)

Obj = dict[str, Any]

SYSTEM_METADATA = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
# Unconditional writes retry lost compare-and-swap races; the bound only stops a pathological livelock.
MAX_CONFLICT_RETRIES = 100
# Strategic merge patch needs patch strategies, which only Kubernetes' own groups define.
BUILTIN_GROUPS = ("", "apps", "autoscaling")
# DeleteOptions.propagationPolicy values, and the finalizers through which the garbage collector carries them out.
PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")
FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
GC_FINALIZERS = {"Foreground": FOREGROUND_FINALIZER, "Orphan": ORPHAN_FINALIZER}


def clone(obj: Any) -> Any:
    """A deep copy of JSON-shaped data, a few times faster than ``copy.deepcopy`` on the write path."""
    return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def now_rfc3339(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


class StaleRead(Exception):
    """A write computed from the watch cache found nothing to change: only a fresh read can tell."""


@dataclass(frozen=True)
class WriteOptions:
    """The query parameters every write takes: ``dryRun``, ``fieldManager``, ``fieldValidation``, ``force``."""

    dry_run: bool = False
    field_manager: str | None = None
    strict: bool = False
    force: bool = False


DEFAULT_WRITE = WriteOptions()


class Registry:
    """REST operations over ``Storage`` for any row of the resource table."""

    def __init__(self, storage: Storage, network: ServiceNetwork, cache: WatchCache | None = None,
                 admission: Admission | None = None) -> None:
        self.storage = storage
        self.network = network
        self.cache = cache
        self.rng = random.Random()
        self.admission = admission or Admission(validating=(NamespaceLifecycle(self.cached),))

    # --- helpers -----------------------------------------------------------------------------------

    async def _current(self, resource: Resource, namespace: str | None, name: str, fresh: bool = True) -> Obj:
        """The stored object; unless ``fresh``, the watch cache's copy when it has one (a write's first try)."""
        key = resource.storage_key(namespace, name)
        cached = None if fresh or self.cache is None else self.cache.get(key)
        obj = clone(cached) if cached is not None else await self.storage.get(key)
        if obj is None:
            raise errors.not_found(resource.plural, name, resource.group)
        return obj

    async def cached(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        """An object from the watch cache when it has it, else from etcd; None when there is none."""
        key = resource.storage_key(namespace, name)
        return (self.cache.get(key) if self.cache is not None else None) or await self.storage.get(key)

    async def _admit(self, resource: Resource, obj: Obj, current: Obj | None, subresource: str | None,
                     strict: bool) -> tuple[Obj, list[str]]:
        """The write pipeline after authorization: mutating admission, the row's defaults, model validation
        and the row's checks, validating admission, then the strategy's reference checks.

        A write through a subresource (status, binding, scale, finalize) is neither mutated nor defaulted again.
        """
        metadata = obj.get("metadata") or {}
        attributes = Attributes("UPDATE" if current is not None else "CREATE", resource, metadata.get("namespace"),
                                metadata.get("name"), subresource, obj, current)
        if subresource is None:
            await self.admission.mutate(attributes)
            resource.defaults(attributes.obj)
        attributes.obj, warnings = validate(resource, attributes.obj, strict, current, subresource is None)
        await self.admission.validate(attributes)
        await strategy_for(resource).references(self.storage, resource, attributes.obj, current)
        return attributes.obj, warnings

    @staticmethod
    def _check_identity(resource: Resource, obj: Obj, namespace: str | None, name: str | None) -> None:
        """The body must be of this resource and agree with the URL about namespace and name."""
        if not isinstance(obj, dict):
            raise errors.BadRequest("the request body must be a JSON or YAML object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if kind and kind != resource.kind:
            raise errors.BadRequest(f"the kind in the data ({kind}) does not match the expected kind "
                                    f"({resource.kind})")
        if api_version and api_version != resource.api_version:
            raise errors.BadRequest(f"the API version in the data ({api_version}) does not match the expected "
                                    f"API version ({resource.api_version})")
        metadata = obj.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise invalid(resource.kind, None, [
                FieldError("FieldValueInvalid", "metadata", "Invalid value: must be an object")], resource.group)
        metadata = metadata or {}
        body_namespace = metadata.get("namespace")
        if resource.namespaced and body_namespace and namespace and body_namespace != namespace:
            raise errors.BadRequest("the namespace of the provided object does not match the namespace sent on "
                                    "the request")
        if name is not None and metadata.get("name") and metadata["name"] != name:
            raise errors.BadRequest("the name of the object ({}) does not match the name on the URL ({})".format(
                metadata["name"], name))

    @staticmethod
    def _normalize(resource: Resource, obj: Obj, namespace: str | None) -> Obj:
        obj = clone(obj)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        metadata = obj.get("metadata")
        if metadata is None:
            metadata = obj["metadata"] = {}
        elif not isinstance(metadata, dict):
            raise errors.BadRequest(f"metadata: must be an object, not {type(metadata).__name__}")
        if resource.namespaced:
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        return obj

    # --- reads -------------------------------------------------------------------------------------

    async def get(self, resource: Resource, namespace: str | None, name: str, fresh: bool = True) -> Obj:
        """The object as stored; unless ``fresh``, the watch cache's copy when it has one."""
        return await self._current(resource, namespace, name, fresh=fresh)

    async def list(self, resource: Resource, namespace: str | None, label_selector: str | None = None,
                   field_selector: str | None = None) -> tuple[list[Obj], int]:
        labels, fields = parse_selectors(label_selector, field_selector)
        items, revision = await self.storage.list(resource.storage_prefix(namespace))
        if resource.namespaced and not namespace:
            items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"].get("name", "")))
        chosen = [obj for obj in items if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)]
        return chosen, revision

    # --- writes ------------------------------------------------------------------------------------

    async def create(self, resource: Resource, namespace: str | None, body: Obj,
                     options: WriteOptions = DEFAULT_WRITE) -> tuple[Obj, list[str]]:
        self._check_identity(resource, body, namespace, None)
        obj = self._normalize(resource, body, namespace)
        metadata = obj["metadata"]
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = metadata["generateName"] + secrets.token_hex(3)[:5]
        for key in (*SYSTEM_METADATA, "resourceVersion"):
            metadata.pop(key, None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = now_rfc3339()
        if resource.has_status:
            metadata["generation"] = 1
            if not resource.creator_owns_status:
                obj.pop("status", None)
                status = resource.initial_status(obj)
                if status is not None:
                    obj["status"] = status
        obj, warnings = await self._admit(resource, obj, None, None, options.strict)
        if options.field_manager:
            obj = patches.record_update(None, obj, options.field_manager, now_rfc3339())
        key = resource.storage_key(namespace, metadata["name"])
        for _attempt in range(MAX_CONFLICT_RETRIES):
            stored, claims = await strategy_for(resource).claims(self.storage, self.network, self.rng, obj, None)
            if options.dry_run:
                return stored, warnings
            try:
                revision = await self.storage.create(key, stored, claims)
            except ClaimTaken as taken:
                log.debug("%s %s lost %s to another writer; allocating again", resource.kind, object_name(obj),
                          taken)
                continue
            if revision is None:
                raise errors.already_exists(resource.plural, metadata["name"], resource.group)
            stored["metadata"]["resourceVersion"] = str(revision)
            log.info("created %s %s", resource.kind, object_name(stored))
            return stored, warnings
        raise errors.ServerTimeout(f"could not allocate values for {resource.kind} {object_name(obj)} against "
                                   "concurrent writers; try again")

    def _merge_update(self, resource: Resource, current: Obj, desired: Obj, subresource: str | None) -> Obj:
        """The object to store when ``desired`` replaces ``current`` through the main resource or ``status``."""
        merged = clone(desired)
        metadata = merged.setdefault("metadata", {})
        for key in SYSTEM_METADATA:
            if key in current["metadata"]:
                metadata[key] = current["metadata"][key]
            else:
                metadata.pop(key, None)
        if subresource == "status":
            merged = {**clone(current), "status": merged.get("status")}
            if merged["status"] is None:
                merged.pop("status")
        elif resource.has_status:
            if "status" in current:
                merged["status"] = clone(current["status"])
            else:
                merged.pop("status", None)
            if merged.get("spec") != current.get("spec"):
                metadata["generation"] = int(current["metadata"].get("generation") or 1) + 1
        elif subresource == "finalize":
            finalizers = (merged.get("spec") or {}).get("finalizers") or []
            merged = clone(current)
            merged.setdefault("spec", {})["finalizers"] = finalizers
        if subresource is None:
            merged = strategy_for(resource).prepare(merged, current)
        return merged

    async def update(self, resource: Resource, namespace: str | None, name: str, body: Obj,
                     subresource: str | None = None, options: WriteOptions = DEFAULT_WRITE) -> tuple[Obj, list[str]]:
        """PUT: replace the object (or its status), compare-and-swap on the resourceVersion given."""
        self._check_identity(resource, body, namespace, name)
        desired = self._normalize(resource, body, namespace)
        desired["metadata"]["name"] = name
        return await self._guaranteed_update(
            resource, namespace, name, lambda current: self._merge_update(resource, current, desired, subresource),
            options, pinned=desired["metadata"].get("resourceVersion"), subresource=subresource)

    async def _guaranteed_update(self, resource: Resource, namespace: str | None, name: str,
                                 mutate: Callable[[Obj], Obj], options: WriteOptions,
                                 pinned: str | None, subresource: str | None = None) -> tuple[Obj, list[str]]:
        """Read the object, compute its new state with ``mutate``, compare-and-swap; on a lost race, again.

        The first read may come from the watch cache, every later one from etcd. A write ``pinned`` to a
        resourceVersion is a Conflict once a fresh read disagrees with it; others retry until they land.
        Errors that ``mutate`` raises reach the caller as they are.
        """
        for attempt in range(MAX_CONFLICT_RETRIES):
            fresh = attempt > 0
            current = await self._current(resource, namespace, name, fresh)
            if pinned and pinned != current["metadata"]["resourceVersion"]:
                if fresh:
                    raise errors.conflict(resource.plural, name, resource.group)
                continue
            desired = mutate(current)
            try:
                return await self._write(resource, current, desired, options, fresh, subresource)
            except (StaleRead, ClaimTaken):
                continue
            except errors.Conflict:
                if pinned and fresh:
                    raise
        raise errors.conflict(resource.plural, name, resource.group)

    async def _write(self, resource: Resource, current: Obj, desired: Obj, options: WriteOptions,
                     fresh: bool = True, subresource: str | None = None) -> tuple[Obj, list[str]]:
        """Validate and store ``desired`` over ``current``; no write at all when nothing changed.

        ``current`` read from the cache (not ``fresh``) cannot prove a write is a no-op: that raises ``StaleRead``.
        """
        obj, warnings = await self._admit(resource, desired, current, subresource, options.strict)
        obj["metadata"].pop("resourceVersion", None)
        revision = int(current["metadata"]["resourceVersion"])
        if options.field_manager:
            obj = patches.record_update(current, obj, options.field_manager, now_rfc3339())
        obj, claims = await strategy_for(resource).claims(self.storage, self.network, self.rng, obj, current)
        unchanged = comparable(obj) == comparable(current)
        if unchanged and not fresh:
            raise StaleRead()
        if unchanged or options.dry_run:
            obj["metadata"]["resourceVersion"] = str(revision)
            return (current if unchanged else obj), warnings
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers") \
                and not obj["metadata"].get("deletionGracePeriodSeconds") and not resource.deletion_hold(obj):
            await self._remove(resource, current)
            return current, warnings
        key = resource.storage_key(obj["metadata"].get("namespace"), obj["metadata"]["name"])
        new_revision = await self.storage.update(key, obj, revision, claims)
        if new_revision is None:
            raise errors.conflict(resource.plural, obj["metadata"]["name"], resource.group)
        obj["metadata"]["resourceVersion"] = str(new_revision)
        log.debug("updated %s %s at %s", resource.kind, object_name(obj), new_revision)
        return obj, warnings

    async def patch(self, resource: Resource, namespace: str | None, name: str, patch_type: str, body: Any,
                    subresource: str | None = None,
                    options: WriteOptions = DEFAULT_WRITE) -> tuple[Obj, list[str], bool]:
        """Apply a patch, retrying lost races unless the patch pins a resourceVersion; True if created.

        An apply patch of an object that does not exist creates it, as ``kubectl apply --server-side`` expects.
        """
        def patched(current: Obj) -> Obj:
            result = self._apply_patch(resource, current, patch_type, body, options.field_manager, options.force)
            self._check_identity(resource, result, namespace, name)
            return self._merge_update(resource, current, self._normalize(resource, result, namespace), subresource)

        # Apply records its own managedFields; other patches are recorded as updates by the field manager.
        write_options = replace(options, field_manager=None) if patch_type == "apply" else options
        for _attempt in range(2):
            try:
                obj, warnings = await self._guaranteed_update(resource, namespace, name, patched, write_options,
                                                              pinned_version(body), subresource)
                return obj, warnings, False
            except errors.NotFound:
                if patch_type != "apply":
                    raise
            if not isinstance(body, dict):
                raise errors.BadRequest("an apply patch must be an object")
            self._check_identity(resource, body, namespace, name)
            applied = patches.server_side_apply(None, body, options.field_manager or "unknown", options.force,
                                                now_rfc3339())
            applied.setdefault("metadata", {})["name"] = name
            try:
                obj, warnings = await self.create(resource, namespace, applied, write_options)
                return obj, warnings, True
            except errors.AlreadyExists:
                continue  # created meanwhile: patch it after all
        raise errors.conflict(resource.plural, name, resource.group)

    @staticmethod
    def _apply_patch(resource: Resource, current: Obj, patch_type: str, body: Any, field_manager: str | None,
                     force: bool) -> Obj:
        try:
            match patch_type:
                case "json":
                    if not isinstance(body, list):
                        raise errors.BadRequest("a JSON patch must be a list of operations")
                    return patches.json_patch(current, body)
                case "merge" | "strategic":
                    if not isinstance(body, dict):
                        raise errors.BadRequest("a merge patch must be an object")
                    if patch_type == "strategic" and resource.group not in BUILTIN_GROUPS:
                        raise errors.UnsupportedMediaType(
                            f"strategic merge patch is not supported for {resource.qualified_name}")
                    merge = patches.strategic_merge_patch if patch_type == "strategic" else patches.json_merge_patch
                    return merge(current, body)
                case "apply":
                    if not isinstance(body, dict):
                        raise errors.BadRequest("an apply patch must be an object")
                    if not field_manager:
                        raise errors.BadRequest("PATCH with apply requires a fieldManager query parameter")
                    return patches.server_side_apply(current, body, field_manager, force, now_rfc3339())
        except patches.ApplyConflict as conflict:
            causes = [{"reason": "FieldManagerConflict", "message": f'conflict with "{manager}"', "field": field}
                      for manager, field in conflict.conflicts]
            summary = "\n".join(f'- conflict with "{manager}": {field}' for manager, field in conflict.conflicts)
            raise errors.Conflict(f"Apply failed with {len(causes)} conflict(s):\n{summary}",
                                  details={"causes": causes}) from None
        except patches.PatchError as error:
            raise errors.Invalid(f"the patch could not be applied: {error}") from None
        raise errors.UnsupportedMediaType(f"unsupported patch type {patch_type!r}")

    # --- deletion ----------------------------------------------------------------------------------

    async def _remove(self, resource: Resource, current: Obj) -> int:
        metadata = current["metadata"]
        key = resource.storage_key(metadata.get("namespace"), metadata["name"])
        released = strategy_for(resource).release(current)
        revision = await self.storage.delete(key, int(metadata["resourceVersion"]), released)
        if revision is None:
            raise errors.conflict(resource.plural, metadata["name"], resource.group)
        log.info("deleted %s %s", resource.kind, object_name(current))
        return revision

    async def delete(self, resource: Resource, namespace: str | None, name: str, options: Obj,
                     dry_run: bool = False) -> Obj:
        """DELETE: graceful for bound pods, deferred while finalizers remain, immediate otherwise.

        Foreground and Orphan propagation add the garbage collector's finalizer, which defers the removal
        until the collector has dealt with the dependents; Background removes the object at once.
        """
        policy = propagation_policy(options)
        for attempt in range(MAX_CONFLICT_RETRIES):
            current = await self._current(resource, namespace, name, fresh=attempt > 0)
            preconditions = options.get("preconditions") or {}
            if preconditions.get("uid") and preconditions["uid"] != current["metadata"].get("uid"):
                raise errors.Conflict(f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                                      f"UID in object meta: {current['metadata'].get('uid')}")
            if preconditions.get("resourceVersion") and \
                    preconditions["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise errors.conflict(resource.plural, name, resource.group)
            desired = self._deletion_state(resource, current, options.get("gracePeriodSeconds"), policy)
            if dry_run:
                return desired or current
            try:
                if desired is None:
                    await self._remove(resource, current)
                    return current
                if desired == current:
                    return current
                key = resource.storage_key(namespace, name)
                stored = {**desired, "metadata": {k: v for k, v in desired["metadata"].items()
                                                  if k != "resourceVersion"}}
                revision = await self.storage.update(key, stored, int(current["metadata"]["resourceVersion"]))
                if revision is None:
                    continue
                desired["metadata"]["resourceVersion"] = str(revision)
                return desired
            except errors.Conflict:
                continue
        raise errors.conflict(resource.plural, name, resource.group)

    @staticmethod
    def _deletion_state(resource: Resource, current: Obj, grace_period: int | None,
                        policy: str | None = None) -> Obj | None:
        """The object marked for deletion, or None when it should go away now.

        It stays while the row grants a grace period (a running pod), while finalizers remain, or while the
        row holds it (a namespace until its controller has emptied it).
        """
        metadata = current["metadata"]
        finalizers = metadata.get("finalizers") or []
        if resource.propagates_deletion:
            finalizers = deletion_finalizers(finalizers, policy)
        grace = resource.deletion_grace(current, grace_period) or 0
        if grace and metadata.get("deletionGracePeriodSeconds") is not None:
            grace = min(grace, int(metadata["deletionGracePeriodSeconds"]))
        held = resource.deletion_hold(current)
        if grace == 0 and not finalizers and not held:
            return None
        marked = clone(current)
        if finalizers:
            marked["metadata"]["finalizers"] = finalizers
        else:
            marked["metadata"].pop("finalizers", None)
        deadline = datetime.now(UTC) + timedelta(seconds=grace)
        if not metadata.get("deletionTimestamp") or grace < int(metadata.get("deletionGracePeriodSeconds") or 0):
            marked["metadata"]["deletionTimestamp"] = now_rfc3339(deadline)
        marked["metadata"]["deletionGracePeriodSeconds"] = grace
        if held:
            resource.mark_deleted(marked)
        return marked

    async def delete_collection(self, resource: Resource, namespace: str | None, label_selector: str | None,
                                field_selector: str | None, options: Obj, dry_run: bool = False) -> list[Obj]:
        items, _revision = await self.list(resource, namespace, label_selector, field_selector)
        deleted = []
        for item in items:
            try:
                deleted.append(await self.delete(resource, item["metadata"].get("namespace"),
                                                 item["metadata"]["name"], options, dry_run))
            except errors.NotFound:
                continue
        return deleted

    # --- subresources ------------------------------------------------------------------------------

    async def bind(self, resource: Resource, namespace: str, name: str, binding: Obj) -> None:
        """``pods/<name>/binding``: set the node once, as the scheduler does."""
        target = binding.get("target") if isinstance(binding, dict) else None
        if not isinstance(target, dict) or not target.get("name"):
            raise invalid("Binding", name, [FieldError.required("target.name")])
        if target.get("kind", "Node") != "Node":
            raise invalid("Binding", name, [FieldError.not_supported("target.kind", target.get("kind"), ("Node",))])

        def bound(current: Obj) -> Obj:
            if current["metadata"].get("deletionTimestamp"):
                raise errors.Conflict(f"pod {name} is being deleted, cannot be assigned to a host")
            assigned = current.get("spec", {}).get("nodeName")
            if assigned:
                raise errors.Conflict(f"pod {name} is already assigned to node \"{assigned}\"")
            result = clone(current)
            result["spec"]["nodeName"] = target["name"]
            status = result.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()})
            status["conditions"] = conditions
            return result

        await self._guaranteed_update(resource, namespace, name, bound, DEFAULT_WRITE, pinned=None,
                                      subresource="binding")

    async def get_scale(self, resource: Resource, namespace: str, name: str) -> Obj:
        return scale_of(resource, await self._current(resource, namespace, name, fresh=True))

    async def update_scale(self, resource: Resource, namespace: str, name: str, verb: str, patch_type: str | None,
                           body: Any) -> Obj:
        """PUT or PATCH ``<workload>/scale``: only ``spec.replicas`` moves, under compare-and-swap."""
        def scaled(current: Obj) -> Obj:
            scale = scale_of(resource, current)
            desired = self._apply_patch(SCALE_VIEW, scale, patch_type or "merge", body, "scale", True) \
                if verb == "PATCH" else body
            if not isinstance(desired, dict):
                raise errors.BadRequest("the scale body must be an object")
            replicas = (desired.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise invalid("Scale", name, [FieldError.invalid("spec.replicas", replicas,
                                                                 "must be greater than or equal to 0")], "autoscaling")
            updated = clone(current)
            updated["spec"]["replicas"] = replicas
            return self._merge_update(resource, current, updated, None)

        obj, _warnings = await self._guaranteed_update(resource, namespace, name, scaled, DEFAULT_WRITE,
                                                       pinned_version(body), "scale")
        return scale_of(resource, obj)

# The Scale subresource's own kind, for patching it (only its group matters there).
SCALE_VIEW = Resource("Scale", "scale", models.KubeObject, group="autoscaling", has_status=False)


def object_name(obj: Obj) -> str:
    metadata = obj.get("metadata", {})
    return f"{metadata['namespace']}/{metadata.get('name')}" if metadata.get("namespace") else str(metadata.get("name"))


def pinned_version(patch: Any) -> str | None:
    """The resourceVersion a patch insists on (optimistic locking), if any; such a patch is never retried."""
    if isinstance(patch, dict):
        metadata = patch.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        return str(version) if version else None
    for operation in patch if isinstance(patch, list) else []:
        if isinstance(operation, dict) and operation.get("path") == "/metadata/resourceVersion" \
                and operation.get("op") in ("add", "replace", "test"):
            return str(operation.get("value"))
    return None


def propagation_policy(options: Obj) -> str | None:
    """The policy DeleteOptions ask for (``orphanDependents`` as its older spelling); None when they say nothing."""
    policy, orphan = options.get("propagationPolicy"), options.get("orphanDependents")
    if policy is not None and orphan is not None:
        raise invalid("DeleteOptions", None, [FieldError(
            "FieldValueInvalid", "propagationPolicy",
            "Invalid value: propagationPolicy and orphanDependents cannot both be set")], "meta.k8s.io")
    if orphan is not None:
        if not isinstance(orphan, bool):
            raise errors.BadRequest("orphanDependents must be a boolean")
        return "Orphan" if orphan else "Background"
    if policy is not None and policy not in PROPAGATION_POLICIES:
        raise invalid("DeleteOptions", None, [FieldError.not_supported("propagationPolicy", policy,
                                                                       PROPAGATION_POLICIES)], "meta.k8s.io")
    return policy


def deletion_finalizers(finalizers: list[str], policy: str | None) -> list[str]:
    """The finalizers a deletion with ``policy`` leaves: an explicit policy replaces the collector's finalizer,
    no policy keeps the one an earlier deletion chose (as Kubernetes does)."""
    if policy is None:
        return list(finalizers)
    kept = [name for name in finalizers if name not in GC_FINALIZERS.values()]
    return [*kept, GC_FINALIZERS[policy]] if policy in GC_FINALIZERS else kept


def comparable(obj: Obj) -> Obj:
    """An object as a no-op check sees it: without its resourceVersion or the times of its managedFields.

    A write that changes nothing else is not stored, so re-applying an unchanged
    manifest leaves the resourceVersion where it was, as in Kubernetes.
    """
    metadata = {key: value for key, value in obj.get("metadata", {}).items() if key != "resourceVersion"}
    if "managedFields" in metadata:
        metadata["managedFields"] = [{k: v for k, v in entry.items() if k != "time"}
                                     for entry in metadata["managedFields"]]
    return {**obj, "metadata": metadata}


def parse_selectors(label_selector: str | None,
                    field_selector: str | None) -> tuple[LabelSelectorQuery, FieldSelectorQuery]:
    try:
        return LabelSelectorQuery.parse(label_selector), FieldSelectorQuery.parse(field_selector)
    except SelectorError as error:
        raise errors.BadRequest(str(error)) from None


def scale_of(resource: Resource, obj: Obj) -> Obj:
    """The ``autoscaling/v1`` Scale view of a ReplicaSet, Deployment or ReplicationController (whose selector is a
    plain label map, not a LabelSelector)."""
    metadata = obj["metadata"]
    selector = obj.get("spec", {}).get("selector") or {}
    plain = all(isinstance(value, str) for value in selector.values())
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {key: metadata[key] for key in ("name", "namespace", "uid", "resourceVersion",
                                                     "creationTimestamp") if key in metadata},
        "spec": {"replicas": obj.get("spec", {}).get("replicas", 0)},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": str(LabelSelectorQuery.from_map(selector) if plain
                            else LabelSelectorQuery.from_label_selector(selector)),
        },
    }
