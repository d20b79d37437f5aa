"""The OpenAPI documents upstream kubectl reads, generated from the resource table.

kubectl asks ``/openapi/v3`` (1.28 and later) or ``/openapi/v2`` (earlier, and
only as protobuf) whether PATCH of a kind accepts the ``fieldValidation`` query
parameter; when it does, kubectl leaves validation to the server instead of
needing full schemas. The documents therefore list every path with its
operations, the kind each serves, and that parameter. Strategic merge patch is
deliberately not advertised: kubectl then computes such patches from its
built-in types, which needs no schemas here.

The v3 documents also carry each kind's schema, generated from its row's model
(wire names, the models' docstrings as descriptions, shared structures such as
ObjectMeta as components), which ``kubectl explain`` reads; a kind added to the
table gets its schema with no code here. ``/openapi/v2`` is JSON with the same
definitions, or, when asked for protobuf as kubectl does, paths only: kubectl
would otherwise compute strategic merge patches from the definitions, and the
models do not say which lists merge by which key.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from pydantic.json_schema import models_json_schema

from daemons.api.resources import RESOURCES, Resource, groups
from daemons.apiserver.discovery import GIT_VERSION

QUERY_PARAMETERS = ("fieldValidation", "fieldManager", "dryRun", "force")
PATCH_MEDIA_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


def _paths(resources: list[Resource]) -> list[tuple[str, str, Resource]]:
    """``(path, method, resource)`` for every operation served."""
    operations = []
    for resource in resources:
        namespace = "{namespace}" if resource.namespaced else None
        collection, item = resource.path(namespace), resource.path(namespace, "{name}")
        operations += [(collection, method, resource) for method in ("get", "post", "delete")]
        operations += [(item, method, resource) for method in ("get", "put", "patch", "delete")]
    return operations


def group_version_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _operation(resource: Resource, verb: str, media_types: tuple[str, ...] = ()) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": f"{verb}{resource.kind}",
        "x-kubernetes-group-version-kind": {"group": resource.group, "version": resource.version,
                                            "kind": resource.kind},
        "x-kubernetes-action": verb,
        "parameters": [{"name": name, "in": "query", "schema": {"type": "string"}} for name in QUERY_PARAMETERS],
        "responses": {"200": {"description": "OK"}},
    }
    if media_types:
        operation["requestBody"] = {"content": {media: {"schema": {"type": "object"}} for media in media_types}}
    return operation


SCHEMA_PREFIX = "#/components/schemas/"
# The scalar types upstream names, which pydantic sees as unions of a number and a string.
SCALARS = {
    "IntOrString": {"type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": True,
                    "description": "An integer or a string, such as a port number or name, or a percentage."},
    "Quantity": {"type": "string", "x-kubernetes-int-or-string": True,
                 "description": "A fixed-point amount with an optional suffix, such as 100m, 1.5 or 128Mi."},
}
# Keys of a schema whose values are schemas themselves, and those whose values are lists or maps of them.
_SUBSCHEMA = ("items", "additionalProperties", "not")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf")


def _openapi_schema(node: dict[str, Any]) -> dict[str, Any]:
    """One pydantic (JSON Schema 2020-12) schema as OpenAPI 3.0 and kubectl explain read it.

    Optional fields lose their ``null`` alternative, a number-or-string union refers to upstream's
    IntOrString or Quantity, other unions become an object; titles and defaults go (explain shows neither), and a
    ``$ref`` with a description beside it moves into ``allOf``, as OpenAPI 3.0 ignores a ref's siblings.
    """
    variants = [v for v in node.pop("anyOf", []) if v.get("type") != "null"]
    if len(variants) == 1:
        node = {**variants[0], **node}
    elif variants:
        types = {v.get("type") for v in variants}
        if types <= {"integer", "number", "string"} and "string" in types:
            shared = "Quantity" if "number" in types else "IntOrString"
            node = {"$ref": SCHEMA_PREFIX + shared, **node}
        else:
            node = {"type": "object", **node}
    node = {key: value for key, value in node.items() if key not in ("title", "default")}
    if isinstance(node.get("additionalProperties"), bool):
        del node["additionalProperties"]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if not isinstance(node.get(bound), bool) and isinstance(node.get(bound), int | float):
            node[limit], node[bound] = node[bound], True
    if "$ref" in node and len(node) > 1:
        node["allOf"] = [{"$ref": node.pop("$ref")}]
    for key in _SUBSCHEMA:
        if isinstance(node.get(key), dict):
            node[key] = _openapi_schema(node[key])
    for key in _SUBSCHEMA_LISTS:
        if key in node:
            node[key] = [_openapi_schema(item) for item in node[key]]
    if "properties" in node:
        node["properties"] = {name: _openapi_schema(field) for name, field in node["properties"].items()}
    return node


@functools.cache
def _schemas() -> tuple[dict[type, str], dict[str, dict[str, Any]]]:
    """Each row model's component name, and every component, generated once from the table's models."""
    models = list(dict.fromkeys(resource.model for resource in RESOURCES))
    refs, generated = models_json_schema([(model, "validation") for model in models], by_alias=True,
                                         ref_template=SCHEMA_PREFIX + "{model}")
    names = {model: refs[(model, "validation")]["$ref"].removeprefix(SCHEMA_PREFIX) for model in models}
    components = {name: _openapi_schema(schema) for name, schema in generated.get("$defs", {}).items()}
    return names, {**SCALARS, **components}


def _references(node: Any) -> list[str]:
    """The component names a schema refers to directly."""
    if isinstance(node, dict):
        found = [node["$ref"].removeprefix(SCHEMA_PREFIX)] if isinstance(node.get("$ref"), str) else []
        return found + [name for value in node.values() for name in _references(value)]
    if isinstance(node, list):
        return [name for value in node for name in _references(value)]
    return []


def components(served: list[Resource]) -> dict[str, dict[str, Any]]:
    """The schemas of ``served`` kinds, each marked with its group-version-kinds, and all they refer to."""
    names, every = _schemas()
    wanted: dict[str, dict[str, Any]] = {}
    pending = []
    for resource in served:
        name = names[resource.model]
        schema = wanted.setdefault(name, {**every[name], "x-kubernetes-group-version-kind": []})
        schema["x-kubernetes-group-version-kind"].append(
            {"group": resource.group, "kind": resource.kind, "version": resource.version})
        pending.append(name)
    while pending:
        for name in _references(every[pending.pop()]):
            if name not in wanted:
                wanted[name] = every[name]
                pending.append(name)
    return dict(sorted(wanted.items()))


@functools.cache
def document(group: str, version: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group version, or None if it is not served."""
    served = [r for r in RESOURCES if (r.group, r.version) == (group, version)]
    if not served:
        return None
    paths: dict[str, Any] = {}
    for path, method, resource in _paths(served):
        media = PATCH_MEDIA_TYPES if method == "patch" else ("application/json",) if method in ("put", "post") else ()
        paths.setdefault(path, {})[method] = _operation(resource, method, media)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": components(served)},
    }


