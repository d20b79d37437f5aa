"""discovery.k8s.io/v1 EndpointSlice: a Service's endpoints in slices, as kube-proxy and kubectl describe read them.

Defaults and checks as upstream's: ports default to protocol TCP and an empty name, every endpoint has 1 to
100 addresses of the slice's address type, port names are unique DNS labels, and the address type is fixed.
"""

from __future__ import annotations

import ipaddress
from datetime import datetime
from typing import Literal

from daemons.api import tables
from daemons.api.bundle import Column, FieldError, Obj, Resource
from daemons.api.defaults import default_endpoint_slice
from daemons.api.models import KubeModel, KubeObject, ObjectReference, check_dns1123_label

ADDRESS_TYPES = ("FQDN", "IPv4", "IPv6")
PROTOCOLS = ("SCTP", "TCP", "UDP")
MAX_ADDRESSES = 100
MAX_ENDPOINTS = 1000
MAX_PORTS = 20000
# Cells list this many entries, then "+ N more...", as kubectl's printer.
SHOWN = 3


class EndpointConditions(KubeModel):
    ready: bool | None = None
    serving: bool | None = None
    terminating: bool | None = None


class Endpoint(KubeModel):
    addresses: list[str] = []
    conditions: EndpointConditions | None = None
    hostname: str | None = None
    target_ref: ObjectReference | None = None
    node_name: str | None = None
    zone: str | None = None


class EndpointSlicePort(KubeModel):
    name: str | None = None
    port: int | None = None
    protocol: str | None = None
    app_protocol: str | None = None


class EndpointSlice(KubeObject):
    address_type: Literal["IPv4", "IPv6", "FQDN"] | str | None = None
    endpoints: list[Endpoint] = []
    ports: list[EndpointSlicePort] | None = None


def _address_error(address: str, address_type: str) -> str | None:
    wanted = {"IPv4": ipaddress.IPv4Address, "IPv6": ipaddress.IPv6Address}.get(address_type)
    if wanted is None:
        return None  # FQDN and unknown types are not checked per address
    try:
        wanted(address)
    except ValueError:
        return f"must be a valid {address_type} address"
    return None


def check(obj: Obj, current: Obj | None) -> list[FieldError]:
    errors: list[FieldError] = []
    address_type = obj.get("addressType")
    if not address_type:
        errors.append(FieldError.required("addressType"))
    elif address_type not in ADDRESS_TYPES:
        errors.append(FieldError.not_supported("addressType", address_type, ADDRESS_TYPES))
    endpoints = obj.get("endpoints") or []
    if len(endpoints) > MAX_ENDPOINTS:
        errors.append(FieldError("FieldValueTooMany", "endpoints",
                                 f"Too many: {len(endpoints)}: must have at most {MAX_ENDPOINTS} items"))
        endpoints = []
    for index, endpoint in enumerate(endpoints):
        path = f"endpoints[{index}].addresses"
        addresses = endpoint.get("addresses") or []
        if not addresses:
            errors.append(FieldError.required(path, "must contain at least 1 address"))
        elif len(addresses) > MAX_ADDRESSES:
            errors.append(FieldError("FieldValueTooMany", path,
                                     f"Too many: {len(addresses)}: must have at most {MAX_ADDRESSES} items"))
        for position, address in enumerate(addresses):
            problem = _address_error(address, str(address_type))
            if problem:
                errors.append(FieldError.invalid(f"{path}[{position}]", address, problem))
    names: set[str] = set()
    for index, port in enumerate(obj.get("ports") or []):
        path = f"ports[{index}]"
        name = port.get("name") or ""
        if name:
            try:
                check_dns1123_label(name)
            except ValueError as error:
                errors.append(FieldError.invalid(f"{path}.name", name, str(error)))
        if name in names:
            errors.append(FieldError.duplicate(f"{path}.name", name))
        names.add(name)
        protocol = port.get("protocol")
        if not protocol:
            errors.append(FieldError.required(f"{path}.protocol"))
        elif protocol not in PROTOCOLS:
            errors.append(FieldError.not_supported(f"{path}.protocol", protocol, PROTOCOLS))
        number = port.get("port")
        if number is not None and not 0 <= number <= 65535:
            errors.append(FieldError.invalid(f"{path}.port", number, "must be between 0 and 65535, inclusive"))
    return errors


def check_update(obj: Obj, current: Obj) -> list[FieldError]:
    if obj.get("addressType") != current.get("addressType"):
        return [FieldError.invalid("addressType", obj.get("addressType"), "field is immutable")]
    return []


def listed(entries: list[str]) -> str:
    """Up to three entries, then ``+ N more...``; ``<unset>`` for none (kubectl's listWithMoreString)."""
    text = ",".join(entries[:SHOWN])
    if len(entries) > SHOWN:
        return f"{text} + {len(entries) - SHOWN} more..."
    return text or "<unset>"


def ports_cell(obj: Obj, _now: datetime) -> str:
    return listed([str(port["port"]) if port.get("port") is not None else (port.get("name") or "*")
                   for port in obj.get("ports") or []])


def endpoints_cell(obj: Obj, _now: datetime) -> str:
    return listed([address for endpoint in obj.get("endpoints") or [] for address in endpoint.get("addresses") or []])


RESOURCE = Resource(
    "EndpointSlice", "endpointslices", EndpointSlice, group="discovery.k8s.io", has_status=False,
    defaults=default_endpoint_slice, check=check, check_update=check_update,
    columns=(Column("AddressType", "string", lambda obj, _now: obj.get("addressType") or ""),
             Column("Ports", "string", ports_cell), Column("Endpoints", "string", endpoints_cell),
             tables.AGE),
)
