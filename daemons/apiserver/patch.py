"""The PATCH flavours the apiserver accepts, as pure functions on wire-format (camelCase) JSON dicts.

* ``json_merge_patch``      application/merge-patch+json (RFC 7386)
* ``json_patch``            application/json-patch+json (RFC 6902)
* ``strategic_merge_patch`` application/strategic-merge-patch+json (kubectl's default)
* ``server_side_apply``     application/apply-patch+yaml (``kubectl apply --server-side``), with field ownership
* ``record_update``         ownership bookkeeping for ordinary writes, so later applies see who set what

Every function copies its inputs first and returns a new dict; callers may keep using what they passed in.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import jsonpatch
import jsonpointer

JSONDict = dict[str, Any]
# Field names from the object root down to a field; list items add nothing, so the same names
# describe a field in every item of a list.
FieldNames = tuple[str, ...]
# One FieldsV1 path: "f:<field>", 'k:{"name":"web"}' (a keyed list item) or 'v:"x"' (a set item).
FieldPath = tuple[str, ...]

PATCH_DIRECTIVE = "$patch"
RETAIN_KEYS_DIRECTIVE = "$retainKeys"
SET_ELEMENT_ORDER_PREFIX = "$setElementOrder/"
DELETE_FROM_PRIMITIVE_LIST_PREFIX = "$deleteFromPrimitiveList/"


class PatchError(ValueError):
    """The patch is malformed or cannot be applied to the object (the apiserver answers 422/400)."""


class ApplyConflict(ValueError):
    """A server-side apply would change fields another applier owns; the apiserver answers 409."""

    def __init__(self, conflicts: list[tuple[str, str]]) -> None:
        self.conflicts = conflicts
        noun = "conflict" if len(conflicts) == 1 else "conflicts"
        details = "; ".join(f'conflict with "{manager}": {path}' for manager, path in conflicts)
        super().__init__(f"Apply failed with {len(conflicts)} {noun}: {details}")


# --- RFC 7386 and RFC 6902 ------------------------------------------------------------------------------


def json_merge_patch(target: JSONDict, patch: JSONDict) -> JSONDict:
    """RFC 7386: null deletes a key, objects merge recursively, anything else replaces."""
    if not isinstance(patch, dict):
        raise PatchError("a JSON merge patch for an object must itself be a JSON object")
    return _merge_json(copy.deepcopy(target), copy.deepcopy(patch))


def _merge_json(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    merged = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge_json(merged.get(key), value)
    return merged


def json_patch(target: JSONDict, operations: list[JSONDict]) -> JSONDict:
    """RFC 6902 operations applied in order; any failing operation rejects the whole patch."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    try:
        result = jsonpatch.JsonPatch(copy.deepcopy(operations)).apply(target, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
        raise PatchError(f"JSON patch failed: {error}") from error
    if not isinstance(result, dict):
        raise PatchError("a JSON patch must leave a JSON object")
    return result


# --- Strategic merge patch ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeList:
    """A list that merges instead of being replaced: items matched by ``key``, or (``key`` None) a set of values."""

    key: str | None = None


_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")

# The patchMergeKey/patchStrategy=merge tags of the upstream Go types, by the trailing field names of the list.
# Lists not named here are atomic and replaced whole, as upstream (tolerations, node taints, Endpoints subsets,
# matchExpressions, containerStatuses...). kubectl computes its patches from these same tags, so they must match
# upstream exactly for its patches to mean what kubectl meant.
MERGE_LISTS: dict[FieldNames, MergeList] = {
    ("metadata", "ownerReferences"): MergeList("uid"),
    ("metadata", "finalizers"): MergeList(),
    # PodSpec, at ``spec`` of a Pod and ``spec.template.spec`` of a ReplicaSet or Deployment.
    **{("spec", containers): MergeList("name") for containers in _CONTAINER_LISTS},
    ("spec", "volumes"): MergeList("name"),
    ("spec", "imagePullSecrets"): MergeList("name"),
    ("spec", "hostAliases"): MergeList("ip"),
    ("spec", "topologySpreadConstraints"): MergeList("topologyKey"),
    ("spec", "resourceClaims"): MergeList("name"),
    ("spec", "schedulingGates"): MergeList("name"),
    **{(containers, "ports"): MergeList("containerPort") for containers in _CONTAINER_LISTS},
    **{(containers, "env"): MergeList("name") for containers in _CONTAINER_LISTS},
    **{(containers, "volumeMounts"): MergeList("mountPath") for containers in _CONTAINER_LISTS},
    **{(containers, "volumeDevices"): MergeList("devicePath") for containers in _CONTAINER_LISTS},
    # ServiceSpec (a PodSpec has no ``ports`` of its own) and NodeSpec.
    ("spec", "ports"): MergeList("port"),
    ("spec", "podCIDRs"): MergeList(),
    # Pod, Node, Namespace, Service, ReplicaSet and Deployment status.
    ("status", "conditions"): MergeList("type"),
    ("status", "podIPs"): MergeList("ip"),
    ("status", "hostIPs"): MergeList("ip"),
    ("status", "addresses"): MergeList("type"),
    ("status", "resourceClaimStatuses"): MergeList("name"),
}


def merge_list_for(names: FieldNames) -> MergeList | None:
    """How the list at ``names`` merges, or None when it is replaced whole."""
    for suffix, rule in MERGE_LISTS.items():
        if names[-len(suffix):] == suffix:
            return rule
    return None


def strategic_merge_patch(target: JSONDict, patch: JSONDict) -> JSONDict:
    """Kubernetes strategic merge patch: like a merge patch, but lists with a merge key merge item by item."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    merged = _merge_map(copy.deepcopy(target), copy.deepcopy(patch), ())
    return {} if merged is None else merged


def _merge_map(original: JSONDict, patch: JSONDict, names: FieldNames) -> JSONDict | None:
    """Merge ``patch`` into ``original`` (both private copies, changed in place); None means delete the map."""
    directive = patch.pop(PATCH_DIRECTIVE, "merge")
    if directive == "delete":
        return None
    if directive == "replace":
        return _merge_map({}, patch, names)
    if directive != "merge":
        raise PatchError(f"{_dotted(names)}: unknown $patch directive {directive!r}")
    retained = patch.pop(RETAIN_KEYS_DIRECTIVE, None)
    if retained is not None:
        if not isinstance(retained, list):
            raise PatchError(f"{_dotted(names)}: $retainKeys must be a list of field names")
        original = {key: value for key, value in original.items() if key in retained}
    orders = _pop_list_directives(patch, SET_ELEMENT_ORDER_PREFIX, names)
    for field, unwanted in _pop_list_directives(patch, DELETE_FROM_PRIMITIVE_LIST_PREFIX, names).items():
        if isinstance(original.get(field), list):
            original[field] = [value for value in original[field] if value not in unwanted]

    for field, value in patch.items():
        field_names = (*names, field)
        existing = original.get(field)
        if value is None:
            original.pop(field, None)
        elif isinstance(value, dict):
            merged = _merge_map(existing if isinstance(existing, dict) else {}, value, field_names)
            if merged is None:
                original.pop(field, None)
            else:
                original[field] = merged
        elif isinstance(value, list) and (rule := merge_list_for(field_names)) is not None:
            base = existing if isinstance(existing, list) else []
            original[field] = _merge_list(base, value, rule, field_names, orders.pop(field, value))
        else:
            original[field] = value

    # Orders for lists the patch did not otherwise touch: only reorder what is there.
    for field, order in orders.items():
        rule = merge_list_for((*names, field))
        if rule is not None and isinstance(original.get(field), list):
            original[field] = _ordered(original[field], order, original[field], rule.key)
    return original


def _pop_list_directives(patch: JSONDict, prefix: str, names: FieldNames) -> dict[str, list[Any]]:
    """Remove the ``<prefix><field>`` directives from ``patch`` and return their lists by field."""
    found: dict[str, list[Any]] = {}
    for key in [key for key in patch if key.startswith(prefix)]:
        value = patch.pop(key)
        if not isinstance(value, list):
            raise PatchError(f"{_dotted(names)}: {key} must be a list")
        found[key.removeprefix(prefix)] = value
    return found


def _merge_list(original: list[Any], patch: list[Any], rule: MergeList, names: FieldNames,
                order: list[Any]) -> list[Any]:
    """Merge a list per ``rule``; a ``{"$patch": "replace"}`` item replaces it with the other items instead."""
    directives = [item.get(PATCH_DIRECTIVE) if isinstance(item, dict) else None for item in patch]
    if "replace" in directives:
        return [_fresh(item, names) for item, directive in zip(patch, directives, strict=True) if directive is None]
    if rule.key is None:
        if any(directive is not None for directive in directives):
            raise PatchError(f"{_dotted(names)}: only $patch: replace applies to a list of values")
        merged = list(original)
        for value in patch:
            if value not in merged:
                merged.append(value)
        return _ordered(merged, order, original, None)

    merged = list(original)
    for item in patch:
        if not isinstance(item, dict) or rule.key not in item:
            raise PatchError(f"{_dotted(names)}: every item must have the merge key {rule.key!r}")
        position = next((index for index, existing in enumerate(merged)
                         if isinstance(existing, dict) and existing.get(rule.key) == item[rule.key]), None)
        result = _merge_map({} if position is None else merged[position], item, names)
        if position is None:
            if result is not None:
                merged.append(result)
        elif result is None:
            del merged[position]
        else:
            merged[position] = result
    return _ordered(merged, order, original, rule.key)


def _fresh(item: Any, names: FieldNames) -> Any:
    """A patch item as it is stored on its own: nulls and directives dropped from maps."""
    return _merge_map({}, item, names) if isinstance(item, dict) else item


def _identity(item: Any, key: str | None) -> Any:
    return item.get(key) if key is not None and isinstance(item, dict) else item


def _ordered(merged: list[Any], order: list[Any], original: list[Any], key: str | None) -> list[Any]:
    """Items named in ``order`` in that order, others kept where they were relative to the original list.

    This is upstream's rule: a server-only item goes before a patch item only when both were in the original
    list and it came first there.
    """
    wanted = [_identity(item, key) for item in order]
    served = [_identity(item, key) for item in original]
    from_patch = sorted((item for item in merged if _identity(item, key) in wanted),
                        key=lambda item: wanted.index(_identity(item, key)))
    server_only = [item for item in merged if _identity(item, key) not in wanted]

    def served_index(item: Any) -> int | None:
        identity = _identity(item, key)
        return served.index(identity) if identity in served else None

    result: list[Any] = []
    while server_only and from_patch:
        left, right = served_index(server_only[0]), served_index(from_patch[0])
        if left is not None and right is not None and left < right:
            result.append(server_only.pop(0))
        else:
            result.append(from_patch.pop(0))
    return result + server_only + from_patch


def _dotted(names: FieldNames) -> str:
    return ".".join(names) or "<root>"


# --- Field ownership (managedFields, FieldsV1) -----------------------------------------------------------

_MISSING = object()
# Never owned: identity and bookkeeping the server sets, as upstream strips them before tracking fields.
_UNTRACKED_TOP_LEVEL = frozenset({"apiVersion", "kind"})
_UNTRACKED_METADATA = frozenset({"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                                 "managedFields", "selfLink"})


@dataclass
class _Owner:
    """One managedFields entry and the field paths it owns."""

    entry: JSONDict
    fields: set[FieldPath]

    @property
    def manager(self) -> str:
        return str(self.entry.get("manager", ""))

    @property
    def operation(self) -> str:
        return str(self.entry.get("operation", ""))


def _tracked_view(obj: JSONDict) -> JSONDict:
    """The part of an object whose fields are owned (a shallow copy; read it, don't change it)."""
    view = {key: value for key, value in obj.items() if key not in _UNTRACKED_TOP_LEVEL}
    metadata = view.get("metadata")
    if isinstance(metadata, dict):
        tracked = {key: value for key, value in metadata.items() if key not in _UNTRACKED_METADATA}
        if tracked:
            view["metadata"] = tracked
        else:
            del view["metadata"]
    return view


def _field_paths(value: Any, path: FieldPath = (), names: FieldNames = ()) -> set[FieldPath]:
    """The FieldsV1 paths ``value`` sets: leaves, and each item of a merging list (maps are not fields).

    A merging list with an item lacking its merge key counts as one atomic field rather than failing the write.
    """
    if isinstance(value, dict) and value:
        paths: set[FieldPath] = set()
        for key, child in value.items():
            paths |= _field_paths(child, (*path, f"f:{key}"), (*names, key))
        return paths
    rule = merge_list_for(names) if isinstance(value, list) else None
    if rule is None or not all(_item_element(item, rule) for item in value):
        return {path} if path else set()
    paths = set()
    for item in value:
        item_path = (*path, _item_element(item, rule))
        paths |= {item_path} | (_field_paths(item, item_path, names) if rule.key is not None else set())
    return paths


def _item_element(item: Any, rule: MergeList) -> str:
    """The FieldsV1 element naming one list item, or "" when the item lacks its merge key."""
    if rule.key is None:
        return "v:" + _compact_json(item)
    if not isinstance(item, dict) or item.get(rule.key) is None:
        return ""
    return "k:" + _compact_json({rule.key: item[rule.key]})


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _lookup(obj: Any, path: FieldPath) -> Any:
    """The value at ``path``, or ``_MISSING``."""
    node = obj
    for element in path:
        kind, _, raw = element.partition(":")
        if kind == "f" and isinstance(node, dict) and raw in node:
            node = node[raw]
        elif kind == "k" and isinstance(node, list):
            node = next((item for item in node if _matches_key(item, raw)), _MISSING)
        elif kind == "v" and isinstance(node, list) and json.loads(raw) in node:
            node = json.loads(raw)
        else:
            return _MISSING
        if node is _MISSING:
            return _MISSING
    return node


def _matches_key(item: Any, raw_key: str) -> bool:
    return isinstance(item, dict) and all(item.get(name) == value for name, value in json.loads(raw_key).items())


def _differs(before: Any, after: Any, path: FieldPath) -> bool:
    """Whether a write changed the field at ``path``; a list item itself changes only by appearing."""
    old, new = _lookup(before, path), _lookup(after, path)
    if path and path[-1][:2] in ("k:", "v:"):
        return (old is _MISSING) != (new is _MISSING)
    return old is _MISSING or new is _MISSING or old != new


def _remove(obj: JSONDict, path: FieldPath) -> None:
    """Delete the field or list item at ``path`` if it is there."""
    parent = _lookup(obj, path[:-1])
    kind, _, raw = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(raw, None)
    elif kind == "k" and isinstance(parent, list):
        parent[:] = [item for item in parent if not _matches_key(item, raw)]
    elif kind == "v" and isinstance(parent, list):
        parent[:] = [item for item in parent if item != json.loads(raw)]


def _to_fields_v1(paths: set[FieldPath]) -> JSONDict:
    """Encode paths as FieldsV1: nested ``{}``; ``"."`` marks a path that is itself owned and has children."""
    tree: JSONDict = {}
    for path in paths:
        node = tree
        for element in path:
            node = node.setdefault(element, {})
    for path in paths:
        node = tree
        for element in path:
            node = node[element]
        if node:
            node["."] = {}
    return _sorted_tree(tree)


def _sorted_tree(tree: JSONDict) -> JSONDict:
    return {key: _sorted_tree(tree[key]) for key in sorted(tree)}


def _from_fields_v1(tree: JSONDict, prefix: FieldPath = ()) -> set[FieldPath]:
    paths: set[FieldPath] = set()
    for element, child in tree.items():
        if element == ".":
            paths.add(prefix)
        elif isinstance(child, dict) and child:
            paths |= _from_fields_v1(child, (*prefix, element))
        else:
            paths.add((*prefix, element))
    return paths


def _describe(path: FieldPath) -> str:
    """A path as upstream prints it in conflicts: ``.spec.containers[name="web"].image``."""
    text = ""
    for element in path:
        kind, _, raw = element.partition(":")
        if kind == "f":
            text += f".{raw}"
        elif kind == "k":
            text += "[" + ",".join(f"{name}={json.dumps(value)}" for name, value in json.loads(raw).items()) + "]"
        else:
            text += f"[={raw}]"
    return text


def _owners(obj: JSONDict | None) -> list[_Owner]:
    entries = ((obj or {}).get("metadata") or {}).get("managedFields") or []
    owners = []
    for entry in copy.deepcopy(entries):
        if isinstance(entry, dict):
            fields_v1 = entry.get("fieldsV1")
            owners.append(_Owner(entry, _from_fields_v1(fields_v1) if isinstance(fields_v1, dict) else set()))
    return owners


def _find_owner(owners: list[_Owner], manager: str, operation: str) -> _Owner | None:
    return next((owner for owner in owners if (owner.manager, owner.operation) == (manager, operation)), None)


def _store_owners(obj: JSONDict, owners: list[_Owner]) -> None:
    """Write the non-empty owners back as ``metadata.managedFields``."""
    entries = [{**owner.entry, "fieldsType": "FieldsV1", "fieldsV1": _to_fields_v1(owner.fields)}
               for owner in owners if owner.fields]
    if entries:
        obj.setdefault("metadata", {})["managedFields"] = entries
    elif isinstance(obj.get("metadata"), dict):
        obj["metadata"].pop("managedFields", None)


def _claim(owners: list[_Owner], manager: str, operation: str, api_version: Any, now: str) -> _Owner:
    """The owner entry of ``manager`` for ``operation``, created if needed and stamped with this write."""
    owner = _find_owner(owners, manager, operation)
    if owner is None:
        owner = _Owner({"manager": manager, "operation": operation}, set())
        owners.append(owner)
    owner.entry.update(apiVersion=api_version, time=now)
    return owner


# --- Server-side apply ----------------------------------------------------------------------------------


def server_side_apply(current: JSONDict | None, applied: JSONDict, manager: str, force: bool, now: str) -> JSONDict:
    """Merge an apply configuration into the live object, tracking which fields ``manager`` applies.

    Fields this manager applied before but left out now are removed unless someone else owns them. Changing a
    field another *Apply* manager owns is a conflict unless ``force``; ownership then moves to ``manager``.
    Status is not applied on the main resource, and nulls in the configuration are dropped.
    """
    if not isinstance(applied, dict):
        raise PatchError("an apply configuration must be a JSON object")
    _reject_directives(applied, ())
    config = _without_nulls(applied)
    config.pop("status", None)
    tracked = _tracked_view(config)
    applying = _field_paths(tracked)
    api_version = config.get("apiVersion") or (current or {}).get("apiVersion")

    if current is None:
        config.setdefault("metadata", {}).pop("managedFields", None)
        owners: list[_Owner] = []
        _claim(owners, manager, "Apply", api_version, now).fields = applying
        _store_owners(config, owners)
        return config

    owners = _owners(current)
    mine = _find_owner(owners, manager, "Apply")
    previously_applied = mine.fields if mine else set()
    others = [owner for owner in owners if owner is not mine]

    changing = {path for path in applying if _differs(current, tracked, path)}
    conflicts = sorted({(owner.manager, _describe(path)) for owner in others if owner.operation == "Apply"
                        for path in owner.fields & changing})
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for owner in others:
        owner.fields -= changing

    still_wanted = {path[:depth] for path in applying.union(*(owner.fields for owner in others))
                    for depth in range(1, len(path) + 1)}
    result = copy.deepcopy(current)
    for path in sorted(previously_applied - still_wanted, key=len):  # items before their fields: keys still match
        _remove(result, path)
        _prune_emptied_maps(result, path, still_wanted)
    merged = _merge_map(result, copy.deepcopy(tracked), ())
    assert merged is not None  # the configuration has no directives, so nothing asks to delete the root
    _claim(owners, manager, "Apply", api_version, now).fields = applying
    _store_owners(merged, owners)
    return merged


def _reject_directives(value: Any, names: FieldNames) -> None:
    """Apply configurations are plain objects: a ``$`` key would be a patch directive smuggled in."""
    if isinstance(value, dict):
        for key, child in value.items():
            if key.startswith("$"):
                raise PatchError(f"{_dotted((*names, key))}: patch directives are not allowed in apply")
            _reject_directives(child, (*names, key))
    elif isinstance(value, list):
        for item in value:
            _reject_directives(item, names)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(child) for key, child in value.items() if child is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _prune_emptied_maps(obj: JSONDict, removed: FieldPath, kept: set[FieldPath]) -> None:
    """Drop maps (below the top level) that removing ``removed`` left empty, e.g. ``labels`` after its last key."""
    for depth in range(len(removed) - 1, 1, -1):
        parent = removed[:depth]
        if parent in kept or not parent[-1].startswith("f:") or _lookup(obj, parent) != {}:
            return
        _remove(obj, parent)


def record_update(before: JSONDict | None, after: JSONDict, manager: str, now: str) -> JSONDict:
    """``after`` with ownership updated for an ordinary write (create, update, patch) by ``manager``.

    The writer takes the fields it added or changed, from whoever owned them; fields it removed are owned by no
    one. Ownership comes from ``before``: managedFields sent by the client are not trusted.
    """
    result = copy.deepcopy(after)
    owners = _owners(before)
    changed = {path for path in _field_paths(_tracked_view(result))
               if _differs(before or {}, result, path)}
    for owner in owners:
        owner.fields = {path for path in owner.fields if _lookup(result, path) is not _MISSING} - changed
    if changed:
        _claim(owners, manager, "Update", result.get("apiVersion"), now).fields |= changed
    _store_owners(result, owners)
    return result