@functools.cache
def root() -> dict[str, Any]:
    """``/openapi/v3``: where each group version's document is, with a content hash as upstream serves it."""
    paths = {}
    for group, versions in groups().items():
        for version in versions:
            path = group_version_path(group, version)
            digest = hashlib.sha512(json.dumps(document(group, version), sort_keys=True).encode()).hexdigest()[:32]
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest.upper()}"}
    return {"paths": paths}


@functools.cache
def document_v2() -> dict[str, Any]:
    """``/openapi/v2`` as JSON (Swagger 2.0), for clients that ask for JSON: every path, and every kind's
    definition as in the v3 documents. kubectl asks for the protobuf form below instead."""
    paths: dict[str, Any] = {}
    for path, method, resource in _paths(list(RESOURCES)):
        paths.setdefault(path, {})[method] = {
            "operationId": f"{method}{resource.kind}",
            "x-kubernetes-group-version-kind": {"group": resource.group, "version": resource.version,
                                                "kind": resource.kind},
            "x-kubernetes-action": method,
            "parameters": [{"name": name, "in": "query", "type": "string"} for name in QUERY_PARAMETERS],
            "responses": {"200": {"description": "OK"}},
        }
    definitions = json.loads(json.dumps(components(list(RESOURCES))).replace(SCHEMA_PREFIX, "#/definitions/"))
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": GIT_VERSION}, "paths": paths,
            "definitions": definitions}


# --- /openapi/v2 as gnostic's openapi.v2.Document protobuf --------------------------------------------

# Served as octet-stream, as Kubernetes does: Go's media type parser rejects the "@" of the protobuf type.
V2_MEDIA_TYPE = "application/octet-stream"
_PATH_ITEM_FIELDS = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _field(number: int, payload: bytes | str) -> bytes:
    """A length-delimited field (strings and embedded messages alike)."""
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _v2_operation(resource: Resource, method: str) -> bytes:
    gvk = f"- group: {resource.group!r}\n  kind: {resource.kind}\n  version: {resource.version}\n"
    operation = _field(5, f"{method}{resource.kind}")
    for name in QUERY_PARAMETERS:
        query = _field(2, "query") + _field(4, name) + _field(6, "string")
        operation += _field(8, _field(1, _field(2, _field(3, query))))  # ParametersItem.parameter.non_body.query
    response = _field(1, _field(1, "OK"))  # ResponseValue.response.description
    operation += _field(9, _field(1, _field(1, "200") + _field(2, response)))
    operation += _field(13, _field(1, "x-kubernetes-group-version-kind") + _field(2, _field(2, gvk)))
    return operation


def document_v2_protobuf() -> bytes:
    """Every served path, with its operations' kinds and query parameters, as kubectl 1.27 reads it."""
    items: dict[str, bytes] = {}
    for path, method, resource in _paths(list(RESOURCES)):
        items[path] = items.get(path, b"") + _field(_PATH_ITEM_FIELDS[method], _v2_operation(resource, method))
    paths = b"".join(_field(2, _field(1, path) + _field(2, item)) for path, item in items.items())
    return _field(1, "2.0") + _field(2, _field(1, "Kubernetes") + _field(2, GIT_VERSION)) + _field(8, paths)
