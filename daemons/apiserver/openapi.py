"""The OpenAPI documents upstream kubectl reads, generated from the resource table.

kubectl asks ``/openapi/v3`` (1.28 and later) or ``/openapi/v2`` (earlier, and
only as protobuf) whether PATCH of a kind accepts the ``fieldValidation`` query
parameter; when it does, kubectl leaves validation to the server instead of
needing full schemas. The documents therefore list every path with its
operations, the kind each serves, and that parameter. Strategic merge patch is
deliberately not advertised: kubectl then computes such patches from its
built-in types, which needs no schemas here.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

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
        "components": {"schemas": {}},
    }


def root() -> dict[str, Any]:
    """``/openapi/v3``: where each group version's document is, with a content hash as upstream serves it."""
    paths = {}
    for group, versions in groups().items():
        for version in versions:
            path = group_version_path(group, version)
            digest = hashlib.sha512(json.dumps(document(group, version), sort_keys=True).encode()).hexdigest()[:32]
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest.upper()}"}
    return {"paths": paths}


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
