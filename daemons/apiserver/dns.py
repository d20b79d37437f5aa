"""The references of a DNS object: every path must name a Service of its namespace, and a port that Service has.

The model checks each field on its own; only the apiserver can look the Services up, so this runs on every
write (create, update, patch, apply, dry runs too) after the model accepted the object. A reference the stored
object already held is not checked again: a DNS whose Service was deleted since stays writable (labels,
finalizers) and the proxy answers its path with 503, as the routing rules say.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from daemons.api import errors
from daemons.api.resources import Resource, require
from daemons.apiserver.storage import Storage

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Route = tuple[int, str, int]  # index in spec.paths, serviceName, servicePort

SERVICES = require("v1", "Service")


def _routes(obj: Obj | None) -> list[Route]:
    paths = ((obj or {}).get("spec") or {}).get("paths") or []
    return [(index, entry.get("serviceName", ""), entry.get("servicePort", 0)) for index, entry in enumerate(paths)]


def new_routes(obj: Obj, current: Obj | None) -> list[Route]:
    """The paths whose Service and port the stored object ``current`` did not already name."""
    held = {(service, port) for _index, service, port in _routes(current)}
    return [route for route in _routes(obj) if (route[1], route[2]) not in held]


def route_causes(obj: Obj, current: Obj | None, services: Mapping[str, Obj]) -> list[dict[str, str]]:
    """One ``StatusCause`` per new path whose Service is not in ``services`` (by name) or lacks the port."""
    namespace = obj.get("metadata", {}).get("namespace", "")
    causes = []
    for index, name, port in new_routes(obj, current):
        service = services.get(name)
        if service is None:
            causes.append({"reason": "FieldValueNotFound", "field": f"spec.paths[{index}].serviceName",
                           "message": f'Not found: "{name}": no Service {name} in namespace {namespace}'})
            continue
        ports = [entry.get("port") for entry in (service.get("spec") or {}).get("ports") or []]
        if port not in ports:
            served = ", ".join(str(number) for number in ports) or "none"
            causes.append({"reason": "FieldValueNotFound", "field": f"spec.paths[{index}].servicePort",
                           "message": f"Not found: {port}: Service {name} in namespace {namespace} has no port "
                                      f"{port} (ports: {served})"})
    return causes


async def check_routes(storage: Storage, resource: Resource, obj: Obj, current: Obj | None) -> None:
    """Raise ``Invalid`` naming each path of ``obj`` that points at no Service port; read Services from etcd, so a
    Service created just before is always seen."""
    namespace = obj["metadata"].get("namespace")
    services: dict[str, Obj] = {}
    for name in sorted({name for _index, name, _port in new_routes(obj, current)}):
        service = await storage.get(SERVICES.storage_key(namespace, name))
        if service is not None:
            services[name] = service
    causes = route_causes(obj, current, services)
    if causes:
        log.debug("refused %s %s/%s: %s", resource.kind, namespace, obj["metadata"].get("name"),
                 "; ".join(f"{cause['field']}: {cause['message']}" for cause in causes))
        raise errors.Invalid.for_object(resource.kind, obj["metadata"].get("name"), causes, resource.group)
