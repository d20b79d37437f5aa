"""The OpenAPI v3 documents upstream kubectl reads, generated from the resource table.

kubectl asks ``/openapi/v3`` whether PATCH of a kind accepts the
``fieldValidation`` query parameter; when it does, kubectl leaves validation to
the server instead of downloading full schemas. The documents therefore list
every path with its operations, the kind each serves, and that parameter.
Strategic merge patch is deliberately not advertised: kubectl then computes
such patches from its built-in types, which needs no schemas here.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from daemons.api.resources import RESOURCES, Resource, groups
from daemons.apiserver.discovery import GIT_VERSION

QUERY_PARAMETERS = ("fieldValidation", "fieldManager", "dryRun", "force")
PATCH_MEDIA_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


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
    for resource in served:
        namespace = "{namespace}" if resource.namespaced else None
        paths[resource.path(namespace)] = {
            "get": _operation(resource, "list"),
            "post": _operation(resource, "post", ("application/json",)),
            "delete": _operation(resource, "deletecollection"),
        }
        paths[resource.path(namespace, "{name}")] = {
            "get": _operation(resource, "get"),
            "put": _operation(resource, "put", ("application/json",)),
            "patch": _operation(resource, "patch", PATCH_MEDIA_TYPES),
            "delete": _operation(resource, "delete"),
        }
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
